//! The `job_events` table: the audit trail of every kind of job.

use sea_orm::entity::prelude::*;

/// A row of `job_events`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "job_events")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub job_id: String,
    pub tenant_id: String,
    /// A user id, or `worker:<id>` / `janitor`.
    pub actor: String,
    pub at: i64,
    pub from_status: Option<String>,
    pub to_status: String,
    pub generation: i32,
    pub detail: Option<String>,
}

/// No relations are navigated through the ORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
