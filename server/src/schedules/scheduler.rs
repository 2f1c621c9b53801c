//! The scheduler loop (contract §15), run by every `serve` and every `worker`: no leader. Each
//! pass reads the database's clock, and for every active schedule creates the export of each
//! window due since it last ran (the latest `EXPORTD_SCHEDULE_CATCH_UP`, oldest first) under
//! the key `schedule:{id}:{window start}`; the key makes a window once however many loops see
//! it due, and a loop that dies before it records the run leaves it to the next pass. An owner
//! who is no longer an active admin pauses the schedule.

use super::windows::Window;
use crate::auth::{load_active_actor, Actor, AuthVia, Role};
use crate::entities::schedules;
use crate::exports::service::{create_scheduled, ScheduledRun};
use crate::service::context::ServiceContext;
use app::schedules::ScheduleRequest;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The longest a pass may take before it is abandoned (a wait on a lock or a query).
const PASS_LIMIT: Duration = Duration::from_secs(30);

/// Runs passes every `every` (with a little jitter, so loops spread) until `shutdown`.
pub async fn run(state: ServiceContext, every: Duration, shutdown: CancellationToken) {
    loop {
        match tokio::time::timeout(PASS_LIMIT, pass(&state)).await {
            Ok(Ok(0)) => {}
            Ok(Ok(made)) => tracing::info!(made, "scheduler pass made runs"),
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
    Create(#[from] crate::error::AppError),
}

/// One pass over every active schedule; how many operations it made.
pub async fn pass(state: &ServiceContext) -> Result<usize, PassError> {
    let now = crate::db::db_now_ms(&state.db).await?;
    let active = schedules::Entity::find().filter(schedules::Column::Paused.eq(false)).filter(schedules::Column::DeletedAt.is_null()).all(&state.db).await?;
    let mut made = 0;
    for s in active {
        match due(state, &s, now).await {
            Ok(n) => made += n,
            Err(e) => tracing::warn!(schedule = %s.id, error = %e, "a schedule's runs were not made; the next pass tries again"),
        }
    }
    Ok(made)
}

/// Makes the runs of schedule `s` due by `now` (ms).
async fn due(state: &ServiceContext, s: &schedules::Model, now: i64) -> Result<usize, PassError> {
    let Some(actor) = service_identity(state, s).await? else { return Ok(0) };
    let Some(current) = super::revision_at(&state.db, &s.id, now).await? else { return Ok(0) };
    let request: ScheduleRequest = serde_json::from_str(&current.request).map_err(|e| crate::error::AppError::Internal(e.to_string()))?;
    let Ok(plan) = super::plan(&request) else { return Ok(0) };
    let after = s.last_due.map_or(s.active_since, |last| last.max(s.active_since));
    let (Ok(after), Ok(until)) = (jiff::Timestamp::from_millisecond(after), jiff::Timestamp::from_millisecond(now)) else { return Ok(0) };
    let mut made = 0;
    for (due_at, day) in plan.cadence.latest(&plan.zone, after, until, state.config.schedule_catch_up) {
        let due_ms = due_at.as_millisecond();
        // The revision current at the due time, whatever was saved since.
        let revision = super::revision_at(&state.db, &s.id, due_ms).await?.unwrap_or_else(|| current.clone());
        let request: ScheduleRequest = serde_json::from_str(&revision.request).map_err(|e| crate::error::AppError::Internal(e.to_string()))?;
        let Ok(plan) = super::plan(&request) else { continue };
        let window: Window = plan.window.window(day, &plan.zone);
        let key = super::run_key(&s.id, &window.start_text());
        let export = super::export_request(&request, &window);
        // Tests stop or kill a loop here, at a window's due time, before it creates the run.
        if crate::faults::Faults::default().check("schedule_before_create", &key).is_err() {
            return Ok(made);
        }
        match create_scheduled(state, &actor, &key, &export).await? {
            ScheduledRun::Created(id) => {
                made += 1;
                let lag = now - due_ms;
                tracing::info!(schedule = %s.id, operation = %id, window = %window.start_text(), lag_ms = lag, "schedule run created");
            }
            ScheduledRun::AlreadyRan => {}
        }
        schedules::Entity::update_many()
            .col_expr(schedules::Column::LastDue, sea_orm::sea_query::Expr::val(due_ms).into())
            .filter(schedules::Column::Id.eq(&s.id))
            .filter(sea_orm::Condition::any().add(schedules::Column::LastDue.is_null()).add(schedules::Column::LastDue.lt(due_ms)))
            .exec(&state.db)
            .await?;
    }
    Ok(made)
}

/// The schedule's service identity with its role now: the lesser of the schedule's and its
/// owner's. `None` (and the schedule paused) when the owner is no longer an active admin; `None`
/// too when the authority's source does not answer (the next pass asks again).
async fn service_identity(state: &ServiceContext, s: &schedules::Model) -> Result<Option<Actor>, PassError> {
    let owner = load_active_actor(&state.db, &state.authority, &s.owner_id, AuthVia::Token).await?;
    let reason = match &owner {
        None => Some("owner_inactive"),
        Some(owner) if owner.unanswered.is_some() => return Ok(None),
        Some(owner) if owner.role != Role::Admin => Some("owner_demoted"),
        Some(_) => None,
    };
    if let Some(reason) = reason {
        pause(state, s, reason).await?;
        return Ok(None);
    }
    let Some(mut actor) = load_active_actor(&state.db, &state.authority, &s.service_user_id, AuthVia::Token).await? else { return Ok(None) };
    // The service identity's stored role is its schedule's; the authority's source does not know it.
    let stored: Option<String> = {
        use sea_orm::QuerySelect;
        crate::entities::users::Entity::find_by_id(s.service_user_id.clone()).select_only().column(crate::entities::users::Column::Role).into_tuple().one(&state.db).await?
    };
    let schedule_role = stored.as_deref().and_then(Role::parse);
    let owner_role = owner.map_or(Role::Viewer, |o| o.role);
    actor.role = schedule_role.unwrap_or(Role::Viewer).lesser(owner_role);
    actor.unanswered = None;
    Ok(Some(actor))
}

/// Pauses `s` for `reason`, once.
async fn pause(state: &ServiceContext, s: &schedules::Model, reason: &str) -> Result<(), PassError> {
    let moved = schedules::Entity::update_many()
        .col_expr(schedules::Column::Paused, sea_orm::sea_query::Expr::val(true).into())
        .col_expr(schedules::Column::PausedReason, sea_orm::sea_query::Expr::val(reason).into())
        .filter(schedules::Column::Id.eq(&s.id))
        .filter(schedules::Column::Paused.eq(false))
        .exec(&state.db)
        .await?;
    if moved.rows_affected > 0 {
        tracing::warn!(schedule = %s.id, reason, "schedule paused: its owner may no longer run it");
    }
    Ok(())
}
