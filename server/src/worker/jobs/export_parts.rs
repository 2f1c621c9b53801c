//! A checkpointed export (SPEC §5.1): its rows in key order, cut into parts of exactly
//! `EXPORTD_PART_ROWS` (the last may be shorter), each read by key range in its own short
//! snapshot, staged, checked, published under its own immutable key, made durable, and
//! checkpointed by one fenced UPDATE with its audit row. A later attempt keeps every checkpointed
//! part and continues after the last checkpointed key: no row is read twice, none is skipped.
//! When the last part is checkpointed, the manifest is published and the bundle's digest read
//! once; the release makes the manifest the artifact.
//!
//! The part size, the highest key and the row count are fixed at the first claim: rows with
//! keys above it (inserted since) are not in the export. Each part shows the moment of its own
//! read, which its checkpoint and the manifest record.

use super::attempt::Stop;
use super::export_attempt::{Attempt, PartRead, Progress, Staged};
use crate::entities::jobs;
use crate::service::canonical::canonical_json;
use crate::exports::parts::{self, PartRecord, PartsPlan};
use crate::job_store::authority::Permission;
use crate::job_store::checkpoints;
use crate::job_store::transitions::{self, Artifact};
use crate::job_store::Mover;
use crate::storage::{manifest_key, part_key, staging_part_key};
use crate::file_type::FileType;
use crate::worker::snapshot::{self, KeyRange, PartEnd, PartOrder, Plan, SpareHold};
use app::{ExportRequest, ResolvedContract};
use sha2::{Digest, Sha256};

