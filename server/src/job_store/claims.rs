//! Claims (SPEC §5.1): a worker takes the next claimable job of a deployment it serves —
//! `queued`, or `retry_wait` whose `next_attempt_at` has passed — and moves it to `running`
//! under a new generation and a lease from the database's clock.
//!
//! Claims rotate between tenants: each claim looks at the tenants with claimable jobs, least
//! recently served first, and takes the oldest job of the first one it can lock; the tenant is
//! then marked served. One tenant's thousand queued jobs wait their turn behind another's one.
//! On PostgreSQL the job is locked with `FOR UPDATE SKIP LOCKED`, so workers on many machines
//! never wait for each other's row, and the tenant's mark is written only if no other claim
//! holds the tenant's row (`SKIP LOCKED` again): the mark is a hint for fairness, never a lock
//! that other claims queue behind, so a claimer frozen inside its transaction stalls no one.
//! On SQLite the write transaction serialises claims.

use super::{audit, begin_write, checkpoints, db_now, Mover};
use crate::entities::{jobs, tenants};
use crate::faults::Faults;
use app::ExportStatus;
use sea_orm::sea_query::{Expr, ExprTrait, LockBehavior, LockType, Order, Query};
use sea_orm::{ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, DbBackend, DbErr, EntityTrait, QueryFilter};
use std::time::Duration;

/// How many waiting tenants one claim considers.
const TENANTS_PER_CLAIM: u64 = 8;

/// Who is claiming.
#[derive(Debug, Clone, Copy)]
pub struct Claimant<'a> {
    /// The worker's id (`worker:…`), stored as the lease owner.
    pub worker_id: &'a str,
    /// The deployments it serves; empty = all.
    pub deployments: &'a [String],
    /// The schema versions its catalog holds (contract §12): it claims only jobs of these, or
    /// jobs accepted before versions were kept.
    pub digests: &'a [String],
    /// How long the lease lasts without a heartbeat.
    pub lease: Duration,
    /// The claimer's fault points (`claim_before_commit`).
    pub faults: &'a Faults,
}

/// `status IN ('queued', 'retry_wait') AND (status = 'queued' OR next_attempt_at <= now)`, on the
/// deployments served, of the schema versions held. The `IN` comes first so the (tenant, status) index can find the rows:
/// with the database's clock (a volatile function) inside an `OR` alone, PostgreSQL scans the
/// whole table.
fn claimable(backend: DbBackend, who: &Claimant<'_>) -> Condition {
    let mut c = Condition::all()
        .add(jobs::Column::Status.is_in([ExportStatus::Queued.as_str(), ExportStatus::RetryWait.as_str()]))
        .add(
            Condition::any()
                .add(jobs::Column::Status.eq(ExportStatus::Queued.as_str()))
                .add(Expr::col((jobs::Entity, jobs::Column::NextAttemptAt)).lte(db_now(backend))),
        );
    if !who.deployments.is_empty() {
        c = c.add(jobs::Column::Deployment.is_in(who.deployments.iter().cloned()));
    }
    c.add(Condition::any().add(jobs::Column::SchemaDigest.is_null()).add(jobs::Column::SchemaDigest.is_in(who.digests.iter().cloned())))
}

/// Claims the next job for `who`, or `None` when nothing is claimable now.
pub async fn claim(db: &DatabaseConnection, who: &Claimant<'_>) -> Result<Option<jobs::Model>, DbErr> {
    for tenant in waiting_tenants(db, who).await? {
        if let Some(job) = claim_from(db, who, &tenant).await? {
            return Ok(Some(job));
        }
    }
    Ok(None)
}

/// The tenants with claimable jobs, least recently served first. Each tenant is tested with the
/// id of its oldest claimable job (`(SELECT … ORDER BY created_at, id LIMIT 1) IS NOT NULL`), not
/// with `EXISTS`: PostgreSQL drops the order and limit of an `EXISTS` and then scans the whole
/// table for a tenant with nothing to claim, while the ordered subquery reads one entry of the
/// claim index (migration 6).
async fn waiting_tenants(db: &DatabaseConnection, who: &Claimant<'_>) -> Result<Vec<String>, DbErr> {
    let backend = db.get_database_backend();
    let oldest = Query::select()
        .column((jobs::Entity, jobs::Column::Id))
        .from(jobs::Entity)
        .and_where(Expr::col((jobs::Entity, jobs::Column::TenantId)).equals((tenants::Entity, tenants::Column::Id)))
        .cond_where(claimable(backend, who))
        .order_by((jobs::Entity, jobs::Column::CreatedAt), Order::Asc)
        .order_by((jobs::Entity, jobs::Column::Id), Order::Asc)
        .limit(1)
        .to_owned();
    let query = Query::select()
        .column((tenants::Entity, tenants::Column::Id))
        .from(tenants::Entity)
        .and_where(Expr::SubQuery(None, Box::new(oldest.into())).is_not_null())
        .order_by((tenants::Entity, tenants::Column::LastClaimedAt), Order::Asc)
        .order_by((tenants::Entity, tenants::Column::Id), Order::Asc)
        .limit(TENANTS_PER_CLAIM)
        .to_owned();
    let rows = db.query_all_raw(backend.build(&query)).await?;
    rows.iter().map(|r| r.try_get_by_index::<String>(0)).collect()
}

