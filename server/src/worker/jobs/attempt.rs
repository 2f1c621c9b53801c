//! What every kind of job's attempt shares: why an attempt stops before it ends well, and the
//! one transition of the job store that ends it for each reason (SPEC §4, §5). A kind's job
//! runs its steps and returns its result; this turns the result into the job's next state.

use crate::entities::jobs;
use crate::error::new_support_ref;
use crate::faults::Injected;
use crate::job_store::transitions::{self, Failure, Outcome, Refusal};
use crate::job_store::Mover;
use crate::worker::lease::{Holding, Lease};
use crate::worker::snapshot::SnapshotError;
use crate::worker::WorkerContext;
use crate::job_store::authority::Permission;
use crate::auth::authority::RoleError;
use sea_orm::sea_query::Expr;

/// Why an attempt stopped before its release.
#[derive(Debug)]
pub(super) enum Stop {
    /// It failed; `detail` goes to the log only.
    Failed { failure: Failure, detail: String },
    /// The actor is no longer authorised.
    Revoked,
    /// Cancel was asked.
    CancelRequested,
    /// The job is not this attempt's any more.
    Lost,
    /// No progress for `EXPORTD_STALL_SECS` while the lease was renewed.
    Stalled,
    /// The process is shutting down before anything was published.
    Shutdown,
    /// A part's rows, asked for without a sort, came out of key order: the part is read again,
    /// sorted (`export_parts`). Anywhere else it is a defect.
    OutOfKeyOrder(String),
}

impl Stop {
    pub(super) fn storage(e: impl std::fmt::Display) -> Stop {
        Stop::Failed { failure: Failure::STORAGE_UNAVAILABLE, detail: e.to_string() }
    }

    pub(super) fn internal(e: impl std::fmt::Display) -> Stop {
        Stop::Failed { failure: Failure::INTERNAL, detail: e.to_string() }
    }

    /// The data cannot be written as promised; the same data would fail again.
    pub(super) fn invalid_data(e: impl std::fmt::Display) -> Stop {
        Stop::Failed { failure: Failure::INVALID_DATA, detail: e.to_string() }
    }

    pub(super) fn snapshot(e: SnapshotError) -> Stop {
        if let SnapshotError::OutOfOrder(detail) = e {
            Stop::OutOfKeyOrder(detail)
        } else if e.is_permanent() {
            Stop::invalid_data(e)
        } else {
            Stop::internal(e)
        }
    }

    pub(super) fn interrupted(holding: Holding) -> Stop {
        match holding {
            Holding::CancelRequested => Stop::CancelRequested,
            Holding::Stalled => Stop::Stalled,
            Holding::Lost | Holding::Held => Stop::Lost,
        }
    }

    pub(super) fn refused(refusal: Refusal) -> Stop {
        match refusal {
            Refusal::CancelRequested => Stop::CancelRequested,
            Refusal::Revoked => Stop::Revoked,
            Refusal::Lost => Stop::Lost,
        }
    }
}

/// SPEC §2's "authorised", asked afresh on the worker's own connection: the job's actor exists,
/// is active, is of the job's tenant, and the role its authority gives it now allows
/// `permission`. A source that does not answer ends the attempt for a retry, never a release.
pub(super) async fn authorised(ctx: &WorkerContext, job: &jobs::Model, permission: Permission) -> Result<(), Stop> {
    match ctx.authority.current_role(&ctx.db, &job.actor_id, &job.tenant_id).await {
        Ok(Some(role)) if permission.allows(role) => Ok(()),
        Ok(_) => Err(Stop::Revoked),
        Err(RoleError::Unanswered(e)) => Err(Stop::Failed { failure: Failure::AUTHORITY_UNAVAILABLE, detail: e.to_string() }),
        Err(RoleError::Db(e)) => Err(Stop::internal(e)),
    }
}

