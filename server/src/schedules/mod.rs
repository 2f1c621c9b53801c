//! Schedules (contract §15): an admin's recurring export, the third thing that creates
//! operations beside the page and the API. Each schedule has a service identity of its own (a
//! user with `schedule_id` set, who cannot sign in), whose role at every check is the lesser of
//! the schedule's role and its owner's role now. The scheduler ([`scheduler`]) creates each
//! window's export under the key `schedule:{id}:{window start}`, so any number of scheduler loops
//! make one operation per window.

pub mod scheduler;
pub mod windows;

use crate::auth::{Actor, Role, NO_PASSWORD};
use crate::entities::{jobs, schedule_revisions, schedules, users};
use crate::error::{AppError, FieldError};
use crate::service::context::ServiceContext;
use app::schedules::{Cadence, Every, MonthDay, ScheduleList, ScheduleRequest, ScheduleRole, ScheduleRun, ScheduleView, ScheduleWindow};
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Set};
use serde_json::Value;

/// The runs `GET /api/schedules/{id}` shows.
const RECENT_RUNS: u64 = 20;

/// The prefix of a run's key; the window's start follows the schedule's id.
pub fn run_key(schedule_id: &str, window_start: &str) -> String {
    format!("schedule:{schedule_id}:{window_start}")
}

/// Whether `actor` may read, cancel and download the operations of `job_actor`: a schedule's
/// service identity whose schedule `actor` owns, or of `actor`'s tenant when `actor` is an admin.
pub async fn admits<C: ConnectionTrait>(db: &C, actor: &Actor, job_actor: &str) -> Result<bool, AppError> {
    let schedule: Option<Option<String>> = users::Entity::find_by_id(job_actor.to_owned()).select_only().column(users::Column::ScheduleId).into_tuple().one(db).await?;
    let Some(Some(schedule)) = schedule else { return Ok(false) };
    let Some(s) = schedules::Entity::find_by_id(schedule).filter(schedules::Column::TenantId.eq(&actor.tenant_id)).one(db).await? else { return Ok(false) };
    Ok(s.owner_id == actor.user_id || actor.role_now()? == Role::Admin)
}

/// Only an admin manages schedules: asked before anything else of a request.
pub fn ensure_admin(actor: &Actor) -> Result<(), AppError> {
    match actor.role_now()? {
        Role::Admin => Ok(()),
        _ => Err(AppError::ScheduleNotPermitted),
    }
}

/// The due times and windows a request describes, or what is wrong with it.
pub struct Plan {
    /// When it is due.
    pub cadence: windows::Cadence,
    /// What each run exports.
    pub window: windows::WindowKind,
    /// Its timezone.
    pub zone: jiff::tz::TimeZone,
}

fn field(pointer: &str, message: impl Into<String>) -> FieldError {
    FieldError::new(pointer.to_owned(), message.into())
}

/// Reads a request's cadence, window and timezone.
pub fn plan(request: &ScheduleRequest) -> Result<Plan, Vec<FieldError>> {
    let mut errors = Vec::new();
    let zone = jiff::tz::TimeZone::get(&request.timezone).map_err(|_| errors.push(field("/timezone", "not an IANA timezone")));
    let at = parse_at(&request.cadence.at).ok_or_else(|| errors.push(field("/cadence/at", "a local time, HH:MM")));
    let every = every(&request.cadence).map_err(|e| errors.push(e));
    let window = match request.window {
        ScheduleWindow::PreviousDay => windows::WindowKind::PreviousDay,
        ScheduleWindow::PreviousWeek => windows::WindowKind::PreviousWeek,
        ScheduleWindow::PreviousMonth => windows::WindowKind::PreviousMonth,
    };
    match (zone, at, every) {
        (Ok(zone), Ok(at), Ok(every)) if errors.is_empty() => Ok(Plan { cadence: windows::Cadence { every, at }, window, zone }),
        _ => Err(errors),
    }
}