/// Runs the rest of a checkpointed export: from after its last checkpointed part to its release.
pub(super) async fn run(a: &Attempt<'_>, plan: Plan, permission: Permission, request: &ExportRequest, resolved: &ResolvedContract) -> Result<Box<jobs::Model>, Stop> {
    let job = a.job;
    let started = std::time::Instant::now();
    let fixed = fix_plan(a, &plan).await?;
    a.lease.counted(fixed.rows_total);
    let checkpointed = checkpoints::of_job(&a.ctx.db, &job.id).await.map_err(Stop::internal)?;
    let mut parts = parts::from_checkpoints(&checkpointed).map_err(Stop::internal)?;
    let mut rows_done: i64 = parts.iter().map(|p| p.rows).sum();
    a.lease.wrote(rows_done);
    if !parts.is_empty() {
        tracing::info!(target: "exportd::lifecycle", export = %job.id, generation = job.generation, parts = parts.len(), "resuming after the last checkpointed part");
    }
    let (compression, file) = (request.options.compression, FileType::of(request));
    // Three steps at once: part n is checked, published, made durable and checkpointed while
    // parts n+1 and n+2 stream from the database, each from its own snapshot into its own
    // staging upload. Part n+2's read begins as soon as part n+1's snapshot has found its last
    // key, on the worker's spare connection (one job's at a time; with the spare taken it waits
    // for part n+1's read to end), so two database processes and the worker's encoding keep
    // both cores busy (a part streams from one database process: [`PartOrder::Checked`]).
    // At most two parts are begun and not yet being finished; checkpoints stay in order.
    let last_key = parts.last().and_then(|p| p.last_key);
    // Where the next part begins, once known: after the last checkpointed key, then after the
    // end that the last part begun has found.
    let mut next_after: Option<Option<i64>> = (!parts.last().is_some_and(|last| last.last)).then_some(last_key);
    let mut next_index = parts.len() as i32 + 1;
    let mut streaming: std::collections::VecDeque<InFlight<'_>> = std::collections::VecDeque::new();
    let mut staged: std::collections::VecDeque<StagedPart> = std::collections::VecDeque::new();
    let mut finishing: Option<Finishing<'_>> = None;
    // Parts are asked for unsorted, their key order checked, until one comes out of order.
    let mut order = PartOrder::Checked;
    // The rows of the parts checkpointed and staged: the export's progress once a part is staged.
    let mut rows_staged = rows_done;
    // The spare was taken when a part was to begin beside another: it begins once that one's
    // read has ended, without asking again meanwhile.
    let mut spare_taken = false;
    // The bundle's digest, begun over its pieces before the last part once that part is staged.
    let mut digest_begun: Option<BegunDigest> = None;
    loop {
        a.checkpoint()?;
        let room = streaming.len() + staged.len() < 2 && !(spare_taken && !streaming.is_empty());
        if let (Some(after), true) = (next_after, room) {
            let range = KeyRange { after, max_key: fixed.max_key.unwrap_or(0), limit: fixed.part_rows };
            // SPEC §2's authority, before each part's read (SPEC §5 step 3, for a read in parts).
            a.authorised(permission).await?;
            let begun = if streaming.is_empty() {
                Some(snapshot::produce(&a.ctx.snapshots, plan.part(range, order)))
            } else {
                a.fault("before_part_read_ahead")?;
                let ahead = snapshot::produce_ahead(&a.ctx.snapshots, plan.part(range, order));
                if ahead.is_some() {
                    a.fault("part_read_ahead")?;
                }
                ahead
            };
            spare_taken = begun.is_none();
            if let Some(mut reading) = begun {
                next_after = None;
                let index = next_index;
                next_index += 1;
                let end = reading.part_end.take();
                let spare = reading.producer.spare();
                let staging = staging_part_key(&job.id, job.generation, index);
                // A part begun beside another counts in the progress once that one's read has
                // ended, after its rows: the part before it holds exactly a part's rows.
                let beside = if streaming.is_empty() { 0 } else { i64::try_from(fixed.part_rows).unwrap_or(i64::MAX) };
                let reports = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(streaming.is_empty()));
                let progress = Progress::Part { before: rows_staged.saturating_add(beside), reports: reports.clone() };
                let stage = async move {
                    let begun = std::time::Instant::now();
                    let staged = a.stage(reading, &staging, compression, progress).await?;
                    let read = staged.part.ok_or_else(|| Stop::internal("a part's read reported no keys"))?;
                    // Checked like the sizes and digests: a part holds at most the plan's rows.
                    if u64::try_from(staged.rows).map_or(true, |rows| rows > fixed.part_rows) {
                        return Err(Stop::invalid_data(format!("part {index} wrote {} rows; a part holds at most {}", staged.rows, fixed.part_rows)));
                    }
                    Ok(StagedPart { index, staging, staged, read, read_ms: begun.elapsed().as_millis() as u64 })
                };
                streaming.push_back(InFlight { after, end, staging: Box::pin(stage), done: None, reports, spare });
            }
        }
        if streaming.is_empty() && staged.is_empty() && finishing.is_none() {
            break;
        }
        match next_step(&mut streaming, &mut finishing).await {
            Step::Ended(PartEnd { end: Some(end), last: false }) => next_after = Some(Some(end)),
            Step::Ended(_) | Step::Staged => {}
            Step::Checkpointed(record) => {
                finishing = None;
                let part = record?;
                rows_done += part.rows;
                parts.push(part);
            }
        }
        // Parts staged, in order: each goes to be finished in its turn.
        while let Some(InFlight { after, done: Some(_), .. }) = streaming.front() {
            let after = *after;
            let Some(InFlight { done: Some(done), .. }) = streaming.pop_front() else { break };
            let part = match done {
                Err(Stop::OutOfKeyOrder(detail)) if order == PartOrder::Checked => {
                    // The plan did not keep the key's order: this part again, sorted, and every
                    // part after it (one begun after its end, found in the snapshot now thrown
                    // away, is stopped with it).
                    next_index -= 1 + streaming.len() as i32;
                    tracing::info!(target: "exportd::lifecycle", export = %job.id, generation = job.generation, part = next_index, detail, "a part's rows came out of key order; reading it again, sorted");
                    a.fault("part_out_of_key_order")?;
                    streaming.clear();
                    order = PartOrder::Sorted;
                    next_after = Some(after);
                    break;
                }
                Err(Stop::OutOfKeyOrder(detail)) => return Err(Stop::invalid_data(detail)),
                other => other?,
            };
            // The part's read has ended: the read begun after it is the job's own now.
            if let Some(next) = streaming.front_mut() {
                next.spare.let_go();
                next.reports.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            if part.staged.rows == 0 && part.index > 1 {
                // The rows left were deleted since the plan was fixed: nothing more to write.
                let _ = a.store.delete(&part.staging).await;
                next_after = None;
                continue;
            }
            rows_staged += part.staged.rows;
            a.lease.wrote_at_least(rows_staged);
            if part.read.last {
                next_after = None;
            } else if streaming.is_empty() && next_after.is_none() && next_index == part.index + 1 {
                // A read that could not tell its end early (SQLite) is followed once it has ended.
                next_after = Some(part.read.last_key);
            }
            staged.push_back(part);
        }
        if finishing.is_none() {
            if let Some(part) = staged.pop_front() {
                // Part n staged, part n − 1 checkpointed, part n not yet.
                a.fault("after_part_staged")?;
                if part.read.last {
                    digest_begun = Some(begin_digest(a, request, resolved, &parts, &part, file));
                }
                finishing = Some(Box::pin(finish_part(a, part, rows_done, file)));
            }
        }
    }

    // The manifest, published like a file; then the bundle's digest, read once from the parts
    // (begun while the last part was finished, when it could be).
    let manifest = bytes::Bytes::from(canonical_json(&parts::manifest(&job.id, request, resolved, &parts)).into_bytes());
    let sha256 = hex::encode(Sha256::digest(&manifest));
    a.checkpoint()?;
    transitions::fence(&a.ctx.db, job, a.ctx.config.lease, a.fenced_authority(permission).await?).await.map_err(Stop::internal)?.map_err(Stop::refused)?;
    let key = manifest_key(&job.tenant_id, &job.id, &sha256);
    a.store.put_once(&key, manifest.clone()).await.map_err(Stop::storage)?;
    a.store.make_durable(&key).await.map_err(Stop::storage)?;
    let digesting = std::time::Instant::now();
    let ticker = a.lease.ticker();
    let on_progress: crate::storage::OnProgress = std::sync::Arc::new(move || ticker.tick());
    let bundle = parts::bundle(manifest.clone(), &parts);
    // Begun for the manifest made now, it is carried on over the last part; begun for another,
    // it is dropped (and stops) here.
    let (begun_early, hasher, rest) = match digest_begun.filter(|begun| begun.manifest == manifest) {
        Some(BegunDigest { hashing, rest, .. }) => (true, hashing.await.map_err(Stop::internal)?.map_err(Stop::storage)?, rest),
        None => (false, Sha256::new(), bundle.pieces(0..bundle.size())),
    };
    let digest = hex::encode(a.store.hash_pieces(hasher, &rest, on_progress).await.map_err(Stop::storage)?.finalize());
    let digest_ms = digesting.elapsed().as_millis() as u64;
    let artifact = Artifact { key: key.to_string(), sha256, bytes: bundle.size() as i64, rows: rows_done, bundle_digest: Some(digest) };
    let released = a.release(&artifact, permission).await?;
    let metrics = &a.ctx.metrics;
    metrics.rows_exported.inc_by(rows_done.max(0) as u64);
    metrics.bytes_exported.inc_by(bundle.size());
    metrics.export_duration.observe(started.elapsed().as_secs_f64());
    tracing::info!(target: "exportd::lifecycle", export = %job.id, rows = rows_done, parts = parts.len(), bytes = bundle.size(), digest_ms, begun_early, ms = started.elapsed().as_millis() as u64, "export released");
    Ok(released)
}

