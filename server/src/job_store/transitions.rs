//! The transitions of SPEC §4 after the claim (see [`super::claims`]), and the fenced writes a
//! worker makes while it holds a lease. Each transition is one conditional UPDATE naming the
//! states (and generation) it expects, with `previous_status = status` so the row it returns
//! tells the audit row where it came from; a zero-row result is re-read and returned as
//! [`Outcome::NotMoved`].

use super::authority::Authority;
use super::{audit, begin_write, db_now, Mover};
use crate::entities::{export_events, exports};
use app::ExportStatus;
use sea_orm::sea_query::{CaseStatement, Expr, ExprTrait};
use sea_orm::{ColumnTrait, ConnectionTrait, DatabaseConnection, DbBackend, DbErr, EntityTrait, QueryFilter, QuerySelect, UpdateMany};
use std::time::Duration;

use ExportStatus::{CancelRequested, Cancelled, Failed, Queued, Ready, RetryWait, Running};

/// Why an attempt ended without a file: what the ExportView's `error` shows. The texts are fixed
/// and safe to show; the detail behind them goes to the log beside the support reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    /// Stable code.
    pub code: &'static str,
    /// For people.
    pub message: &'static str,
    /// Whether the user may retry the export (a new intent).
    pub retryable: bool,
    /// Whether the worker retries it by itself while attempts are left.
    pub transient: bool,
}

impl Failure {
    /// The object store failed; retried with backoff, then `failed` when attempts run out.
    pub const STORAGE_UNAVAILABLE: Failure = Failure {
        code: "storage_unavailable",
        message: "The file store was unavailable.",
        retryable: true,
        transient: true,
    };
    /// The worker stopped renewing its lease (it crashed, hung or lost the database).
    pub const WORKER_LOST: Failure = Failure {
        code: "worker_lost",
        message: "The worker producing this export stopped responding.",
        retryable: true,
        transient: true,
    };
    /// No worker of the export's deployment claimed it in time.
    pub const NO_WORKER: Failure = Failure {
        code: "no_worker",
        message: "No worker is available for this export's deployment.",
        retryable: true,
        transient: false,
    };
    /// The requesting user may no longer export this.
    pub const PERMISSION_REVOKED: Failure = Failure {
        code: "permission_revoked",
        message: "The requesting user may no longer export this.",
        retryable: false,
        transient: false,
    };
    /// Anything else; retried like a storage failure.
    pub const INTERNAL: Failure = Failure {
        code: "internal",
        message: "An internal error stopped the export.",
        retryable: true,
        transient: true,
    };
}

/// How failed attempts are retried.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Claims per job before a transient failure becomes `failed`.
    pub max_attempts: i32,
    /// The first backoff; each later one doubles, up to five minutes.
    pub base: Duration,
}

impl RetryPolicy {
    /// The wait after attempt `attempt` (1-based): `base · 2^(attempt-1)`, capped at five minutes,
    /// with ±25 % jitter so jobs that failed together do not come back together.
    pub fn backoff_ms(&self, attempt: i32) -> i64 {
        let base = self.base.as_millis() as i64;
        let exp = Ord::max(Ord::min(base.saturating_mul(1i64 << (attempt - 1).clamp(0, 20)), 300_000), 1);
        let jitter = (uuid::Uuid::new_v4().as_u128() % 1001) as i64; // 0..=1000 ‰ of the band
        exp - exp / 4 + exp / 2 * jitter / 1000
    }
}

/// The state of a row that a transition did not move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current {
    /// Its status now; `None` when the row is gone (purged).
    pub status: Option<ExportStatus>,
    /// Its generation now.
    pub generation: i32,
}

/// What a transition did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The row moved; this is it after the move.
    Moved(Box<exports::Model>),
    /// Someone else moved it first (or it was never in an expected state): how it is now.
    NotMoved(Current),
}

/// Why a worker's fenced write was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Still this generation, but cancel was asked.
    CancelRequested,
    /// Still this generation and running, but the actor is no longer authorised.
    Revoked,
    /// Not this worker's any more: another generation, or finished.
    Lost,
}

impl Refusal {
    fn of(current: &Current, generation: i32) -> Refusal {
        match current.status {
            Some(Running) if current.generation == generation => Refusal::Revoked,
            Some(CancelRequested) if current.generation == generation => Refusal::CancelRequested,
            _ => Refusal::Lost,
        }
    }
}

