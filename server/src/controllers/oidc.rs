//! `/auth/oidc/…`: sign-in through the organisation's OpenID Connect provider (contract §13).
//! Every failure is a page that says in words that sign-in failed and why, in English and
//! Arabic, with a 4xx status: never a 5xx, and nothing created.

use crate::auth::oidc::SignInFailure;
use crate::auth::oidc_sign_in::{self, SECURE_SIGN_IN_COOKIE, SIGN_IN_COOKIE};
use crate::auth::{self, oidc::Provider};
use crate::state::AppState;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, request::Parts, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// The callback's query: a code and its state, or the provider's error.
#[derive(Debug, serde::Deserialize)]
pub struct Callback {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

/// The configured provider; without one these routes do not exist (404, as any unknown route).
fn provider(state: &AppState) -> Result<&Arc<Provider>, Response> {
    state.oidc.as_ref().ok_or_else(|| crate::error::AppError::NotFound.into_response())
}

fn redirect_uri(parts: &Parts, state: &AppState) -> Option<String> {
    auth::origin(parts, &state.config).map(|origin| format!("{origin}/auth/oidc/callback"))
}

/// How long a sign-in's start or callback may take in all, under the server's request timeout,
/// so that even a provider that answers slowly gets the failure page.
const SIGN_IN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(25);

/// The name of the cookie that keeps a started sign-in: over TLS a `__Host-` cookie (for `/`,
/// as the prefix requires), else one for `/auth/oidc` only.
fn sign_in_cookie_name(secure: bool) -> (&'static str, &'static str) {
    if secure {
        (SECURE_SIGN_IN_COOKIE, "/")
    } else {
        (SIGN_IN_COOKIE, "/auth/oidc")
    }
}

/// The cookie that keeps a started sign-in, or the one that removes it.
fn sign_in_cookie(value: &str, max_age_secs: i64, secure: bool) -> String {
    let (name, path) = sign_in_cookie_name(secure);
    let secure = if secure { "; Secure" } else { "" };
    format!("{name}={value}; Path={path}; HttpOnly; SameSite=Lax; Max-Age={max_age_secs}{secure}")
}

fn see_other(location: &str, cookies: &[String]) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(location) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    for cookie in cookies {
        if let Ok(value) = HeaderValue::from_str(cookie) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `GET /auth/oidc/start`: to the provider, with state, nonce and a PKCE challenge; the state,
/// nonce and verifier are kept under a short-lived, single-use, HttpOnly cookie.
pub async fn start(State(state): State<AppState>, parts: Parts) -> Response {
    let provider = match provider(&state) {
        Ok(p) => p,
        Err(response) => return response,
    };
    let Some(redirect) = redirect_uri(&parts, &state) else { return failed(SignInFailure::ProviderDown) };
    let started = match tokio::time::timeout(SIGN_IN_DEADLINE, provider.start(&redirect)).await {
        Ok(Ok(started)) => started,
        Ok(Err(failure)) => return failed(failure),
        Err(_) => return failed(SignInFailure::ProviderDown),
    };
    match oidc_sign_in::keep(&state.db, &started, state.now_ms()).await {
        Ok(secret) => {
            let secure = auth::over_tls(&parts, &state.config);
            see_other(&started.url, &[sign_in_cookie(&secret, oidc_sign_in::SIGN_IN_TTL_MS / 1000, secure)])
        }
        Err(failure) => failed(failure),
    }
}

/// `GET /auth/oidc/callback`: the started sign-in is taken (once), the code exchanged, the ID
/// token verified, the user created or updated and a session started; then back to the page.
pub async fn callback(State(state): State<AppState>, parts: Parts, query: Result<Query<Callback>, QueryRejection>) -> Response {
    let provider = match provider(&state) {
        Ok(p) => p,
        Err(response) => return response,
    };
    // A query that does not read (a state given twice, say) is a state that does not match.
    let Ok(Query(query)) = query else { return failed(SignInFailure::StateMismatch) };
    let secure = auth::over_tls(&parts, &state.config);
    let result = async {
        let now = state.now_ms();
        let cookie = auth::cookie_value(&parts.headers, sign_in_cookie_name(secure).0);
        let (nonce, verifier) = oidc_sign_in::take(&state.db, cookie, query.state.as_deref().unwrap_or(""), now).await?;
        if let Some(error) = query.error.as_deref() {
            return Err(SignInFailure::Refused(error.chars().take(80).collect()));
        }
        let code = query.code.as_deref().ok_or_else(|| SignInFailure::Refused("no code".into()))?;
        let redirect = redirect_uri(&parts, &state).ok_or(SignInFailure::ProviderDown)?;
        let identity = provider.finish(&redirect, code, &nonce, &verifier).await?;
        oidc_sign_in::sign_in(&state.db, provider.issuer(), &identity, state.authority.is_source(), now).await
    };
    let result = tokio::time::timeout(SIGN_IN_DEADLINE, result).await.unwrap_or(Err(SignInFailure::ProviderDown));
    match result {
        Ok(session) => see_other("/", &[auth::session_cookie(&session, secure), sign_in_cookie("", 0, secure)]),
        Err(failure) => {
            let mut response = failed(failure);
            if let Ok(value) = HeaderValue::from_str(&sign_in_cookie("", 0, secure)) {
                response.headers_mut().append(header::SET_COOKIE, value);
            }
            response
        }
    }
}

/// `GET /auth/oidc/sign-out`: to the provider's end-session endpoint when it has one (the
/// exportd session is ended by `DELETE /api/session` first), else back to the page.
pub async fn sign_out(State(state): State<AppState>, parts: Parts) -> Response {
    let provider = match provider(&state) {
        Ok(p) => p,
        Err(response) => return response,
    };
    let Some(end) = provider.end_session_url().await else { return see_other("/", &[]) };
    let Ok(mut url) = url::Url::parse(&end) else { return see_other("/", &[]) };
    url.query_pairs_mut().append_pair("client_id", &provider.config().client_id);
    if let Some(origin) = auth::origin(&parts, &state.config) {
        url.query_pairs_mut().append_pair("post_logout_redirect_uri", &format!("{origin}/"));
    }
    see_other(url.as_str(), &[])
}

/// The words of a failure, in English and in Arabic.
fn words(failure: &SignInFailure) -> (String, &'static str) {
    let ar = match failure {
        SignInFailure::ProviderDown => "تعذّر الوصول إلى مزوّد تسجيل الدخول؛ حاول بعد قليل.",
        SignInFailure::StateMismatch => "لم يبدأ تسجيل الدخول هذا في هذا المتصفح، أو استُخدم من قبل، أو طال أكثر من اللازم؛ ابدأ من جديد.",
        SignInFailure::Refused(_) => "رفض المزوّد تسجيل الدخول.",
        SignInFailure::Unverified(_) => "تعذّر التحقق من جواب المزوّد.",
        SignInFailure::UnknownTenant(_) => "لا يذكر حسابك جهة معروفة في exportd؛ راجع مسؤول النظام.",
        SignInFailure::UnknownRole(_) => "ليس لحسابك دور في exportd؛ راجع مسؤول النظام.",
        SignInFailure::Deactivated => "حسابك معطّل في exportd.",
        SignInFailure::Busy => "exportd مشغول؛ حاول بعد قليل.",
    };
    (failure.to_string(), ar)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The page of a failed sign-in.
fn failed(failure: SignInFailure) -> Response {
    let status = match failure {
        SignInFailure::StateMismatch => StatusCode::BAD_REQUEST,
        SignInFailure::Refused(_) | SignInFailure::UnknownTenant(_) | SignInFailure::UnknownRole(_) | SignInFailure::Deactivated => StatusCode::FORBIDDEN,
        SignInFailure::Unverified(_) | SignInFailure::ProviderDown | SignInFailure::Busy => StatusCode::UNAUTHORIZED,
    };
    tracing::info!(target: "exportd::auth", reason = %failure, "sign-in through the provider failed");
    let (en, ar) = words(&failure);
    let body = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\"><title>Sign-in failed</title></head>\
<body><main data-testid=\"sign-in-failed\"><h1>Sign-in failed</h1><p data-testid=\"reason\">Sign-in failed: {}.</p>\
<section lang=\"ar\" dir=\"rtl\"><h2>تعذّر تسجيل الدخول</h2><p>{}</p></section>\
<p><a href=\"/\">Back to exportd</a> · <a href=\"/\" lang=\"ar\">العودة إلى exportd</a></p></main></body></html>",
        escape(&en),
        escape(ar)
    );
    let mut response = (status, body).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
