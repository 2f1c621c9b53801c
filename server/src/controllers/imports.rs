//! `/api/imports`: create, read, list and cancel imports, and their reports (SPEC §10).

use super::body::{require_json, RawBody};
use super::ids::ImportIdPath;
use crate::auth::Actor;
use crate::error::{AppError, FieldError};
use crate::service::key::IdempotencyKey;
use crate::service::requests::parse_json;
use crate::imports::service::{self, CancelOutcome, CreateOutcome};
use crate::imports::uploads::ensure_may_import;
use crate::state::AppState;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;


/// `POST /api/imports`: 202 with the new or replayed import.
#[utoipa::path(post, path = "/api/imports", tag = "imports", operation_id = "create_import",
    params(("Idempotency-Key" = String, Header, description = "One key per intent: an sf-string or a raw token of %x21-7E, 1-255 characters",
        pattern = r#"^("([\x20\x21\x23-\x5B\x5D-\x7E]|\\["\\]){1,255}"|[\x21\x23-\x7E]{1,255})$"#)),
    request_body = app::ImportRequest,
    responses(
        (status = 202, description = "A new import, or the one the key is bound to (then with Idempotent-Replayed: true)", body = app::ImportView,
            headers(("Location" = String, description = "The import's status URL"), ("Idempotent-Replayed" = String, description = "true on a replay")),
            links(
                ("ShowImport" = (operation_id = "show_import", parameters(("id" = "$response.body#/id")), description = "The import's state")),
                ("CancelImport" = (operation_id = "cancel_import", parameters(("id" = "$response.body#/id")), description = "Cancel it")),
                ("ImportReport" = (operation_id = "import_report", parameters(("id" = "$response.body#/id")), description = "Its report, once it has one"))
            )),
        (status = 400, description = "idempotency-key-missing, idempotency-key-invalid or malformed-json", body = app::Problem, content_type = "application/problem+json"),
        (status = 401, description = "not signed in", body = app::Problem, content_type = "application/problem+json"),
        (status = 403, description = "import-not-permitted or cross-origin", body = app::Problem, content_type = "application/problem+json"),
        (status = 413, description = "body-too-large", body = app::Problem, content_type = "application/problem+json"),
        (status = 415, description = "unsupported-media-type", body = app::Problem, content_type = "application/problem+json"),
        (status = 422, description = "invalid-request, upload-not-found or idempotency-key-reused", body = app::Problem, content_type = "application/problem+json"),
        (status = 429, description = "too-many-exports: too many unfinished imports", body = app::Problem, content_type = "application/problem+json"),
        (status = 500, description = "internal", body = app::Problem, content_type = "application/problem+json"),
        (status = 503, description = "creation-paused or busy; Retry-After", body = app::Problem, content_type = "application/problem+json")
    ))]
pub async fn create(State(state): State<AppState>, actor: Actor, headers: HeaderMap, RawBody(body): RawBody) -> Result<Response, AppError> {
    ensure_may_import(&actor)?;
    let key = IdempotencyKey::from_header_values(headers.get_all("idempotency-key").iter().map(|v| v.as_bytes()))?;
    require_json(&headers)?;
    let request = parse_json(&body)?;
    let (view, replayed) = match service::create_import(&state, &actor, &key, request).await? {
        CreateOutcome::Created(v) => (v, false),
        CreateOutcome::Replayed(v) => (v, true),
    };
    let mut resp = (StatusCode::ACCEPTED, Json(&view)).into_response();
    let location = HeaderValue::from_str(&format!("/api/imports/{}", view.id)).map_err(|e| AppError::Internal(e.to_string()))?;
    resp.headers_mut().insert(header::LOCATION, location);
    if replayed {
        resp.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(resp)
}

/// `GET /api/imports/{id}`: the actor's import; `Retry-After: 1` while it is not terminal.
#[utoipa::path(get, path = "/api/imports/{id}", tag = "imports", operation_id = "show_import",
    params(("id" = String, Path, description = "imp_…")),
    responses((status = 200, description = "The import; Retry-After: 1 while not terminal", body = app::ImportView),
        (status = 401, description = "not signed in", body = app::Problem, content_type = "application/problem+json"),
        (status = 404, description = "import-not-found", body = app::Problem, content_type = "application/problem+json")))]
