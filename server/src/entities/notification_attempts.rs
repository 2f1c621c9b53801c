//! The `notification_attempts` table.

use sea_orm::entity::prelude::*;

/// A row of `notification_attempts`: what one attempt of a notification came to.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "notification_attempts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub notification_id: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub attempt: i32,
    /// When it ended, on the database's clock.
    pub at: i64,
    /// `delivered`, `rejected` (an answer other than 2xx), `refused` (the target's address),
    /// `timeout` or `error`.
    pub outcome: String,
    /// The HTTP status, when there was one.
    pub status_code: Option<i32>,
    /// What went wrong, for operators.
    pub detail: Option<String>,
}

/// No relations are navigated through the ORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
