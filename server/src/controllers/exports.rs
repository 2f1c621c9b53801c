//! `/api/exports`: create and read export operations.

use super::body::{require_json, RawBody};
use crate::auth::Actor;
use crate::error::AppError;
use crate::error::FieldError;
use crate::service::key::IdempotencyKey;
use crate::exports::service::{self, CancelOutcome, CreateOutcome, ExportList};
use crate::state::AppState;
use axum::extract::rejection::QueryRejection;
use super::ids::ExportIdPath;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

fn location(id: &str) -> Result<HeaderValue, AppError> {
    HeaderValue::from_str(&format!("/api/exports/{id}")).map_err(|e| AppError::Internal(e.to_string()))
}

/// `POST /api/exports`: 202 with the new or replayed operation.
#[utoipa::path(post, path = "/api/exports", tag = "exports",
    params(("Idempotency-Key" = String, Header, description = "One key per intent: an sf-string or a raw token of %x21-7E, 1-255 characters",
        pattern = r#"^("([\x20\x21\x23-\x5B\x5D-\x7E]|\\["\\]){1,255}"|[\x21\x23-\x7E]{1,255})$"#)),
    request_body = app::ExportRequest,
    responses(
        (status = 202, description = "A new operation, or the one the key is bound to (then with Idempotent-Replayed: true)", body = app::ExportView,
            headers(("Location" = String, description = "The operation's status URL"), ("Idempotent-Replayed" = String, description = "true on a replay")),
            links(
                ("ShowExport" = (operation_id = "show", parameters(("id" = "$response.body#/id")), description = "The operation's state")),
                ("CancelExport" = (operation_id = "cancel", parameters(("id" = "$response.body#/id")), description = "Cancel it")),
                ("DownloadExport" = (operation_id = "download", parameters(("id" = "$response.body#/id")), description = "Its file, once ready"))
            )),
        (status = 400, description = "idempotency-key-missing, idempotency-key-invalid or malformed-json", body = app::Problem, content_type = "application/problem+json"), (status = 401, description = "not signed in", body = app::Problem, content_type = "application/problem+json"), (status = 403, description = "export-not-permitted or cross-origin", body = app::Problem, content_type = "application/problem+json"), (status = 405, description = "method-not-allowed", body = app::Problem, content_type = "application/problem+json"), (status = 413, description = "body-too-large", body = app::Problem, content_type = "application/problem+json"), (status = 415, description = "unsupported-media-type", body = app::Problem, content_type = "application/problem+json"), (status = 422, description = "invalid-request or idempotency-key-reused", body = app::Problem, content_type = "application/problem+json"), (status = 429, description = "too-many-exports", body = app::Problem, content_type = "application/problem+json"), (status = 404, description = "not-found", body = app::Problem, content_type = "application/problem+json"), (status = 500, description = "internal", body = app::Problem, content_type = "application/problem+json"),
        (status = 503, description = "creation-paused (exportd drain) or busy (a bounded wait gave up; nothing changed); Retry-After", body = app::Problem, content_type = "application/problem+json")
    ))]
pub async fn create(State(state): State<AppState>, actor: Actor, headers: HeaderMap, RawBody(body): RawBody) -> Result<Response, AppError> {
    service::ensure_may_export(&actor)?;
    let key = IdempotencyKey::from_header_values(headers.get_all("idempotency-key").iter().map(|v| v.as_bytes()))?;
    require_json(&headers)?;
    let request = crate::service::requests::parse_json(&body)?;
    let outcome = service::create_export(&state, &actor, &key, request).await?;
    let (view, replayed) = match outcome {
        CreateOutcome::Created(v) => (v, false),
        CreateOutcome::Replayed(v) => (v, true),
    };
    let mut resp = (StatusCode::ACCEPTED, Json(&view)).into_response();
    resp.headers_mut().insert(header::LOCATION, location(&view.id)?);
    if replayed {
        resp.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(resp)
}

/// `GET /api/exports/{id}`: the actor's export; `Retry-After: 1` while it is not terminal.
#[utoipa::path(get, path = "/api/exports/{id}", tag = "exports",
    params(("id" = String, Path, description = "exp_…")),
    responses((status = 200, description = "The export; Retry-After: 1 while not terminal", body = app::ExportView), (status = 401, description = "not signed in", body = app::Problem, content_type = "application/problem+json"), (status = 404, description = "export-not-found", body = app::Problem, content_type = "application/problem+json")))]
pub async fn show(State(state): State<AppState>, actor: Actor, ExportIdPath(id): ExportIdPath) -> Result<Response, AppError> {
    let view = service::get_export(&state, &actor, &id).await?;
    let mut resp = Json(&view).into_response();
    if !view.status.is_terminal() {
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    Ok(resp)
}

/// The query of `GET /api/exports`.
#[derive(Debug, serde::Deserialize)]
pub struct ListParams {
    /// Page size, 1–100 (default 20).
    pub limit: Option<String>,
    /// Where to continue, from `next_cursor`.
    pub cursor: Option<String>,
}

/// `GET /api/exports`: the actor's exports, newest first.
#[utoipa::path(get, path = "/api/exports", tag = "exports",
    params(("limit" = Option<u32>, Query, description = "1-100, default 20", minimum = 1, maximum = 100), ("cursor" = Option<String>, Query, description = "next_cursor of the previous page")),
    responses((status = 200, description = "The actor's exports, newest first", body = ExportList), (status = 401, description = "not signed in", body = app::Problem, content_type = "application/problem+json"), (status = 422, description = "invalid-request: bad limit or cursor", body = app::Problem, content_type = "application/problem+json")))]
pub async fn list(
    State(state): State<AppState>,
    actor: Actor,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Result<Json<ExportList>, AppError> {
    let Query(params) = params.map_err(|_| AppError::InvalidRequest(vec![FieldError::new("", "unreadable query string")]))?;
    Ok(Json(service::list_exports(&state, &actor, params.limit.as_deref(), params.cursor.as_deref()).await?))
}

/// `POST /api/exports/{id}/cancel`: 200 cancelled, 202 cancel_requested, 409 when finished.
#[utoipa::path(post, path = "/api/exports/{id}/cancel", tag = "exports",
    params(("id" = String, Path, description = "exp_…")),
    responses((status = 200, description = "cancelled", body = app::ExportView), (status = 202, description = "cancel_requested", body = app::ExportView),
        (status = 401, description = "not signed in", body = app::Problem, content_type = "application/problem+json"), (status = 403, description = "cross-origin", body = app::Problem, content_type = "application/problem+json"), (status = 404, description = "export-not-found", body = app::Problem, content_type = "application/problem+json"), (status = 409, description = "export-already-finished", body = app::Problem, content_type = "application/problem+json"), (status = 503, description = "busy: another process holds the export for now; nothing changed; Retry-After", body = app::Problem, content_type = "application/problem+json")))]
pub async fn cancel(State(state): State<AppState>, actor: Actor, ExportIdPath(id): ExportIdPath) -> Result<Response, AppError> {
    Ok(match service::cancel_export(&state, &actor, &id).await? {
        CancelOutcome::Cancelled(view) => (StatusCode::OK, Json(view)).into_response(),
        CancelOutcome::Requested(view) => (StatusCode::ACCEPTED, Json(view)).into_response(),
    })
}
