//! What every export attempt does, of one file (`export_csv`) or of parts (`export_parts`):
//! its checkpoints and fault points, the authority check, the staging of a stream of rows, the
//! validation of what was staged, publish-once, and the fenced release.

use crate::entities::jobs;
use crate::catalog::Report;
use crate::job_store::authority::Permission;
use crate::job_store::transitions::{self, Artifact, Refusal};
use crate::job_store::Mover;
use crate::metrics::release_lost;
use crate::storage::{ExportStore, Published, StagingUpload};
use crate::worker::encoding::Encoder;
use app::Compression;
use crate::worker::lease::{Holding, Lease};
use crate::worker::snapshot::{Produced, Reading};
use crate::worker::WorkerContext;
use super::attempt::Stop;
use object_store::path::Path;
use sha2::{Digest, Sha256};

/// One attempt at an export: the claimed job, its deployment's store, its lease and its own
/// staging key.
pub(super) struct Attempt<'a> {
    pub(super) ctx: &'a WorkerContext,
    pub(super) job: &'a jobs::Model,
    pub(super) store: &'a ExportStore,
    pub(super) lease: &'a Lease,
    pub(super) staging: &'a Path,
}

/// How a staged file's rows count in its export's progress.
pub(super) enum Progress {
    /// The export's one file: its rows are the progress.
    Whole,
    /// A part: the rows written before it and its own, once `reports` is set (a part streaming
    /// beside the one before it counts once that one's read has ended).
    Part { before: i64, reports: std::sync::Arc<std::sync::atomic::AtomicBool> },
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
    pub(super) counted: Option<i64>,
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


    /// Streams a read's rows (begun by [`crate::worker::snapshot::produce`]), compressed as asked, into a
    /// staging upload at `key`, and completes it; an upload that does not complete is aborted.
    /// `progress`: how its rows count in the export's progress.
    pub(super) async fn stage(&self, reading: Reading, key: &Path, compression: Compression, progress: Progress) -> Result<Staged, Stop> {
        let ticker = self.lease.ticker();
        let mut upload = self.store.stage(key, std::sync::Arc::new(move || ticker.tick()));
        let staged = match self.stream(reading, &mut upload, compression, progress).await {
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
    pub(super) async fn release(&self, artifact: &Artifact, permission: Permission) -> Result<Box<jobs::Model>, Stop> {
        self.fault("before_release")?;
        let authorised = self.fenced_authority(permission).await?;
        transitions::release(&self.ctx.db, self.job, artifact, self.ctx.config.artifact_ttl, authorised, Mover::Worker(&self.ctx.worker_id), &self.ctx.faults)
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

    /// SPEC §2's "authorised" for this export, on a fresh read (see [`super::attempt::authorised`]).
    pub(super) async fn authorised(&self, permission: Permission) -> Result<(), Stop> {
        super::attempt::authorised(self.ctx, self.job, permission).await
    }

    /// The authority condition of this export's fenced writes (see [`super::attempt::fenced_authority`]).
    pub(super) async fn fenced_authority(&self, permission: Permission) -> Result<sea_orm::sea_query::Expr, Stop> {
        super::attempt::fenced_authority(self.ctx, self.job, permission).await
    }

    /// The job's report in this worker's catalog. A worker claims only jobs whose schema
    /// version its catalog holds, so a report that is not there is a defect, not a retry.
    pub(super) fn report(&self) -> Result<&Report, Stop> {
        self.ctx.config.catalog.report(&self.job.report).ok_or_else(|| Stop::internal(format!("unknown report {:?}", self.job.report)))
    }

    /// Streams the snapshot as CSV into the upload, hashing and counting as it goes. A stop (a
    /// cancel, a lost lease, a stall, a shutdown) ends it wherever it waits, cancelling the
    /// snapshot's query if the database is still running it.
    async fn stream(&self, reading: Reading, upload: &mut StagingUpload, compression: Compression, progress: Progress) -> Result<Staged, Stop> {
        let Reading { mut produced, producer, spares, .. } = reading;
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
                        let chunk = encoder.encode(&csv).map_err(Stop::internal)?;
                        hasher.update(chunk);
                        crc.update(chunk);
                        bytes += chunk.len() as i64;
                        upload.write(chunk).await.map_err(Stop::storage)?;
                        spares.give_back(csv);
                        self.fault("each_chunk")?;
                        rows = written;
                        match &progress {
                            Progress::Whole => self.lease.wrote(rows),
                            Progress::Part { before, reports } if reports.load(std::sync::atomic::Ordering::Relaxed) => self.lease.wrote_at_least(before + rows),
                            Progress::Part { .. } => self.lease.ticker().tick(),
                        }
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
    /// same CRC-32. Meanwhile a local folder writes the staged file out to its disk, so that
    /// making the published file durable later finds it written (it is the same file); a
    /// failure to write it out stops the attempt like a wrong digest, since the later fsync may
    /// not hear of it.
    pub(super) async fn validate(&self, staged: &Staged, key: &Path) -> Result<(), Stop> {
        let ticker = self.lease.ticker();
        let (read, written) = tokio::join!(self.store.digest(key, std::sync::Arc::new(move || ticker.tick())), self.store.write_out(key));
        written.map_err(Stop::storage)?;
        let read = read.map_err(Stop::storage)?;
        if read.size as i64 != staged.bytes || read.sha256 != staged.sha256 || read.crc32 != staged.crc32 {
            return Err(Stop::storage(format!(
                "the staged object is {} bytes with digest {} and CRC-32 {:08x}, but {} bytes with digest {} and CRC-32 {:08x} were written",
                read.size, read.sha256, read.crc32, staged.bytes, staged.sha256, staged.crc32
            )));
        }
        Ok(())
    }
}
