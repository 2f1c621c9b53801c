//! `/api/session`: log in, who am I, log out.

use super::body::RawBody;
use crate::auth::{self, Actor, AuthVia};
use crate::entities::users;
use crate::error::AppError;
use crate::server::AppState;
use app::{LoginRequest, SessionView};
use axum::extract::{ConnectInfo, State};
use axum::http::{header, request::Parts, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use std::net::SocketAddr;

fn behind_tls(parts: &Parts) -> bool {
    parts.headers.get("x-forwarded-proto").is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"))
}

fn with_cookie(status: StatusCode, cookie: String) -> Result<Response, AppError> {
    let mut resp = status.into_response();
    let value = HeaderValue::from_str(&cookie).map_err(|e| AppError::Internal(e.to_string()))?;
    resp.headers_mut().insert(header::SET_COOKIE, value);
    Ok(resp)
}

/// `POST /api/session`: checks the password (against a dummy hash for unknown emails) and starts a session.
#[utoipa::path(post, path = "/api/session", tag = "session", request_body = app::LoginRequest,
    responses((status = 204, description = "Signed in; the session cookie is set"), (status = 400, description = "malformed-json", body = app::Problem, content_type = "application/problem+json"), (status = 401, description = "invalid-credentials", body = app::Problem, content_type = "application/problem+json"), (status = 403, description = "cross-origin", body = app::Problem, content_type = "application/problem+json"), (status = 429, description = "rate-limited", body = app::Problem, content_type = "application/problem+json")))]
pub async fn login(State(state): State<AppState>, parts: Parts, RawBody(body): RawBody) -> Result<Response, AppError> {
    auth::require_same_origin(&parts)?;
    super::body::require_json(&parts.headers)?;
    let login: LoginRequest = serde_json::from_slice(&body).map_err(|_| AppError::MalformedJson("expected {\"email\", \"password\"}".into()))?;
    let email = login.email.trim().to_lowercase();
    let ip = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip().to_string())
        .unwrap_or_default();
    let now = state.now_ms();
    auth::throttle::reserve(&state.db, &ip, &email, now).await?;
    let user = users::Entity::find().filter(users::Column::Email.eq(&email)).one(&state.db).await?;
    let password = login.password;
    let stored = user.as_ref().map(|u| u.password_hash.clone());
    let verified = tokio::task::spawn_blocking(move || auth::verify_password_or_dummy(&password, stored.as_deref()))
        .await
        .map_err(|e| AppError::Internal(format!("password check: {e}")))?;
    let user = match user {
        Some(u) if verified && u.active => u,
        // The attempt was counted as a failure when it was reserved.
        _ => return Err(AppError::InvalidCredentials),
    };
    auth::throttle::succeeded(&state.db, &ip, &email).await?;
    let secret = auth::create_session(&state.db, &user.id, now).await?;
    with_cookie(StatusCode::NO_CONTENT, auth::session_cookie(&secret, behind_tls(&parts)))
}

/// `GET /api/session`: who is signed in.
#[utoipa::path(get, path = "/api/session", tag = "session",
    responses((status = 200, description = "Who is signed in", body = app::SessionView), (status = 401, description = "not signed in", body = app::Problem, content_type = "application/problem+json")))]
pub async fn whoami(actor: Actor) -> Json<SessionView> {
    Json(SessionView { email: actor.email, role: actor.role.as_str().to_owned(), tenant: actor.tenant_slug })
}

/// `DELETE /api/session`: ends the browser session.
#[utoipa::path(delete, path = "/api/session", tag = "session",
    responses((status = 204, description = "Signed out"), (status = 401, description = "not signed in", body = app::Problem, content_type = "application/problem+json")))]
pub async fn logout(State(state): State<AppState>, actor: Actor, parts: Parts) -> Result<Response, AppError> {
    if let AuthVia::Session(secret) = &actor.via {
        auth::revoke_session(&state.db, secret, state.now_ms()).await?;
    }
    with_cookie(StatusCode::NO_CONTENT, auth::clear_session_cookie(behind_tls(&parts)))
}
