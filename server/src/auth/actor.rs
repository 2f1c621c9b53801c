//! The authenticated caller of an API request.

use super::{require_same_origin, tokens::hash_secret, Role, SESSION_COOKIE};
use crate::entities::{api_tokens, sessions, tenants, users};
use crate::error::AppError;
use crate::server::AppState;
use axum::extract::FromRequestParts;
use axum::http::{header, request::Parts, Method};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter};

/// How the caller proved who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthVia {
    /// A browser session; holds the cookie value so logout can revoke it.
    Session(String),
    /// An API token.
    Token,
}

/// An active user of a tenant, as of this request.
#[derive(Debug, Clone)]
pub struct Actor {
    /// The user's id.
    pub user_id: String,
    /// The user's email.
    pub email: String,
    /// The user's role now.
    pub role: Role,
    /// The tenant's id.
    pub tenant_id: String,
    /// The tenant's slug.
    pub tenant_slug: String,
    /// The tenant's deployment.
    pub deployment: String,
    /// How the caller authenticated.
    pub via: AuthVia,
}

/// Loads an active user and their tenant as an actor; `None` when the user is unknown or inactive.
pub async fn load_active_actor<C: ConnectionTrait>(
    db: &C,
    user_id: &str,
    via: AuthVia,
) -> Result<Option<Actor>, AppError> {
    let Some(user) = users::Entity::find_by_id(user_id.to_owned()).one(db).await? else {
        return Ok(None);
    };
    if !user.active {
        return Ok(None);
    }
    let Some(role) = Role::parse(&user.role) else { return Ok(None) };
    let Some(tenant) = tenants::Entity::find_by_id(user.tenant_id.clone()).one(db).await? else {
        return Ok(None);
    };
    Ok(Some(Actor {
        user_id: user.id,
        email: user.email,
        role,
        tenant_id: tenant.id,
        tenant_slug: tenant.slug,
        deployment: tenant.deployment,
        via,
    }))
}

/// The value of our session cookie in a request, if any.
pub fn session_secret(parts: &Parts) -> Option<String> {
    parts
        .headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.to_owned())
        .filter(|v| !v.is_empty())
}

impl FromRequestParts<AppState> for Actor {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Actor, AppError> {
        let now = state.now_ms();
        let (user_id, via) = if let Some(auth) = parts.headers.get(header::AUTHORIZATION) {
            let token = auth
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer "))
                .ok_or(AppError::Unauthenticated)?;
            let row = api_tokens::Entity::find()
                .filter(api_tokens::Column::TokenHash.eq(hash_secret(token.trim())))
                .filter(api_tokens::Column::RevokedAt.is_null())
                .one(&state.db)
                .await?
                .ok_or(AppError::Unauthenticated)?;
            (row.user_id, AuthVia::Token)
        } else if let Some(secret) = session_secret(parts) {
            let row = sessions::Entity::find_by_id(hash_secret(&secret))
                .filter(sessions::Column::RevokedAt.is_null())
                .filter(sessions::Column::ExpiresAt.gt(now))
                .one(&state.db)
                .await?
                .ok_or(AppError::Unauthenticated)?;
            (row.user_id, AuthVia::Session(secret))
        } else {
            return Err(AppError::Unauthenticated);
        };
        let actor = load_active_actor(&state.db, &user_id, via)
            .await?
            .ok_or(AppError::Unauthenticated)?;
        let safe = matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS);
        if !safe && matches!(actor.via, AuthVia::Session(_)) {
            require_same_origin(parts)?;
        }
        Ok(actor)
    }
}
