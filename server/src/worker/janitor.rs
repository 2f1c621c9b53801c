//! The janitor (SPEC §5.11), in every worker process; safe to run in all of them at once, since
//! each of its moves is a conditional transition of the job store and each delete is idempotent.
//!
//! Every `EXPORTD_JANITOR_MS` it ends jobs whose lease expired (a lost worker: `retry_wait`, or
//! `failed` with `worker_lost` once attempts are spent; a lost cancel: `cancelled`), ends
//! attempts whose lease is renewed but that made no progress for `EXPORTD_STALL_SECS` plus a
//! lease (`stalled`: their worker's own stall rule did not end them), fails jobs claimable for
//! longer than `EXPORTD_QUEUE_TTL_SECS` without a claim (`no_worker`), deletes artifacts past
//! `EXPORTD_ARTIFACT_TTL_SECS` (an export's file, an import's report whatever its ending; the
//! record stays, marked expired) and purges records past
//! `EXPORTD_RECORD_TTL_SECS` (so their keys may be used again), all on the database's clock and
//! skipping rows another process holds. Every `EXPORTD_SWEEP_MS` it also sweeps the stores of
//! the deployments it serves: staging objects (and the partial files of local uploads) of
//! attempts that can no longer release, and objects under `exports/` and `imports/` that are
//! not their finished job's artifact (nor, for a failed import that may be redriven, its
//! validation's report) and older than the lease plus `EXPORTD_ORPHAN_MARGIN_SECS`. A
//! checkpointed export's parts (SPEC §5.1) are its artifact with its manifest: kept while it can
//! still finish and while its bundle is kept; a part no checkpoint references is swept like
//! staging (once its attempt can no longer checkpoint it). On SQLite
//! it also checkpoints the write-ahead log, which is then cut back to its limit.

use super::WorkerContext;
use crate::db::db_now_ms;
use crate::entities::{jobs, tenants};
use crate::error::new_support_ref;
use crate::imports::uploads;
use crate::job_store::kind::JobKind;
use crate::job_store::transitions::{self, Ender, Failure, Outcome};
use crate::job_store::Mover;
use crate::storage::{parse_artifact_key, parse_staging_key, part_generation, ExportStore};
use app::ExportStatus;
use futures::StreamExt;
use object_store::path::Path;
use sea_orm::{DbErr, EntityTrait, QuerySelect};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// Rows one rule handles per pass.
const BATCH: u64 = 200;

/// What one pass did, for tests and the log.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pass {
    /// Jobs ended because their lease expired.
    pub leases_expired: usize,
    /// Attempts ended because they made no progress while their lease was renewed.
    pub stalled_ended: usize,
    /// Queued jobs failed with `no_worker`.
    pub unclaimed_failed: usize,
    /// Artifacts deleted past retention.
    pub artifacts_expired: usize,
    /// Records purged.
    pub records_purged: usize,
    /// Login throttle rows and sessions that no longer matter, deleted.
    pub logins_purged: usize,
    /// Staging objects deleted.
    pub staging_deleted: usize,
    /// Objects under `exports/` deleted that were not their job's artifact.
    pub orphans_deleted: usize,
    /// Uploads removed after `EXPORTD_UPLOAD_TTL_SECS` unused.
    pub uploads_expired: usize,
    /// Objects under `uploads/` and `uploading/` deleted that no upload keeps.
    pub upload_objects_deleted: usize,
}

/// The longest one pass may take; a pass stuck on a store that stopped answering is abandoned,
/// and the next one starts afresh.
const PASS_LIMIT: Duration = Duration::from_secs(300);

/// Runs the janitor until shutdown.
pub async fn run(ctx: WorkerContext) {
    let every = ctx.config.janitor_every;
    let mut last_sweep: Option<tokio::time::Instant> = None;
    loop {
        // A little jitter, so the janitors of many workers do not move in step.
        let jitter = every.mul_f64((uuid::Uuid::new_v4().as_u128() % 200) as f64 / 1000.0);
        tokio::select! {
            _ = tokio::time::sleep(every + jitter) => {}
            _ = ctx.shutdown.cancelled() => return,
        }
        let sweep = last_sweep.is_none_or(|t| t.elapsed() >= ctx.config.sweep_every);
        if sweep {
            last_sweep = Some(tokio::time::Instant::now());
        }
        match tokio::time::timeout(PASS_LIMIT, pass(&ctx, sweep)).await {
            Ok(Ok(done)) if done != Pass::default() => tracing::info!(?done, "janitor pass"),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "janitor pass failed; next time"),
            Err(_) => tracing::warn!("a janitor pass did not finish within {PASS_LIMIT:?}; abandoned"),
        }
    }
}

