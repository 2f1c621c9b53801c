//! The `schedule_revisions` table.

use sea_orm::entity::prelude::*;

/// A row of `schedule_revisions`: one revision of a schedule's request.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "schedule_revisions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub schedule_id: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub revision: i64,
    /// The request as JSON (`app::ScheduleRequest`).
    pub request: String,
    /// When it took effect, on the database's clock.
    pub effective_from: i64,
}

/// No relations are navigated through the ORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
