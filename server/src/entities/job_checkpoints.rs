//! The `job_checkpoints` table: each finished step of a job that works in steps.

use sea_orm::entity::prelude::*;

/// A row of `job_checkpoints`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "job_checkpoints")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub job_id: String,
    /// 1, 2, …: one more than the job's checkpoint before it.
    #[sea_orm(primary_key, auto_increment = false)]
    pub seq: i32,
    /// The generation that recorded it.
    pub generation: i32,
    /// The attempt that recorded it.
    pub attempt: i32,
    /// When, by the database's clock.
    pub at: i64,
    /// What the step produced, as JSON (its kind decides the shape).
    #[sea_orm(column_type = "Text")]
    pub payload: String,
}

/// No relations are navigated through the ORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
