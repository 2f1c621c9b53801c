//! `/api/schedules`: an admin's recurring exports (contract §15).

use super::body::{require_json, RawBody};
use super::ids::ScheduleIdPath;
use crate::auth::Actor;
use crate::error::AppError;
use crate::schedules;
use crate::service::key::IdempotencyKey;
use crate::state::AppState;
use app::schedules::{ScheduleList, ScheduleView};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

/// `POST /api/schedules`: 201 with the new schedule, or 200 with the one the key made.
#[utoipa::path(post, path = "/api/schedules", tag = "schedules", operation_id = "create_schedule",
    params(("Idempotency-Key" = String, Header, description = "One key per intent, as for exports")),
    request_body = app::schedules::ScheduleRequest,
    responses(
        (status = 201, description = "The new schedule", body = ScheduleView, headers(("Location" = String, description = "The schedule's URL"))),
        (status = 200, description = "The schedule this key made (Idempotent-Replayed: true)", body = ScheduleView),
        (status = 400, description = "idempotency-key-missing, idempotency-key-invalid or malformed-json", body = app::Problem, content_type = "application/problem+json"),
        (status = 401, description = "not signed in", body = app::Problem, content_type = "application/problem+json"),
        (status = 403, description = "schedule-not-permitted (not an admin), export-not-permitted or cross-origin", body = app::Problem, content_type = "application/problem+json"),
        (status = 413, description = "body-too-large", body = app::Problem, content_type = "application/problem+json"),
        (status = 415, description = "unsupported-media-type", body = app::Problem, content_type = "application/problem+json"),
        (status = 422, description = "invalid-request or idempotency-key-reused", body = app::Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy: a bounded wait gave up; nothing changed", body = app::Problem, content_type = "application/problem+json")
    ))]
pub async fn create(State(state): State<AppState>, actor: Actor, headers: HeaderMap, RawBody(body): RawBody) -> Result<Response, AppError> {
    schedules::ensure_admin(&actor)?;
    let key = IdempotencyKey::from_header_values(headers.get_all("idempotency-key").iter().map(|v| v.as_bytes()))?;
    require_json(&headers)?;
    let request = crate::service::requests::parse_json(&body)?;
    let (view, replayed) = schedules::create(&state, &actor, key.as_str(), request).await?;
    let status = if replayed { StatusCode::OK } else { StatusCode::CREATED };
    let mut resp = (status, Json(&view)).into_response();
    let location = HeaderValue::from_str(&format!("/api/schedules/{}", view.id)).map_err(|e| AppError::Internal(e.to_string()))?;
    resp.headers_mut().insert(header::LOCATION, location);
    if replayed {
        resp.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(resp)
}

/// `GET /api/schedules`: the tenant's schedules.
#[utoipa::path(get, path = "/api/schedules", tag = "schedules", operation_id = "list_schedules",
    responses((status = 200, description = "The tenant's schedules, newest first", body = ScheduleList),
        (status = 401, description = "not signed in", body = app::Problem, content_type = "application/problem+json"),
        (status = 403, description = "schedule-not-permitted (not an admin) or cross-origin", body = app::Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy: a bounded wait gave up; nothing changed", body = app::Problem, content_type = "application/problem+json")))]
pub async fn list(State(state): State<AppState>, actor: Actor) -> Result<Json<ScheduleList>, AppError> {
    Ok(Json(schedules::list(&state, &actor).await?))
}

/// `GET /api/schedules/{id}`: the schedule with its recent runs.
#[utoipa::path(get, path = "/api/schedules/{id}", tag = "schedules", operation_id = "show_schedule",
    params(("id" = String, Path, description = "sch_…")),
    responses((status = 200, description = "The schedule and its recent runs, newest first", body = ScheduleView),
        (status = 401, description = "not signed in", body = app::Problem, content_type = "application/problem+json"),
        (status = 403, description = "schedule-not-permitted (not an admin) or cross-origin", body = app::Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy: a bounded wait gave up; nothing changed", body = app::Problem, content_type = "application/problem+json"),
        (status = 404, description = "schedule-not-found", body = app::Problem, content_type = "application/problem+json")))]
pub async fn show(State(state): State<AppState>, actor: Actor, ScheduleIdPath(id): ScheduleIdPath) -> Result<Json<ScheduleView>, AppError> {
    Ok(Json(schedules::show(&state, &actor, &id).await?))
}

/// `PUT /api/schedules/{id}`: a new revision.
#[utoipa::path(put, path = "/api/schedules/{id}", tag = "schedules", operation_id = "update_schedule",
    params(("id" = String, Path, description = "sch_…")),
    request_body = app::schedules::ScheduleRequest,
    responses((status = 200, description = "The schedule at its new revision", body = ScheduleView),
        (status = 403, description = "schedule-not-permitted (not an admin), export-not-permitted or cross-origin", body = app::Problem, content_type = "application/problem+json"),
        (status = 401, description = "not signed in", body = app::Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy: a bounded wait gave up; nothing changed", body = app::Problem, content_type = "application/problem+json"),
        (status = 404, description = "schedule-not-found", body = app::Problem, content_type = "application/problem+json"),
        (status = 400, description = "malformed-json", body = app::Problem, content_type = "application/problem+json"),
        (status = 413, description = "body-too-large", body = app::Problem, content_type = "application/problem+json"),
        (status = 415, description = "unsupported-media-type", body = app::Problem, content_type = "application/problem+json"),
        (status = 422, description = "invalid-request", body = app::Problem, content_type = "application/problem+json")))]
pub async fn update(State(state): State<AppState>, actor: Actor, ScheduleIdPath(id): ScheduleIdPath, headers: HeaderMap, RawBody(body): RawBody) -> Result<Json<ScheduleView>, AppError> {
    schedules::ensure_admin(&actor)?;
    require_json(&headers)?;
    let request = crate::service::requests::parse_json(&body)?;
    Ok(Json(schedules::update(&state, &actor, &id, request).await?))
}

/// `POST /api/schedules/{id}/pause`.
#[utoipa::path(post, path = "/api/schedules/{id}/pause", tag = "schedules", operation_id = "pause_schedule",
    params(("id" = String, Path, description = "sch_…")),
    responses((status = 200, description = "The schedule, paused: its windows do not run", body = ScheduleView),
        (status = 401, description = "not signed in", body = app::Problem, content_type = "application/problem+json"),
        (status = 403, description = "schedule-not-permitted (not an admin) or cross-origin", body = app::Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy: a bounded wait gave up; nothing changed", body = app::Problem, content_type = "application/problem+json"),
        (status = 404, description = "schedule-not-found", body = app::Problem, content_type = "application/problem+json")))]
