//! Schedules (contract §15): an admin's recurring export, run as a service identity of its own.
//! `schedules` holds what changes with the schedule's life (paused or not and since when, the
//! span of its latest pause, whose due times never run, since when it may run, the latest due
//! time it has run); `schedule_revisions` each revision of its request, from the
//! moment it took effect, so a window runs under the revision current at its due time. A
//! schedule's service identity is a user with `schedule_id` set, who has no password, no
//! provider identity and no token, so it cannot sign in.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const UP: [&str; 4] = [
    "CREATE TABLE schedules (id VARCHAR NOT NULL PRIMARY KEY, tenant_id VARCHAR NOT NULL REFERENCES tenants (id), \
     owner_id VARCHAR NOT NULL REFERENCES users (id), service_user_id VARCHAR NOT NULL UNIQUE REFERENCES users (id), \
     idempotency_key VARCHAR NOT NULL, fingerprint VARCHAR NOT NULL, revision BIGINT NOT NULL, \
     paused BOOLEAN NOT NULL DEFAULT FALSE, paused_reason VARCHAR NULL, paused_at BIGINT NULL, skip_from BIGINT NULL, skip_until BIGINT NULL, \
     active_since BIGINT NOT NULL, last_due BIGINT NULL, \
     deleted_at BIGINT NULL, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL)",
    "CREATE UNIQUE INDEX schedules_key ON schedules (tenant_id, owner_id, idempotency_key)",
    "CREATE TABLE schedule_revisions (schedule_id VARCHAR NOT NULL REFERENCES schedules (id), revision BIGINT NOT NULL, \
     request TEXT NOT NULL, effective_from BIGINT NOT NULL, PRIMARY KEY (schedule_id, revision))",
    "ALTER TABLE users ADD COLUMN schedule_id VARCHAR NULL",
];

const DOWN: [&str; 4] = [
    "ALTER TABLE users DROP COLUMN schedule_id",
    "DROP TABLE schedule_revisions",
    "DROP INDEX schedules_key",
    "DROP TABLE schedules",
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
