//! What a signed link serves, of any kind of job: an export's file, part or bundle, or an
//! import's report.

use crate::entities::jobs;
use crate::error::AppError;

/// What a download serves: the export's file, one part of a checkpointed export, or the bundle
/// of a checkpointed export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// The file of a snapshot export, or the bundle of a checkpointed one.
    Artifact,
    /// Part `n` (1, 2, …) of a checkpointed export.
    Part(i32),
}

/// The bytes a verified link serves.
pub enum Body {
    /// One stored object, whole.
    Object(object_store::path::Path),
    /// The bundle of a checkpointed export, made of its manifest and its stored parts.
    Bundle(crate::bundle::Bundle),
}

/// What a signed link may serve, after the re-checks: the export, its store, the body, its size,
/// its identity (the `ETag`: the file's, the part's or the manifest's digest), the digest of its
/// bytes, and how it is named.
pub struct LinkedArtifact {
    /// The export the link is for.
    pub export: jobs::Model,
    /// The store holding the bytes.
    pub store: crate::storage::ExportStore,
    /// What is served.
    pub body: Body,
    /// Its size in bytes.
    pub len: u64,
    /// Hex SHA-256 that identifies it.
    pub etag_sha256: String,
    /// Hex SHA-256 of its bytes.
    pub digest: String,
    /// The name it is saved under.
    pub filename: String,
    /// Its media type.
    pub media_type: &'static str,
    /// What it is, for the audit trail.
    pub served: Served,
}

/// A file missing from its store is expired (retention ran, or someone removed it), not an error.
pub fn artifact_gone(e: object_store::Error) -> AppError {
    match e {
        object_store::Error::NotFound { .. } => AppError::ArtifactExpired,
        e => e.into(),
    }
}
