//! One attempt at an export (SPEC §5 steps 2–8): authority, snapshot, CSV streamed to this
//! attempt's staging object while hashing, validation of the staged object, the ownership fence,
//! publish-once under the content-addressed key, the file made durable, the fenced release, and
//! the staging object deleted. Whatever stops the attempt ends it with one transition of the job
//! store: a cancel, a lost lease or a stall (no progress for `EXPORTD_STALL_SECS`) interrupts it
//! wherever it waits — a snapshot query still waiting for its first row is cancelled in the
//! database — and a SIGTERM does so until the file is published.

use crate::auth::load_active_actor;
use crate::auth::AuthVia;
use crate::entities::jobs;
use crate::exports::reports::{find_report, ReportSpec};
use crate::exports::view::{request_of, resolved_of};
use crate::job_store::authority::Authority;
use crate::job_store::transitions::{self, Artifact, Refusal};
use crate::job_store::Mover;
use crate::metrics::release_lost;
use crate::storage::{artifact_key, staging_key, ExportStore, Published, StagingUpload};
use crate::worker::encoding::{extension, Encoder};
use app::{Compression, Consistency};
use crate::worker::lease::{Holding, Lease};
use crate::worker::snapshot::{self, Plan, Produced};
use crate::worker::WorkerContext;
use super::attempt::{begin, end, Stop};
use object_store::path::Path;
use sha2::{Digest, Sha256};

/// Runs one claimed job to the end of its attempt, whatever happens. A job of a deployment this
/// worker does not serve, or one that is not (or no longer) this generation's, is left as it is.
pub async fn run(ctx: &WorkerContext, job: jobs::Model) {
    let Some(lease) = begin(ctx, &job).await else { return };
    let staging = staging_key(&job.id, job.generation);
    let store = ctx.stores.for_deployment(&ctx.db, &job.deployment).await;
    let result = match &store {
        Ok(store) => {
            let attempt = Attempt { ctx, job: &job, store, lease: &lease, staging: &staging };
            // The attempt stops itself gracefully at its checkpoints; this ends it wherever else
            // it waits (a store that stopped answering, a hung digest or copy).
            tokio::select! {
                biased;
                result = attempt.run() => result,
                holding = lease.interrupted() => Err(Stop::interrupted(holding)),
            }
        }
        Err(e) => Err(Stop::storage(e)),
    };
    // The heartbeat stops here; the transition that ends the attempt clears the lease.
    drop(lease);
    end(ctx, &job, result).await;
    if let Ok(store) = store {
        // Only this attempt's own staging object; never anything under exports/.
        if let Err(e) = store.delete(&staging).await {
            tracing::warn!(export = %job.id, error = %e, "staging object not deleted; the janitor will");
        }
    }
}

pub(super) struct Attempt<'a> {
    pub(super) ctx: &'a WorkerContext,
    pub(super) job: &'a jobs::Model,
    pub(super) store: &'a ExportStore,
    pub(super) lease: &'a Lease,
    pub(super) staging: &'a Path,
}

/// What a stream staged: the file's bytes as stored (compressed, with gzip).
pub(super) struct Staged {
    /// Data rows.
    pub(super) rows: i64,
    /// Bytes.
    pub(super) bytes: i64,
    /// Hex SHA-256 of the bytes.
    pub(super) sha256: String,
    /// CRC-32 of the bytes (a bundle's entries carry it).
    pub(super) crc32: u32,
    /// The snapshot's row count, when it was counted (a whole export's is).
    counted: Option<i64>,
    /// A part's keys and the moment its snapshot shows.
    pub(super) part: Option<PartRead>,
}

/// What a part's read saw besides its rows.
#[derive(Debug, Clone, Copy)]
pub(super) struct PartRead {
    pub(super) first_key: Option<i64>,
    pub(super) last_key: Option<i64>,
    pub(super) read_at: i64,
    /// Whether no row of the export is left after it.
    pub(super) last: bool,
}

