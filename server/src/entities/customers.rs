//! The `customers` table.

use sea_orm::entity::prelude::*;

/// A row of `customers`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "customers")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub tenant_id: String,
    pub name: String,
    pub email: String,
    /// The customer's key in its tenant: `email` trimmed and lower-cased ([`migrations::email_key`]).
    pub email_key: String,
    pub phone: String,
    pub country: String,
    pub created_at: i64,
    pub lifetime_total_cents: i64,
}

/// No relations are navigated through the ORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