/// A part being read and staged.
struct InFlight<'f> {
    /// The key it begins after: where it is read again from if its rows come out of order.
    after: Option<i64>,
    /// Where its rows end, as soon as its snapshot knows: the next part begins there.
    end: Option<tokio::sync::oneshot::Receiver<PartEnd>>,
    /// Its read and staging.
    staging: std::pin::Pin<Box<dyn std::future::Future<Output = Result<StagedPart, Stop>> + Send + 'f>>,
    /// Its staging's result, kept until the parts before it are staged.
    done: Option<Result<StagedPart, Stop>>,
    /// Whether its rows count in the progress yet.
    reports: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// For a part begun while the part before it streams: the worker's spare, let go once that
    /// read has ended (a stopped read lets it go after its connection).
    spare: SpareHold,
}

/// A staged part being checked, published, made durable and checkpointed.
type Finishing<'f> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<PartRecord, Stop>> + Send + 'f>>;

/// What happened next among the parts in flight.
enum Step {
    /// The last part begun has found where its rows end.
    Ended(PartEnd),
    /// A part's staging ended (its result is in its [`InFlight::done`]).
    Staged,
    /// The part being finished is checkpointed, or failed.
    Checkpointed(Result<PartRecord, Stop>),
}

/// Waits for the next of: the last begun part's end, a part's staging (the first two), the
/// part being finished.
async fn next_step(streaming: &mut std::collections::VecDeque<InFlight<'_>>, finishing: &mut Option<Finishing<'_>>) -> Step {
    let two = streaming.len() == 2;
    let mut slots = streaming.iter_mut();
    let (first, second) = (slots.next(), slots.next());
    let (first_end, first_staging) = match first {
        Some(InFlight { end, staging, done: None, .. }) => (end.as_mut(), Some(staging)),
        Some(InFlight { end, .. }) => (end.as_mut(), None),
        None => (None, None),
    };
    let (second_end, second_staging) = match second {
        Some(InFlight { end, staging, done: None, .. }) => (end.as_mut(), Some(staging)),
        Some(InFlight { end, .. }) => (end.as_mut(), None),
        None => (None, None),
    };
    let last_end = if two { second_end } else { first_end };
    tokio::select! {
        end = async { match last_end { Some(end) => end.await, None => std::future::pending().await } } => {
            // Heard once: a read that failed before it found its end ends its staging too.
            if let Some(last) = streaming.back_mut() {
                last.end = None;
            }
            match end {
                Ok(end) => Step::Ended(end),
                Err(_) => Step::Ended(PartEnd { end: None, last: false }),
            }
        }
        done = async { match first_staging { Some(staging) => staging.await, None => std::future::pending().await } } => {
            if let Some(first) = streaming.front_mut() {
                first.done = Some(done);
            }
            Step::Staged
        }
        done = async { match second_staging { Some(staging) => staging.await, None => std::future::pending().await } } => {
            if let Some(second) = streaming.get_mut(1) {
                second.done = Some(done);
            }
            Step::Staged
        }
        record = async { match finishing { Some(finishing) => finishing.await, None => std::future::pending().await } } => Step::Checkpointed(record),
    }
}

