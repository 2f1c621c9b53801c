//! The `import_refusals` table: a row of an import that the database refused while applying.

use sea_orm::entity::prelude::*;

/// A row of `import_refusals`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "import_refusals")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub job_id: String,
    /// The record's 1-based number among the file's data records.
    #[sea_orm(primary_key, auto_increment = false)]
    pub record: i64,
    /// The checkpoint of the batch that met it (past the job's last: a batch rolled back).
    pub seq: i32,
    /// The physical line where the record starts (the header is line 1).
    pub line: i64,
    /// Why, in words (never the database's own text).
    pub message: String,
}

/// No relations are navigated through the ORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
