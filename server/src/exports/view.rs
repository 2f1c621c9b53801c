//! The ExportView of an operation (SPEC §3.2).

use crate::clock::rfc3339;
use crate::entities::jobs;
use crate::error::AppError;
use super::parts::PartsPlan;
use app::{ArtifactView, Consistency, DownloadView, ErrorView, ExportRequest, ExportStatus, ExportView, PartView, Progress, ResolvedContract};

/// Reads the stored status.
pub fn status_of(m: &jobs::Model) -> Result<ExportStatus, AppError> {
    ExportStatus::parse(&m.status).ok_or_else(|| AppError::Internal(format!("unknown stored status {:?}", m.status)))
}

/// Reads the stored resolved contract.
pub fn resolved_of(m: &jobs::Model) -> Result<ResolvedContract, AppError> {
    serde_json::from_str(&m.resolved).map_err(|e| AppError::Internal(format!("stored contract of {}: {e}", m.id)))
}

/// Reads the stored request.
pub fn request_of(m: &jobs::Model) -> Result<ExportRequest, AppError> {
    serde_json::from_str(&m.request).map_err(|e| AppError::Internal(format!("stored request of {}: {e}", m.id)))
}

/// Why a job failed, as its view shows it.
pub fn error_of(m: &jobs::Model) -> Option<ErrorView> {
    m.error_code.as_ref().map(|code| ErrorView {
        code: code.clone(),
        message: m.error_message.clone().unwrap_or_default(),
        retryable: m.error_retryable.unwrap_or(false),
        support_ref: m.error_support_ref.clone(),
    })
}

/// The view of a stored operation, with a download link when one was minted for the reader and,
/// for a ready checkpointed export, its parts.
pub fn to_view(m: &jobs::Model, download: Option<DownloadView>, parts: Option<Vec<PartView>>) -> Result<ExportView, AppError> {
    let artifact = match (&m.artifact_sha256, m.artifact_bytes, m.artifact_rows) {
        (Some(sha256), Some(bytes), Some(rows)) => Some(ArtifactView {
            sha256: sha256.clone(),
            bytes,
            rows,
            expires_at: rfc3339(m.artifact_expires_at.unwrap_or(0)),
            expired: m.artifact_expired,
            parts,
        }),
        _ => None,
    };
    let request = request_of(m)?;
    let checkpointed = request.consistency == Consistency::Checkpointed;
    let parts_expected = m.checkpoint_plan.as_deref().and_then(|p| serde_json::from_str::<PartsPlan>(p).ok()).map(|p| p.parts_expected());
    let error = error_of(m);
    Ok(ExportView {
        id: m.id.clone(),
        status: status_of(m)?,
        status_url: format!("/api/exports/{}", m.id),
        report: m.report.clone(),
        request,
        resolved: resolved_of(m)?,
        created_at: rfc3339(m.created_at),
        updated_at: rfc3339(m.updated_at),
        attempt: m.attempt,
        next_attempt_at: m.next_attempt_at.map(rfc3339),
        last_progress_at: match status_of(m)? {
            ExportStatus::Running | ExportStatus::CancelRequested => m.last_progress_at.map(rfc3339),
            _ => None,
        },
        progress: Progress {
            rows_written: m.rows_written,
            rows_total: m.rows_total,
            parts_done: checkpointed.then_some(i64::from(m.checkpoint_seq)),
            parts_expected: parts_expected.filter(|_| checkpointed),
        },
        artifact,
        download,
        error,
    })
}