/// A part read and staged, not yet checked or checkpointed.
struct StagedPart {
    index: i32,
    staging: object_store::path::Path,
    staged: Staged,
    read: PartRead,
    read_ms: u64,
}

/// Checks a staged part, publishes it under its immutable key, makes it durable and
/// checkpoints it (`rows_done`: the rows of the parts checkpointed before it); then deletes its
/// staging object.
async fn finish_part(a: &Attempt<'_>, part: StagedPart, rows_done: i64, file: FileType) -> Result<PartRecord, Stop> {
    let job = a.job;
    let started = std::time::Instant::now();
    a.validate(&part.staged, &part.staging).await?;
    let validated = started.elapsed();
    let key = published_key(job, &part, file);
    a.publish(&part.staging, &key).await?;
    let published = started.elapsed();
    let record = part_record(job, &part, &key);
    let StagedPart { index, staging, read_ms, .. } = part;
    let part = record;
    let payload = serde_json::to_value(&part).map_err(Stop::internal)?;
    checkpoints::record(&a.ctx.db, job, index, &payload, rows_done + part.rows, Mover::Worker(&a.ctx.worker_id))
        .await
        .map_err(Stop::internal)?
        .map_err(Stop::refused)?;
    tracing::info!(
        target: "exportd::lifecycle", export = %job.id, generation = job.generation, part = index, rows = part.rows, bytes = part.bytes,
        read_ms, validate_ms = validated.as_millis() as u64, publish_ms = (published - validated).as_millis() as u64,
        checkpoint_ms = (started.elapsed() - published).as_millis() as u64, "part checkpointed"
    );
    a.fault("after_checkpoint")?;
    if let Err(e) = a.store.delete(&staging).await {
        tracing::warn!(export = %job.id, error = %e, "a part's staging object was not deleted; the janitor will");
    }
    Ok(part)
}

