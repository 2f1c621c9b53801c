//! Uploads (SPEC §10): a CSV file a user sent for an import, kept in the tenant's deployment
//! store. The same bytes from the same user are one upload (unique by digest per tenant and
//! user, never across them); `last_used_at` moves with each use (the upload again, an import
//! naming it), and the janitor removes an upload unused for `EXPORTD_UPLOAD_TTL_SECS` that no
//! unfinished import names (`jobs.upload_id`: the upload a job reads, for an import).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const UP: [&str; 5] = [
    "CREATE TABLE uploads (id VARCHAR NOT NULL PRIMARY KEY, tenant_id VARCHAR NOT NULL REFERENCES tenants (id), \
     user_id VARCHAR NOT NULL REFERENCES users (id), deployment VARCHAR NOT NULL, sha256 VARCHAR NOT NULL, bytes BIGINT NOT NULL, \
     object_key VARCHAR NOT NULL, created_at BIGINT NOT NULL, last_used_at BIGINT NOT NULL)",
    "CREATE UNIQUE INDEX uploads_tenant_user_digest ON uploads (tenant_id, user_id, sha256)",
    "CREATE INDEX uploads_last_used ON uploads (last_used_at)",
    "ALTER TABLE jobs ADD COLUMN upload_id VARCHAR NULL",
    "CREATE INDEX jobs_upload ON jobs (upload_id)",
];

const DOWN: [&str; 3] = ["DROP INDEX jobs_upload", "ALTER TABLE jobs DROP COLUMN upload_id", "DROP TABLE uploads"];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::execute_all(manager, &UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::execute_all(manager, &DOWN).await
    }
}
