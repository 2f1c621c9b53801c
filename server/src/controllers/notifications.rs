//! `/api/notifications`: the deliveries of an operation's notifications (contract §15).

use crate::auth::Actor;
use crate::error::{AppError, FieldError};
use crate::notifications;
use crate::state::AppState;
use app::schedules::NotificationList;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::Json;
use serde::Deserialize;

/// The query of `GET /api/notifications`.
#[derive(Debug, Deserialize)]
pub struct NotificationParams {
    /// The operation's id.
    operation: Option<String>,
}

/// `GET /api/notifications?operation=ID`: the operation's deliveries with their attempts.
#[utoipa::path(get, path = "/api/notifications", tag = "notifications", operation_id = "list_notifications",
    params(("operation" = String, Query, description = "exp_… or imp_…: an operation the caller may read")),
    responses((status = 200, description = "Its deliveries, newest first, each with its attempts", body = NotificationList),
        (status = 401, description = "not signed in", body = app::Problem, content_type = "application/problem+json"),
        (status = 403, description = "cross-origin", body = app::Problem, content_type = "application/problem+json"),
        (status = 404, description = "no such operation of the caller's", body = app::Problem, content_type = "application/problem+json"),
        (status = 422, description = "invalid-request: no operation named", body = app::Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy: a bounded wait gave up", body = app::Problem, content_type = "application/problem+json")))]
pub async fn list(State(state): State<AppState>, actor: Actor, params: Result<Query<NotificationParams>, QueryRejection>) -> Result<Json<NotificationList>, AppError> {
    let Query(params) = params.map_err(|_| AppError::InvalidRequest(vec![FieldError::new("", "unreadable query string")]))?;
    let operation = params.operation.filter(|o| !o.is_empty()).ok_or_else(|| AppError::InvalidRequest(vec![FieldError::new("/operation", "the operation's id, exp_… or imp_…")]))?;
    Ok(Json(notifications::for_operation(&state, &actor, &operation).await?))
}
