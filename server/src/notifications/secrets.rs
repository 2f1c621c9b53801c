//! Each tenant's webhook secret (contract §15): `whsec_` + base64 of 32 random bytes, made with the
//! tenant (or, for a tenant older than notifications, the first time one is needed), shown and
//! replaced by `exportd webhook-secret rotate TENANT`. For 24 h after a rotation the old secret
//! signs beside the new, so a receiver can move to the new one without losing a delivery.

use crate::entities::{tenants, webhook_secrets};
use argon2::password_hash::rand_core::{OsRng, RngCore};
use base64::Engine;
use sea_orm::sea_query::OnConflict;
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, Set};

/// How long a replaced secret still signs.
pub const OLD_SECRET_SIGNS_MS: i64 = 24 * 3600 * 1000;

/// A new secret from the OS's generator.
pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    OsRng.fill_bytes(&mut bytes);
    format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// The secret of `tenant_id`, made now if it has none (two makers at once keep the first).
pub async fn ensure<C: ConnectionTrait>(db: &C, tenant_id: &str, now_ms: i64) -> Result<webhook_secrets::Model, DbErr> {
    // Every webhook attempt asks: a read answers it, and only a tenant without one writes.
    if let Some(secret) = webhook_secrets::Entity::find_by_id(tenant_id.to_owned()).one(db).await? {
        return Ok(secret);
    }
    webhook_secrets::Entity::insert(webhook_secrets::ActiveModel {
        tenant_id: Set(tenant_id.to_owned()),
        secret: Set(new_secret()),
        previous_secret: Set(None),
        previous_until: Set(None),
        rotated_at: Set(now_ms),
    })
    .on_conflict(OnConflict::column(webhook_secrets::Column::TenantId).do_nothing().to_owned())
    .try_insert()
    .exec(db)
    .await?;
    webhook_secrets::Entity::find_by_id(tenant_id.to_owned()).one(db).await?.ok_or_else(|| DbErr::RecordNotFound(format!("the webhook secret of {tenant_id}")))
}

/// The secrets that sign at `now_ms`: the current one, and the one it replaced for 24 h.
pub fn signing(secret: &webhook_secrets::Model, now_ms: i64) -> Vec<String> {
    let mut secrets = vec![secret.secret.clone()];
    if let (Some(old), Some(until)) = (&secret.previous_secret, secret.previous_until) {
        if now_ms < until {
            secrets.push(old.clone());
        }
    }
    secrets
}

/// The tenant a command names, by slug or id.
pub async fn tenant<C: ConnectionTrait>(db: &C, name: &str) -> Result<Option<tenants::Model>, DbErr> {
    tenants::Entity::find()
        .filter(sea_orm::Condition::any().add(tenants::Column::Slug.eq(name)).add(tenants::Column::Id.eq(name)))
        .one(db)
        .await
}

/// Replaces the tenant's secret with a new one, on the database's clock; the old one signs beside
/// it for 24 h (a second rotation within them ends the first old one's day). Returns the new
/// secret; a rotation that raced another's and lost is an error, and nothing of it is kept.
pub async fn rotate<C: ConnectionTrait>(db: &C, tenant_id: &str) -> Result<String, DbErr> {
    let now_ms = crate::db::db_now_ms(db).await?;
    let current = ensure(db, tenant_id, now_ms).await?;
    let secret = new_secret();
    let rotated = webhook_secrets::Entity::update_many()
        .col_expr(webhook_secrets::Column::Secret, sea_orm::sea_query::Expr::val(secret.clone()).into())
        .col_expr(webhook_secrets::Column::PreviousSecret, sea_orm::sea_query::Expr::val(current.secret.clone()).into())
        .col_expr(webhook_secrets::Column::PreviousUntil, sea_orm::sea_query::Expr::val(now_ms + OLD_SECRET_SIGNS_MS).into())
        .col_expr(webhook_secrets::Column::RotatedAt, sea_orm::sea_query::Expr::val(now_ms).into())
        .filter(webhook_secrets::Column::TenantId.eq(tenant_id))
        .filter(webhook_secrets::Column::Secret.eq(current.secret))
        .exec(db)
        .await?;
    if rotated.rows_affected != 1 {
        return Err(DbErr::Custom("another rotation of this tenant's secret happened at the same time: run it again".into()));
    }
    Ok(secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_whsec_and_32_bytes_of_base64_and_signs() {
        let s = new_secret();
        let bytes = base64::engine::general_purpose::STANDARD.decode(s.strip_prefix("whsec_").unwrap()).unwrap();
        assert_eq!(bytes.len(), 32);
        assert_ne!(s, new_secret());
        assert!(super::super::webhook::sign(&s, "msg_1", 1, "{}").is_some());
    }

    #[test]
    fn a_replaced_secret_signs_until_its_day_is_over() {
        let m = webhook_secrets::Model { tenant_id: "t".into(), secret: "new".into(), previous_secret: Some("old".into()), previous_until: Some(1000), rotated_at: 0 };
        assert_eq!(signing(&m, 999), vec!["new".to_owned(), "old".to_owned()]);
        assert_eq!(signing(&m, 1000), vec!["new".to_owned()]);
    }
}