fn parse_at(text: &str) -> Option<jiff::civil::Time> {
    let (h, m) = text.split_once(':')?;
    if h.len() != 2 || m.len() != 2 {
        return None;
    }
    jiff::civil::Time::new(h.parse().ok()?, m.parse().ok()?, 0, 0).ok()
}

fn every(cadence: &Cadence) -> Result<windows::Every, FieldError> {
    use jiff::civil::Weekday;
    match (cadence.every, cadence.weekday, &cadence.day) {
        (Every::Day, None, None) => Ok(windows::Every::Day),
        (Every::Week, Some(n @ 1..=7), None) => Ok(windows::Every::Week(Weekday::from_monday_one_offset(n as i8).unwrap_or(Weekday::Monday))),
        (Every::Week, _, None) => Err(field("/cadence/weekday", "with week: 1 (Monday) to 7 (Sunday)")),
        (Every::Month, None, Some(MonthDay::Day(n @ 1..=28))) => Ok(windows::Every::Month(Some(*n as i8))),
        (Every::Month, None, Some(MonthDay::Named(last))) if last == "last" => Ok(windows::Every::Month(None)),
        (Every::Month, None, _) => Err(field("/cadence/day", "with month: 1 to 28, or \"last\"")),
        (_, Some(_), _) => Err(field("/cadence/weekday", "only with week")),
        (_, _, Some(_)) => Err(field("/cadence/day", "only with month")),
    }
}

/// The export a run of `request` makes for `window`.
pub fn export_request(request: &ScheduleRequest, window: &windows::Window) -> app::ExportRequest {
    app::ExportRequest {
        report: request.report.clone(),
        filters: request.filters.clone(),
        columns: request.columns.clone(),
        format: request.format,
        time_range: app::TimeRange::Dates { from: window.from.to_string(), to: window.to.to_string() },
        timezone: request.timezone.clone(),
        options: request.options.clone(),
        consistency: app::Consistency::default(),
        notify: request.notify.clone(),
    }
}

/// The role a schedule's service identity is given.
fn role_of(role: ScheduleRole) -> Role {
    match role {
        ScheduleRole::Analyst => Role::Analyst,
        ScheduleRole::Admin => Role::Admin,
    }
}

/// Checks a request as a create would: its plan, and its export as the service identity would
/// make it (report, filters, columns, options) with the lesser of its role and the owner's.
fn validate(state: &ServiceContext, actor: &Actor, raw: Value) -> Result<ScheduleRequest, AppError> {
    let mut errors = Vec::new();
    crate::exports::validate::control_characters(&raw, "", &mut errors);
    if !errors.is_empty() {
        return Err(AppError::InvalidRequest(errors));
    }
    let request: ScheduleRequest = crate::service::requests::typed_request(raw)?;
    let mut plan = plan(&request);
    let unsendable = crate::notifications::check(request.notify.as_ref(), &state.config);
    if !unsendable.is_empty() {
        plan = Err(plan.err().unwrap_or_default().into_iter().chain(unsendable).collect());
    }
    let plan = plan.map_err(AppError::InvalidRequest)?;
    let role = role_of(request.role).lesser(actor.role_now()?);
    let today = jiff::Timestamp::now().to_zoned(plan.zone.clone()).date();
    let sample = export_request(&request, &plan.window.window(today, &plan.zone));
    crate::exports::validate::validate(&state.config.catalog, &sample, role)?;
    Ok(request)
}

