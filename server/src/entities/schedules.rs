//! The `schedules` table.

use sea_orm::entity::prelude::*;

/// A row of `schedules`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "schedules")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub tenant_id: String,
    /// The admin who made it.
    pub owner_id: String,
    /// The user its operations are created by.
    pub service_user_id: String,
    /// The creating request's `Idempotency-Key`.
    pub idempotency_key: String,
    /// The creating request's fingerprint.
    pub fingerprint: String,
    /// The current revision.
    pub revision: i64,
    pub paused: bool,
    /// Why it was paused, when the owner did not: `owner_inactive`, `owner_demoted`.
    pub paused_reason: Option<String>,
    /// When it was paused, while it is.
    pub paused_at: Option<i64>,
    /// The span of its latest pause, `(skip_from, skip_until]`, whose due times never run.
    pub skip_from: Option<i64>,
    /// See `skip_from`.
    pub skip_until: Option<i64>,
    /// The moment from which its due times run (its creation).
    pub active_since: i64,
    /// The latest due time it has run.
    pub last_due: Option<i64>,
    pub deleted_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// No relations are navigated through the ORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