/// What a heartbeat learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heartbeat {
    /// The lease was renewed.
    Renewed,
    /// The lease was renewed, and cancel was asked: stop at the next checkpoint.
    CancelRequested,
    /// The job is no longer this generation's.
    Lost,
}

/// A published file, as the release records it.
#[derive(Debug, Clone)]
pub struct Artifact {
    /// Its object key.
    pub key: String,
    /// Hex SHA-256 of its bytes.
    pub sha256: String,
    /// Its size.
    pub bytes: i64,
    /// Its data rows.
    pub rows: i64,
}

fn is(status: ExportStatus) -> Expr {
    Expr::col((exports::Entity, exports::Column::Status)).eq(status.as_str())
}

fn none<T>() -> Expr
where
    Option<T>: Into<sea_orm::Value>,
{
    Expr::val(Option::<T>::None)
}

/// An UPDATE of one job that records where it moved from and when.
fn moving(backend: DbBackend, id: &str) -> UpdateMany<exports::Entity> {
    exports::Entity::update_many()
        .col_expr(exports::Column::PreviousStatus, Expr::col(exports::Column::Status))
        .col_expr(exports::Column::UpdatedAt, db_now(backend))
        .filter(exports::Column::Id.eq(id))
}

/// The row's status and generation now.
pub async fn current<C: ConnectionTrait>(db: &C, id: &str) -> Result<Current, DbErr> {
    let row = exports::Entity::find_by_id(id.to_owned())
        .select_only()
        .column(exports::Column::Status)
        .column(exports::Column::Generation)
        .into_tuple::<(String, i32)>()
        .one(db)
        .await?;
    Ok(match row {
        Some((status, generation)) => Current { status: ExportStatus::parse(&status), generation },
        None => Current { status: None, generation: 0 },
    })
}

/// Runs a transition: the UPDATE and, if it moved the row, its audit row in one transaction. (A
/// row that becomes `queued` wakes the workers through the database's own trigger.)
async fn apply(db: &DatabaseConnection, id: &str, update: UpdateMany<exports::Entity>, by: Mover<'_>, detail: Option<&str>) -> Result<Outcome, DbErr> {
    let txn = begin_write(db).await?;
    let moved = update.exec_with_returning(&txn).await?;
    match moved.into_iter().next() {
        Some(row) => {
            audit::record_move(&txn, &row, by, detail).await?;
            txn.commit().await?;
            Ok(Outcome::Moved(Box::new(row)))
        }
        None => {
            txn.rollback().await?;
            Ok(Outcome::NotMoved(current(db, id).await?))
        }
    }
}

/// Renews the lease of `job` under `generation` and records its progress; tells the worker to
/// stop when cancel was asked or the job is no longer its own.
pub async fn heartbeat(db: &DatabaseConnection, id: &str, generation: i32, lease: Duration, rows_written: i64, rows_total: Option<i64>) -> Result<Heartbeat, DbErr> {
    let backend = db.get_database_backend();
    let rows = exports::Entity::update_many()
        .col_expr(exports::Column::LeaseExpiresAt, db_now(backend).add(lease.as_millis() as i64))
        .col_expr(exports::Column::RowsWritten, Expr::val(rows_written))
        .col_expr(exports::Column::RowsTotal, Expr::val(rows_total))
        .filter(exports::Column::Id.eq(id))
        .filter(exports::Column::Generation.eq(generation))
        .filter(exports::Column::Status.is_in([Running.as_str(), CancelRequested.as_str()]))
        .exec_with_returning(db)
        .await?;
    Ok(match rows.first().and_then(|r| ExportStatus::parse(&r.status)) {
        Some(Running) => Heartbeat::Renewed,
        Some(_) => Heartbeat::CancelRequested,
        None => Heartbeat::Lost,
    })
}

/// The fence before publishing: succeeds only while `job` is `running` under its generation and
/// its actor is still authorised, and renews the lease for the copy that follows.
pub async fn fence(db: &DatabaseConnection, job: &exports::Model, lease: Duration, authority: Authority) -> Result<Result<(), Refusal>, DbErr> {
    let backend = db.get_database_backend();
    let rows = exports::Entity::update_many()
        .col_expr(exports::Column::LeaseExpiresAt, db_now(backend).add(lease.as_millis() as i64))
        .filter(exports::Column::Id.eq(&job.id))
        .filter(exports::Column::Generation.eq(job.generation))
        .filter(exports::Column::Status.eq(Running.as_str()))
        .filter(authority.condition())
        .exec(db)
        .await?;
    if rows.rows_affected == 1 {
        return Ok(Ok(()));
    }
    Ok(Err(Refusal::of(&current(db, &job.id).await?, job.generation)))
}

