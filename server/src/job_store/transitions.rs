//! The transitions of SPEC §4 after the claim (see [`super::claims`]), and the fenced writes a
//! worker makes while it holds a lease. Each transition is one conditional UPDATE naming the
//! states (and generation) it expects, with `previous_status = status` so the row it returns
//! tells the audit row where it came from; a zero-row result is re-read and returned as
//! [`Outcome::NotMoved`].

use super::{audit, begin_write, checkpoints, db_now, Mover};
pub use super::fencing::{current, Current, Refusal};
use crate::entities::{job_events, jobs};
use crate::faults::Faults;
use app::ExportStatus;
use sea_orm::sea_query::{CaseStatement, Expr, ExprTrait, LockBehavior, LockType, Query};
use sea_orm::{ColumnTrait, DatabaseConnection, DbBackend, DbErr, EntityTrait, QueryFilter, QuerySelect, UpdateMany};
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
    /// The catalog's authority query did not answer (its source is down or too slow): nothing is
    /// released on an unknown authority; retried with backoff.
    pub const AUTHORITY_UNAVAILABLE: Failure = Failure {
        code: "authority_unavailable",
        message: "Whether the requesting user may still export this could not be checked.",
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
    /// No worker's catalog holds the operation's schema version (contract §12): its report or
    /// dataset changed, and no worker of the version that accepted it is left.
    pub const CATALOG_MISMATCH: Failure = Failure {
        code: "catalog_mismatch",
        message: "No worker runs the version of the report or dataset this operation was accepted with.",
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
    /// The attempt made no progress for `EXPORTD_STALL_SECS` although its lease was renewed (a
    /// hung read or store): ended by the worker itself, or by the janitor; retried.
    pub const STALLED: Failure = Failure {
        code: "stalled",
        message: "The export stopped making progress.",
        retryable: true,
        transient: true,
    };
    /// The data cannot be written as the file promises (text that is not UTF-8, an empty cell
    /// in a column that has none, an instant outside the calendar, rows that do not match their
    /// count): the same data fails the same way every time, so it is not retried.
    pub const INVALID_DATA: Failure = Failure {
        code: "invalid_data",
        message: "Some of the data cannot be written to the file.",
        retryable: false,
        transient: false,
    };
    /// An import's file cannot be read as the dataset's CSV at all (SPEC §10: a missing key
    /// column, an unknown column, not UTF-8).
    pub const INVALID_FILE: Failure = Failure {
        code: "invalid_file",
        message: "The file cannot be imported: see its first error.",
        retryable: false,
        transient: false,
    };
    /// An import's file has invalid rows and its policy fails it before anything is applied.
    pub const VALIDATION_FAILED: Failure = Failure {
        code: "validation_failed",
        message: "Some rows are invalid; nothing was applied. The report lists them.",
        retryable: false,
        transient: false,
    };
    /// The database refused a row of an import applied under `abort`: the batches before it
    /// stay applied.
    pub const APPLY_FAILED: Failure = Failure {
        code: "apply_failed",
        message: "The database refused a row; the batches before it were applied. The report says which rows were not.",
        retryable: false,
        transient: false,
    };
    /// The importing user may no longer import.
    pub const IMPORT_REVOKED: Failure = Failure {
        code: "permission_revoked",
        message: "The requesting user may no longer import; the batches already applied stay. The report says which rows were not applied.",
        retryable: false,
        transient: false,
    };
    /// Anything else; retried like a storage failure.
    /// An import's file is no longer in the store (its upload expired): no attempt can read it.
    pub const UPLOAD_EXPIRED: Failure = Failure {
        code: "upload_expired",
        message: "The uploaded file is no longer kept; upload it again.",
        retryable: true,
        transient: false,
    };
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


/// What a transition did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The row moved; this is it after the move.
    Moved(Box<jobs::Model>),
    /// Someone else moved it first (or it was never in an expected state): how it is now.
    NotMoved(Current),
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
    /// A checkpointed export's bundle: the hex SHA-256 of its bytes (the artifact's `sha256`
    /// is then the manifest's).
    pub bundle_digest: Option<String>,
}

fn is(status: ExportStatus) -> Expr {
    Expr::col((jobs::Entity, jobs::Column::Status)).eq(status.as_str())
}

fn none<T>() -> Expr
where
    Option<T>: Into<sea_orm::Value>,
{
    Expr::val(Option::<T>::None)
}

/// What a transition does about a row that another process holds locked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// Wait for it, for at most the pool's `lock_timeout` (then a "busy" error): the transitions
    /// of the attempt that owns the job and of a user's cancel.
    Wait,
    /// Skip it, as if it were not in an expected state (on PostgreSQL, `FOR NO KEY UPDATE SKIP
    /// LOCKED`; SQLite has no row locks): the janitor's, which come back on their next pass.
    Skip,
}

