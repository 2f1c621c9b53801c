//! What an import job stores, beside the columns every job has: what its request resolved to
//! (`jobs.resolved`), what its validating phase found (the checkpoint plan, fixed once, so a
//! later attempt never validates again), in each batch's checkpoint the counts so far, and in
//! `import_refusals` each row the database refused, once.

use crate::entities::{import_refusals, jobs};
use crate::error::AppError;
use crate::job_store::kind::JobKind;
use app::{ExportStatus, ImportRequest, ReportStatus, RowError};
use sea_orm::sea_query::OnConflict;
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Set};
use serde::{Deserialize, Serialize};

/// What an import's request resolved to when it was accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolved {
    /// Where the upload's bytes are.
    pub object_key: String,
    /// Their digest.
    pub sha256: String,
    /// Their size.
    pub bytes: i64,
}

/// What the validating phase decided, for every later attempt.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Data records.
    pub rows: i64,
    /// Records with no error.
    pub valid: i64,
    /// Records with at least one error.
    pub invalid: i64,
    /// The first errors, in input order.
    pub first_errors: Vec<RowError>,
    /// The validation's report file, when it found errors.
    pub report: Option<ReportFile>,
    /// Set when the import fails without applying anything: the failure's code.
    pub fails: Option<String>,
    /// The records a batch covers, fixed at the first claim, so every attempt's batches start
    /// on the same records (a source apart keys its ledger by them); `None` in plans stored
    /// before it was kept: the worker's own setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_rows: Option<i64>,
}

/// A report file in the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportFile {
    /// Its key.
    pub key: String,
    /// Hex SHA-256.
    pub sha256: String,
    /// Size in bytes.
    pub bytes: i64,
    /// Data rows.
    pub rows: i64,
}

/// A batch's checkpoint: the counts up to and including it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Mark {
    /// The 1-based number of the last record the batch covered.
    pub last_record: i64,
    /// Rows that created a record.
    pub created: i64,
    /// Rows that changed one.
    pub updated: i64,
    /// Rows equal to their record.
    pub unchanged: i64,
    /// Valid rows the database refused.
    pub refused: i64,
}

impl Mark {
    /// Rows written (or, in a dry run, that would be).
    pub fn applied(&self) -> i64 {
        self.created + self.updated + self.unchanged
    }
}

/// A row the database refused while a batch was applied (or, in a dry run, would refuse).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The record's 1-based number among the file's data records.
    pub record: i64,
    /// The line it starts on.
    pub line: i64,
    /// Why, in words.
    pub message: String,
}

/// Records the rows batch `seq` refused, inside the batch's transaction (or on their own for a
/// batch rolled back under `abort`); a row recorded before is left as it is.
pub async fn record_refusals<C: ConnectionTrait>(db: &C, job_id: &str, seq: i32, refused: &[Refused]) -> Result<(), DbErr> {
    // At most 4 columns a row: well within both backends' limits on bound values per statement.
    for chunk in refused.chunks(1000) {
        let rows = chunk.iter().map(|r| import_refusals::ActiveModel {
            job_id: Set(job_id.to_owned()),
            record: Set(r.record),
            seq: Set(seq),
            line: Set(r.line),
            message: Set(r.message.clone()),
        });
        import_refusals::Entity::insert_many(rows)
            .on_conflict(OnConflict::columns([import_refusals::Column::JobId, import_refusals::Column::Record]).do_nothing().to_owned())
            .exec_without_returning(db)
            .await?;
    }
    Ok(())
}

/// The refusals of `job_id` after record `after`, in record order, at most `limit` of them.
pub async fn refusals_after<C: ConnectionTrait>(db: &C, job_id: &str, after: i64, limit: u64) -> Result<Vec<import_refusals::Model>, DbErr> {
    import_refusals::Entity::find()
        .filter(import_refusals::Column::JobId.eq(job_id))
        .filter(import_refusals::Column::Record.gt(after))
        .order_by_asc(import_refusals::Column::Record)
        .limit(limit)
        .all(db)
        .await
}

/// The counts of the last committed batch of `job_id` (all zero before the first).
pub async fn last_mark<C: ConnectionTrait>(db: &C, job_id: &str) -> Result<Mark, DbErr> {
    match crate::job_store::checkpoints::last_of(db, job_id).await? {
        Some(c) => serde_json::from_str(&c.payload).map_err(|e| DbErr::Custom(format!("checkpoint of {job_id}: {e}"))),
        None => Ok(Mark::default()),
    }
}

/// Whether `m` is an import that ended failed or cancelled without the report it is owed: one
/// is owed once a worker has read its file (it was claimed, or its plan is fixed). The janitor
/// looks for these with the same rule ([`crate::job_store::transitions::owed_reports`]).
pub fn owes_report(m: &jobs::Model) -> bool {
    let ended_short = matches!(ExportStatus::parse(&m.status), Some(ExportStatus::Failed | ExportStatus::Cancelled));
    JobKind::parse(&m.kind).is_some_and(JobKind::reports_every_ending) && ended_short && m.artifact_key.is_none() && (m.attempt > 0 || m.checkpoint_plan.is_some())
}

/// Where the report of `m` stands.
pub fn report_status(m: &jobs::Model) -> ReportStatus {
    if m.artifact_key.is_some() {
        ReportStatus::Written
    } else if owes_report(m) {
        ReportStatus::Pending
    } else {
        ReportStatus::None
    }
}

/// The stored request of an import.
pub fn request_of(m: &jobs::Model) -> Result<ImportRequest, AppError> {
    serde_json::from_str(&m.request).map_err(|e| AppError::Internal(format!("stored request of {}: {e}", m.id)))
}

/// What the stored request resolved to.
pub fn resolved_of(m: &jobs::Model) -> Result<Resolved, AppError> {
    serde_json::from_str(&m.resolved).map_err(|e| AppError::Internal(format!("stored resolution of {}: {e}", m.id)))
}

/// The plan its validating phase fixed, if it ran.
pub fn plan_of(m: &jobs::Model) -> Result<Option<Plan>, AppError> {
    m.checkpoint_plan
        .as_deref()
        .map(|p| serde_json::from_str(p).map_err(|e| AppError::Internal(format!("stored plan of {}: {e}", m.id))))
        .transpose()
}
