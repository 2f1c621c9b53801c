//! Ids in paths, as the API answers them (SPEC §11): a segment that does not decode (bytes that
//! are not UTF-8, which axum would answer as a text/plain 400) is the unknown id it names.

use crate::error::AppError;
use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;

/// The `{id}` of `/api/exports/{id}…`; one that does not decode is `export-not-found`.
pub struct ExportIdPath(pub String);

impl<S: Send + Sync> FromRequestParts<S> for ExportIdPath {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<ExportIdPath, AppError> {
        Path::<String>::from_request_parts(parts, state).await.map(|Path(id)| ExportIdPath(id)).map_err(|_| AppError::ExportNotFound)
    }
}

/// The `{id}` of `/api/imports/{id}…`; one that does not decode is `import-not-found`.
pub struct ImportIdPath(pub String);

impl<S: Send + Sync> FromRequestParts<S> for ImportIdPath {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<ImportIdPath, AppError> {
        Path::<String>::from_request_parts(parts, state).await.map(|Path(id)| ImportIdPath(id)).map_err(|_| AppError::ImportNotFound)
    }
}

/// The `{id}` of a signed link `/files/{id}`; one that does not decode, or is not the id of a
/// job (an export, or an import's report), is `link-invalid`.
pub struct LinkIdPath(pub String);

impl<S: Send + Sync> FromRequestParts<S> for LinkIdPath {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<LinkIdPath, AppError> {
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(id)) if crate::job_store::kind::JobKind::of_id(&id).is_some() => Ok(LinkIdPath(id)),
            _ => Err(AppError::LinkInvalid),
        }
    }
}

/// The `{id}` and `{n}` of `/api/exports/{id}/parts/{n}/download`; an id that does not decode or
/// a part number that is not a positive decimal integer is `export-not-found` (no such part).
pub struct ExportPartPath(pub String, pub i32);

impl<S: Send + Sync> FromRequestParts<S> for ExportPartPath {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<ExportPartPath, AppError> {
        let Ok(Path((id, n))) = Path::<(String, String)>::from_request_parts(parts, state).await else { return Err(AppError::ExportNotFound) };
        // Digits only: `+1` or ` 1` parse as 1 in Rust, but name no part.
        match n.parse::<i32>() {
            Ok(index) if index >= 1 && n.bytes().all(|b| b.is_ascii_digit()) => Ok(ExportPartPath(id, index)),
            _ => Err(AppError::ExportNotFound),
        }
    }
}

/// The `{id}` of `/api/schedules/{id}…`; one that does not decode is `schedule-not-found`.
pub struct ScheduleIdPath(pub String);

impl<S: Send + Sync> FromRequestParts<S> for ScheduleIdPath {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<ScheduleIdPath, AppError> {
        Path::<String>::from_request_parts(parts, state).await.map(|Path(id)| ScheduleIdPath(id)).map_err(|_| AppError::ScheduleNotFound)
    }
}
