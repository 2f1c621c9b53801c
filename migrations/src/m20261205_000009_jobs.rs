//! One job store for every kind of job (SPEC §10): the `exports` table becomes `jobs`, with a
//! `kind` (`export`, `import`), and `export_events` becomes `job_events`. Claims, leases, fencing,
//! the janitor and the audit trail read one table whatever the kind; what a kind needs beyond
//! the common columns lives in a table of its own, keyed by the job's id. Idempotency keys are
//! scoped by (tenant, actor, kind), so an import never replays an export, and the per-actor limit
//! counts each kind apart. The older indexes keep their `exports_…` names (SQLite cannot rename
//! an index); they follow the table.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const UP: [&str; 8] = [
    "ALTER TABLE exports RENAME TO jobs",
    "ALTER TABLE export_events RENAME TO job_events",
    "ALTER TABLE job_events RENAME COLUMN export_id TO job_id",
    "ALTER TABLE jobs ADD COLUMN kind VARCHAR NOT NULL DEFAULT 'export'",
    "DROP INDEX exports_tenant_actor_key",
    "CREATE UNIQUE INDEX jobs_tenant_actor_kind_key ON jobs (tenant_id, actor_id, kind, idempotency_key)",
    "DROP INDEX exports_actor_status",
    "CREATE INDEX jobs_actor_kind_status ON jobs (actor_id, kind, status)",
];

const DOWN: [&str; 8] = [
    "DROP INDEX jobs_actor_kind_status",
    "CREATE INDEX exports_actor_status ON jobs (actor_id, status)",
    "DROP INDEX jobs_tenant_actor_kind_key",
    "CREATE UNIQUE INDEX exports_tenant_actor_key ON jobs (tenant_id, actor_id, idempotency_key)",
    "ALTER TABLE jobs DROP COLUMN kind",
    "ALTER TABLE job_events RENAME COLUMN job_id TO export_id",
    "ALTER TABLE job_events RENAME TO export_events",
    "ALTER TABLE jobs RENAME TO exports",
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
