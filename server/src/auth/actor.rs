//! The authenticated caller of an API request.

use super::authority::{Authority, Whom};
use super::{require_same_origin, tokens::hash_secret, Role};
use crate::entities::{api_tokens, sessions, tenants, users};
use crate::error::AppError;
use crate::state::AppState;
use axum::extract::FromRequestParts;
use axum::http::{header, request::Parts, Method};
use sea_orm::ConnectionTrait;

/// How the caller proved who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthVia {
    /// A browser session; holds the cookie value so logout can revoke it.
    Session(String),
    /// An API token of exportd's own.
    Token,
    /// An access token (a JWT) from the organisation's OpenID Connect provider.
    ProviderToken,
}

/// An active user of a tenant, as of this request.
#[derive(Debug, Clone)]
pub struct Actor {
    /// The user's id.
    pub user_id: String,
    /// The user's email: for a user of the provider, the claim's (or `oidc:SUB` without one).
    pub email: String,
    /// The user's role now, from the [`Authority`]; no access reads as a viewer's (it may read
    /// and cancel its own operations, nothing else), and so does a role the authority's source
    /// did not give in time: every check of "authorised" asks [`Actor::role_now`] instead.
    pub role: Role,
    /// Why the authority's source gave no role, when it did not answer.
    pub unanswered: Option<String>,
    /// The tenant's id.
    pub tenant_id: String,
    /// The tenant's slug.
    pub tenant_slug: String,
    /// The tenant's deployment.
    pub deployment: String,
    /// How the caller authenticated.
    pub via: AuthVia,
}

/// The columns of an actor, read in one query: the user joined to their tenant.
fn actor_query() -> sea_orm::sea_query::SelectStatement {
    use sea_orm::sea_query::{Expr, ExprTrait, Query};
    Query::select()
        .columns([(users::Entity, users::Column::Id), (users::Entity, users::Column::Email), (users::Entity, users::Column::Role)])
        .columns([(tenants::Entity, tenants::Column::Id), (tenants::Entity, tenants::Column::Slug), (tenants::Entity, tenants::Column::Deployment)])
        .columns([(users::Entity, users::Column::OidcSubject), (users::Entity, users::Column::ContactEmail)])
        .column((tenants::Entity, tenants::Column::SourceId))
        .from(users::Entity)
        .inner_join(tenants::Entity, Expr::col((tenants::Entity, tenants::Column::Id)).equals((users::Entity, users::Column::TenantId)))
        .and_where(Expr::col((users::Entity, users::Column::Active)).eq(true))
        .to_owned()
}

/// Runs an actor query and asks `authority` for the role; `None` when no active user matched
/// (or their stored role is unknown).
async fn one_actor<C: ConnectionTrait>(db: &C, authority: &Authority, query: sea_orm::sea_query::SelectStatement, via: AuthVia) -> Result<Option<Actor>, AppError> {
    let backend = db.get_database_backend();
    let Some(row) = db.query_one_raw(backend.build(&query)).await? else { return Ok(None) };
    let text = |i: usize| row.try_get_by_index::<String>(i);
    let maybe = |i: usize| row.try_get_by_index::<Option<String>>(i);
    let Some(stored) = Role::parse(&text(2)?) else { return Ok(None) };
    let email = text(1)?;
    let subject = maybe(6)?;
    let source_id = text(8)?;
    let whom = Whom::of(stored, &email, subject.as_deref(), &source_id);
    // Reading and cancelling one's own operations needs only an active user (contract §2): a
    // source that does not answer stops only the checks that need the role.
    let (role, unanswered) = match authority.role(whom).await {
        Ok(role) => (role.unwrap_or(Role::Viewer), None),
        Err(e) => (Role::Viewer, Some(e.0)),
    };
    let email = maybe(7)?.unwrap_or(email);
    Ok(Some(Actor { user_id: text(0)?, email, role, unanswered, tenant_id: text(3)?, tenant_slug: text(4)?, deployment: text(5)?, via }))
}

impl Actor {
    /// The role for a check of "authorised": 503 `busy` when the authority's source did not
    /// answer, never a guess.
    pub fn role_now(&self) -> Result<Role, AppError> {
        match &self.unanswered {
            Some(cause) => Err(AppError::AuthorityUnanswered(cause.clone())),
            None => Ok(self.role),
        }
    }
}

/// Loads an active user and their tenant as an actor, in one query, with the role `authority`
/// gives it now; `None` when the user is unknown or inactive.
pub async fn load_active_actor<C: ConnectionTrait>(db: &C, authority: &Authority, user_id: &str, via: AuthVia) -> Result<Option<Actor>, AppError> {
    use sea_orm::sea_query::{Expr, ExprTrait};
    let mut query = actor_query();
    query.and_where(Expr::col((users::Entity, users::Column::Id)).eq(user_id));
    one_actor(db, authority, query, via).await
}

