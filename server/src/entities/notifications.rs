//! The `notifications` table: the outbox of contract §15.

use sea_orm::entity::prelude::*;

/// A row of `notifications`: one delivery of one terminal transition.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "notifications")]
pub struct Model {
    /// `msg_…`: the webhook's `webhook-id`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub tenant_id: String,
    pub operation_id: String,
    /// `webhook` or `email`.
    pub channel: String,
    /// The webhook's URL or the email address.
    pub target: String,
    /// `en` or `ar`: the email's language.
    pub language: String,
    /// `export.ready`, `import.failed`, …
    pub event_type: String,
    /// The event as JSON, its links as paths (the origin is added when it is sent).
    #[sea_orm(column_type = "Text")]
    pub payload: String,
    /// `pending`, `delivered` or `failed`.
    pub status: String,
    /// Attempts claimed so far (an attempt's number fences its outcome).
    pub attempts: i32,
    /// The attempt count when it was written or last redelivered: the retry wait doubles from it.
    pub retry_base: i32,
    pub next_attempt_at: Option<i64>,
    /// After this an undelivered notification is `failed`.
    pub retry_until: i64,
    /// While an attempt is in flight, until when it is the claimer's.
    pub lease_until: Option<i64>,
    pub created_at: i64,
    pub finished_at: Option<i64>,
}

/// No relations are navigated through the ORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
