//! What keeping a fleet healthy needs: each running export's last progress (separate from its
//! lease, so the stall rule can tell a hung attempt from a slow one), each deployment's object
//! store bound by its identity (so no process writes a deployment's files elsewhere), and the
//! operator's switches (`exportd drain`).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const UP: [&str; 3] = [
    "ALTER TABLE exports ADD COLUMN last_progress_at BIGINT NULL",
    "CREATE TABLE deployment_stores (deployment VARCHAR NOT NULL PRIMARY KEY, identity VARCHAR NOT NULL, recorded_at BIGINT NOT NULL)",
    "CREATE TABLE settings (name VARCHAR NOT NULL PRIMARY KEY, value VARCHAR NOT NULL, updated_at BIGINT NOT NULL)",
];

const DOWN: [&str; 3] = ["DROP TABLE settings", "DROP TABLE deployment_stores", "ALTER TABLE exports DROP COLUMN last_progress_at"];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::execute_all(manager, &UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::execute_all(manager, &DOWN).await
    }
}