/// The actor of an unrevoked API token (by its hash), in one query.
async fn actor_of_token<C: ConnectionTrait>(db: &C, authority: &Authority, token_hash: String) -> Result<Option<Actor>, AppError> {
    use sea_orm::sea_query::{Expr, ExprTrait};
    let mut query = actor_query();
    query
        .inner_join(api_tokens::Entity, Expr::col((api_tokens::Entity, api_tokens::Column::UserId)).equals((users::Entity, users::Column::Id)))
        .and_where(Expr::col((api_tokens::Entity, api_tokens::Column::TokenHash)).eq(token_hash))
        .and_where(Expr::col((api_tokens::Entity, api_tokens::Column::RevokedAt)).is_null());
    one_actor(db, authority, query, AuthVia::Token).await
}

/// The actor of a provider's user, by its `(issuer, sub)`.
pub async fn actor_of_subject<C: ConnectionTrait>(db: &C, authority: &Authority, issuer: &str, subject: &str, via: AuthVia) -> Result<Option<Actor>, AppError> {
    use sea_orm::sea_query::{Expr, ExprTrait};
    let mut query = actor_query();
    query
        .and_where(Expr::col((users::Entity, users::Column::OidcIssuer)).eq(issuer))
        .and_where(Expr::col((users::Entity, users::Column::OidcSubject)).eq(subject));
    one_actor(db, authority, query, via).await
}

/// The actor of a live session (by its hash), in one query.
async fn actor_of_session<C: ConnectionTrait>(db: &C, authority: &Authority, session_hash: String, secret: String, now_ms: i64) -> Result<Option<Actor>, AppError> {
    use sea_orm::sea_query::{Expr, ExprTrait};
    let mut query = actor_query();
    query
        .inner_join(sessions::Entity, Expr::col((sessions::Entity, sessions::Column::UserId)).equals((users::Entity, users::Column::Id)))
        .and_where(Expr::col((sessions::Entity, sessions::Column::Id)).eq(session_hash))
        .and_where(Expr::col((sessions::Entity, sessions::Column::RevokedAt)).is_null())
        .and_where(Expr::col((sessions::Entity, sessions::Column::ExpiresAt)).gt(now_ms));
    one_actor(db, authority, query, AuthVia::Session(secret)).await
}

/// The value of our session cookie in a request, if any: over TLS only the `__Host-` one.
pub fn session_secret(parts: &Parts, secure: bool) -> Option<String> {
    cookie_value(&parts.headers, super::session_cookie_name(secure)).map(str::to_owned)
}

/// The non-empty value of the cookie `name` in a request's `Cookie` headers, if any.
pub fn cookie_value<'h>(headers: &'h axum::http::HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(cookie, _)| *cookie == name)
        .map(|(_, value)| value)
        .filter(|v| !v.is_empty())
}

/// Whether a bearer token has a JWT's shape (three dot-separated parts); exportd's own tokens
/// never do.
fn looks_like_jwt(token: &str) -> bool {
    token.split('.').count() == 3
}

/// The token of an `Authorization: Bearer …` header; the scheme's name is case-insensitive
/// (RFC 9110 §11.1).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

impl FromRequestParts<AppState> for Actor {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Actor, AppError> {
        let now = state.now_ms();
        if let Some(actor) = parts.extensions.get::<Actor>() {
            return Ok(actor.clone());
        }
        let actor = if let Some(auth) = parts.headers.get(header::AUTHORIZATION) {
            let token = auth.to_str().ok().and_then(bearer_token).ok_or(AppError::Unauthenticated)?;
            match &state.oidc {
                Some(provider) if looks_like_jwt(token) => match provider.verify_access_token(token).await {
                    Some(subject) => actor_of_subject(&state.db, &state.authority, provider.issuer(), &subject, AuthVia::ProviderToken).await?,
                    None => None,
                },
                _ => actor_of_token(&state.db, &state.authority, hash_secret(token)).await?,
            }
        } else if let Some(secret) = session_secret(parts, super::over_tls(parts, &state.config)) {
            actor_of_session(&state.db, &state.authority, hash_secret(&secret), secret, now).await?
        } else {
            return Err(AppError::Unauthenticated);
        };
        let actor = actor.ok_or(AppError::Unauthenticated)?;
        let safe = matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS);
        if !safe && matches!(actor.via, AuthVia::Session(_)) {
            require_same_origin(parts, &state.config)?;
        }
        parts.extensions.insert(actor.clone());
        Ok(actor)
    }
}

#[cfg(test)]
mod tests {
    use super::bearer_token;

    #[test]
    fn the_bearer_scheme_is_matched_in_any_case() {
        for header in ["Bearer abc", "bearer abc", "BEARER  abc ", " Bearer abc"] {
            assert_eq!(bearer_token(header), Some("abc"), "{header:?}");
        }
        for header in ["Basic abc", "Bearer", "Bearer   ", "Bearerabc"] {
            assert_eq!(bearer_token(header), None, "{header:?}");
        }
    }
}
