//! The `login_throttle` table: failed logins per (IP, email).

use sea_orm::entity::prelude::*;

/// A row of `login_throttle`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "login_throttle")]
pub struct Model {
    /// Hex SHA-256 of `ip \n email`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// Failures since the last success.
    pub failures: i32,
    /// No login for this pair before this instant (epoch ms).
    pub blocked_until: i64,
    pub updated_at: i64,
}

/// No relations.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
