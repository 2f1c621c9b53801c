//! `/api/session`: log in, who am I, log out.

use super::body::RawBody;
use crate::auth::{self, Actor};
use crate::entities::users;
use crate::error::AppError;
use crate::state::AppState;
use app::{LoginRequest, SessionView};
use axum::extract::State;
use axum::http::{header, request::Parts, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};

fn with_cookie(status: StatusCode, cookie: String) -> Result<Response, AppError> {
    let mut resp = status.into_response();
    let value = HeaderValue::from_str(&cookie).map_err(|e| AppError::Internal(e.to_string()))?;
    resp.headers_mut().insert(header::SET_COOKIE, value);
    Ok(resp)
}

/// How long a login waits for a free password check before it answers 503 `busy`.
pub const PASSWORD_CHECK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// `POST /api/session`: checks the password (against a dummy hash for unknown emails) and starts a session.
#[utoipa::path(post, path = "/api/session", tag = "session", request_body = app::LoginRequest,
    responses((status = 204, description = "Signed in; the session cookie is set"), (status = 400, description = "malformed-json", body = app::Problem, content_type = "application/problem+json"), (status = 401, description = "invalid-credentials", body = app::Problem, content_type = "application/problem+json"), (status = 403, description = "cross-origin", body = app::Problem, content_type = "application/problem+json"), (status = 429, description = "rate-limited", body = app::Problem, content_type = "application/problem+json"),
        (status = 413, description = "body-too-large", body = app::Problem, content_type = "application/problem+json"), (status = 415, description = "unsupported-media-type", body = app::Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy: as many password checks as the server runs at once are running; Retry-After", body = app::Problem, content_type = "application/problem+json")))]
pub async fn login(State(state): State<AppState>, parts: Parts, RawBody(body): RawBody) -> Result<Response, AppError> {
    auth::require_same_origin(&parts, &state.config)?;
    super::body::require_json(&parts.headers)?;
    let login: LoginRequest = serde_json::from_slice(&body).map_err(|_| AppError::MalformedJson("expected {\"email\", \"password\"}".into()))?;
    let email = login.email.trim().to_lowercase();
    // An address no user can have is no one's: nothing to look up, nothing to count.
    if !crate::service::ids::could_be_email(&email) {
        return Err(AppError::InvalidCredentials);
    }
    // A bounded number of password checks at once, and a short wait for one: a flood gets 503s,
    // not the memory of a thousand Argon2 runs, and touches neither the database nor the throttle.
    let waiting = tokio::time::timeout(PASSWORD_CHECK_WAIT, state.password_checks.clone().acquire_owned());
    let check = waiting.await.map_err(|_| AppError::Busy)?.map_err(|_| AppError::Busy)?;
    let ip = auth::throttle_address(auth::client_ip(&parts, &state.config));
    let now = state.now_ms();
    auth::throttle::reserve(&state.db, &ip, &email, now).await?;
    let user = users::Entity::find().filter(users::Column::Email.eq(&email)).one(&state.db).await?;
    let password = login.password;
    let stored = user.as_ref().map(|u| u.password_hash.clone());
    let verified = tokio::task::spawn_blocking(move || {
        let verified = auth::verify_password_or_dummy(&password, stored.as_deref());
        drop(check);
        verified
    })
    .await
    .map_err(|e| AppError::Internal(format!("password check: {e}")))?;
    let user = match user {
        Some(u) if verified && u.active => u,
        // The attempt was counted as a failure when it was reserved.
        _ => return Err(AppError::InvalidCredentials),
    };
    auth::throttle::succeeded(&state.db, &ip, &email).await?;
    let secret = auth::create_session(&state.db, &user.id, now).await?;
    with_cookie(StatusCode::NO_CONTENT, auth::session_cookie(&secret, auth::over_tls(&parts, &state.config)))
}

/// `GET /api/session`: who is signed in.
#[utoipa::path(get, path = "/api/session", tag = "session",
    responses((status = 200, description = "Who is signed in", body = app::SessionView), (status = 401, description = "not signed in", body = app::Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy: the catalog's authority query did not answer, so the role is not known; Retry-After", body = app::Problem, content_type = "application/problem+json")))]
pub async fn whoami(actor: Actor) -> Result<Json<SessionView>, AppError> {
    Ok(Json(session_view(actor)?))
}

/// The signed-in user as the API and the page show them, with the role they have now.
pub fn session_view(actor: Actor) -> Result<SessionView, AppError> {
    let role = actor.role_now()?;
    Ok(SessionView { email: actor.email, role: role.as_str().to_owned(), tenant: actor.tenant_slug })
}

/// `DELETE /api/session`: ends the browser session, if there is one, and removes its cookie;
/// a session that has expired or was revoked is ended already, and its cookie removed too.
#[utoipa::path(delete, path = "/api/session", tag = "session",
    responses((status = 204, description = "Signed out; the cookie is removed"), (status = 403, description = "cross-origin", body = app::Problem, content_type = "application/problem+json")))]
pub async fn logout(State(state): State<AppState>, parts: Parts) -> Result<Response, AppError> {
    let secure = auth::over_tls(&parts, &state.config);
    if let Some(secret) = auth::session_secret(&parts, secure) {
        auth::require_same_origin(&parts, &state.config)?;
        auth::revoke_session(&state.db, &secret, state.now_ms()).await?;
    }
    with_cookie(StatusCode::NO_CONTENT, auth::clear_session_cookie(secure))
}
