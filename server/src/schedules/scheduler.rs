//! The scheduler loop (contract §15), run by every `serve` and every `worker`: no leader. Each
//! pass reads the database's clock, and for every active schedule creates the export of each
//! window due since it last ran (the latest `EXPORTD_SCHEDULE_CATCH_UP`, oldest first) under
//! the key `schedule:{id}:{window start}`; the key makes a window once however many loops see
//! it due, and a loop that dies before it records the run leaves it to the next pass. An owner
//! who is no longer an active admin pauses the schedule.

use super::windows::Window;
use crate::auth::{load_active_actor, Actor, AuthVia, Role};
use crate::entities::{schedules, users};
use crate::error::AppError;
use crate::exports::service::{create_scheduled, ScheduledRun};
use crate::service::context::ServiceContext;
use app::schedules::ScheduleRequest;
use sea_orm::{ColumnTrait, DbBackend, EntityTrait, QueryFilter, QueryOrder, QuerySelect, TransactionTrait};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The longest a pass may take before it is abandoned (a wait on a lock or a query).
const PASS_LIMIT: Duration = Duration::from_secs(30);

/// Runs passes every `every` (with a little jitter, so loops spread) until `shutdown`.
pub async fn run(state: ServiceContext, every: Duration, shutdown: CancellationToken) {
    loop {
        match tokio::time::timeout(PASS_LIMIT, pass(&state)).await {
            Ok(Ok(made)) => tracing::debug!(made, "scheduler pass ended"),
            Ok(Err(e)) => tracing::warn!(error = %e, "scheduler pass failed; the next pass tries again"),
            Err(_) => tracing::warn!("scheduler pass took too long; the next pass tries again"),
        }
        let jitter = every.mul_f64((uuid::Uuid::new_v4().as_u128() % 200) as f64 / 1000.0);
        tokio::select! {
            _ = tokio::time::sleep(every + jitter) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

/// Why a pass stopped.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    /// The database.
    #[error("database: {0}")]
    Db(#[from] sea_orm::DbErr),
    /// A create refused or failed.
    #[error("{0}")]
    Create(#[from] AppError),
}

/// One pass over every active schedule, oldest first; how many operations it made.
pub async fn pass(state: &ServiceContext) -> Result<usize, PassError> {
    let now = crate::db::db_now_ms(&state.db).await?;
    let active = schedules::Entity::find()
        .filter(schedules::Column::Paused.eq(false))
        .filter(schedules::Column::DeletedAt.is_null())
        .order_by_asc(schedules::Column::CreatedAt)
        .order_by_asc(schedules::Column::Id)
        .all(&state.db)
        .await?;
    let mut made = 0;
    for s in active {
        match due(state, &s, now).await {
            Ok(n) => made += n,
            Err(e) => tracing::warn!(schedule = %s.id, error = %e, "a schedule's runs were not made; the next pass tries again"),
        }
    }
    Ok(made)
}

/// Makes the runs of schedule `s` due by `now` (ms). On PostgreSQL the schedule's row is held
/// while its revisions are read, its runs made and its last due time recorded: an edit holds
/// the row while it saves a revision, so every loop finds the same revision current at a due
/// time, and loops take a schedule's due times one after another. (SQLite's write transaction
/// holds the whole database, and a SQLite deployment has one process.)
async fn due(state: &ServiceContext, s: &schedules::Model, now: i64) -> Result<usize, PassError> {
    // Most passes find nothing due: that costs one query, and takes no lock.
    if !any_due(state, s, now).await? {
        return Ok(0);
    }
    if state.db.get_database_backend() != DbBackend::Postgres {
        return runs(state, &state.db, s, now).await;
    }
    let held = state.db.begin().await?;
    let row = schedules::Entity::find_by_id(s.id.clone()).lock_exclusive().one(&held).await?;
    let made = match row {
        Some(s) if !s.paused && s.deleted_at.is_none() => runs(state, &held, &s, now).await,
        _ => Ok(0),
    };
    match made {
        Ok(made) => {
            held.commit().await?;
            Ok(made)
        }
        Err(e) => {
            held.rollback().await?;
            Err(e)
        }
    }
}

/// Whether `s` has a due time by `now`, as the pass read it (the held row decides).
async fn any_due(state: &ServiceContext, s: &schedules::Model, now: i64) -> Result<bool, PassError> {
    let Some(current) = super::revision_at(&state.db, &s.id, now).await? else { return Ok(false) };
    let request: ScheduleRequest = serde_json::from_str(&current.request).map_err(|e| AppError::Internal(e.to_string()))?;
    Ok(super::plan(&request).is_ok_and(|plan| !due_times(&plan, s, now, 1).is_empty()))
}

/// The due times of `s` by `now`: the latest `EXPORTD_SCHEDULE_CATCH_UP` since it last ran (or
/// was made), oldest first, leaving out those of its latest pause.
fn due_times(plan: &super::Plan, s: &schedules::Model, now: i64, n: usize) -> Vec<(jiff::Timestamp, jiff::civil::Date)> {
    let ms = |t: i64| jiff::Timestamp::from_millisecond(t).unwrap_or(jiff::Timestamp::MIN);
    let after = s.last_due.map_or(s.active_since, |last| last.max(s.active_since));
    let latest = |from: i64, until: i64, n: usize| if from < until && n > 0 { plan.cadence.latest(&plan.zone, ms(from), ms(until), n) } else { Vec::new() };
    match (s.skip_from, s.skip_until) {
        (Some(from), Some(until)) if until > after => {
            let mut due = latest(after.max(until), now, n);
            let mut before = latest(after, from.min(now), n - due.len());
            before.append(&mut due);
            before
        }
        _ => latest(after, now, n),
    }
}

async fn runs<C: sea_orm::ConnectionTrait>(state: &ServiceContext, db: &C, s: &schedules::Model, now: i64) -> Result<usize, PassError> {
    let Some(current) = super::revision_at(db, &s.id, now).await? else { return Ok(0) };
    let request: ScheduleRequest = serde_json::from_str(&current.request).map_err(|e| AppError::Internal(e.to_string()))?;
    let Ok(plan) = super::plan(&request) else { return Ok(0) };
    let due = due_times(&plan, s, now, state.config.schedule_catch_up);
    if due.is_empty() {
        return Ok(0);
    }
    // The owner is asked only when a window is due.
    let Some(actor) = service_identity(state, db, s).await? else { return Ok(0) };
    let mut made = 0;
    for (due_at, day) in due {
        let due_ms = due_at.as_millisecond();
        // The revision current at the due time, whatever was saved since.
        let revision = super::revision_at(db, &s.id, due_ms).await?.unwrap_or_else(|| current.clone());
        let request: ScheduleRequest = serde_json::from_str(&revision.request).map_err(|e| AppError::Internal(e.to_string()))?;
        let Ok(plan) = super::plan(&request) else { continue };
        let window: Window = plan.window.window(day, &plan.zone);
        let key = super::run_key(&s.id, &window.start_text());
        let export = super::export_request(&request, &window);
        // Tests stop or kill a loop here, at a window's due time, before it creates the run.
        if crate::faults::Faults::default().check("schedule_before_create", &key).is_err() {
            return Ok(made);
        }
        match create_scheduled(state, &actor, &key, &export).await {
            Ok(ScheduledRun::Created(id)) => {
                made += 1;
                let lag = now - due_ms;
                state.metrics.schedule_runs.with_label_values(&[s.id.as_str()]).inc();
                state.metrics.schedule_lag.observe(lag as f64 / 1000.0);
                tracing::info!(schedule = %s.id, operation = %id, window = %window.start_text(), lag_ms = lag, "schedule run created");
            }
            Ok(ScheduledRun::AlreadyRan) => {}
            // The catalog or the role no longer allows the export: it would be refused at every
            // pass, so the schedule pauses and says why.
            // The window is passed over (a revision saved later does not apply to it).
            Err(e @ (AppError::InvalidRequest(_) | AppError::ExportNotPermitted(_))) => {
                tracing::warn!(schedule = %s.id, window = %window.start_text(), error = %e, "a schedule's run was refused");
                ran(db, s, due_ms).await?;
                pause(db, s, "refused").await?;
                return Ok(made);
            }
            Err(e) => return Err(e.into()),
        }
        ran(db, s, due_ms).await?;
    }
    Ok(made)
}

/// Records that `s` has run its due time `due_ms` (never going back).
async fn ran<C: sea_orm::ConnectionTrait>(db: &C, s: &schedules::Model, due_ms: i64) -> Result<(), PassError> {
    schedules::Entity::update_many()
        .col_expr(schedules::Column::LastDue, sea_orm::sea_query::Expr::val(due_ms).into())
        .filter(schedules::Column::Id.eq(&s.id))
        .filter(sea_orm::Condition::any().add(schedules::Column::LastDue.is_null()).add(schedules::Column::LastDue.lt(due_ms)))
        .exec(db)
        .await?;
    Ok(())
}

/// The schedule's service identity with its role now: the lesser of the schedule's and its
/// owner's. `None` (and the schedule paused) when the owner is no longer an active admin; `None`
/// too when the authority's source does not answer (the next pass asks again). The service
/// identity itself is not asked of the source, which does not know it.
async fn service_identity<C: sea_orm::ConnectionTrait>(state: &ServiceContext, db: &C, s: &schedules::Model) -> Result<Option<Actor>, PassError> {
    let owner = load_active_actor(&state.db, &state.authority, &s.owner_id, AuthVia::Token).await?;
    let owner = match owner {
        None => return pause(db, s, "owner_inactive").await.map(|_| None),
        Some(owner) if owner.unanswered.is_some() => return Ok(None),
        Some(owner) if owner.role != Role::Admin => return pause(db, s, "owner_demoted").await.map(|_| None),
        Some(owner) => owner,
    };
    let stored: Option<String> = users::Entity::find_by_id(s.service_user_id.clone())
        .filter(users::Column::Active.eq(true))
        .select_only()
        .column(users::Column::Role)
        .into_tuple()
        .one(&state.db)
        .await?;
    let Some(role) = stored.as_deref().and_then(Role::parse) else {
        pause(db, s, "service_identity_inactive").await?;
        return Ok(None);
    };
    Ok(Some(Actor {
        user_id: s.service_user_id.clone(),
        email: format!("schedule:{}", s.id),
        role: role.lesser(owner.role),
        unanswered: None,
        tenant_id: owner.tenant_id,
        tenant_slug: owner.tenant_slug,
        deployment: owner.deployment,
        via: AuthVia::Token,
    }))
}

/// Pauses `s` for `reason`, once.
async fn pause<C: sea_orm::ConnectionTrait>(db: &C, s: &schedules::Model, reason: &str) -> Result<(), PassError> {
    let moved = schedules::Entity::update_many()
        .col_expr(schedules::Column::Paused, sea_orm::sea_query::Expr::val(true).into())
        .col_expr(schedules::Column::PausedReason, sea_orm::sea_query::Expr::val(reason).into())
        .col_expr(schedules::Column::PausedAt, crate::job_store::db_now(db.get_database_backend()).into())
        .filter(schedules::Column::Id.eq(&s.id))
        .filter(schedules::Column::Paused.eq(false))
        .exec(db)
        .await?;
    if moved.rows_affected > 0 {
        tracing::warn!(schedule = %s.id, reason, "schedule paused");
    }
    Ok(())
}