/// One pass of every rule; with `sweep`, the store sweeps too.
pub async fn pass(ctx: &WorkerContext, sweep: bool) -> Result<Pass, DbErr> {
    let mut done = Pass::default();
    let by = Mover::Janitor(&ctx.worker_id);
    let now = db_now_ms(&ctx.db).await?;
    done.leases_expired = expire_leases(ctx, now, by).await?;
    ctx.metrics.lease_reclaims.inc_by(done.leases_expired as u64);
    done.stalled_ended = end_stalled(ctx, now, by).await?;
    ctx.metrics.stalled_attempts.inc_by(done.stalled_ended as u64);
    done.unclaimed_failed = fail_unclaimed(ctx, now, by).await?;
    done.artifacts_expired = expire_artifacts(ctx, now, by).await?;
    done.records_purged = purge_records(ctx, now).await?;
    done.uploads_expired = expire_uploads(ctx, now).await?;
    done.logins_purged = (crate::auth::throttle::purge(&ctx.db, now).await? + crate::auth::purge_sessions(&ctx.db, now).await?) as usize;
    if sweep {
        for deployment in served_deployments(ctx).await? {
            let store = match ctx.stores.for_deployment(&ctx.db, &deployment).await {
                Ok(store) => store,
                Err(e) => {
                    tracing::warn!(deployment = %deployment, error = %e, "not sweeping a store that is not the deployment's");
                    continue;
                }
            };
            done.staging_deleted += sweep_staging(ctx, &store).await?;
            done.staging_deleted += sweep_partial_uploads(ctx, &store).await?;
            done.orphans_deleted += sweep_published(ctx, &store).await?;
            done.upload_objects_deleted += sweep_uploads(ctx, &store).await?;
        }
    }
    crate::db::checkpoint_wal(&ctx.db).await;
    Ok(done)
}

fn moved(outcome: Outcome) -> usize {
    matches!(outcome, Outcome::Moved(_)) as usize
}

/// Running (or cancel-requested) jobs whose lease ran out: their worker is gone. A crash counts
/// as an attempt, so a job that always kills its worker ends `failed` (`worker_lost`).
async fn expire_leases(ctx: &WorkerContext, now: i64, by: Mover<'_>) -> Result<usize, DbErr> {
    let mut n = 0;
    for job in transitions::lapsed_leases(&ctx.db, now, BATCH).await? {
        let support_ref = new_support_ref();
        let outcome = transitions::end_attempt(&ctx.db, &job, Failure::WORKER_LOST, &support_ref, &ctx.retry_policy(), by, Ender::LapsedLease).await?;
        if let Outcome::Moved(row) = &outcome {
            tracing::warn!(export = %job.id, generation = job.generation, owner = ?job.lease_owner, support_ref = %support_ref, status = %row.status, "lease expired: the worker is gone");
        }
        n += moved(outcome);
    }
    Ok(n)
}

/// Attempts whose lease is renewed but that made no progress for the stall time plus a lease:
/// their worker's own stall rule should have ended them; it did not (it hangs itself).
async fn end_stalled(ctx: &WorkerContext, now: i64, by: Mover<'_>) -> Result<usize, DbErr> {
    let quiet = ctx.config.stall + ctx.config.lease;
    let mut n = 0;
    for job in transitions::stalled_attempts(&ctx.db, now, quiet, BATCH).await? {
        let support_ref = new_support_ref();
        let outcome = transitions::end_attempt(&ctx.db, &job, Failure::STALLED, &support_ref, &ctx.retry_policy(), by, Ender::Stalled { quiet }).await?;
        if let Outcome::Moved(row) = &outcome {
            tracing::warn!(export = %job.id, generation = job.generation, owner = ?job.lease_owner, support_ref = %support_ref, status = %row.status, "no progress although the lease was renewed: the attempt hangs");
        }
        n += moved(outcome);
    }
    Ok(n)
}