impl Attempt<'_> {
    /// Stops at a checkpoint when the lease says so, or (before anything is published) when the
    /// process is shutting down.
    pub(super) fn checkpoint(&self) -> Result<(), Stop> {
        match self.lease.holding() {
            Holding::Held if self.ctx.shutdown.is_cancelled() => Err(Stop::Shutdown),
            Holding::Held => Ok(()),
            other => Err(Stop::interrupted(other)),
        }
    }

    /// Waits until the attempt must stop before publishing: the lease says so, or the process
    /// is shutting down.
    async fn must_stop(&self) -> Stop {
        tokio::select! {
            holding = self.lease.interrupted() => Stop::interrupted(holding),
            () = self.ctx.shutdown.cancelled() => Stop::Shutdown,
        }
    }

    pub(super) fn fault(&self, point: &'static str) -> Result<(), Stop> {
        Ok(self.ctx.faults.check(point, &self.job.id)?)
    }

    async fn run(&self) -> Result<Box<jobs::Model>, Stop> {
        let job = self.job;
        self.fault("after_claim")?;
        self.checkpoint()?;
        let report = find_report(&job.report).ok_or_else(|| Stop::internal(format!("unknown report {:?}", job.report)))?;
        let request = request_of(job).map_err(Stop::internal)?;
        let resolved = resolved_of(job).map_err(Stop::internal)?;
        let authority = Authority::Export { needs_pii: report.needs_pii(&resolved.columns).ok_or_else(|| Stop::internal("a resolved column left the registry"))? };
        self.authorised(report, &resolved.columns).await?;
        let plan = Plan::new(report, &request, &resolved, &job.tenant_id).map_err(Stop::internal)?;
        match request.consistency {
            Consistency::Snapshot => self.one_file(plan, authority, request.options.compression).await,
            Consistency::Checkpointed => super::export_parts::run(self, plan, authority, &request, &resolved).await,
        }
    }

    /// A whole export as one file, in one snapshot (SPEC §5 steps 4–8).
    async fn one_file(&self, plan: Plan, authority: Authority, compression: Compression) -> Result<Box<jobs::Model>, Stop> {
        let job = self.job;
        let started = std::time::Instant::now();
        let staged = self.stage(plan, self.staging, compression, 0).await?;
        let total = staged.counted.ok_or_else(|| Stop::internal("the snapshot was never counted"))?;
        if staged.rows != total {
            return Err(Stop::invalid_data(format!("wrote {} rows but the snapshot counted {total}", staged.rows)));
        }
        let streamed = started.elapsed();
        self.fault("after_staging")?;
        self.validate(&staged, self.staging).await?;
        let validated = started.elapsed();
        self.checkpoint()?;

        // The fence: still ours and still authorised, checked by the database right before the copy.
        transitions::fence(&self.ctx.db, job, self.ctx.config.lease, authority).await.map_err(Stop::internal)?.map_err(Stop::refused)?;
        self.fault("before_publish")?;
        let key = artifact_key(&job.tenant_id, &job.id, &staged.sha256, extension(compression));
        self.publish(self.staging, &key).await?;
        self.fault("after_publish")?;

        let artifact = Artifact { key: key.to_string(), sha256: staged.sha256, bytes: staged.bytes, rows: staged.rows, bundle_digest: None };
        let released = self.release(&artifact, authority).await?;
        let metrics = &self.ctx.metrics;
        metrics.rows_exported.inc_by(staged.rows.max(0) as u64);
        metrics.bytes_exported.inc_by(staged.bytes.max(0) as u64);
        metrics.export_duration.observe(started.elapsed().as_secs_f64());
        tracing::info!(
            export = %job.id, rows = staged.rows, bytes = staged.bytes,
            stream_ms = streamed.as_millis() as u64, validate_ms = (validated - streamed).as_millis() as u64,
            publish_ms = (started.elapsed() - validated).as_millis() as u64, "export released"
        );
        Ok(released)
    }

    /// Streams `plan`'s rows, as CSV compressed as asked, into a staging upload at `key`, and
    /// completes it; an upload that does not complete is aborted.
    /// `rows_before`: the rows already written by earlier parts, for the progress.
    pub(super) async fn stage(&self, plan: Plan, key: &Path, compression: Compression, rows_before: i64) -> Result<Staged, Stop> {
        let ticker = self.lease.ticker();
        let mut upload = self.store.stage(key, std::sync::Arc::new(move || ticker.tick()));
        let staged = match self.stream(plan, &mut upload, compression, rows_before).await {
            Ok(staged) => staged,
            Err(stop) => {
                // Discard the upload, so no incomplete multipart upload is left in the store.
                if let Err(e) = upload.abort().await {
                    tracing::warn!(export = %self.job.id, error = %e, "aborting the staging upload failed");
                }
                return Err(stop);
            }
        };
        // Completing it aborts it on failure.
        upload.finish().await.map_err(Stop::storage)?;
        Ok(staged)
    }

    /// Publishes a staged object once at its immutable `key` (an object already there under a
    /// content-addressed key is this same file), durable before anything references it.
    pub(super) async fn publish(&self, staged: &Path, key: &Path) -> Result<(), Stop> {
        let ticker = self.lease.ticker();
        if self.store.publish(staged, key, std::sync::Arc::new(move || ticker.tick())).await.map_err(Stop::storage)? == Published::AlreadyThere {
            // An earlier attempt (or a racing worker) published it: under a content-addressed
            // key that is this same file, so this attempt goes on with it.
            tracing::info!(target: "exportd::lifecycle", export = %self.job.id, generation = self.job.generation, key = %key, "file already published; going on with it");
        }
        self.lease.ticker().tick();
        // Durable before the UPDATE that references it (SPEC §5.13).
        self.store.make_durable(key).await.map_err(Stop::storage)
    }

    /// The release: `running → ready` with `artifact`, under this generation, while authorised.
    pub(super) async fn release(&self, artifact: &Artifact, authority: Authority) -> Result<Box<jobs::Model>, Stop> {
        self.fault("before_release")?;
        transitions::release(&self.ctx.db, self.job, artifact, self.ctx.config.artifact_ttl, authority, Mover::Worker(&self.ctx.worker_id), &self.ctx.faults)
            .await
            .map_err(Stop::internal)?
            .map_err(|refusal| {
                let reason = match refusal {
                    Refusal::Lost => release_lost::LOST,
                    Refusal::CancelRequested => release_lost::CANCEL_REQUESTED,
                    Refusal::Revoked => release_lost::REVOKED,
                };
                self.ctx.metrics.releases_lost.with_label_values(&[reason]).inc();
                Stop::refused(refusal)
            })
    }

    /// SPEC §2's "authorised", on a fresh read: the actor exists, is active, is of the job's
    /// tenant, and their role may export these columns.
    pub(super) async fn authorised(&self, report: &ReportSpec, columns: &[String]) -> Result<(), Stop> {
        let actor = load_active_actor(&self.ctx.db, &self.job.actor_id, AuthVia::Token).await.map_err(Stop::internal)?;
        let needs_pii = report.needs_pii(columns).unwrap_or(true);
        match actor {
            Some(a) if a.tenant_id == self.job.tenant_id && a.role.may_export_contract(needs_pii) => Ok(()),
            _ => Err(Stop::Revoked),
        }
    }

    /// Streams the snapshot as CSV into the upload, hashing and counting as it goes. A stop (a
    /// cancel, a lost lease, a stall, a shutdown) ends it wherever it waits, cancelling the
    /// snapshot's query if the database is still running it.
    async fn stream(&self, plan: Plan, upload: &mut StagingUpload, compression: Compression, rows_before: i64) -> Result<Staged, Stop> {
        let (mut produced, producer) = snapshot::produce(&self.ctx.snapshots, plan);
        let mut hasher = Sha256::new();
        let mut crc = crc32fast::Hasher::new();
        let mut encoder = Encoder::new(compression);
        let (mut rows, mut bytes, mut total, mut first_chunk, mut part) = (0i64, 0i64, None, true, None);
        let consumed: Result<(), Stop> = async {
            loop {
                let next = tokio::select! {
                    biased;
                    stop = self.must_stop() => return Err(stop),
                    next = produced.recv() => next,
                };
                let Some(next) = next else { return Ok(()) };
                match next {
                    Produced::Counted(n) => {
                        total = Some(n);
                        self.lease.counted(n);
                    }
                    Produced::Part { first_key, last_key, read_at, last } => part = Some(PartRead { first_key, last_key, read_at, last }),
                    Produced::Chunk(csv, written) => {
                        let chunk = encoder.encode(csv).map_err(Stop::internal)?;
                        hasher.update(&chunk);
                        crc.update(&chunk);
                        bytes += chunk.len() as i64;
                        upload.write(&chunk).await.map_err(Stop::storage)?;
                        self.fault("each_chunk")?;
                        rows = written;
                        self.lease.wrote(rows_before + rows);
                        self.checkpoint()?;
                        if first_chunk {
                            first_chunk = false;
                            self.fault("mid_stream")?;
                        }
                    }
                }
            }
        }
        .await;
        drop(produced);
        if let Err(stop) = consumed {
            producer.stop().await;
            return Err(stop);
        }
        producer.finish().await.map_err(Stop::snapshot)?;
        let tail = encoder.finish().map_err(Stop::internal)?;
        hasher.update(&tail);
        crc.update(&tail);
        bytes += tail.len() as i64;
        upload.write(&tail).await.map_err(Stop::storage)?;
        Ok(Staged { rows, bytes, sha256: hex::encode(hasher.finalize()), crc32: crc.finalize(), counted: total, part })
    }

    /// The staged object at `key` must be exactly what was streamed: same size, same digest,
    /// same CRC-32.
    pub(super) async fn validate(&self, staged: &Staged, key: &Path) -> Result<(), Stop> {
        let ticker = self.lease.ticker();
        let read = self.store.digest(key, std::sync::Arc::new(move || ticker.tick())).await.map_err(Stop::storage)?;
        if read.size as i64 != staged.bytes || read.sha256 != staged.sha256 || read.crc32 != staged.crc32 {
            return Err(Stop::storage(format!(
                "the staged object is {} bytes with digest {} and CRC-32 {:08x}, but {} bytes with digest {} and CRC-32 {:08x} were written",
                read.size, read.sha256, read.crc32, staged.bytes, staged.sha256, staged.crc32
            )));
        }
        Ok(())
    }
}
