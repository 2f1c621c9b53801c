//! `/api/uploads`: files sent for imports (SPEC §10).

use crate::auth::Actor;
use crate::error::AppError;
use crate::imports::uploads::{self, UploadOutcome};
use crate::state::{AppState, REQUEST_TIMEOUT};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

/// The media types an upload may be declared as (with any parameters): CSV, an XLSX workbook,
/// or bytes of no declared kind (a browser that does not know `.xlsx`). Which it is, the import
/// reads from its first bytes: a workbook starts with a ZIP's signature.
const UPLOAD_MEDIA_TYPES: [&str; 3] = ["text/csv", crate::file_type::XLSX_MEDIA_TYPE, "application/octet-stream"];

/// Refuses a body that is not declared as one of [`UPLOAD_MEDIA_TYPES`].
fn require_file(headers: &HeaderMap) -> Result<(), AppError> {
    let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let essence = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if UPLOAD_MEDIA_TYPES.contains(&essence.as_str()) { Ok(()) } else { Err(AppError::UploadMediaType) }
}

/// `POST /api/uploads`: the body, streamed into the store. 201 for new bytes, 200 for the same
/// bytes from the same user again.
#[utoipa::path(post, path = "/api/uploads", tag = "imports", operation_id = "create_upload",
    request_body(content((String = "text/csv"), (String = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"), (String = "application/octet-stream")), description = "The CSV file or XLSX workbook, at most EXPORTD_MAX_UPLOAD_BYTES"),
    responses(
        (status = 201, description = "A new upload", body = app::UploadView),
        (status = 200, description = "The same bytes as an upload of this user's", body = app::UploadView),
        (status = 401, description = "not signed in", body = app::Problem, content_type = "application/problem+json"),
        (status = 403, description = "import-not-permitted or cross-origin", body = app::Problem, content_type = "application/problem+json"),
        (status = 408, description = "request-timeout: the body stopped arriving", body = app::Problem, content_type = "application/problem+json"),
        (status = 413, description = "body-too-large: above EXPORTD_MAX_UPLOAD_BYTES; nothing kept", body = app::Problem, content_type = "application/problem+json"),
        (status = 415, description = "unsupported-media-type: not text/csv, an XLSX workbook or application/octet-stream", body = app::Problem, content_type = "application/problem+json"),
        (status = 500, description = "internal", body = app::Problem, content_type = "application/problem+json"),
        (status = 503, description = "creation-paused (exportd drain); Retry-After", body = app::Problem, content_type = "application/problem+json")
    ))]
pub async fn create(State(state): State<AppState>, actor: Actor, req: Request) -> Result<Response, AppError> {
    uploads::ensure_may_import(&actor)?;
    require_file(req.headers())?;
    let declared = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    // A body declared far above the limit is refused before it is read; one a little above it
    // is read (and dropped) to its end, so its sender gets the answer.
    if declared.is_some_and(|n| n > state.config.max_upload_bytes.saturating_add(uploads::DRAIN_LIMIT)) {
        return Err(AppError::UploadTooLarge { max: state.config.max_upload_bytes });
    }
    let body = req.into_body().into_data_stream();
    Ok(match uploads::upload(&state, &actor, body, REQUEST_TIMEOUT).await? {
        UploadOutcome::Created(view) => (StatusCode::CREATED, Json(view)).into_response(),
        UploadOutcome::Existing(view) => (StatusCode::OK, Json(view)).into_response(),
    })
}
