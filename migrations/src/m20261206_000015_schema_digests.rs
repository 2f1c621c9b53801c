//! Each operation's schema version (contract §12): the digest of its report's or dataset's
//! definition in the catalog that accepted it. A worker claims only operations whose digest its
//! own catalog holds. Operations accepted before this migration have none, and any worker
//! claims them.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const UP: [&str; 1] = ["ALTER TABLE jobs ADD COLUMN schema_digest VARCHAR NULL"];

const DOWN: [&str; 1] = ["ALTER TABLE jobs DROP COLUMN schema_digest"];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::execute_all(manager, &UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::execute_all(manager, &DOWN).await
    }
}