/// Jobs claimable for longer than the queue TTL without a claim: no worker serves their
/// deployment.
async fn fail_unclaimed(ctx: &WorkerContext, now: i64, by: Mover<'_>) -> Result<usize, DbErr> {
    let mut n = 0;
    for job in transitions::overdue_unclaimed(&ctx.db, now, ctx.config.queue_ttl, BATCH).await? {
        let support_ref = new_support_ref();
        let outcome = transitions::fail_unclaimed(&ctx.db, &job, ctx.config.queue_ttl, &ctx.digests, &support_ref, by).await?;
        if matches!(outcome, Outcome::Moved(_)) {
            tracing::warn!(export = %job.id, deployment = %job.deployment, schema_digest = ?job.schema_digest, support_ref = %support_ref, "no worker claimed the operation in time");
        }
        n += moved(outcome);
    }
    Ok(n)
}

/// Uploads unused for `EXPORTD_UPLOAD_TTL_SECS` that no unfinished import names: the row goes,
/// then the object (a store that refuses leaves it to the sweep of `uploads/`).
async fn expire_uploads(ctx: &WorkerContext, now: i64) -> Result<usize, DbErr> {
    let before = now - ctx.config.upload_ttl.as_millis() as i64;
    let gone = uploads::expire(&ctx.db, before, &ctx.worker.deployments, BATCH).await?;
    for upload in &gone {
        if let Ok(store) = ctx.stores.for_deployment(&ctx.db, &upload.deployment).await {
            if let Err(e) = store.delete(&Path::from(upload.object_key.as_str())).await {
                tracing::warn!(upload = %upload.id, error = %e, "expired upload's file not deleted; the sweep will");
            }
        }
    }
    Ok(gone.len())
}

/// Objects under `uploading/` (bytes still arriving, or left by a request that died) and under
/// `uploads/` that no upload row keeps, once older than the lease plus the margin: a live
/// upload publishes and records its file well within that.
async fn sweep_uploads(ctx: &WorkerContext, store: &ExportStore) -> Result<usize, DbErr> {
    let grace = (ctx.config.lease + ctx.config.orphan_margin).as_millis() as i64;
    let mut deleted = 0;
    for prefix in ["uploading", "uploads"] {
        let listed: Vec<object_store::ObjectMeta> = store.list(prefix).filter_map(|m| async move { m.ok() }).collect().await;
        let now = db_now_ms(&ctx.db).await?;
        let old: Vec<_> = listed.into_iter().filter(|m| m.last_modified.timestamp_millis() <= now - grace).collect();
        let ids: Vec<String> = old.iter().filter_map(|m| uploads::upload_id_of_key(&m.location)).collect();
        let kept = if prefix == "uploads" { uploads::existing(&ctx.db, &ids).await? } else { HashSet::new() };
        for meta in old {
            if uploads::upload_id_of_key(&meta.location).is_some_and(|id| !kept.contains(&id)) {
                match store.delete(&meta.location).await {
                    Ok(()) => deleted += 1,
                    Err(e) => tracing::warn!(key = %meta.location, error = %e, "not deleted; next sweep"),
                }
            }
        }
    }
    Ok(deleted)
}

/// Whether this worker may touch the store of `deployment`.
fn serves(ctx: &WorkerContext, deployment: &str) -> bool {
    ctx.worker.serves(deployment)
}

/// Artifacts past retention: the object is deleted first, then the record marked expired, so
/// a crash in between only repeats the (idempotent) delete.
async fn expire_artifacts(ctx: &WorkerContext, now: i64, by: Mover<'_>) -> Result<usize, DbErr> {
    let mut n = 0;
    for job in transitions::due_artifacts(&ctx.db, now, &ctx.worker.deployments, BATCH).await? {
        if !delete_artifact(ctx, &job).await {
            continue;
        }
        n += moved(transitions::mark_artifact_expired(&ctx.db, &job, by).await?);
    }
    Ok(n)
}

