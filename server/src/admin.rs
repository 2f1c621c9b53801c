//! The administration a real installation needs before its first sign-in, without SQL
//! (contract §13): tenants with their deployment and source id, users with their role, and API
//! tokens. Adding a slug or an email that exists changes nothing and is an error; each change is
//! one transaction.

use crate::auth::{hash_password, Role, NO_PASSWORD};
use crate::entities::{api_tokens, sessions, tenants, users};
use sea_orm::sea_query::Expr;
use crate::job_store::begin_write;
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QueryOrder, Set};

/// Why an administration command did nothing.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// What the operator asked for cannot be done; the message says why.
    #[error("{0}")]
    Refused(String),
    /// The database failed.
    #[error("database: {0}")]
    Db(#[from] DbErr),
}

fn refused(message: impl Into<String>) -> AdminError {
    AdminError::Refused(message.into())
}


/// The shape of a tenant's slug: 1–63 of `a-z`, `0-9` and `-`, starting with a letter.
fn is_slug(slug: &str) -> bool {
    slug.len() <= 63 && slug.starts_with(|c: char| c.is_ascii_lowercase()) && slug.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Adds a tenant `slug` served by `deployment`, with `source_id` (default: its own id); prints
/// nothing on success. A slug or a source id that exists is refused.
pub async fn add_tenant(db: &DatabaseConnection, slug: &str, deployment: &str, source_id: Option<&str>, now_ms: i64) -> Result<tenants::Model, AdminError> {
    if !is_slug(slug) {
        return Err(refused(format!("{slug:?} is not a slug: 1–63 of a-z, 0-9 and -, starting with a letter")));
    }
    if deployment.trim().is_empty() {
        return Err(refused("a tenant needs a deployment"));
    }
    let id = format!("ten_{slug}");
    let source_id = source_id.map_or_else(|| id.clone(), str::to_owned);
    if source_id.trim().is_empty() {
        return Err(refused("a source id may not be empty"));
    }
    // On SQLite the write lock is taken at once, so the look-before-insert cannot be overtaken.
    let txn = begin_write(db).await?;
    if tenants::Entity::find().filter(tenants::Column::Slug.eq(slug)).one(&txn).await?.is_some() {
        return Err(refused(format!("a tenant {slug:?} exists; nothing changed")));
    }
    if tenants::Entity::find().filter(tenants::Column::SourceId.eq(&source_id)).one(&txn).await?.is_some() {
        return Err(refused(format!("another tenant has the source id {source_id:?}; nothing changed")));
    }
    let tenant = tenants::ActiveModel {
        id: Set(id),
        slug: Set(slug.to_owned()),
        name: Set(slug.to_owned()),
        deployment: Set(deployment.to_owned()),
        source_id: Set(source_id),
        created_at: Set(now_ms),
        last_claimed_at: Set(0),
    }
    .insert(&txn)
    .await?;
    // Its webhooks' secret is made with it (contract §15).
    crate::notifications::secrets::ensure(&txn, &tenant.id, now_ms).await?;
    txn.commit().await?;
    Ok(tenant)
}

/// Every tenant, by slug: `slug`, `id`, `deployment` and `source id`, tab-separated, a line each.
pub async fn list_tenants(db: &DatabaseConnection) -> Result<String, AdminError> {
    let all = tenants::Entity::find().order_by_asc(tenants::Column::Slug).all(db).await?;
    Ok(all.iter().map(|t| format!("{}\t{}\t{}\t{}\n", t.slug, t.id, t.deployment, t.source_id)).collect())
}

/// Adds a user of the tenant `tenant_slug` with `role`, and `password` if one is given; an email
/// that exists (in any tenant) is refused.
pub async fn add_user(db: &DatabaseConnection, email: &str, tenant_slug: &str, role: &str, password: Option<&str>, now_ms: i64) -> Result<users::Model, AdminError> {
    let email = email.trim().to_lowercase();
    if !crate::service::ids::could_be_email(&email) || email.starts_with("oidc:") {
        return Err(refused(format!("{email:?} is not an email address")));
    }
    let role = Role::parse(role).ok_or_else(|| refused(format!("unknown role {role:?}: use admin, analyst or viewer")))?;
    let password_hash = match password {
        Some(p) if p.is_empty() => return Err(refused("the password is empty")),
        Some(p) => hash_password(p).map_err(|e| refused(format!("hashing the password: {e}")))?,
        None => NO_PASSWORD.to_owned(),
    };
    let txn = begin_write(db).await?;
    let tenant = tenants::Entity::find().filter(tenants::Column::Slug.eq(tenant_slug)).one(&txn).await?.ok_or_else(|| refused(format!("no tenant {tenant_slug:?}")))?;
    if users::Entity::find().filter(users::Column::Email.eq(&email)).one(&txn).await?.is_some() {
        return Err(refused(format!("a user {email:?} exists; nothing changed")));
    }
    let user = users::ActiveModel {
        id: Set(format!("usr_{}", uuid::Uuid::now_v7().simple())),
        tenant_id: Set(tenant.id),
        email: Set(email),
        password_hash: Set(password_hash),
        role: Set(role.as_str().to_owned()),
        active: Set(true),
        created_at: Set(now_ms),
        oidc_issuer: Set(None),
        oidc_subject: Set(None),
        contact_email: Set(None),
        role_pinned: Set(false),
        schedule_id: Set(None),
    }
    .insert(&txn)
    .await?;
    txn.commit().await?;
    Ok(user)
}

/// The user of this email (compared trimmed and lower-cased, as stored), or of `oidc:SUB` (a
/// user of the provider; its `sub` compared exactly).
pub async fn user_by_email<C: ConnectionTrait>(db: &C, email: &str) -> Result<users::Model, AdminError> {
    let email = if email.trim().starts_with("oidc:") { email.trim().to_owned() } else { email.trim().to_lowercase() };
    users::Entity::find().filter(users::Column::Email.eq(&email)).one(db).await?.ok_or_else(|| refused(format!("no user {email:?}")))
}

/// The user of `email`, unless it is a schedule's service identity, which has no token and no
/// role but its schedule's (contract §15).
pub async fn person_by_email<C: ConnectionTrait>(db: &C, email: &str) -> Result<users::Model, AdminError> {
    let user = user_by_email(db, email).await?;
    if user.schedule_id.is_some() {
        return Err(refused(format!("{:?} is a schedule's service identity: it has no token and its schedule's role; pause or delete the schedule instead", user.email)));
    }
    Ok(user)
}

/// Deactivates the user of `email`: in one transaction they lose their sessions and tokens, and
/// every later check of their authority (a page, a link, a worker's fence) finds them inactive.
pub async fn deactivate_user(db: &DatabaseConnection, email: &str, now_ms: i64) -> Result<(), AdminError> {
    let txn = begin_write(db).await?;
    let user = person_by_email(&txn, email).await?;
    users::Entity::update_many().col_expr(users::Column::Active, Expr::value(false)).filter(users::Column::Id.eq(&user.id)).exec(&txn).await?;
    sessions::Entity::update_many()
        .col_expr(sessions::Column::RevokedAt, Expr::value(now_ms))
        .filter(sessions::Column::UserId.eq(&user.id))
        .filter(sessions::Column::RevokedAt.is_null())
        .exec(&txn)
        .await?;
    api_tokens::Entity::update_many()
        .col_expr(api_tokens::Column::RevokedAt, Expr::value(now_ms))
        .filter(api_tokens::Column::UserId.eq(&user.id))
        .filter(api_tokens::Column::RevokedAt.is_null())
        .exec(&txn)
        .await?;
    txn.commit().await?;
    Ok(())
}

/// The users, of one tenant or all, by email: `email`, `tenant`, `role` and `active` or
/// `inactive`, tab-separated, a line each.
pub async fn list_users(db: &DatabaseConnection, tenant_slug: Option<&str>) -> Result<String, AdminError> {
    let tenants: Vec<tenants::Model> = tenants::Entity::find().all(db).await?;
    let mut query = users::Entity::find().order_by_asc(users::Column::Email);
    if let Some(slug) = tenant_slug {
        let tenant = tenants.iter().find(|t| t.slug == slug).ok_or_else(|| refused(format!("no tenant {slug:?}")))?;
        query = query.filter(users::Column::TenantId.eq(&tenant.id));
    }
    let slug_of = |id: &str| tenants.iter().find(|t| t.id == id).map_or_else(|| id.to_owned(), |t| t.slug.clone());
    Ok(query
        .all(db)
        .await?
        .iter()
        .map(|u| format!("{}\t{}\t{}\t{}\n", u.email, slug_of(&u.tenant_id), u.role, if u.active { "active" } else { "inactive" }))
        .collect())
}

/// The API tokens of the user of `email`, oldest first: `id`, `created` (epoch ms) and `active`
/// or `revoked`, tab-separated, a line each. A token's secret is never shown again.
pub async fn list_tokens(db: &DatabaseConnection, email: &str) -> Result<String, AdminError> {
    let user = user_by_email(db, email).await?;
    let tokens = api_tokens::Entity::find().filter(api_tokens::Column::UserId.eq(&user.id)).order_by_asc(api_tokens::Column::CreatedAt).all(db).await?;
    Ok(tokens.iter().map(|t| format!("{}\t{}\t{}\n", t.id, t.created_at, if t.revoked_at.is_some() { "revoked" } else { "active" })).collect())
}

/// Revokes the API token `id` at once; a token already revoked stays as it was.
pub async fn revoke_token(db: &DatabaseConnection, id: &str, now_ms: i64) -> Result<(), AdminError> {
    let token = api_tokens::Entity::find_by_id(id.to_owned()).one(db).await?.ok_or_else(|| refused(format!("no token {id:?}")))?;
    if token.revoked_at.is_none() {
        api_tokens::Entity::update_many()
            .col_expr(api_tokens::Column::RevokedAt, Expr::value(now_ms))
            .filter(api_tokens::Column::Id.eq(id))
            .filter(api_tokens::Column::RevokedAt.is_null())
            .exec(db)
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slug_is_lower_case_letters_digits_and_dashes_starting_with_a_letter() {
        assert!(is_slug("acme") && is_slug("acme-2"));
        assert!(!is_slug("") && !is_slug("2acme") && !is_slug("Acme") && !is_slug("ac me") && !is_slug(&"a".repeat(64)));
    }
}
