//! Checkpoints (SPEC §5.1, and §10 for imports later): a job that works in steps records each
//! finished step with one fenced UPDATE of its row and a row here, in one transaction. The job
//! row keeps the number of its last checkpoint and the plan its first attempt fixed (for a
//! checkpointed export: the part size and the highest key); a checkpointed export's bundle keeps
//! the digest of its bytes. Rows are read by key within a tenant, so each report's table gets an
//! index on (tenant_id, id).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const UP: [&str; 6] = [
    "ALTER TABLE exports ADD COLUMN checkpoint_seq INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE exports ADD COLUMN checkpoint_plan TEXT NULL",
    "ALTER TABLE exports ADD COLUMN bundle_digest VARCHAR NULL",
    "CREATE TABLE job_checkpoints (job_id VARCHAR NOT NULL, seq INTEGER NOT NULL, generation INTEGER NOT NULL, attempt INTEGER NOT NULL, \
     at BIGINT NOT NULL, payload TEXT NOT NULL, PRIMARY KEY (job_id, seq))",
    "CREATE INDEX orders_tenant_key ON orders (tenant_id, id)",
    "CREATE INDEX customers_tenant_key ON customers (tenant_id, id)",
];

const DOWN: [&str; 6] = [
    "DROP INDEX IF EXISTS customers_tenant_key",
    "DROP INDEX IF EXISTS orders_tenant_key",
    "DROP TABLE job_checkpoints",
    "ALTER TABLE exports DROP COLUMN bundle_digest",
    "ALTER TABLE exports DROP COLUMN checkpoint_plan",
    "ALTER TABLE exports DROP COLUMN checkpoint_seq",
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
