//! Liveness and readiness.

use crate::server::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use sea_orm::{ConnectionTrait, Statement};

/// `GET /healthz`: the process is up.
#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, description = "The process is up", body = String)))]
pub async fn healthz() -> &'static str {
    "ok"
}

/// `GET /readyz`: the database answers.
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses((status = 200, description = "Ready", body = String), (status = 503, description = "The database does not answer", body = String)))]
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, &'static str) {
    let backend = state.db.get_database_backend();
    match state.db.query_one_raw(Statement::from_string(backend, "SELECT 1")).await {
        Ok(_) => (StatusCode::OK, "ready"),
        Err(e) => {
            tracing::warn!(error = %e, "readiness: database unavailable");
            (StatusCode::SERVICE_UNAVAILABLE, "database unavailable")
        }
    }
}