/// Creates a schedule owned by `actor` under `key`, or answers the one `key` made (`true`).
pub async fn create(state: &ServiceContext, actor: &Actor, key: &str, raw: Value) -> Result<(ScheduleView, bool), AppError> {
    ensure_admin(actor)?;
    // The request with its defaults filled in, so a retry that spells a default out is the same
    // intent; a body that does not read is fingerprinted as sent.
    let typed = crate::service::requests::typed_request::<ScheduleRequest>(raw.clone()).ok().and_then(|r| serde_json::to_value(r).ok());
    let fingerprint = crate::service::canonical::fingerprint(typed.as_ref().unwrap_or(&raw));
    if let Some(existing) = find_by_key(&state.db, actor, key).await? {
        return replay(state, &existing, &fingerprint).await;
    }
    let request = validate(state, actor, raw)?;
    let id = format!("sch_{}", uuid::Uuid::now_v7().simple());
    let service_user = format!("usr_{}", uuid::Uuid::now_v7().simple());
    let json = serde_json::to_string(&request).map_err(|e| AppError::Internal(e.to_string()))?;
    let txn = crate::job_store::begin_write(&state.db).await?;
    let now = crate::db::db_now_ms(&txn).await?;
    users::ActiveModel {
        id: Set(service_user.clone()),
        tenant_id: Set(actor.tenant_id.clone()),
        email: Set(format!("schedule:{id}")),
        password_hash: Set(NO_PASSWORD.to_owned()),
        role: Set(role_of(request.role).as_str().to_owned()),
        active: Set(true),
        created_at: Set(now),
        oidc_issuer: Set(None),
        oidc_subject: Set(None),
        contact_email: Set(None),
        role_pinned: Set(true),
        schedule_id: Set(Some(id.clone())),
    }
    .insert(&txn)
    .await?;
    let inserted = schedules::ActiveModel {
        id: Set(id.clone()),
        tenant_id: Set(actor.tenant_id.clone()),
        owner_id: Set(actor.user_id.clone()),
        service_user_id: Set(service_user),
        idempotency_key: Set(key.to_owned()),
        fingerprint: Set(fingerprint.clone()),
        revision: Set(1),
        paused: Set(false),
        paused_reason: Set(None),
        paused_at: Set(None),
        skip_from: Set(None),
        skip_until: Set(None),
        active_since: Set(now),
        last_due: Set(None),
        deleted_at: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(&txn)
    .await;
    if inserted.is_err() {
        // Another request with the same key won the race: answer what it made.
        txn.rollback().await?;
        let existing = find_by_key(&state.db, actor, key).await?.ok_or(AppError::Busy)?;
        return replay(state, &existing, &fingerprint).await;
    }
    schedule_revisions::ActiveModel { schedule_id: Set(id.clone()), revision: Set(1), request: Set(json), effective_from: Set(now) }.insert(&txn).await?;
    txn.commit().await?;
    tracing::info!(schedule = %id, owner = %actor.user_id, "schedule created");
    Ok((show(state, actor, &id).await?, false))
}

async fn find_by_key<C: ConnectionTrait>(db: &C, actor: &Actor, key: &str) -> Result<Option<schedules::Model>, AppError> {
    Ok(schedules::Entity::find()
        .filter(schedules::Column::TenantId.eq(&actor.tenant_id))
        .filter(schedules::Column::OwnerId.eq(&actor.user_id))
        .filter(schedules::Column::IdempotencyKey.eq(key))
        .one(db)
        .await?)
}

async fn replay(state: &ServiceContext, existing: &schedules::Model, fingerprint: &str) -> Result<(ScheduleView, bool), AppError> {
    if existing.fingerprint != fingerprint {
        return Err(AppError::IdempotencyKeyReused { operation_ref: format!("/api/schedules/{}", existing.id) });
    }
    Ok((view(&state.db, existing, false).await?, true))
}

/// The tenant's schedule `id`, for an admin of the tenant.
async fn find<C: ConnectionTrait>(db: &C, actor: &Actor, id: &str) -> Result<schedules::Model, AppError> {
    schedules::Entity::find_by_id(id.to_owned()).filter(schedules::Column::TenantId.eq(&actor.tenant_id)).one(db).await?.ok_or(AppError::ScheduleNotFound)
}

/// The tenant's schedule `id`, its row held until the transaction ends (on PostgreSQL; SQLite's
/// write transaction holds the whole database).
async fn find_locked<C: ConnectionTrait>(db: &C, actor: &Actor, id: &str) -> Result<schedules::Model, AppError> {
    schedules::Entity::find_by_id(id.to_owned())
        .filter(schedules::Column::TenantId.eq(&actor.tenant_id))
        .lock_exclusive()
        .one(db)
        .await?
        .ok_or(AppError::ScheduleNotFound)
}

/// The revision of schedule `id` current at `at` (ms), or the first.
pub async fn revision_at<C: ConnectionTrait>(db: &C, id: &str, at: i64) -> Result<Option<schedule_revisions::Model>, sea_orm::DbErr> {
    let current = schedule_revisions::Entity::find()
        .filter(schedule_revisions::Column::ScheduleId.eq(id))
        .filter(schedule_revisions::Column::EffectiveFrom.lte(at))
        .order_by_desc(schedule_revisions::Column::Revision)
        .one(db)
        .await?;
    match current {
        Some(r) => Ok(Some(r)),
        None => schedule_revisions::Entity::find().filter(schedule_revisions::Column::ScheduleId.eq(id)).order_by_asc(schedule_revisions::Column::Revision).one(db).await,
    }
}

/// A schedule as the API shows it, with its recent runs when `runs`.
async fn view<C: ConnectionTrait>(db: &C, s: &schedules::Model, runs: bool) -> Result<ScheduleView, AppError> {
    let revision = schedule_revisions::Entity::find_by_id((s.id.clone(), s.revision)).one(db).await?.ok_or_else(|| AppError::Internal(format!("{} has no revision {}", s.id, s.revision)))?;
    let request: ScheduleRequest = serde_json::from_str(&revision.request).map_err(|e| AppError::Internal(format!("{}'s request: {e}", s.id)))?;
    let owner: Option<String> = users::Entity::find_by_id(s.owner_id.clone()).select_only().column(users::Column::Email).into_tuple().one(db).await?;
    let status = if s.deleted_at.is_some() {
        "deleted"
    } else if s.paused {
        "paused"
    } else {
        "active"
    };
    let next_due = match (status, plan(&request)) {
        ("active", Ok(plan)) => {
            let now = jiff::Timestamp::now();
            let after = now.checked_add(jiff::SignedDuration::from_hours(24 * 62)).unwrap_or(now);
            plan.cadence.latest(&plan.zone, now, after, 64).first().map(|(due, _)| due.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        }
        _ => None,
    };
    let runs = if runs { Some(recent_runs(db, s).await?) } else { None };
    Ok(ScheduleView {
        id: s.id.clone(),
        revision: s.revision,
        status: status.to_owned(),
        paused_reason: s.paused_reason.clone(),
        owner: owner.unwrap_or_default(),
        service_identity: format!("schedule:{}", s.id),
        request,
        next_due,
        runs,
        created_at: crate::clock::rfc3339(s.created_at),
    })
}

async fn recent_runs<C: ConnectionTrait>(db: &C, s: &schedules::Model) -> Result<Vec<ScheduleRun>, AppError> {
    let prefix = run_key(&s.id, "");
    let rows = jobs::Entity::find()
        .filter(jobs::Column::TenantId.eq(&s.tenant_id))
        .filter(jobs::Column::ActorId.eq(&s.service_user_id))
        .order_by_desc(jobs::Column::CreatedAt)
        .order_by_desc(jobs::Column::Id)
        .limit(RECENT_RUNS)
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .map(|m| ScheduleRun {
            window_start: m.idempotency_key.strip_prefix(&prefix).unwrap_or(&m.idempotency_key).to_owned(),
            id: m.id,
            status: m.status,
            created_at: crate::clock::rfc3339(m.created_at),
        })
        .collect())
}

/// `GET /api/schedules/{id}`.
pub async fn show(state: &ServiceContext, actor: &Actor, id: &str) -> Result<ScheduleView, AppError> {
    ensure_admin(actor)?;
    let s = find(&state.db, actor, id).await?;
    view(&state.db, &s, true).await
}

/// `GET /api/schedules`: the tenant's schedules, newest first, deleted ones left out.
pub async fn list(state: &ServiceContext, actor: &Actor) -> Result<ScheduleList, AppError> {
    ensure_admin(actor)?;
    let rows = schedules::Entity::find()
        .filter(schedules::Column::TenantId.eq(&actor.tenant_id))
        .filter(schedules::Column::DeletedAt.is_null())
        .order_by_desc(schedules::Column::CreatedAt)
        .order_by_desc(schedules::Column::Id)
        .limit(500)
        .all(&state.db)
        .await?;
    let mut items = Vec::with_capacity(rows.len());
    for s in &rows {
        items.push(view(&state.db, s, false).await?);
    }
    Ok(ScheduleList { items })
}

/// `PUT /api/schedules/{id}`: a new revision, current from now; a window already due runs
/// under the revision current at its due time.
pub async fn update(state: &ServiceContext, actor: &Actor, id: &str, raw: Value) -> Result<ScheduleView, AppError> {
    ensure_admin(actor)?;
    let request = validate(state, actor, raw)?;
    let json = serde_json::to_string(&request).map_err(|e| AppError::Internal(e.to_string()))?;
    let txn = crate::job_store::begin_write(&state.db).await?;
    // The row is held until the commit, and the clock read after it is: a scheduler loop reading
    // the revisions (under a share of the row) sees this one committed or not yet begun, so every
    // loop finds the same revision current at a due time.
    let s = find_locked(&txn, actor, id).await?;
    if s.deleted_at.is_some() {
        txn.rollback().await?;
        return Err(AppError::ScheduleNotFound);
    }
    let now = crate::db::db_now_ms(&txn).await?;
    let revision = s.revision + 1;
    schedule_revisions::ActiveModel { schedule_id: Set(s.id.clone()), revision: Set(revision), request: Set(json), effective_from: Set(now) }.insert(&txn).await?;
    users::Entity::update_many()
        .col_expr(users::Column::Role, sea_orm::sea_query::Expr::val(role_of(request.role).as_str()).into())
        .filter(users::Column::Id.eq(&s.service_user_id))
        .exec(&txn)
        .await?;
    let mut active: schedules::ActiveModel = s.into();
    active.revision = Set(revision);
    active.updated_at = Set(now);
    active.update(&txn).await?;
    txn.commit().await?;
    show(state, actor, id).await
}

/// `POST /api/schedules/{id}/pause` (`true`) and `…/resume` (`false`): windows that fall while
/// paused never run; those due before the pause still do.
pub async fn set_paused(state: &ServiceContext, actor: &Actor, id: &str, paused: bool) -> Result<ScheduleView, AppError> {
    ensure_admin(actor)?;
    let txn = crate::job_store::begin_write(&state.db).await?;
    let s = find_locked(&txn, actor, id).await?;
    if s.deleted_at.is_some() {
        txn.rollback().await?;
        return Err(AppError::ScheduleNotFound);
    }
    let now = crate::db::db_now_ms(&txn).await?;
    let (was_paused, paused_at) = (s.paused, s.paused_at);
    let mut active: schedules::ActiveModel = s.into();
    match (was_paused, paused) {
        (false, true) => {
            active.paused = Set(true);
            active.paused_at = Set(Some(now));
        }
        (true, false) => {
            active.paused = Set(false);
            active.paused_reason = Set(None);
            active.paused_at = Set(None);
            active.skip_from = Set(Some(paused_at.unwrap_or(now)));
            active.skip_until = Set(Some(now));
        }
        _ => {}
    }
    active.updated_at = Set(now);
    active.update(&txn).await?;
    txn.commit().await?;
    show(state, actor, id).await
}

/// `DELETE /api/schedules/{id}`: no more runs; its runs stay readable.
pub async fn delete(state: &ServiceContext, actor: &Actor, id: &str) -> Result<(), AppError> {
    ensure_admin(actor)?;
    let txn = crate::job_store::begin_write(&state.db).await?;
    let s = find_locked(&txn, actor, id).await?;
    if s.deleted_at.is_none() {
        let now = crate::db::db_now_ms(&txn).await?;
        let mut active: schedules::ActiveModel = s.into();
        active.deleted_at = Set(Some(now));
        active.updated_at = Set(now);
        active.update(&txn).await?;
    }
    txn.commit().await?;
    Ok(())
}