/// `id = …`, and with [`Held::Skip`] on PostgreSQL, only if no other transaction holds the row
/// (taking it with `lock`: `NoKeyUpdate` for an UPDATE, `Update` for a DELETE).
fn the_row(backend: DbBackend, id: &str, held: Held, lock: LockType) -> sea_orm::Condition {
    let mut c = sea_orm::Condition::all().add(jobs::Column::Id.eq(id));
    if held == Held::Skip && backend == DbBackend::Postgres {
        let unheld = Query::select()
            .column(jobs::Column::Id)
            .from(jobs::Entity)
            .and_where(jobs::Column::Id.eq(id))
            .lock_with_behavior(lock, LockBehavior::SkipLocked)
            .to_owned();
        c = c.add(jobs::Column::Id.in_subquery(unheld));
    }
    c
}

/// An UPDATE of one job that records where it moved from and when.
fn moving(backend: DbBackend, id: &str, held: Held) -> UpdateMany<jobs::Entity> {
    jobs::Entity::update_many()
        .col_expr(jobs::Column::PreviousStatus, Expr::col(jobs::Column::Status))
        .col_expr(jobs::Column::UpdatedAt, db_now(backend))
        .filter(the_row(backend, id, held, LockType::NoKeyUpdate))
}

/// `update` that records `artifact` as the job's, kept for `artifact_ttl` from now by the
/// database's clock: the release's, and an import's report at any other ending.
fn recording(update: UpdateMany<jobs::Entity>, backend: DbBackend, artifact: &Artifact, artifact_ttl: Duration) -> UpdateMany<jobs::Entity> {
    update
        .col_expr(jobs::Column::ArtifactKey, Expr::val(artifact.key.clone()))
        .col_expr(jobs::Column::ArtifactSha256, Expr::val(artifact.sha256.clone()))
        .col_expr(jobs::Column::ArtifactBytes, Expr::val(artifact.bytes))
        .col_expr(jobs::Column::ArtifactRows, Expr::val(artifact.rows))
        .col_expr(jobs::Column::BundleDigest, Expr::val(artifact.bundle_digest.clone()))
        .col_expr(jobs::Column::ArtifactExpiresAt, db_now(backend).add(artifact_ttl.as_millis() as i64))
        .col_expr(jobs::Column::ArtifactExpired, Expr::val(false))
}

/// Records `artifact` on `job` while this attempt still runs it (an import's report, just
/// before the transition that ends the attempt failed or cancelled, so the ending and its
/// report are seen together); `false` when the job is no longer this attempt's.
pub async fn attach_artifact(db: &DatabaseConnection, job: &jobs::Model, artifact: &Artifact, artifact_ttl: Duration) -> Result<bool, DbErr> {
    let attached = recording(jobs::Entity::update_many(), db.get_database_backend(), artifact, artifact_ttl)
        .filter(jobs::Column::Id.eq(&job.id))
        .filter(jobs::Column::Generation.eq(job.generation))
        .filter(jobs::Column::Status.is_in([Running.as_str(), CancelRequested.as_str()]))
        .exec(db)
        .await?;
    Ok(attached.rows_affected == 1)
}

/// Records `artifact` as the report of `job`, which ended failed or cancelled without one (a
/// kind that [reports every ending](super::kind::JobKind::reports_every_ending)): only while it
/// still has none and has not moved since, so two writers (its worker and a janitor) record one.
/// `false` when it was not recorded.
pub async fn attach_report(db: &DatabaseConnection, job: &jobs::Model, artifact: &Artifact, artifact_ttl: Duration, by: Mover<'_>) -> Result<bool, DbErr> {
    let backend = db.get_database_backend();
    let update = recording(jobs::Entity::update_many(), backend, artifact, artifact_ttl)
        .col_expr(jobs::Column::UpdatedAt, db_now(backend))
        .filter(jobs::Column::Id.eq(&job.id))
        .filter(jobs::Column::Generation.eq(job.generation))
        .filter(jobs::Column::Status.is_in([Failed.as_str(), Cancelled.as_str()]))
        .filter(jobs::Column::ArtifactKey.is_null());
    let txn = begin_write(db).await?;
    let attached = update.exec_with_returning(&txn).await?;
    match attached.first() {
        Some(row) => {
            audit::record_event(&txn, row, by, row.updated_at, "report written").await?;
            txn.commit().await?;
            Ok(true)
        }
        None => {
            txn.rollback().await?;
            Ok(false)
        }
    }
}