/// Claims the oldest claimable job of `tenant`, if one is not locked by another claim.
async fn claim_from(db: &DatabaseConnection, who: &Claimant<'_>, tenant: &str) -> Result<Option<jobs::Model>, DbErr> {
    let backend = db.get_database_backend();
    let now = || db_now(backend);
    let oldest = Query::select()
        .column(jobs::Column::Id)
        .from(jobs::Entity)
        .and_where(jobs::Column::TenantId.eq(tenant))
        .cond_where(claimable(backend, who))
        .order_by(jobs::Column::CreatedAt, Order::Asc)
        .order_by(jobs::Column::Id, Order::Asc)
        .limit(1)
        .lock_with_behavior(LockType::Update, LockBehavior::SkipLocked)
        .to_owned();
    let lease_ms = who.lease.as_millis() as i64;
    let txn = begin_write(db).await?;
    let claimed = jobs::Entity::update_many()
        .col_expr(jobs::Column::PreviousStatus, Expr::col(jobs::Column::Status))
        .col_expr(jobs::Column::Status, Expr::val(ExportStatus::Running.as_str()))
        .col_expr(jobs::Column::Generation, Expr::col(jobs::Column::Generation).add(1))
        .col_expr(jobs::Column::Attempt, Expr::col(jobs::Column::Attempt).add(1))
        .col_expr(jobs::Column::LeaseOwner, Expr::val(who.worker_id))
        .col_expr(jobs::Column::LeaseExpiresAt, now().add(lease_ms))
        .col_expr(jobs::Column::NextAttemptAt, Expr::val(Option::<i64>::None))
        // A new attempt starts from nothing but its job's checkpoints: no other progress, and the
        // last attempt's error is history.
        .col_expr(jobs::Column::RowsWritten, checkpoints::rows_kept_across_attempts())
        .col_expr(jobs::Column::RowsTotal, checkpoints::total_kept_across_attempts())
        .col_expr(jobs::Column::ErrorCode, Expr::val(Option::<String>::None))
        .col_expr(jobs::Column::ErrorMessage, Expr::val(Option::<String>::None))
        .col_expr(jobs::Column::ErrorRetryable, Expr::val(Option::<bool>::None))
        .col_expr(jobs::Column::ErrorSupportRef, Expr::val(Option::<String>::None))
        .col_expr(jobs::Column::UpdatedAt, now())
        .col_expr(jobs::Column::LastProgressAt, now())
        .filter(jobs::Column::Id.in_subquery(oldest))
        .filter(jobs::Column::Status.is_in([ExportStatus::Queued.as_str(), ExportStatus::RetryWait.as_str()]))
        .exec_with_returning(&txn)
        .await?;
    let Some(job) = claimed.into_iter().next() else {
        txn.rollback().await?;
        return Ok(None);
    };
    // The tenant's mark, unless another claim holds its row right now (then that claim marks it).
    let unheld_tenant = Query::select()
        .column(tenants::Column::Id)
        .from(tenants::Entity)
        .and_where(tenants::Column::Id.eq(tenant))
        .lock_with_behavior(LockType::NoKeyUpdate, LockBehavior::SkipLocked)
        .to_owned();
    tenants::Entity::update_many()
        .col_expr(tenants::Column::LastClaimedAt, now())
        .filter(tenants::Column::Id.in_subquery(unheld_tenant))
        .exec(&txn)
        .await?;
    audit::record_move(&txn, &job, Mover::Worker(who.worker_id), Some("claimed")).await?;
    if who.faults.check("claim_before_commit", &job.id).is_err() {
        txn.rollback().await?;
        return Ok(None);
    }
    txn.commit().await?;
    Ok(Some(job))
}