pub async fn show(State(state): State<AppState>, actor: Actor, ImportIdPath(id): ImportIdPath) -> Result<Response, AppError> {
    let view = service::get_import(&state, &actor, &id).await?;
    let mut resp = Json(&view).into_response();
    if !view.status.is_terminal() {
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    Ok(resp)
}

/// The query of `GET /api/imports`.
#[derive(Debug, serde::Deserialize)]
pub struct ListParams {
    /// Page size, 1–100 (default 20).
    pub limit: Option<String>,
    /// Where to continue, from `next_cursor`.
    pub cursor: Option<String>,
}

/// `GET /api/imports`: the actor's imports, newest first.
#[utoipa::path(get, path = "/api/imports", tag = "imports", operation_id = "list_imports",
    params(("limit" = Option<u32>, Query, description = "1-100, default 20", minimum = 1, maximum = 100), ("cursor" = Option<String>, Query, description = "next_cursor of the previous page")),
    responses((status = 200, description = "The actor's imports, newest first", body = app::ImportList),
        (status = 401, description = "not signed in", body = app::Problem, content_type = "application/problem+json"),
        (status = 422, description = "invalid-request: bad limit or cursor", body = app::Problem, content_type = "application/problem+json")))]
pub async fn list(State(state): State<AppState>, actor: Actor, params: Result<Query<ListParams>, QueryRejection>) -> Result<Json<app::ImportList>, AppError> {
    let Query(params) = params.map_err(|_| AppError::InvalidRequest(vec![FieldError::new("", "unreadable query string")]))?;
    Ok(Json(service::list_imports(&state, &actor, params.limit.as_deref(), params.cursor.as_deref()).await?))
}

/// `POST /api/imports/{id}/cancel`: 200 cancelled, 202 cancel_requested, 409 when finished.
#[utoipa::path(post, path = "/api/imports/{id}/cancel", tag = "imports", operation_id = "cancel_import",
    params(("id" = String, Path, description = "imp_…")),
    responses((status = 200, description = "cancelled", body = app::ImportView), (status = 202, description = "cancel_requested", body = app::ImportView),
        (status = 401, description = "not signed in", body = app::Problem, content_type = "application/problem+json"),
        (status = 403, description = "cross-origin", body = app::Problem, content_type = "application/problem+json"),
        (status = 404, description = "import-not-found", body = app::Problem, content_type = "application/problem+json"),
        (status = 409, description = "export-already-finished", body = app::Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy; Retry-After", body = app::Problem, content_type = "application/problem+json")))]
pub async fn cancel(State(state): State<AppState>, actor: Actor, ImportIdPath(id): ImportIdPath) -> Result<Response, AppError> {
    Ok(match service::cancel_import(&state, &actor, &id).await? {
        CancelOutcome::Cancelled(view) => (StatusCode::OK, Json(view)).into_response(),
        CancelOutcome::Requested(view) => (StatusCode::ACCEPTED, Json(view)).into_response(),
    })
}

/// `GET /api/imports/{id}/report`: 303 to a fresh signed link to the report.
#[utoipa::path(get, path = "/api/imports/{id}/report", tag = "imports", operation_id = "import_report",
    params(("id" = String, Path, description = "imp_…")),
    responses((status = 303, description = "To a freshly minted link to the report", headers(("Location" = String))),
        (status = 401, description = "not signed in", body = app::Problem, content_type = "application/problem+json"),
        (status = 403, description = "permission-revoked", body = app::Problem, content_type = "application/problem+json"),
        (status = 404, description = "import-not-found", body = app::Problem, content_type = "application/problem+json"),
        (status = 409, description = "export-not-ready: no report yet", body = app::Problem, content_type = "application/problem+json"),
        (status = 410, description = "artifact-expired", body = app::Problem, content_type = "application/problem+json")))]
pub async fn report(State(state): State<AppState>, actor: Actor, ImportIdPath(id): ImportIdPath) -> Result<Response, AppError> {
    super::downloads::see_other(&service::report_download(&state, &actor, &id).await?)
}