/// Deletes a job's artifact and what its kind keeps with it: a file, or a checkpointed export's
/// manifest and then every part its checkpoints reference (the manifest first, so no new
/// download starts on parts being deleted), or an import's report and then its validation's
/// report; false when the store refused (try again next pass: every delete is idempotent).
async fn delete_artifact(ctx: &WorkerContext, job: &jobs::Model) -> bool {
    let Some(key) = &job.artifact_key else { return true };
    let Ok(store) = ctx.stores.for_deployment(&ctx.db, &job.deployment).await else { return false };
    let kept_with_it: Vec<String> = match JobKind::parse(&job.kind) {
        Some(JobKind::Export) | None => match crate::job_store::checkpoints::of_job(&ctx.db, &job.id).await {
            Ok(checkpoints) => crate::exports::parts::from_checkpoints(&checkpoints).unwrap_or_default().into_iter().map(|p| p.key).collect(),
            Err(e) => {
                tracing::warn!(export = %job.id, error = %e, "checkpoints not read; next pass");
                return false;
            }
        },
        Some(JobKind::Import) => validation_report(job).into_iter().collect(),
    };
    let keys = std::iter::once(key.clone()).chain(kept_with_it);
    for key in keys {
        if let Err(e) = store.delete(&Path::from(key.as_str())).await {
            tracing::warn!(export = %job.id, error = %e, "artifact not deleted; next pass");
            return false;
        }
    }
    true
}

/// Records past retention; an artifact still kept is deleted first (by a janitor that serves
/// its deployment).
async fn purge_records(ctx: &WorkerContext, now: i64) -> Result<usize, DbErr> {
    let mut n = 0;
    for job in transitions::purgeable(&ctx.db, now, ctx.config.record_ttl, &ctx.worker.deployments, BATCH).await? {
        let keeps_artifact = job.artifact_key.is_some() && !job.artifact_expired;
        if keeps_artifact && !(serves(ctx, &job.deployment) && delete_artifact(ctx, &job).await) {
            continue;
        }
        n += transitions::purge(&ctx.db, &job, ctx.config.record_ttl).await? as usize;
    }
    Ok(n)
}

/// The deployments whose stores this worker sweeps.
async fn served_deployments(ctx: &WorkerContext) -> Result<Vec<String>, DbErr> {
    if !ctx.worker.deployments.is_empty() {
        return Ok(ctx.worker.deployments.clone());
    }
    let mut all: Vec<String> = tenants::Entity::find().select_only().column(tenants::Column::Deployment).distinct().into_tuple().all(&ctx.db).await?;
    all.sort();
    Ok(all)
}

/// The jobs of these ids, by id.
async fn jobs_by_id(ctx: &WorkerContext, ids: Vec<String>) -> Result<HashMap<String, jobs::Model>, DbErr> {
    let mut ids = ids;
    ids.sort();
    ids.dedup();
    Ok(transitions::by_ids(&ctx.db, &ids).await?.into_iter().map(|j| (j.id.clone(), j)).collect())
}

/// What the janitor knows of the jobs a batch of listed objects belongs to: each job as read
/// after the listing, and the part keys their checkpoints reference, read after the jobs (so a
/// job read as past a generation has every checkpoint that generation will ever make).
#[derive(Default)]
struct Known {
    jobs: HashMap<String, jobs::Model>,
    referenced: HashSet<String>,
}

/// The part keys the checkpoints of `jobs` reference.
async fn referenced_parts(ctx: &WorkerContext, jobs: &HashMap<String, jobs::Model>) -> Result<HashSet<String>, DbErr> {
    let ids: Vec<String> = jobs.keys().cloned().collect();
    let checkpoints = crate::job_store::checkpoints::of_jobs(&ctx.db, &ids).await?;
    Ok(checkpoints.into_iter().filter_map(|c| serde_json::from_str::<crate::exports::parts::PartRecord>(&c.payload).ok()).map(|p| p.key).collect())
}