/// Jobs of `deployments` (empty: all) that ended failed or cancelled and are owed a report they
/// do not have yet: of a kind that reports every ending, once a worker read their file (claimed,
/// or with a fixed plan). The same rule as `imports::stored::owes_report`.
pub async fn owed_reports(db: &DatabaseConnection, deployments: &[String], limit: u64) -> Result<Vec<jobs::Model>, DbErr> {
    let kinds: Vec<&str> = super::kind::JobKind::ALL.into_iter().filter(|k| k.reports_every_ending()).map(|k| k.as_str()).collect();
    let mut find = jobs::Entity::find();
    if !deployments.is_empty() {
        find = find.filter(jobs::Column::Deployment.is_in(deployments.iter().cloned()));
    }
    find.filter(jobs::Column::Kind.is_in(kinds))
        .filter(jobs::Column::Status.is_in([Failed.as_str(), Cancelled.as_str()]))
        .filter(jobs::Column::ArtifactKey.is_null())
        .filter(sea_orm::Condition::any().add(jobs::Column::Attempt.gt(0)).add(jobs::Column::CheckpointPlan.is_not_null()))
        .limit(limit)
        .all(db)
        .await
}


/// A fault point inside a transition's transaction, before its COMMIT (tests freeze a process
/// there); a `return` action makes the transition change nothing.
type Fault<'a> = Option<(&'a Faults, &'static str)>;

/// Runs a transition: the UPDATE and, if it moved the row, its audit row and (into a terminal
/// state, when its request asked) its notifications, in one transaction. (A row that becomes
/// `queued` wakes the workers through the database's own trigger.) Every move into a terminal
/// state goes through here.
async fn apply(db: &DatabaseConnection, id: &str, update: UpdateMany<jobs::Entity>, by: Mover<'_>, detail: Option<&str>, fault: Fault<'_>) -> Result<Outcome, DbErr> {
    let txn = begin_write(db).await?;
    let moved = update.exec_with_returning(&txn).await?;
    match moved.into_iter().next() {
        Some(row) => {
            audit::record_move(&txn, &row, by, detail).await?;
            crate::notifications::outbox::record(&txn, &row).await?;
            if let Some((faults, point)) = fault {
                if faults.check(point, id).is_err() {
                    txn.rollback().await?;
                    return Ok(Outcome::NotMoved(current(db, id).await?));
                }
            }
            txn.commit().await?;
            Ok(Outcome::Moved(Box::new(row)))
        }
        None => {
            txn.rollback().await?;
            Ok(Outcome::NotMoved(current(db, id).await?))
        }
    }
}

/// What a heartbeat carries besides the renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Beat {
    /// Data rows written so far.
    pub rows_written: i64,
    /// Rows to write, once counted.
    pub rows_total: Option<i64>,
    /// Whether the attempt made progress (rows, bytes uploaded, digest read, copy) since the last
    /// heartbeat: then `last_progress_at` becomes now.
    pub progressed: bool,
}

