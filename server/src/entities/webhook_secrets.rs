//! The `webhook_secrets` table.

use sea_orm::entity::prelude::*;

/// A row of `webhook_secrets`: the secret a tenant's webhooks are signed with.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_secrets")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub tenant_id: String,
    /// `whsec_` + base64 of 32 random bytes.
    pub secret: String,
    /// The secret before the latest rotation, which also signs until `previous_until`.
    pub previous_secret: Option<String>,
    pub previous_until: Option<i64>,
    pub rotated_at: i64,
}

/// No relations are navigated through the ORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