/// `running → ready` under `job`'s generation, with the artifact, only while the actor is
/// authorised: the authority condition is part of the UPDATE, so a revocation that lands after
/// the worker's last check still refuses the release.
pub async fn release(
    db: &DatabaseConnection,
    job: &exports::Model,
    artifact: &Artifact,
    artifact_ttl: Duration,
    authority: Authority,
    by: Mover<'_>,
) -> Result<Result<Box<exports::Model>, Refusal>, DbErr> {
    let backend = db.get_database_backend();
    let now = || db_now(backend);
    let update = moving(backend, &job.id)
        .col_expr(exports::Column::Status, Expr::val(Ready.as_str()))
        .col_expr(exports::Column::ArtifactKey, Expr::val(artifact.key.clone()))
        .col_expr(exports::Column::ArtifactSha256, Expr::val(artifact.sha256.clone()))
        .col_expr(exports::Column::ArtifactBytes, Expr::val(artifact.bytes))
        .col_expr(exports::Column::ArtifactRows, Expr::val(artifact.rows))
        .col_expr(exports::Column::ArtifactExpiresAt, now().add(artifact_ttl.as_millis() as i64))
        .col_expr(exports::Column::ArtifactExpired, Expr::val(false))
        .col_expr(exports::Column::RowsWritten, Expr::val(artifact.rows))
        .col_expr(exports::Column::RowsTotal, Expr::val(artifact.rows))
        .col_expr(exports::Column::ErrorCode, none::<String>())
        .col_expr(exports::Column::ErrorMessage, none::<String>())
        .col_expr(exports::Column::ErrorRetryable, none::<bool>())
        .col_expr(exports::Column::ErrorSupportRef, none::<String>())
        .col_expr(exports::Column::NextAttemptAt, none::<i64>())
        .col_expr(exports::Column::LeaseOwner, none::<String>())
        .col_expr(exports::Column::LeaseExpiresAt, none::<i64>())
        .col_expr(exports::Column::FinishedAt, now())
        .filter(exports::Column::Generation.eq(job.generation))
        .filter(exports::Column::Status.eq(Running.as_str()))
        .filter(authority.condition());
    Ok(match apply(db, &job.id, update, by, None).await? {
        Outcome::Moved(row) => Ok(row),
        Outcome::NotMoved(current) => Err(Refusal::of(&current, job.generation)),
    })
}