/// Renews the lease of `job` under `generation` and records its progress; tells the worker to
/// stop when cancel was asked or the job is no longer its own.
pub async fn heartbeat(db: &DatabaseConnection, id: &str, generation: i32, lease: Duration, beat: Beat) -> Result<Heartbeat, DbErr> {
    let backend = db.get_database_backend();
    let mut update = jobs::Entity::update_many()
        .col_expr(jobs::Column::LeaseExpiresAt, db_now(backend).add(lease.as_millis() as i64))
        .col_expr(jobs::Column::RowsWritten, checkpoints::rows_reported(beat.rows_written));
    // A total not counted yet by this attempt leaves the one the claim kept (a job with
    // checkpoints keeps its plan's total across attempts).
    if let Some(total) = beat.rows_total {
        update = update.col_expr(jobs::Column::RowsTotal, Expr::val(total));
    }
    if beat.progressed {
        update = update.col_expr(jobs::Column::LastProgressAt, db_now(backend));
    }
    let rows = update
        .filter(jobs::Column::Id.eq(id))
        .filter(jobs::Column::Generation.eq(generation))
        .filter(jobs::Column::Status.is_in([Running.as_str(), CancelRequested.as_str()]))
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
pub async fn fence(db: &DatabaseConnection, job: &jobs::Model, lease: Duration, authorised: Expr) -> Result<Result<(), Refusal>, DbErr> {
    let backend = db.get_database_backend();
    let rows = jobs::Entity::update_many()
        .col_expr(jobs::Column::LeaseExpiresAt, db_now(backend).add(lease.as_millis() as i64))
        .filter(jobs::Column::Id.eq(&job.id))
        .filter(jobs::Column::Generation.eq(job.generation))
        .filter(jobs::Column::Status.eq(Running.as_str()))
        .filter(authorised)
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
#[allow(clippy::too_many_arguments)]
pub async fn release(
    db: &DatabaseConnection,
    job: &jobs::Model,
    artifact: &Artifact,
    artifact_ttl: Duration,
    authorised: Expr,
    by: Mover<'_>,
    faults: &Faults,
) -> Result<Result<Box<jobs::Model>, Refusal>, DbErr> {
    let backend = db.get_database_backend();
    let now = || db_now(backend);
    let update = recording(moving(backend, &job.id, Held::Wait), backend, artifact, artifact_ttl)
        .col_expr(jobs::Column::Status, Expr::val(Ready.as_str()))
        .col_expr(jobs::Column::RowsWritten, Expr::val(artifact.rows))
        .col_expr(jobs::Column::RowsTotal, Expr::val(artifact.rows))
        .col_expr(jobs::Column::ErrorCode, none::<String>())
        .col_expr(jobs::Column::ErrorMessage, none::<String>())
        .col_expr(jobs::Column::ErrorRetryable, none::<bool>())
        .col_expr(jobs::Column::ErrorSupportRef, none::<String>())
        .col_expr(jobs::Column::NextAttemptAt, none::<i64>())
        .col_expr(jobs::Column::LeaseOwner, none::<String>())
        .col_expr(jobs::Column::LeaseExpiresAt, none::<i64>())
        .col_expr(jobs::Column::FinishedAt, now())
        .filter(jobs::Column::Generation.eq(job.generation))
        .filter(jobs::Column::Status.eq(Running.as_str()))
        .filter(authorised);
    Ok(match apply(db, &job.id, update, by, None, Some((faults, "release_before_commit"))).await? {
        Outcome::Moved(row) => Ok(row),
        Outcome::NotMoved(current) => Err(Refusal::of(&current, job.generation)),
    })
}

/// Who ends an attempt, and so on what condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ender {
    /// The attempt itself, under its generation.
    Attempt,
    /// The janitor, for a worker whose lease ran out by the database's clock.
    LapsedLease,
    /// The janitor, for an attempt whose lease is renewed but that has made no progress for
    /// `quiet` by the database's clock (its worker's own stall rule did not end it).
    Stalled {
        /// `EXPORTD_STALL_SECS` + `EXPORTD_LEASE_SECS`.
        quiet: Duration,
    },
}

/// Ends an attempt of `job` that failed, in one UPDATE whatever lands meanwhile: a cancel asked
/// during the attempt wins (`cancelled`); a transient failure with attempts left waits for its
/// backoff (`retry_wait`, `next_attempt_at`); anything else is `failed`. The janitor's enders
/// move the job only if their condition holds by the database's clock, and skip a row another
/// process holds.
pub async fn end_attempt(
    db: &DatabaseConnection,
    job: &jobs::Model,
    failure: Failure,
    support_ref: &str,
    policy: &RetryPolicy,
    by: Mover<'_>,
    ender: Ender,
) -> Result<Outcome, DbErr> {
    let backend = db.get_database_backend();
    let now = || db_now(backend);
    let cancel = || is(CancelRequested);
    let retry = || is(Running).and(Expr::col((jobs::Entity, jobs::Column::Attempt)).lt(policy.max_attempts));
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
    let held = if ender == Ender::Attempt { Held::Wait } else { Held::Skip };
    let mut update = moving(backend, &job.id, held)
        .col_expr(jobs::Column::Status, status)
        .col_expr(jobs::Column::NextAttemptAt, next_attempt)
        .col_expr(jobs::Column::FinishedAt, finished)
        .col_expr(jobs::Column::ErrorCode, unless_cancelled(Expr::val(failure.code)))
        .col_expr(jobs::Column::ErrorMessage, unless_cancelled(Expr::val(failure.message)))
        .col_expr(
            jobs::Column::ErrorRetryable,
            CaseStatement::new().case(cancel(), none::<bool>()).finally(Expr::val(failure.retryable)).into(),
        )
        .col_expr(jobs::Column::ErrorSupportRef, unless_cancelled(Expr::val(support_ref)))
        .col_expr(jobs::Column::LeaseOwner, none::<String>())
        .col_expr(jobs::Column::LeaseExpiresAt, none::<i64>())
        .filter(jobs::Column::Generation.eq(job.generation))
        .filter(jobs::Column::Status.is_in([Running.as_str(), CancelRequested.as_str()]));
    match ender {
        Ender::Attempt => {}
        Ender::LapsedLease => update = update.filter(Expr::col((jobs::Entity, jobs::Column::LeaseExpiresAt)).lt(now())),
        Ender::Stalled { quiet } => {
            update = update
                .filter(Expr::col((jobs::Entity, jobs::Column::LastProgressAt)).lt(now().sub(quiet.as_millis() as i64)))
                .filter(Expr::col((jobs::Entity, jobs::Column::LeaseExpiresAt)).gte(now()))
        }
    }
    apply(db, &job.id, update, by, Some(failure.code), None).await
}

/// `cancel_requested → cancelled`: the worker saw the cancel at a checkpoint and stopped.
pub async fn acknowledge_cancel(db: &DatabaseConnection, job: &jobs::Model, by: Mover<'_>) -> Result<Outcome, DbErr> {
    let backend = db.get_database_backend();
    let update = moving(backend, &job.id, Held::Wait)
        .col_expr(jobs::Column::Status, Expr::val(Cancelled.as_str()))
        .col_expr(jobs::Column::FinishedAt, db_now(backend))
        .col_expr(jobs::Column::LeaseOwner, none::<String>())
        .col_expr(jobs::Column::LeaseExpiresAt, none::<i64>())
        .filter(jobs::Column::Generation.eq(job.generation))
        .filter(jobs::Column::Status.eq(CancelRequested.as_str()));
    apply(db, &job.id, update, by, Some("cancel seen at a checkpoint"), None).await
}

/// Hands a job back on shutdown: `running → queued` with attempt−1 (not counted) and no
/// progress but its checkpoints', so another worker starts it afresh (after its last checkpoint);
/// a job whose cancel was asked ends `cancelled`.
pub async fn hand_back(db: &DatabaseConnection, job: &jobs::Model, by: Mover<'_>) -> Result<Outcome, DbErr> {
    let backend = db.get_database_backend();
    let cancel = || is(CancelRequested);
    let update = moving(backend, &job.id, Held::Wait)
        .col_expr(jobs::Column::Status, CaseStatement::new().case(cancel(), Expr::val(Cancelled.as_str())).finally(Expr::val(Queued.as_str())).into())
        .col_expr(
            jobs::Column::Attempt,
            CaseStatement::new().case(cancel(), Expr::col(jobs::Column::Attempt)).finally(Expr::col(jobs::Column::Attempt).sub(1)).into(),
        )
        .col_expr(jobs::Column::RowsWritten, checkpoints::rows_kept_across_attempts())
        .col_expr(jobs::Column::RowsTotal, checkpoints::total_kept_across_attempts())
        .col_expr(jobs::Column::FinishedAt, CaseStatement::new().case(cancel(), db_now(backend)).finally(none::<i64>()).into())
        .col_expr(jobs::Column::LeaseOwner, none::<String>())
        .col_expr(jobs::Column::LeaseExpiresAt, none::<i64>())
        .filter(jobs::Column::Generation.eq(job.generation))
        .filter(jobs::Column::Status.is_in([Running.as_str(), CancelRequested.as_str()]));
    apply(db, &job.id, update, by, Some("handed back"), None).await
}

/// Who asks for a cancel.
#[derive(Debug, Clone, Copy)]
pub enum Canceller<'a> {
    /// A user, of a job of `actor_id` (their own, or a run of a schedule they own or administer).
    User {
        /// The user's tenant.
        tenant_id: &'a str,
        /// The job's actor.
        actor_id: &'a str,
        /// The user who cancels, whom the audit names.
        by: &'a str,
    },
    /// An operator at the command line, of any export.
    Operator,
}

