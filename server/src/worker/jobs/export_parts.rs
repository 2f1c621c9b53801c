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
use super::export_attempt::{Attempt, PartRead, Staged};
use crate::entities::jobs;
use crate::service::canonical::canonical_json;
use crate::exports::parts::{self, PartRecord, PartsPlan};
use crate::job_store::authority::Permission;
use crate::job_store::checkpoints;
use crate::job_store::transitions::{self, Artifact};
use crate::job_store::Mover;
use crate::storage::{manifest_key, part_key, staging_part_key};
use crate::file_type::FileType;
use crate::worker::snapshot::{self, KeyRange, PartEnd, PartOrder, Plan, Reading};
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
    // Three steps at once: part n+1 streams from the database while part n is checked,
    // published, made durable and checkpointed, so the database never waits for the store; and
    // once part n+1's snapshot has found its last key, part n+2's read begins in a snapshot of
    // its own on the worker's spare connection (one job's at a time), so its rows are found and
    // sorted while part n+1 streams.
    // Checkpoints stay in order: part n+1 is checkpointed only after part n, in the next round.
    let mut last_key = parts.last().and_then(|p| p.last_key);
    let mut more = !parts.last().is_some_and(|last| last.last);
    let mut pending: Option<StagedPart> = None;
    let mut ahead: Option<ReadAhead> = None;
    // Parts are asked for unsorted, their key order checked, until one comes out of order.
    let sorted = std::sync::atomic::AtomicBool::new(false);
    let order = || if sorted.load(std::sync::atomic::Ordering::Relaxed) { PartOrder::Sorted } else { PartOrder::Checked };
    while more || pending.is_some() {
        a.checkpoint()?;
        let index = parts.len() as i32 + 1 + i32::from(pending.is_some());
        let rows_before = rows_done + pending.as_ref().map_or(0, |p| p.staged.rows);
        let range = KeyRange { after: last_key, max_key: fixed.max_key.unwrap_or(0), limit: fixed.part_rows };
        let begun = ahead.take();
        let read = async {
            if !more {
                return Ok((None, None));
            }
            let started = std::time::Instant::now();
            let mut reading = match begun {
                // Begun after the same key, and authorised then.
                Some(begun) if begun.after == last_key => begun.reading,
                other => {
                    // A read ahead from another key is stopped now, not when this part is staged.
                    drop(other);
                    // SPEC §2's authority, before each part's read (SPEC §5 step 3, for a read in parts).
                    a.authorised(permission).await?;
                    snapshot::produce(&a.ctx.snapshots, plan.part(range, order()))
                }
            };
            let part_end = reading.part_end.take();
            let read_ahead = async {
                let Some(Ok(PartEnd { end: Some(end), last: false })) = (match part_end {
                    Some(part_end) => Some(part_end.await),
                    None => None,
                }) else {
                    return Ok(None);
                };
                // Begun only while the lease is held and the export authorised.
                a.checkpoint()?;
                a.authorised(permission).await?;
                a.fault("before_part_read_ahead")?;
                let after = Some(end);
                let Some(reading) = snapshot::produce_ahead(&a.ctx.snapshots, plan.part(KeyRange { after, ..range }, order())) else { return Ok(None) };
                a.fault("part_read_ahead")?;
                Ok(Some(ReadAhead { after, reading }))
            };
            let staging = staging_part_key(&job.id, job.generation, index);
            let (staged, mut read_ahead) = match tokio::try_join!(a.stage(reading, &staging, compression, rows_before), read_ahead) {
                Err(Stop::OutOfKeyOrder(detail)) => {
                    // The plan did not keep the key's order (its staging was discarded, the read
                    // ahead with it): this part again, sorted, and every part after it.
                    tracing::info!(target: "exportd::lifecycle", export = %job.id, generation = job.generation, part = index, detail, "a part's rows came out of key order; reading it again, sorted");
                    sorted.store(true, std::sync::atomic::Ordering::Relaxed);
                    a.fault("part_out_of_key_order")?;
                    a.authorised(permission).await?;
                    let reading = snapshot::produce(&a.ctx.snapshots, plan.part(range, PartOrder::Sorted));
                    let staged = a.stage(reading, &staging, compression, rows_before).await.map_err(|stop| match stop {
                        Stop::OutOfKeyOrder(detail) => Stop::invalid_data(detail),
                        stop => stop,
                    })?;
                    (staged, None)
                }
                joined => joined?,
            };
            if let Some(ahead) = &mut read_ahead {
                // This part's read has ended: the one begun ahead is the job's only read now.
                ahead.reading.producer.now_the_jobs_own();
            }
            let read = staged.part.ok_or_else(|| Stop::internal("a part's read reported no keys"))?;
            // Checked like the sizes and digests: a part holds at most the plan's rows.
            if u64::try_from(staged.rows).map_or(true, |rows| rows > fixed.part_rows) {
                return Err(Stop::invalid_data(format!("part {index} wrote {} rows; a part holds at most {}", staged.rows, fixed.part_rows)));
            }
            Ok((Some(StagedPart { index, staging, staged, read, read_ms: started.elapsed().as_millis() as u64 }), read_ahead))
        };
        let finish = async {
            match pending.take() {
                Some(part) => finish_part(a, part, rows_done, file).await.map(Some),
                None => Ok(None),
            }
        };
        let ((next, read_ahead), finished) = tokio::try_join!(read, finish)?;
        ahead = read_ahead;
        if let Some(part) = finished {
            rows_done += part.rows;
            parts.push(part);
        }
        match next {
            Some(next) if next.staged.rows == 0 && next.index > 1 => {
                // The rows left were deleted since the plan was fixed: nothing more to write.
                let _ = a.store.delete(&next.staging).await;
                more = false;
            }
            Some(next) => {
                last_key = next.read.last_key;
                more = !next.read.last;
                // Part n staged, part n − 1 checkpointed, part n not yet.
                a.fault("after_part_staged")?;
                pending = Some(next);
            }
            None => {}
        }
    }

    // The manifest, published like a file; then the bundle's digest, read once from the parts.
    let manifest = canonical_json(&parts::manifest(&job.id, request, resolved, &parts)).into_bytes();
    let sha256 = hex::encode(Sha256::digest(&manifest));
    a.checkpoint()?;
    transitions::fence(&a.ctx.db, job, a.ctx.config.lease, a.fenced_authority(permission).await?).await.map_err(Stop::internal)?.map_err(Stop::refused)?;
    let key = manifest_key(&job.tenant_id, &job.id, &sha256);
    a.store.put_once(&key, bytes::Bytes::from(manifest.clone())).await.map_err(Stop::storage)?;
    a.store.make_durable(&key).await.map_err(Stop::storage)?;
    let bundle = parts::bundle(bytes::Bytes::from(manifest), &parts);
    let ticker = a.lease.ticker();
    let digesting = std::time::Instant::now();
    let digest = a.store.digest_pieces(&bundle.pieces(0..bundle.size()), std::sync::Arc::new(move || ticker.tick())).await.map_err(Stop::storage)?;
    let digest_ms = digesting.elapsed().as_millis() as u64;
    let artifact = Artifact { key: key.to_string(), sha256, bytes: bundle.size() as i64, rows: rows_done, bundle_digest: Some(digest) };
    let released = a.release(&artifact, permission).await?;
    let metrics = &a.ctx.metrics;
    metrics.rows_exported.inc_by(rows_done.max(0) as u64);
    metrics.bytes_exported.inc_by(bundle.size());
    metrics.export_duration.observe(started.elapsed().as_secs_f64());
    tracing::info!(export = %job.id, rows = rows_done, parts = parts.len(), bytes = bundle.size(), digest_ms, ms = started.elapsed().as_millis() as u64, "export released");
    Ok(released)
}

/// The next part's read, begun while the part before it streamed: after that part's last key.
struct ReadAhead {
    after: Option<i64>,
    reading: Reading,
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
    let StagedPart { index, staging, staged, read, read_ms } = part;
    a.validate(&staged, &staging).await?;
    let validated = started.elapsed();
    let key = part_key(&job.tenant_id, &job.id, index, job.generation, &staged.sha256, file.extension());
    a.publish(&staging, &key).await?;
    let published = started.elapsed();
    let part = PartRecord {
        index,
        key: key.to_string(),
        first_key: read.first_key,
        last_key: read.last_key,
        rows: staged.rows,
        bytes: staged.bytes,
        sha256: staged.sha256,
        crc32: staged.crc32,
        read_at: read.read_at,
        attempt: job.attempt,
        generation: job.generation,
        last: read.last,
    };
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