/// Ends an attempt of `job` that failed, in one UPDATE whatever lands meanwhile: a cancel asked
/// during the attempt wins (`cancelled`); a transient failure with attempts left waits for its
/// backoff (`retry_wait`, `next_attempt_at`); anything else is `failed`. With
/// `only_if_lease_expired` (the janitor's use, for a lost worker) it moves the job only if its
/// lease has run out by the database's clock.
#[allow(clippy::too_many_arguments)]
pub async fn end_attempt(
    db: &DatabaseConnection,
    job: &exports::Model,
    failure: Failure,
    support_ref: &str,
    policy: &RetryPolicy,
    by: Mover<'_>,
    only_if_lease_expired: bool,
) -> Result<Outcome, DbErr> {
    let backend = db.get_database_backend();
    let now = || db_now(backend);
    let cancel = || is(CancelRequested);
    let retry = || is(Running).and(Expr::col((exports::Entity, exports::Column::Attempt)).lt(policy.max_attempts));
    let unless_cancelled = |value: Expr| -> Expr { CaseStatement::new().case(cancel(), Expr::val(Option::<String>::None)).finally(value).into() };
    let (status, next_attempt, finished): (Expr, Expr, Expr) = if failure.transient {
        (
            CaseStatement::new().case(cancel(), Expr::val(Cancelled.as_str())).case(retry(), Expr::val(RetryWait.as_str())).finally(Expr::val(Failed.as_str())).into(),
            CaseStatement::new().case(retry(), now().add(policy.backoff_ms(job.attempt))).finally(none::<i64>()).into(),
            CaseStatement::new().case(retry(), none::<i64>()).finally(now()).into(),
        )
    } else {
        (CaseStatement::new().case(cancel(), Expr::val(Cancelled.as_str())).finally(Expr::val(Failed.as_str())).into(), none::<i64>(), now())
    };
    let mut update = moving(backend, &job.id)
        .col_expr(exports::Column::Status, status)
        .col_expr(exports::Column::NextAttemptAt, next_attempt)
        .col_expr(exports::Column::FinishedAt, finished)
        .col_expr(exports::Column::ErrorCode, unless_cancelled(Expr::val(failure.code)))
        .col_expr(exports::Column::ErrorMessage, unless_cancelled(Expr::val(failure.message)))
        .col_expr(
            exports::Column::ErrorRetryable,
            CaseStatement::new().case(cancel(), none::<bool>()).finally(Expr::val(failure.retryable)).into(),
        )
        .col_expr(exports::Column::ErrorSupportRef, unless_cancelled(Expr::val(support_ref)))
        .col_expr(exports::Column::LeaseOwner, none::<String>())
        .col_expr(exports::Column::LeaseExpiresAt, none::<i64>())
        .filter(exports::Column::Generation.eq(job.generation))
        .filter(exports::Column::Status.is_in([Running.as_str(), CancelRequested.as_str()]));
    if only_if_lease_expired {
        update = update.filter(Expr::col((exports::Entity, exports::Column::LeaseExpiresAt)).lt(now()));
    }
    apply(db, &job.id, update, by, Some(failure.code)).await
}

/// `cancel_requested → cancelled`: the worker saw the cancel at a checkpoint and stopped.
pub async fn acknowledge_cancel(db: &DatabaseConnection, job: &exports::Model, by: Mover<'_>) -> Result<Outcome, DbErr> {
    let backend = db.get_database_backend();
    let update = moving(backend, &job.id)
        .col_expr(exports::Column::Status, Expr::val(Cancelled.as_str()))
        .col_expr(exports::Column::FinishedAt, db_now(backend))
        .col_expr(exports::Column::LeaseOwner, none::<String>())
        .col_expr(exports::Column::LeaseExpiresAt, none::<i64>())
        .filter(exports::Column::Generation.eq(job.generation))
        .filter(exports::Column::Status.eq(CancelRequested.as_str()));
    apply(db, &job.id, update, by, Some("cancel seen at a checkpoint")).await
}

/// Hands a job back on shutdown: `running → queued` with attempt−1 (not counted) and no
/// progress, so another worker starts it afresh; a job whose cancel was asked ends `cancelled`.
pub async fn hand_back(db: &DatabaseConnection, job: &exports::Model, by: Mover<'_>) -> Result<Outcome, DbErr> {
    let backend = db.get_database_backend();
    let cancel = || is(CancelRequested);
    let update = moving(backend, &job.id)
        .col_expr(exports::Column::Status, CaseStatement::new().case(cancel(), Expr::val(Cancelled.as_str())).finally(Expr::val(Queued.as_str())).into())
        .col_expr(
            exports::Column::Attempt,
            CaseStatement::new().case(cancel(), Expr::col(exports::Column::Attempt)).finally(Expr::col(exports::Column::Attempt).sub(1)).into(),
        )
        .col_expr(exports::Column::RowsWritten, Expr::val(0i64))
        .col_expr(exports::Column::RowsTotal, none::<i64>())
        .col_expr(exports::Column::FinishedAt, CaseStatement::new().case(cancel(), db_now(backend)).finally(none::<i64>()).into())
        .col_expr(exports::Column::LeaseOwner, none::<String>())
        .col_expr(exports::Column::LeaseExpiresAt, none::<i64>())
        .filter(exports::Column::Generation.eq(job.generation))
        .filter(exports::Column::Status.is_in([Running.as_str(), CancelRequested.as_str()]));
    apply(db, &job.id, update, by, Some("handed back")).await
}