/// A cancel, in one UPDATE: `queued`/`retry_wait → cancelled` at once, `running →
/// cancel_requested` (the worker stops at its next checkpoint).
pub async fn cancel(db: &DatabaseConnection, id: &str, by: Canceller<'_>) -> Result<Outcome, DbErr> {
    let backend = db.get_database_backend();
    let waiting = || Expr::col((jobs::Entity, jobs::Column::Status)).is_in([Queued.as_str(), RetryWait.as_str()]);
    let mut update = moving(backend, id, Held::Wait)
        .col_expr(jobs::Column::Status, CaseStatement::new().case(waiting(), Expr::val(Cancelled.as_str())).finally(Expr::val(CancelRequested.as_str())).into())
        .col_expr(jobs::Column::FinishedAt, CaseStatement::new().case(waiting(), db_now(backend)).finally(none::<i64>()).into())
        .col_expr(jobs::Column::NextAttemptAt, none::<i64>())
        .filter(jobs::Column::Status.is_in([Queued.as_str(), RetryWait.as_str(), Running.as_str()]));
    let mover = match by {
        Canceller::User { tenant_id, actor_id, by } => {
            update = update.filter(jobs::Column::TenantId.eq(tenant_id)).filter(jobs::Column::ActorId.eq(actor_id));
            Mover::User(by)
        }
        Canceller::Operator => Mover::Operator,
    };
    apply(db, id, update, mover, Some("cancel"), None).await
}

