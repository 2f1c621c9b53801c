//! `/api/exports`: create and read export operations.

use super::body::RawBody;
use crate::auth::Actor;
use crate::error::AppError;
use crate::error::FieldError;
use crate::exports::service::{self, CancelOutcome, CreateOutcome};
use crate::server::AppState;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

fn location(id: &str) -> Result<HeaderValue, AppError> {
    HeaderValue::from_str(&format!("/api/exports/{id}")).map_err(|e| AppError::Internal(e.to_string()))
}

/// `POST /api/exports`: 202 with the new or replayed operation.
pub async fn create(State(state): State<AppState>, actor: Actor, headers: HeaderMap, RawBody(body): RawBody) -> Result<Response, AppError> {
    let outcome = service::create_export(&state, &actor, &headers, &body).await?;
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
pub async fn show(State(state): State<AppState>, actor: Actor, Path(id): Path<String>) -> Result<Response, AppError> {
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
pub async fn list(
    State(state): State<AppState>,
    actor: Actor,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Result<Json<serde_json::Value>, AppError> {
    let Query(params) = params.map_err(|_| AppError::InvalidRequest(vec![FieldError::new("", "unreadable query string")]))?;
    let page = service::list_exports(&state, &actor, params.limit.as_deref(), params.cursor.as_deref()).await?;
    Ok(Json(serde_json::json!({"items": page.items, "next_cursor": page.next_cursor})))
}

/// `POST /api/exports/{id}/cancel`: 200 cancelled, 202 cancel_requested, 409 when finished.
pub async fn cancel(State(state): State<AppState>, actor: Actor, Path(id): Path<String>) -> Result<Response, AppError> {
    Ok(match service::cancel_export(&state, &actor, &id).await? {
        CancelOutcome::Cancelled(view) => (StatusCode::OK, Json(view)).into_response(),
        CancelOutcome::Requested(view) => (StatusCode::ACCEPTED, Json(view)).into_response(),
    })
}