/// A user's cancel of their own export, in one UPDATE: `queued`/`retry_wait → cancelled` at
/// once, `running → cancel_requested` (the worker stops at its next checkpoint).
pub async fn cancel(db: &DatabaseConnection, id: &str, tenant_id: &str, actor_id: &str) -> Result<Outcome, DbErr> {
    let backend = db.get_database_backend();
    let waiting = || Expr::col((exports::Entity, exports::Column::Status)).is_in([Queued.as_str(), RetryWait.as_str()]);
    let update = moving(backend, id)
        .col_expr(exports::Column::Status, CaseStatement::new().case(waiting(), Expr::val(Cancelled.as_str())).finally(Expr::val(CancelRequested.as_str())).into())
        .col_expr(exports::Column::FinishedAt, CaseStatement::new().case(waiting(), db_now(backend)).finally(none::<i64>()).into())
        .col_expr(exports::Column::NextAttemptAt, none::<i64>())
        .filter(exports::Column::TenantId.eq(tenant_id))
        .filter(exports::Column::ActorId.eq(actor_id))
        .filter(exports::Column::Status.is_in([Queued.as_str(), RetryWait.as_str(), Running.as_str()]));
    apply(db, id, update, Mover::User(actor_id), Some("cancel")).await
}

// The janitor's lookups take `now` (read once from the database's clock) as a value: a bound
// value lets the indexes on (status, time) find the rows, where the clock function would not.

/// Running jobs (and cancels) whose lease ran out by `now`: their worker is gone.
pub async fn lapsed_leases(db: &DatabaseConnection, now: i64, limit: u64) -> Result<Vec<exports::Model>, DbErr> {
    exports::Entity::find()
        .filter(exports::Column::Status.is_in([Running.as_str(), CancelRequested.as_str()]))
        .filter(exports::Column::LeaseExpiresAt.lt(now))
        .limit(limit)
        .all(db)
        .await
}

/// Queued jobs that have waited longer than `ttl` (a queued row is not written while it waits,
/// so `updated_at` is when it started waiting).
pub async fn overdue_queued(db: &DatabaseConnection, now: i64, ttl: Duration, limit: u64) -> Result<Vec<exports::Model>, DbErr> {
    exports::Entity::find()
        .filter(exports::Column::Status.eq(Queued.as_str()))
        .filter(exports::Column::UpdatedAt.lt(now - ttl.as_millis() as i64))
        .limit(limit)
        .all(db)
        .await
}

/// `queued → failed` (`no_worker`) for a job that waited longer than `ttl`.
pub async fn fail_unclaimed(db: &DatabaseConnection, job: &exports::Model, ttl: Duration, support_ref: &str, by: Mover<'_>) -> Result<Outcome, DbErr> {
    let backend = db.get_database_backend();
    let failure = Failure::NO_WORKER;
    let update = moving(backend, &job.id)
        .col_expr(exports::Column::Status, Expr::val(Failed.as_str()))
        .col_expr(exports::Column::ErrorCode, Expr::val(failure.code))
        .col_expr(exports::Column::ErrorMessage, Expr::val(failure.message))
        .col_expr(exports::Column::ErrorRetryable, Expr::val(failure.retryable))
        .col_expr(exports::Column::ErrorSupportRef, Expr::val(support_ref))
        .col_expr(exports::Column::FinishedAt, db_now(backend))
        .filter(exports::Column::Generation.eq(job.generation))
        .filter(exports::Column::Status.eq(Queued.as_str()))
        .filter(Expr::col((exports::Entity, exports::Column::UpdatedAt)).lt(db_now(backend).sub(ttl.as_millis() as i64)));
    apply(db, &job.id, update, by, Some(failure.code)).await
}

/// Ready jobs whose artifact is past its retention by `now` and not yet marked expired.
/// Only those of `deployments` (empty: all), since deleting one needs its deployment's store.
pub async fn due_artifacts(db: &DatabaseConnection, now: i64, deployments: &[String], limit: u64) -> Result<Vec<exports::Model>, DbErr> {
    let mut find = exports::Entity::find();
    if !deployments.is_empty() {
        find = find.filter(exports::Column::Deployment.is_in(deployments.iter().cloned()));
    }
    find
        .filter(exports::Column::Status.eq(Ready.as_str()))
        .filter(exports::Column::ArtifactExpiresAt.lte(now))
        .filter(exports::Column::ArtifactExpired.eq(false))
        .limit(limit)
        .all(db)
        .await
}

