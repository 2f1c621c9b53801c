//! The `jobs` table: every job of every kind (SPEC §4, §10), with the columns the job store
//! moves; what one kind needs beyond them lives in a table of its own.

use sea_orm::entity::prelude::*;

/// A row of `jobs`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "jobs")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub tenant_id: String,
    pub actor_id: String,
    /// What the job does (`export`, `import`); see [`crate::job_store::kind::JobKind`].
    pub kind: String,
    pub idempotency_key: String,
    pub fingerprint: String,
    pub report: String,
    /// The request with defaults filled in, as JSON.
    #[sea_orm(column_type = "Text")]
    pub request: String,
    /// The resolved contract, as JSON.
    #[sea_orm(column_type = "Text")]
    pub resolved: String,
    pub deployment: String,
    pub status: String,
    /// The status a transition moved the row from (the audit row reads it back).
    pub previous_status: Option<String>,
    pub generation: i32,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<i64>,
    pub attempt: i32,
    pub next_attempt_at: Option<i64>,
    pub rows_written: i64,
    pub rows_total: Option<i64>,
    pub artifact_key: Option<String>,
    pub artifact_sha256: Option<String>,
    pub artifact_bytes: Option<i64>,
    pub artifact_rows: Option<i64>,
    pub artifact_expires_at: Option<i64>,
    pub artifact_expired: bool,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub error_retryable: Option<bool>,
    pub error_support_ref: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub finished_at: Option<i64>,
    /// When the running attempt last made progress (database clock); set at claim.
    pub last_progress_at: Option<i64>,
    /// The number of the job's last checkpoint (0: none).
    pub checkpoint_seq: i32,
    /// What the first attempt of a job that checkpoints fixed for every later one, as JSON.
    #[sea_orm(column_type = "Text")]
    pub checkpoint_plan: Option<String>,
    /// A checkpointed export's bundle: the SHA-256 of its bytes (`Content-Digest`), hex.
    pub bundle_digest: Option<String>,
    /// The upload the job reads (an import's file); an upload named by an unfinished job is kept.
    pub upload_id: Option<String>,
    /// The schema version of its report or dataset when it was accepted (contract §12); a
    /// worker claims it only if its catalog holds this digest. `None` for jobs accepted before
    /// digests were kept: any worker claims them.
    pub schema_digest: Option<String>,
}

/// No relations are navigated through the ORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