/// An operator's redrive of a failed job: `failed → queued` with its attempts reset, its error,
/// progress and report cleared, in its own deployment under the same key and id; the queue's
/// wait starts again now. One transaction: the move, its audit row and what the job's kind
/// forgets. An export forgets its checkpoints (it starts again from nothing: what its steps
/// produced may have been swept since it failed); an import keeps its plan and its committed
/// batches, which stay applied (its next attempt goes on after them), and forgets the refusals
/// of a batch that was rolled back (it runs again). A job that reads an upload is redriven only
/// while the upload is kept, and one whose artifact expired (with it went what a later attempt
/// needs, an import's validation report) not at all: `NotMoved` with the job still `failed`.
pub async fn redrive(db: &DatabaseConnection, id: &str) -> Result<Outcome, DbErr> {
    use super::kind::JobKind;
    use crate::entities::uploads;
    let backend = db.get_database_backend();
    let keeping: Vec<&str> = JobKind::ALL.into_iter().filter(|k| k.redrive_keeps_committed_steps()).map(JobKind::as_str).collect();
    let keeps = |kept: Expr, reset: Expr| -> Expr {
        CaseStatement::new().case(Expr::col((jobs::Entity, jobs::Column::Kind)).is_in(keeping.clone()), kept).finally(reset).into()
    };
    let upload_kept = Query::select()
        .expr(Expr::val(1))
        .from(uploads::Entity)
        .and_where(Expr::col((uploads::Entity, uploads::Column::Id)).equals((jobs::Entity, jobs::Column::UploadId)))
        .to_owned();
    let update = moving(backend, id, Held::Wait)
        .col_expr(jobs::Column::Status, Expr::val(Queued.as_str()))
        .col_expr(jobs::Column::Attempt, Expr::val(0))
        .col_expr(jobs::Column::NextAttemptAt, none::<i64>())
        .col_expr(jobs::Column::FinishedAt, none::<i64>())
        .col_expr(jobs::Column::RowsWritten, Expr::val(0i64))
        .col_expr(jobs::Column::RowsTotal, none::<i64>())
        .col_expr(jobs::Column::LastProgressAt, none::<i64>())
        .col_expr(jobs::Column::CheckpointSeq, keeps(Expr::col((jobs::Entity, jobs::Column::CheckpointSeq)), Expr::val(0)))
        .col_expr(jobs::Column::CheckpointPlan, keeps(Expr::col((jobs::Entity, jobs::Column::CheckpointPlan)), none::<String>()))
        .col_expr(jobs::Column::ErrorCode, none::<String>())
        .col_expr(jobs::Column::ErrorMessage, none::<String>())
        .col_expr(jobs::Column::ErrorRetryable, none::<bool>())
        .col_expr(jobs::Column::ErrorSupportRef, none::<String>())
        .col_expr(jobs::Column::ArtifactKey, none::<String>())
        .col_expr(jobs::Column::ArtifactSha256, none::<String>())
        .col_expr(jobs::Column::ArtifactBytes, none::<i64>())
        .col_expr(jobs::Column::ArtifactRows, none::<i64>())
        .col_expr(jobs::Column::ArtifactExpiresAt, none::<i64>())
        .filter(jobs::Column::Status.eq(Failed.as_str()))
        .filter(jobs::Column::ArtifactExpired.eq(false))
        .filter(sea_orm::Condition::any().add(jobs::Column::UploadId.is_null()).add(Expr::exists(upload_kept)));
    let txn = begin_write(db).await?;
    let Some(row) = update.exec_with_returning(&txn).await?.into_iter().next() else {
        txn.rollback().await?;
        return Ok(Outcome::NotMoved(current(db, id).await?));
    };
    if JobKind::parse(&row.kind).is_some_and(JobKind::redrive_keeps_committed_steps) {
        checkpoints::forget_uncommitted(&txn, &row).await?;
    } else {
        checkpoints::forget(&txn, id).await?;
    }
    audit::record_move(&txn, &row, Mover::Operator, Some("redriven")).await?;
    txn.commit().await?;
    Ok(Outcome::Moved(Box::new(row)))
}