/// Marks a ready job's artifact expired, once its object is deleted; the record stays.
pub async fn mark_artifact_expired(db: &DatabaseConnection, job: &exports::Model, by: Mover<'_>) -> Result<Outcome, DbErr> {
    let backend = db.get_database_backend();
    let update = moving(backend, &job.id)
        .col_expr(exports::Column::ArtifactExpired, Expr::val(true))
        .filter(exports::Column::Status.eq(Ready.as_str()))
        .filter(exports::Column::ArtifactExpired.eq(false))
        .filter(Expr::col((exports::Entity, exports::Column::ArtifactExpiresAt)).lte(db_now(backend)));
    apply(db, &job.id, update, by, Some("artifact expired")).await
}

fn finished_before(backend: DbBackend, ttl: Duration) -> Expr {
    Expr::col((exports::Entity, exports::Column::FinishedAt)).if_null(Expr::col((exports::Entity, exports::Column::UpdatedAt))).lt(db_now(backend).sub(ttl.as_millis() as i64))
}

const TERMINAL: [&str; 3] = ["ready", "failed", "cancelled"];

/// Finished jobs whose record is past its retention by `now` (every transition into a
/// terminal state sets `finished_at`).
/// A record that still keeps an artifact is one only a janitor of its deployment can purge
/// (it deletes the file first): with `deployments` (empty: all), only those are listed.
pub async fn purgeable(db: &DatabaseConnection, now: i64, ttl: Duration, deployments: &[String], limit: u64) -> Result<Vec<exports::Model>, DbErr> {
    let mut find = exports::Entity::find();
    if !deployments.is_empty() {
        find = find.filter(
            sea_orm::Condition::any()
                .add(exports::Column::ArtifactKey.is_null())
                .add(exports::Column::ArtifactExpired.eq(true))
                .add(exports::Column::Deployment.is_in(deployments.iter().cloned())),
        );
    }
    find
        .filter(exports::Column::Status.is_in(TERMINAL))
        .filter(exports::Column::FinishedAt.lt(now - ttl.as_millis() as i64))
        .limit(limit)
        .all(db)
        .await
}

/// Deletes a finished job's record and its audit trail, so its key may be used again. False
/// when it was not (or no longer) purgeable.
pub async fn purge(db: &DatabaseConnection, job: &exports::Model, ttl: Duration) -> Result<bool, DbErr> {
    let backend = db.get_database_backend();
    let txn = begin_write(db).await?;
    let deleted = exports::Entity::delete_many()
        .filter(exports::Column::Id.eq(&job.id))
        .filter(exports::Column::Status.is_in(TERMINAL))
        .filter(finished_before(backend, ttl))
        .exec(&txn)
        .await?;
    if deleted.rows_affected != 1 {
        txn.rollback().await?;
        return Ok(false);
    }
    export_events::Entity::delete_many().filter(export_events::Column::ExportId.eq(&job.id)).exec(&txn).await?;
    txn.commit().await?;
    Ok(true)
}

/// The jobs with these ids (for the janitor's store sweeps).
pub async fn by_ids(db: &DatabaseConnection, ids: &[String]) -> Result<Vec<exports::Model>, DbErr> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    exports::Entity::find().filter(exports::Column::Id.is_in(ids.iter().cloned())).all(db).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_each_attempt_within_a_quarter_either_way() {
        let policy = RetryPolicy { max_attempts: 5, base: Duration::from_secs(1) };
        for attempt in 1..=4 {
            let expected = 1000i64 << (attempt - 1);
            for _ in 0..50 {
                let got = policy.backoff_ms(attempt);
                assert!(got >= expected * 3 / 4 && got <= expected * 5 / 4, "attempt {attempt}: {got} ms");
            }
        }
        assert!(policy.backoff_ms(30) <= 375_000, "capped");
    }

    #[test]
    fn a_refusal_under_the_same_generation_tells_cancel_from_revocation() {
        let at = |status, generation| Current { status: Some(status), generation };
        assert_eq!(Refusal::of(&at(Running, 3), 3), Refusal::Revoked);
        assert_eq!(Refusal::of(&at(CancelRequested, 3), 3), Refusal::CancelRequested);
        assert_eq!(Refusal::of(&at(Running, 4), 3), Refusal::Lost);
        assert_eq!(Refusal::of(&at(Ready, 3), 3), Refusal::Lost);
        assert_eq!(Refusal::of(&Current { status: None, generation: 0 }, 3), Refusal::Lost);
    }
}