/// Lists `prefix` in batches and deletes what `doomed` picks; with `with_parts`, what the jobs'
/// checkpoints reference is read too.
async fn sweep<F>(ctx: &WorkerContext, store: &ExportStore, prefix: &str, id_of: fn(&Path) -> Option<String>, with_parts: bool, doomed: F) -> Result<usize, DbErr>
where
    F: Fn(&object_store::ObjectMeta, Option<&jobs::Model>, &HashSet<String>, i64) -> bool,
{
    let mut listing = store.list(prefix);
    let mut deleted = 0;
    let mut batch = Vec::new();
    loop {
        let next = listing.next().await;
        let done = next.is_none();
        match next {
            Some(Ok(meta)) => batch.push(meta),
            Some(Err(e)) => {
                tracing::warn!(prefix, error = %e, "listing the store failed; next sweep");
                return Ok(deleted);
            }
            None => {}
        }
        if batch.len() < BATCH as usize && !done {
            continue;
        }
        let now = db_now_ms(&ctx.db).await?;
        let mut known = Known { jobs: jobs_by_id(ctx, batch.iter().filter_map(|m| id_of(&m.location)).collect()).await?, ..Known::default() };
        if with_parts {
            known.referenced = referenced_parts(ctx, &known.jobs).await?;
        }
        for meta in batch.drain(..) {
            let job = id_of(&meta.location).and_then(|id| known.jobs.get(&id));
            if doomed(&meta, job, &known.referenced, now) {
                match store.delete(&meta.location).await {
                    Ok(()) => deleted += 1,
                    Err(e) => tracing::warn!(key = %meta.location, error = %e, "not deleted; next sweep"),
                }
            }
        }
        if done {
            return Ok(deleted);
        }
    }
}

/// Whether what generation `generation` of `job` wrote can no longer be used, by `job` as read
/// after the object was listed: the job is gone, or has moved past that generation, or is no
/// longer running under it. (An object of a generation newer than the job as read was written
/// after the read, by a live attempt.)
fn attempt_is_dead(generation: i32, job: Option<&jobs::Model>) -> bool {
    match job {
        None => true,
        Some(job) => {
            let live = matches!(ExportStatus::parse(&job.status), Some(ExportStatus::Running | ExportStatus::CancelRequested));
            job.generation > generation || (job.generation == generation && !live)
        }
    }
}

/// Whether the staging object `key` belongs to an attempt that can no longer release.
fn staging_is_dead(key: &Path, job: Option<&jobs::Model>) -> bool {
    parse_staging_key(key).is_some_and(|(_, generation)| attempt_is_dead(generation, job))
}

/// Staging objects whose attempt can no longer release.
async fn sweep_staging(ctx: &WorkerContext, store: &ExportStore) -> Result<usize, DbErr> {
    sweep(ctx, store, "staging", |key| parse_staging_key(key).map(|(id, _)| id), false, |meta, job, _, _| staging_is_dead(&meta.location, job)).await
}

/// The partial files of local uploads whose attempt can no longer release (the same rule as
/// [`sweep_staging`]), once older than the lease plus the margin by the database's clock: a
/// live attempt's upload is never touched, however slow it is and whatever this host's clock
/// says.
async fn sweep_partial_uploads(ctx: &WorkerContext, store: &ExportStore) -> Result<usize, DbErr> {
    let listing = store.clone();
    let partials = tokio::task::spawn_blocking(move || listing.partial_uploads()).await.unwrap_or_default();
    if partials.is_empty() {
        return Ok(0);
    }
    let now = db_now_ms(&ctx.db).await?;
    let grace = (ctx.config.lease + ctx.config.orphan_margin).as_millis() as i64;
    let jobs = jobs_by_id(ctx, partials.iter().filter_map(|p| parse_staging_key(&p.key).map(|(id, _)| id)).collect()).await?;
    let mut deleted = 0;
    for partial in partials {
        let job = parse_staging_key(&partial.key).and_then(|(id, _)| jobs.get(&id));
        if partial.modified_ms < now - grace && staging_is_dead(&partial.key, job) && store.remove_partial(&partial) {
            deleted += 1;
        }
    }
    Ok(deleted)
}

