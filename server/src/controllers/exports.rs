//! `/api/exports`: create and read export operations.

use super::body::RawBody;
use crate::auth::Actor;
use crate::error::AppError;
use crate::exports::service::{self, CreateOutcome};
use crate::server::AppState;
use axum::extract::{Path, State};
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
