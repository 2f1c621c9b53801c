//! One attempt at an export (SPEC §5 steps 2–8): authority, snapshot, CSV streamed to this
//! attempt's staging object while hashing, validation of the staged object, the ownership fence,
//! publish-once under the content-addressed key, the file made durable, the fenced release, and
//! the staging object deleted. Whatever stops the attempt ends it with one transition of the job
//! store: a cancel, a lost lease or a stall (no progress for `EXPORTD_STALL_SECS`) interrupts it
//! wherever it waits — a snapshot query still waiting for its first row is cancelled in the
//! database — and a SIGTERM does so until the file is published.

use crate::entities::jobs;
use crate::entities::tenants::source_id_of as tenant_source_id;
use crate::exports::view::{request_of, resolved_of};
use crate::job_store::authority::Permission;
use crate::job_store::transitions::{self, Artifact};
use crate::storage::{artifact_key, staging_key};
use crate::file_type::FileType;
use app::Consistency;
use crate::worker::snapshot::{self, Plan};
use crate::worker::WorkerContext;
use super::attempt::{begin, end, Stop};
use super::export_attempt::{Attempt, Progress};

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


impl Attempt<'_> {
    async fn run(&self) -> Result<Box<jobs::Model>, Stop> {
        let job = self.job;
        self.fault("after_claim")?;
        self.checkpoint()?;
        let report = self.report()?;
        let request = request_of(job).map_err(Stop::internal)?;
        let resolved = resolved_of(job).map_err(Stop::internal)?;
        let needs_pii = report.needs_pii(&resolved.columns).ok_or_else(|| Stop::internal("a resolved column left the catalog"))?;
        let permission = Permission::Export { needs_pii, roles: report.roles };
        self.authorised(permission).await?;
        let source_id = tenant_source_id(&self.ctx.db, &job.tenant_id).await.map_err(Stop::internal)?;
        let accepted = jiff::Timestamp::from_millisecond(job.created_at).map_err(Stop::internal)?;
        let plan = Plan::new(report, &request, &resolved, &source_id, self.ctx.snapshots.backend()).map_err(Stop::internal)?.accepted_at(accepted);
        match request.consistency {
            Consistency::Snapshot => self.one_file(plan, permission, &request).await,
            Consistency::Checkpointed => super::export_parts::run(self, plan, permission, &request, &resolved).await,
        }
    }

    /// A whole export as one file, in one snapshot (SPEC §5 steps 4–8).
    async fn one_file(&self, plan: Plan, permission: Permission, request: &app::ExportRequest) -> Result<Box<jobs::Model>, Stop> {
        let job = self.job;
        let started = std::time::Instant::now();
        let staged = self.stage(snapshot::produce(&self.ctx.snapshots, plan), self.staging, request.options.compression, Progress::Whole).await?;
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
        transitions::fence(&self.ctx.db, job, self.ctx.config.lease, self.fenced_authority(permission).await?).await.map_err(Stop::internal)?.map_err(Stop::refused)?;
        self.fault("before_publish")?;
        let key = artifact_key(&job.tenant_id, &job.id, &staged.sha256, FileType::of(request).extension());
        self.publish(self.staging, &key).await?;
        self.fault("after_publish")?;

        let artifact = Artifact { key: key.to_string(), sha256: staged.sha256, bytes: staged.bytes, rows: staged.rows, bundle_digest: None };
        let released = self.release(&artifact, permission).await?;
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
}
