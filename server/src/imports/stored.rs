//! What an import job stores, beside the columns every job has: what its request resolved to
//! (`jobs.resolved`), what its validating phase found (the checkpoint plan, fixed once, so a
//! later attempt never validates again) and, in each batch's checkpoint, the counts so far.

use crate::entities::jobs;
use crate::error::AppError;
use app::{ImportRequest, RowError};
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
