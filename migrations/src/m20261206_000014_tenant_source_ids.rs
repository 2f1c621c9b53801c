//! Each tenant's source id (contract §12): what a catalog report's `tenant` expression is compared
//! with in the operator's own database. Unique; by default the tenant's own id, as it is for every
//! tenant that existed before (the demo's `ten_acme`, `ten_globex`). Set by
//! `exportd tenant add --source-id`.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const UP: [&str; 3] = [
    "ALTER TABLE tenants ADD COLUMN source_id VARCHAR NOT NULL DEFAULT ''",
    "UPDATE tenants SET source_id = id",
    "CREATE UNIQUE INDEX tenants_source_id ON tenants (source_id)",
];

const DOWN: [&str; 2] = ["DROP INDEX tenants_source_id", "ALTER TABLE tenants DROP COLUMN source_id"];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::execute_all(manager, &UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::execute_all(manager, &DOWN).await
    }
}
