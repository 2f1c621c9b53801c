//! Liveness and readiness.

use crate::error::AppError;
use axum::http::header;
use axum::response::IntoResponse;
use crate::state::AppState;
use axum::extract::State;
use sea_orm::{ConnectionTrait, Statement};

/// `GET /healthz`: the process is up.
#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, description = "The process is up", body = String)))]
pub async fn healthz() -> &'static str {
    "ok"
}

/// The content type of Prometheus' text format.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `GET /metrics`: Prometheus text.
#[utoipa::path(get, path = "/metrics", tag = "health", responses((status = 200, description = "Prometheus text format", body = String, content_type = "text/plain")))]
pub async fn metrics(State(state): State<AppState>) -> Result<impl IntoResponse, AppError> {
    let text = state.metrics.render(&state.db).await?;
    Ok(([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], text))
}

/// `GET /readyz`: the database and every configured object store answer.
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses((status = 200, description = "Ready", body = String),
        (status = 503, description = "not-ready: the detail names the database or the store that does not answer", body = app::Problem, content_type = "application/problem+json")))]
pub async fn readyz(State(state): State<AppState>) -> Result<&'static str, AppError> {
    let backend = state.db.get_database_backend();
    if let Err(e) = state.db.query_one_raw(Statement::from_string(backend, "SELECT 1")).await {
        tracing::warn!(error = %e, "readiness: database unavailable");
        return Err(AppError::NotReady("the database does not answer".into()));
    }
    for (name, store) in state.stores.configured() {
        let checked = match store {
            Ok(store) => store.check().await.map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        if let Err(e) = checked {
            tracing::warn!(store = %name, error = %e, "readiness: object store unavailable");
            return Err(AppError::NotReady(format!("the object store \"{name}\" does not answer")));
        }
    }
    Ok("ready")
}
