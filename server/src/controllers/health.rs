//! Liveness and readiness.

use crate::server::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use sea_orm::{ConnectionTrait, Statement};

/// `GET /healthz`: the process is up.
pub async fn healthz() -> &'static str {
    "ok"
}

/// `GET /readyz`: the database answers.
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
