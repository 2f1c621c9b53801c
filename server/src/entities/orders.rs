//! The `orders` table.

use sea_orm::entity::prelude::*;

/// A row of `orders`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "orders")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub tenant_id: String,
    pub customer_id: i64,
    pub placed_at: i64,
    pub country: String,
    pub status: String,
    pub total_cents: i64,
    pub currency: String,
    pub notes: String,
    /// The order's key in its tenant (1–64 printable characters); never NULL once inserted (a
    /// trigger names an order inserted without one `ORD-<id>`).
    pub order_ref: Option<String>,
}

/// No relations are navigated through the ORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
