//! Browser sessions, stored in the database so every instance knows them.

use super::tokens::{hash_secret, new_secret};
use crate::entities::sessions;
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, Set};
use sea_orm::sea_query::Expr;

/// The cookie's name over plain HTTP.
pub const SESSION_COOKIE: &str = "exportd_session";

/// The cookie's name over TLS: the `__Host-` prefix makes browsers refuse it unless it is
/// `Secure`, for `/` and set by this host itself (no sibling domain can plant one).
pub const SECURE_SESSION_COOKIE: &str = "__Host-exportd_session";

/// The session cookie's name, over TLS or not.
pub fn session_cookie_name(secure: bool) -> &'static str {
    if secure {
        SECURE_SESSION_COOKIE
    } else {
        SESSION_COOKIE
    }
}

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
    let name = session_cookie_name(secure);
    let secure = if secure { "; Secure" } else { "" };
    format!("{name}={secret}; Path=/; HttpOnly; SameSite=Lax; Max-Age={max_age}{secure}")
}

/// The `Set-Cookie` value that removes the cookie.
pub fn clear_session_cookie(secure: bool) -> String {
    let name = session_cookie_name(secure);
    let secure = if secure { "; Secure" } else { "" };
    format!("{name}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0{secure}")
}

/// Deletes sessions that can no longer be used: expired, or revoked before `now`.
pub async fn purge_sessions<C: ConnectionTrait>(db: &C, now_ms: i64) -> Result<u64, DbErr> {
    use sea_orm::Condition;
    let due = || Condition::any().add(sessions::Column::ExpiresAt.lte(now_ms)).add(sessions::Column::RevokedAt.lte(now_ms));
    // Looked for first: a DELETE takes SQLite's one write lock even when nothing is due, and the
    // janitor runs this every pass.
    if sessions::Entity::find().filter(due()).one(db).await?.is_none() {
        return Ok(0);
    }
    let gone = sessions::Entity::delete_many().filter(due()).exec(db).await?;
    Ok(gone.rows_affected)
}