/// The condition of a fenced write (the fence, the release, an import's batch) for
/// `permission`. With the catalog's authority query the job store's UPDATE cannot hold the role,
/// so the source is asked here, just before the write (the window this leaves is in
/// docs/authentication.md).
pub(super) async fn fenced_authority(ctx: &WorkerContext, job: &jobs::Model, permission: Permission) -> Result<Expr, Stop> {
    if ctx.authority.is_source() {
        authorised(ctx, job, permission).await?;
    }
    Ok(ctx.authority.condition(permission))
}

impl From<Injected> for Stop {
    fn from(_: Injected) -> Stop {
        Stop::storage("a fault point injected a storage failure")
    }
}

/// Starts an attempt at a claimed job under its lease; `None` leaves the job as it is: it
/// belongs to a deployment this worker does not serve, or it is not (or no longer) this
/// generation's (a duplicate delivery).
pub(super) async fn begin(ctx: &WorkerContext, job: &jobs::Model) -> Option<Lease> {
    if !ctx.worker.serves(&job.deployment) {
        tracing::warn!(job = %job.id, deployment = %job.deployment, "refusing a job of a deployment this worker does not serve");
        return None;
    }
    let lease = Lease::start(ctx, job).await;
    if lease.is_none() {
        tracing::info!(job = %job.id, generation = job.generation, "not this generation's job (a duplicate delivery): nothing to do");
    }
    lease
}

/// Ends the attempt with the transition its result calls for.
pub(super) async fn end(ctx: &WorkerContext, job: &jobs::Model, result: Result<Box<jobs::Model>, Stop>) {
    let by = Mover::Worker(&ctx.worker_id);
    let ended = match result {
        Ok(released) => {
            let _ = ctx.faults.check("after_release", &job.id);
            tracing::info!(job = %job.id, generation = job.generation, rows = released.artifact_rows, "job ready");
            return;
        }
        Err(Stop::Lost) => {
            ctx.metrics.fenced_writes_rejected.inc();
            tracing::warn!(job = %job.id, generation = job.generation, "attempt lost its lease: nothing published or released");
            return;
        }
        Err(Stop::Stalled) => {
            ctx.metrics.stalled_attempts.inc();
            let detail = format!("no progress for {} s while the lease was renewed", ctx.config.stall.as_secs());
            fail(ctx, job, Failure::STALLED, &detail).await
        }
        Err(Stop::CancelRequested) => transitions::acknowledge_cancel(&ctx.db, job, by).await,
        Err(Stop::Shutdown) => transitions::hand_back(&ctx.db, job, by).await,
        Err(Stop::Revoked) => fail(ctx, job, Failure::PERMISSION_REVOKED, "the actor is no longer authorised").await,
        Err(Stop::Failed { failure, detail }) => fail(ctx, job, failure, &detail).await,
        Err(Stop::OutOfKeyOrder(detail)) => fail(ctx, job, Failure::INTERNAL, &detail).await,
    };
    match ended {
        Ok(Outcome::Moved(row)) => tracing::info!(job = %job.id, generation = job.generation, status = %row.status, "attempt ended"),
        Ok(Outcome::NotMoved(now)) => {
            ctx.metrics.fenced_writes_rejected.inc();
            tracing::warn!(
                job = %job.id, generation = job.generation, now = ?now.status, now_generation = now.generation,
                "attempt lost its lease before it could end: someone else moved the job"
            )
        }
        Err(e) => tracing::warn!(job = %job.id, error = %e, "could not record the end of an attempt; the janitor will once the lease expires"),
    }
}

pub(super) async fn fail(ctx: &WorkerContext, job: &jobs::Model, failure: Failure, detail: &str) -> Result<Outcome, sea_orm::DbErr> {
    let support_ref = new_support_ref();
    tracing::warn!(job = %job.id, generation = job.generation, attempt = job.attempt, code = failure.code, support_ref = %support_ref, detail, "attempt failed");
    let _ = ctx.faults.check("before_end_attempt", &job.id);
    transitions::end_attempt(&ctx.db, job, failure, &support_ref, &ctx.retry_policy(), Mover::Worker(&ctx.worker_id), transitions::Ender::Attempt).await
}

