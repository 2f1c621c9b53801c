//! Notifications (contract §15): an outbox. `notifications` holds one row per delivery (a
//! webhook, or one email address) of one terminal transition, written in that transition's
//! transaction; its id is the webhook's `webhook-id`, the same on every attempt.
//! `notification_attempts` records each attempt, and `webhook_secrets` each tenant's signing
//! secret, with the one it replaced while that one still signs.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const UP: [&str; 5] = [
    "CREATE TABLE notifications (id VARCHAR NOT NULL PRIMARY KEY, tenant_id VARCHAR NOT NULL, operation_id VARCHAR NOT NULL, \
     channel VARCHAR NOT NULL, target VARCHAR NOT NULL, language VARCHAR NOT NULL, event_type VARCHAR NOT NULL, payload TEXT NOT NULL, \
     status VARCHAR NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, retry_base INTEGER NOT NULL DEFAULT 0, next_attempt_at BIGINT NULL, retry_until BIGINT NOT NULL, \
     lease_until BIGINT NULL, created_at BIGINT NOT NULL, finished_at BIGINT NULL)",
    "CREATE INDEX notifications_due ON notifications (status, next_attempt_at)",
    "CREATE INDEX notifications_operation ON notifications (operation_id)",
    "CREATE TABLE notification_attempts (notification_id VARCHAR NOT NULL REFERENCES notifications (id) ON DELETE CASCADE, attempt INTEGER NOT NULL, \
     at BIGINT NOT NULL, outcome VARCHAR NOT NULL, status_code INTEGER NULL, detail VARCHAR NULL, PRIMARY KEY (notification_id, attempt))",
    "CREATE TABLE webhook_secrets (tenant_id VARCHAR NOT NULL PRIMARY KEY REFERENCES tenants (id), secret VARCHAR NOT NULL, \
     previous_secret VARCHAR NULL, previous_until BIGINT NULL, rotated_at BIGINT NOT NULL)",
];

const DOWN: [&str; 5] = [
    "DROP TABLE webhook_secrets",
    "DROP TABLE notification_attempts",
    "DROP INDEX notifications_operation",
    "DROP INDEX notifications_due",
    "DROP TABLE notifications",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::execute_all(manager, &UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::execute_all(manager, &DOWN).await
    }
}