// The janitor's lookups take `now` (read once from the database's clock) as a value: a bound
// value lets the indexes on (status, time) find the rows, where the clock function would not.

/// Running jobs (and cancels) whose lease ran out by `now`: their worker is gone.
pub async fn lapsed_leases(db: &DatabaseConnection, now: i64, limit: u64) -> Result<Vec<jobs::Model>, DbErr> {
    jobs::Entity::find()
        .filter(jobs::Column::Status.is_in([Running.as_str(), CancelRequested.as_str()]))
        .filter(jobs::Column::LeaseExpiresAt.lt(now))
        .limit(limit)
        .all(db)
        .await
}

/// Running jobs (and cancels) whose lease is renewed but whose last progress is older than
/// `quiet` by `now`: their attempt hangs.
pub async fn stalled_attempts(db: &DatabaseConnection, now: i64, quiet: Duration, limit: u64) -> Result<Vec<jobs::Model>, DbErr> {
    jobs::Entity::find()
        .filter(jobs::Column::Status.is_in([Running.as_str(), CancelRequested.as_str()]))
        .filter(jobs::Column::LastProgressAt.lt(now - quiet.as_millis() as i64))
        .filter(jobs::Column::LeaseExpiresAt.gte(now))
        .limit(limit)
        .all(db)
        .await
}

/// `status = 'queued' AND updated_at < t OR status = 'retry_wait' AND next_attempt_at < t`:
/// claimable since before `t` (a queued row is not written while it waits, so `updated_at` is
/// when it started waiting; a job in `retry_wait` is claimable from `next_attempt_at`).
fn claimable_since_before(t: Expr) -> sea_orm::Condition {
    let col = |c: jobs::Column| Expr::col((jobs::Entity, c));
    sea_orm::Condition::any()
        .add(col(jobs::Column::Status).eq(Queued.as_str()).and(col(jobs::Column::UpdatedAt).lt(t.clone())))
        .add(col(jobs::Column::Status).eq(RetryWait.as_str()).and(col(jobs::Column::NextAttemptAt).lt(t)))
}

/// Jobs claimable for longer than `ttl` by `now`, and not claimed: no worker serves them.
pub async fn overdue_unclaimed(db: &DatabaseConnection, now: i64, ttl: Duration, limit: u64) -> Result<Vec<jobs::Model>, DbErr> {
    jobs::Entity::find()
        .filter(jobs::Column::Status.is_in([Queued.as_str(), RetryWait.as_str()]))
        .filter(claimable_since_before(Expr::val(now - ttl.as_millis() as i64)))
        .limit(limit)
        .all(db)
        .await
}

/// `queued`/`retry_wait → failed` for a job claimable for longer than `ttl`: `catalog_mismatch`
/// when its schema version is not one of `digests` (those of the catalog of the process that
/// moves it), else `no_worker`.
pub async fn fail_unclaimed(db: &DatabaseConnection, job: &jobs::Model, ttl: Duration, digests: &[String], support_ref: &str, by: Mover<'_>) -> Result<Outcome, DbErr> {
    let backend = db.get_database_backend();
    let failure = match &job.schema_digest {
        Some(digest) if !digests.contains(digest) => Failure::CATALOG_MISMATCH,
        _ => Failure::NO_WORKER,
    };
    let update = moving(backend, &job.id, Held::Skip)
        .col_expr(jobs::Column::Status, Expr::val(Failed.as_str()))
        .col_expr(jobs::Column::ErrorCode, Expr::val(failure.code))
        .col_expr(jobs::Column::ErrorMessage, Expr::val(failure.message))
        .col_expr(jobs::Column::ErrorRetryable, Expr::val(failure.retryable))
        .col_expr(jobs::Column::ErrorSupportRef, Expr::val(support_ref))
        .col_expr(jobs::Column::FinishedAt, db_now(backend))
        .col_expr(jobs::Column::NextAttemptAt, none::<i64>())
        .filter(jobs::Column::Generation.eq(job.generation))
        .filter(claimable_since_before(db_now(backend).sub(ttl.as_millis() as i64)));
    apply(db, &job.id, update, by, Some(failure.code), None).await
}

