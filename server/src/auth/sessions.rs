//! Browser sessions, stored in the database so every instance knows them.

use super::tokens::{hash_secret, new_secret};
use crate::entities::sessions;
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, Set};
use sea_orm::sea_query::Expr;

/// The cookie's name.
pub const SESSION_COOKIE: &str = "exportd_session";

/// How long a session lasts.
pub const SESSION_TTL_MS: i64 = 7 * 24 * 3600 * 1000;

/// Starts a session for a user; returns the cookie value.
pub async fn create_session<C: ConnectionTrait>(db: &C, user_id: &str, now_ms: i64) -> Result<String, DbErr> {
    let secret = new_secret();
    sessions::ActiveModel {
        id: Set(hash_secret(&secret)),
        user_id: Set(user_id.to_owned()),
        created_at: Set(now_ms),
        expires_at: Set(now_ms + SESSION_TTL_MS),
        revoked_at: Set(None),
    }
    .insert(db)
    .await?;
    Ok(secret)
}

/// Revokes the session behind a cookie value.
pub async fn revoke_session<C: ConnectionTrait>(db: &C, secret: &str, now_ms: i64) -> Result<(), DbErr> {
    sessions::Entity::update_many()
        .col_expr(sessions::Column::RevokedAt, Expr::value(now_ms))
        .filter(sessions::Column::Id.eq(hash_secret(secret)))
        .filter(sessions::Column::RevokedAt.is_null())
        .exec(db)
        .await?;
    Ok(())
}

/// The `Set-Cookie` value for a new session.
pub fn session_cookie(secret: &str, secure: bool) -> String {
    let max_age = SESSION_TTL_MS / 1000;
    let secure = if secure { "; Secure" } else { "" };
    format!("{SESSION_COOKIE}={secret}; Path=/; HttpOnly; SameSite=Lax; Max-Age={max_age}{secure}")
}

/// The `Set-Cookie` value that removes the cookie.
pub fn clear_session_cookie(secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0{secure}")
}
