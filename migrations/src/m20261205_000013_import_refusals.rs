//! The rows of an import that the database refused while applying (SPEC §10), one row each,
//! written with the batch that met them: in its transaction when it commits, or on their own
//! when the batch is rolled back under `abort` (the report lists them all the same). A batch
//! checkpoint then holds only its counts, so nothing is copied from one checkpoint to the next.
//! `seq` is the batch's checkpoint: a refusal whose `seq` is past the job's `checkpoint_seq`
//! belongs to a batch that was rolled back, and a redrive forgets it (the batch runs again).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const UP: [&str; 1] = [
    "CREATE TABLE import_refusals (job_id VARCHAR NOT NULL, record BIGINT NOT NULL, seq INTEGER NOT NULL, line BIGINT NOT NULL, \
     message VARCHAR NOT NULL, PRIMARY KEY (job_id, record))",
];

const DOWN: [&str; 1] = ["DROP TABLE import_refusals"];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::execute_all(manager, &UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::execute_all(manager, &DOWN).await
    }
}
