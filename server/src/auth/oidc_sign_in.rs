//! The database side of a sign-in through the provider (contract §13): a started sign-in kept
//! until its callback and taken once; and the user of `(issuer, sub)`, created or updated from
//! the verified claims, with a session, in one transaction: a sign-in that fails creates nothing.

use super::oidc::{Identity, SignInFailure, Started};
use super::tokens::{hash_secret, new_secret};
use super::Role;
use crate::entities::{oidc_sign_ins, tenants, users};
use crate::job_store::begin_write;
use sea_orm::{ActiveModelTrait, ColumnTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, Set};

/// How long a started sign-in waits for its callback.
pub const SIGN_IN_TTL_MS: i64 = 10 * 60 * 1000;

/// The cookie that binds a started sign-in to the browser that started it, over plain HTTP.
pub const SIGN_IN_COOKIE: &str = "exportd_oidc";

/// The same over TLS: the `__Host-` prefix makes browsers refuse one a sibling domain plants.
pub const SECURE_SIGN_IN_COOKIE: &str = "__Host-exportd_oidc";

fn busy(e: DbErr) -> SignInFailure {
    tracing::warn!(error = %e, "a sign-in's database work failed");
    SignInFailure::Busy
}

/// Keeps `started` until its callback; returns the cookie value that finds it again (only its
/// hash is stored). Sign-ins that were never finished are dropped on the way.
pub async fn keep(db: &DatabaseConnection, started: &Started, now_ms: i64) -> Result<String, SignInFailure> {
    oidc_sign_ins::Entity::delete_many().filter(oidc_sign_ins::Column::ExpiresAt.lte(now_ms)).exec(db).await.map_err(busy)?;
    let secret = new_secret();
    oidc_sign_ins::ActiveModel {
        id: Set(hash_secret(&secret)),
        state: Set(started.state.clone()),
        nonce: Set(started.nonce.clone()),
        pkce_verifier: Set(started.pkce_verifier.clone()),
        expires_at: Set(now_ms + SIGN_IN_TTL_MS),
    }
    .insert(db)
    .await
    .map_err(busy)?;
    Ok(secret)
}

/// Takes the sign-in of `cookie` whose `state` is `state`, once: it is deleted whatever the
/// answer, so a replayed or forged state, a cookie from another browser (or none), and a sign-in
/// that waited too long all fail alike. Returns its `(nonce, pkce_verifier)`.
pub async fn take(db: &DatabaseConnection, cookie: Option<&str>, state: &str, now_ms: i64) -> Result<(String, String), SignInFailure> {
    let Some(cookie) = cookie else { return Err(SignInFailure::StateMismatch) };
    let id = hash_secret(cookie);
    let txn = begin_write(db).await.map_err(busy)?;
    let row = oidc_sign_ins::Entity::find_by_id(id.clone()).one(&txn).await.map_err(busy)?;
    let deleted = oidc_sign_ins::Entity::delete_by_id(id).exec(&txn).await.map_err(busy)?;
    txn.commit().await.map_err(busy)?;
    let row = row.filter(|_| deleted.rows_affected == 1).ok_or(SignInFailure::StateMismatch)?;
    let same = subtle::ConstantTimeEq::ct_eq(row.state.as_bytes(), state.as_bytes());
    if !bool::from(same) || row.expires_at <= now_ms {
        return Err(SignInFailure::StateMismatch);
    }
    Ok((row.nonce, row.pkce_verifier))
}

/// The user `identity` signs in as, created or updated from its claims, and a new session for
/// it, in one transaction; returns the session's cookie value. Refused, creating nothing: a
/// tenant claim that is missing, unknown, or not the user's recorded tenant; a role claim that is
/// missing or unknown (unless `role_from_source`: the catalog's authority query gives the role,
/// and the claim is kept only when it is a role); a deactivated user.
pub async fn sign_in(db: &DatabaseConnection, issuer: &str, identity: &Identity, role_from_source: bool, now_ms: i64) -> Result<String, SignInFailure> {
    let slug = identity.tenant.clone().ok_or_else(|| SignInFailure::UnknownTenant("no tenant claim".into()))?;
    let claimed = identity.role.as_deref().and_then(Role::parse);
    let role = match (&identity.role, claimed) {
        (_, Some(role)) => role,
        // The catalog's authority query gives the role: a claim is not needed.
        (None, None) if role_from_source => Role::Viewer,
        (None, None) => return Err(SignInFailure::UnknownRole("no role claim".into())),
        (Some(other), None) => return Err(SignInFailure::UnknownRole(format!("{other:?} is not a role"))),
    };
    let txn = begin_write(db).await.map_err(busy)?;
    let tenant = tenants::Entity::find().filter(tenants::Column::Slug.eq(&slug)).one(&txn).await.map_err(busy)?;
    let tenant = tenant.ok_or_else(|| SignInFailure::UnknownTenant(format!("{slug:?} is not a tenant")))?;
    let existing = users::Entity::find()
        .filter(users::Column::OidcIssuer.eq(issuer))
        .filter(users::Column::OidcSubject.eq(&identity.subject))
        .one(&txn)
        .await
        .map_err(busy)?;
    let user_id = match existing {
        Some(user) if user.tenant_id != tenant.id => return Err(SignInFailure::UnknownTenant(format!("{slug:?} is not your tenant"))),
        Some(user) if !user.active => return Err(SignInFailure::Deactivated),
        Some(user) => {
            let id = user.id.clone();
            let pinned = user.role_pinned;
            let mut user: users::ActiveModel = user.into();
            if !pinned && claimed.is_some() {
                user.role = Set(role.as_str().to_owned());
            }
            user.contact_email = Set(identity.email.clone());
            user.update(&txn).await.map_err(busy)?;
            id
        }
        None => {
            let id = format!("usr_{}", uuid::Uuid::now_v7().simple());
            users::ActiveModel {
                id: Set(id.clone()),
                tenant_id: Set(tenant.id),
                // The unique name the CLI knows the user by; the claims' email need not be unique.
                email: Set(format!("oidc:{}", identity.subject)),
                password_hash: Set(super::NO_PASSWORD.to_owned()),
                role: Set(role.as_str().to_owned()),
                active: Set(true),
                created_at: Set(now_ms),
                oidc_issuer: Set(Some(issuer.to_owned())),
                oidc_subject: Set(Some(identity.subject.clone())),
                contact_email: Set(identity.email.clone()),
                role_pinned: Set(false),
                schedule_id: Set(None),
            }
            .insert(&txn)
            .await
            .map_err(busy)?;
            id
        }
    };
    let secret = super::create_session(&txn, &user_id, now_ms).await.map_err(busy)?;
    txn.commit().await.map_err(busy)?;
    Ok(secret)
}