/// The key a staged part is published under: its content's.
fn published_key(job: &jobs::Model, part: &StagedPart, file: FileType) -> object_store::path::Path {
    part_key(&job.tenant_id, &job.id, part.index, job.generation, &part.staged.sha256, file.extension())
}

/// The checkpoint of a staged part published at `key`.
fn part_record(job: &jobs::Model, part: &StagedPart, key: &object_store::path::Path) -> PartRecord {
    let (staged, read) = (&part.staged, &part.read);
    PartRecord {
        index: part.index,
        key: key.to_string(),
        first_key: read.first_key,
        last_key: read.last_key,
        rows: staged.rows,
        bytes: staged.bytes,
        sha256: staged.sha256.clone(),
        crc32: staged.crc32,
        read_at: read.read_at,
        attempt: job.attempt,
        generation: job.generation,
        last: read.last,
    }
}

/// The bundle's digest, begun before its last part is checkpointed.
struct BegunDigest {
    /// The manifest it was begun for: the one made once the part is checkpointed must be the
    /// same, or the digest is read again from the start.
    manifest: bytes::Bytes,
    /// Its hashing of the pieces before the last part (stopped if dropped).
    hashing: tokio_util::task::AbortOnDropHandle<Result<Sha256, object_store::Error>>,
    /// The pieces from the last part on.
    rest: Vec<crate::bundle::Piece>,
}

/// Begins the bundle's digest while its last part (`last`, staged) is checked, published and
/// checkpointed, and the manifest published: over the manifest and the parts checkpointed
/// before it (`parts`), with the last part's checkpoint as it will be recorded. Reading the
/// bundle back was a third of a resume's time, all of it after the last checkpoint.
fn begin_digest(a: &Attempt<'_>, request: &ExportRequest, resolved: &ResolvedContract, parts: &[PartRecord], last: &StagedPart, file: FileType) -> BegunDigest {
    let key = published_key(a.job, last, file);
    let mut all = parts.to_vec();
    all.push(part_record(a.job, last, &key));
    let manifest = bytes::Bytes::from(canonical_json(&parts::manifest(&a.job.id, request, resolved, &all)).into_bytes());
    let bundle = parts::bundle(manifest.clone(), &all);
    let mut pieces = bundle.pieces(0..bundle.size());
    let last_object = object_store::path::Path::from(key.to_string().as_str());
    // An empty last part has no piece of its own: then every piece is known now.
    let cut = pieces.iter().position(|piece| matches!(piece, crate::bundle::Piece::Object(object, _) if *object == last_object)).unwrap_or(pieces.len());
    let rest = pieces.split_off(cut);
    let (store, ticker) = (a.store.clone(), a.lease.ticker());
    let hashing = tokio::spawn(async move { store.hash_pieces(Sha256::new(), &pieces, std::sync::Arc::new(move || ticker.tick())).await });
    BegunDigest { manifest, hashing: tokio_util::task::AbortOnDropHandle::new(hashing), rest }
}

/// The plan in force: the one an earlier attempt fixed, or one fixed now from a snapshot of the
/// rows (their highest key and their number) and the part size configured now.
async fn fix_plan(a: &Attempt<'_>, plan: &Plan) -> Result<PartsPlan, Stop> {
    let fixed = match &a.job.checkpoint_plan {
        Some(fixed) => fixed.clone(),
        None => {
            let (max_key, rows_total) = snapshot::bounds(&a.ctx.snapshots, plan).await.map_err(Stop::snapshot)?;
            let plan = PartsPlan { part_rows: a.ctx.config.part_rows.max(1), max_key, rows_total };
            let proposed = serde_json::to_string(&plan).map_err(Stop::internal)?;
            checkpoints::fix_plan(&a.ctx.db, a.job, &proposed).await.map_err(Stop::internal)?.map_err(Stop::refused)?
        }
    };
    serde_json::from_str(&fixed).map_err(Stop::internal)
}