pub async fn pause(State(state): State<AppState>, actor: Actor, ScheduleIdPath(id): ScheduleIdPath) -> Result<Json<ScheduleView>, AppError> {
    Ok(Json(schedules::set_paused(&state, &actor, &id, true).await?))
}

/// `POST /api/schedules/{id}/resume`.
#[utoipa::path(post, path = "/api/schedules/{id}/resume", tag = "schedules", operation_id = "resume_schedule",
    params(("id" = String, Path, description = "sch_…")),
    responses((status = 200, description = "The schedule, active again: windows that fell while paused never run", body = ScheduleView),
        (status = 401, description = "not signed in", body = app::Problem, content_type = "application/problem+json"),
        (status = 403, description = "schedule-not-permitted (not an admin) or cross-origin", body = app::Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy: a bounded wait gave up; nothing changed", body = app::Problem, content_type = "application/problem+json"),
        (status = 404, description = "schedule-not-found", body = app::Problem, content_type = "application/problem+json")))]
pub async fn resume(State(state): State<AppState>, actor: Actor, ScheduleIdPath(id): ScheduleIdPath) -> Result<Json<ScheduleView>, AppError> {
    Ok(Json(schedules::set_paused(&state, &actor, &id, false).await?))
}

/// `DELETE /api/schedules/{id}`: no more runs; its runs stay readable.
#[utoipa::path(delete, path = "/api/schedules/{id}", tag = "schedules", operation_id = "delete_schedule",
    params(("id" = String, Path, description = "sch_…")),
    responses((status = 204, description = "Deleted"),
        (status = 401, description = "not signed in", body = app::Problem, content_type = "application/problem+json"),
        (status = 403, description = "schedule-not-permitted (not an admin) or cross-origin", body = app::Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy: a bounded wait gave up; nothing changed", body = app::Problem, content_type = "application/problem+json"),
        (status = 404, description = "schedule-not-found", body = app::Problem, content_type = "application/problem+json")))]
pub async fn delete(State(state): State<AppState>, actor: Actor, ScheduleIdPath(id): ScheduleIdPath) -> Result<StatusCode, AppError> {
    schedules::delete(&state, &actor, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
