//! The `users` table.

use sea_orm::entity::prelude::*;

/// A row of `users`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "users")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub tenant_id: String,
    pub email: String,
    pub password_hash: String,
    pub role: String,
    pub active: bool,
    pub created_at: i64,
    /// The provider's issuer, for a user who signs in through it.
    pub oidc_issuer: Option<String>,
    /// The provider's `sub`, for a user who signs in through it.
    pub oidc_subject: Option<String>,
    /// The email the provider's claims gave (optional, not unique).
    pub contact_email: Option<String>,
    /// A role set by `exportd user set-role`, which later claims do not change.
    pub role_pinned: bool,
    /// For a schedule's service identity, its schedule: such a user cannot sign in.
    pub schedule_id: Option<String>,
}

/// No relations are navigated through the ORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