/// Finished jobs whose artifact (a ready export's file, an import's report whatever its ending)
/// is past its retention by `now` and not yet marked expired.
/// Only those of `deployments` (empty: all), since deleting one needs its deployment's store.
pub async fn due_artifacts(db: &DatabaseConnection, now: i64, deployments: &[String], limit: u64) -> Result<Vec<jobs::Model>, DbErr> {
    let mut find = jobs::Entity::find();
    if !deployments.is_empty() {
        find = find.filter(jobs::Column::Deployment.is_in(deployments.iter().cloned()));
    }
    find
        .filter(jobs::Column::Status.is_in(TERMINAL))
        .filter(jobs::Column::ArtifactKey.is_not_null())
        .filter(jobs::Column::ArtifactExpiresAt.lte(now))
        .filter(jobs::Column::ArtifactExpired.eq(false))
        .limit(limit)
        .all(db)
        .await
}

/// Marks a finished job's artifact expired, once its object is deleted; the record stays.
pub async fn mark_artifact_expired(db: &DatabaseConnection, job: &jobs::Model, by: Mover<'_>) -> Result<Outcome, DbErr> {
    let backend = db.get_database_backend();
    let update = moving(backend, &job.id, Held::Skip)
        .col_expr(jobs::Column::ArtifactExpired, Expr::val(true))
        .filter(jobs::Column::Status.is_in(TERMINAL))
        .filter(jobs::Column::Generation.eq(job.generation))
        .filter(jobs::Column::ArtifactExpired.eq(false))
        .filter(Expr::col((jobs::Entity, jobs::Column::ArtifactExpiresAt)).lte(db_now(backend)));
    apply(db, &job.id, update, by, Some("artifact expired"), None).await
}

fn finished_before(backend: DbBackend, ttl: Duration) -> Expr {
    Expr::col((jobs::Entity, jobs::Column::FinishedAt)).if_null(Expr::col((jobs::Entity, jobs::Column::UpdatedAt))).lt(db_now(backend).sub(ttl.as_millis() as i64))
}

const TERMINAL: [&str; 3] = ["ready", "failed", "cancelled"];

/// Finished jobs whose record is past its retention by `now` (every transition into a
/// terminal state sets `finished_at`).
/// A record that still keeps an artifact is one only a janitor of its deployment can purge
/// (it deletes the file first): with `deployments` (empty: all), only those are listed.
pub async fn purgeable(db: &DatabaseConnection, now: i64, ttl: Duration, deployments: &[String], limit: u64) -> Result<Vec<jobs::Model>, DbErr> {
    let mut find = jobs::Entity::find();
    if !deployments.is_empty() {
        find = find.filter(
            sea_orm::Condition::any()
                .add(jobs::Column::ArtifactKey.is_null())
                .add(jobs::Column::ArtifactExpired.eq(true))
                .add(jobs::Column::Deployment.is_in(deployments.iter().cloned())),
        );
    }
    find
        .filter(jobs::Column::Status.is_in(TERMINAL))
        .filter(jobs::Column::FinishedAt.lt(now - ttl.as_millis() as i64))
        .limit(limit)
        .all(db)
        .await
}

/// Deletes a finished job's record and its audit trail, so its key may be used again. False
/// when it was not (or no longer) purgeable.
pub async fn purge(db: &DatabaseConnection, job: &jobs::Model, ttl: Duration) -> Result<bool, DbErr> {
    let backend = db.get_database_backend();
    let txn = begin_write(db).await?;
    let deleted = jobs::Entity::delete_many()
        .filter(the_row(backend, &job.id, Held::Skip, LockType::Update))
        .filter(jobs::Column::Status.is_in(TERMINAL))
        .filter(finished_before(backend, ttl))
        .exec(&txn)
        .await?;
    if deleted.rows_affected != 1 {
        txn.rollback().await?;
        return Ok(false);
    }
    job_events::Entity::delete_many().filter(job_events::Column::JobId.eq(&job.id)).exec(&txn).await?;
    crate::notifications::outbox::forget(&txn, &job.id).await?;
    super::checkpoints::forget(&txn, &job.id).await?;
    txn.commit().await?;
    Ok(true)
}

/// The jobs with these ids (for the janitor's store sweeps).
pub async fn by_ids(db: &DatabaseConnection, ids: &[String]) -> Result<Vec<jobs::Model>, DbErr> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    jobs::Entity::find().filter(jobs::Column::Id.is_in(ids.iter().cloned())).all(db).await
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