/// Whether the object `meta` under `exports/` is doomed, given its `job` (as read after the
/// listing) and the part keys its checkpoints reference:
/// - a part no checkpoint references, of an attempt that can no longer checkpoint it: at once,
///   like staging;
/// - anything of a job that is gone, or not its finished job's artifact (a file or manifest
///   that a worker which lost published anyway; the parts of a checkpointed export that ended
///   without release, or whose bundle expired), once older than the lease plus the margin.
///
/// A referenced part of a job that can still finish, or of a ready export whose bundle is
/// kept, is never doomed.
fn export_object_is_doomed(meta: &object_store::ObjectMeta, job: Option<&jobs::Model>, referenced: &HashSet<String>, now: i64, grace: i64) -> bool {
    let old = meta.last_modified.timestamp_millis() <= now - grace;
    let Some(job) = job else { return old };
    let finished = ExportStatus::parse(&job.status).is_some_and(ExportStatus::is_terminal);
    let kept = !job.artifact_expired && job.status == ExportStatus::Ready.as_str();
    match part_generation(&meta.location).filter(|_| is_part(&meta.location)) {
        Some(_) if referenced.contains(meta.location.as_ref()) => finished && !kept && old,
        Some(generation) => attempt_is_dead(generation, Some(job)) && (!finished || old),
        None => {
            let is_artifact = !job.artifact_expired && job.artifact_key.as_deref() == Some(meta.location.as_ref());
            finished && !is_artifact && old
        }
    }
}

/// The key of an import's validation report, from its plan.
fn validation_report(job: &jobs::Model) -> Option<String> {
    crate::imports::stored::plan_of(job).ok().flatten().and_then(|p| p.report).map(|r| r.key)
}

/// Whether the object `meta` under `imports/` is doomed, given its `job` (as read after the
/// listing): anything of a job that is gone, or of a finished job that is neither its report
/// nor the validation's report while something still needs that (the report owed to the job,
/// or a redrive of a failed import whose report is kept), once older than the lease plus the
/// margin.
fn import_object_is_doomed(meta: &object_store::ObjectMeta, job: Option<&jobs::Model>, now: i64, grace: i64) -> bool {
    let old = meta.last_modified.timestamp_millis() <= now - grace;
    let Some(job) = job else { return old };
    let status = ExportStatus::parse(&job.status);
    let finished = status.is_some_and(ExportStatus::is_terminal);
    let key = Some(meta.location.as_ref());
    let is_artifact = !job.artifact_expired && job.artifact_key.as_deref() == key;
    let redrivable = status == Some(ExportStatus::Failed) && !job.artifact_expired;
    let needed = validation_report(job).as_deref() == key && (crate::imports::stored::owes_report(job) || redrivable);
    finished && !is_artifact && !needed && old
}

/// Whether `key` is a part of a checkpointed export (`exports/{tenant}/{id}/parts/…`).
fn is_part(key: &Path) -> bool {
    key.parts().nth(3).is_some_and(|folder| folder.as_ref() == "parts")
}

/// Objects under every kind's root (`exports/`, `imports/`) that its rule picks:
/// [`export_object_is_doomed`], [`import_object_is_doomed`].
async fn sweep_published(ctx: &WorkerContext, store: &ExportStore) -> Result<usize, DbErr> {
    let grace = (ctx.config.lease + ctx.config.orphan_margin).as_millis() as i64;
    let mut deleted = 0;
    for kind in JobKind::ALL {
        deleted += match kind {
            JobKind::Export => sweep(ctx, store, kind.artifact_root(), parse_artifact_key, true, move |meta, job, referenced, now| export_object_is_doomed(meta, job, referenced, now, grace)).await?,
            JobKind::Import => sweep(ctx, store, kind.artifact_root(), parse_artifact_key, false, move |meta, job, _, now| import_object_is_doomed(meta, job, now, grace)).await?,
        };
    }
    Ok(deleted)
}

/// Writes the reports owed to jobs that ended without the one their kind gives every ending
/// (an import failed or cancelled by the janitor, by a cancel while it waited, by a worker that
/// was lost before it wrote one), every `EXPORTD_JANITOR_MS` until shutdown. Apart from the
/// janitor's pass: a report takes as long as reading its file, and the pass must not wait.
pub async fn run_reports(ctx: WorkerContext) {
    let every = ctx.config.janitor_every;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = ctx.shutdown.cancelled() => return,
        }
        match super::jobs::import_report::settle_owed(&ctx, BATCH).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(reports = n, "reports written for jobs that did not finish"),
            Err(e) => tracing::warn!(error = %e, "looking for owed reports failed; next time"),
        }
    }
}
