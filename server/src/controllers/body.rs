//! Request bodies: the 64 KiB limit as a problem (413) and the JSON media type (415).

use crate::error::AppError;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderMap};

/// The raw bytes of a request body, within the body limit.
pub struct RawBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<RawBody, AppError> {
        Bytes::from_request(req, state).await.map(RawBody).map_err(|rejection| {
            if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                AppError::BodyTooLarge
            } else {
                AppError::MalformedJson("the body could not be read".into())
            }
        })
    }
}

/// Refuses a body that is not declared as JSON.
pub fn require_json(headers: &HeaderMap) -> Result<(), AppError> {
    let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let essence = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json")) {
        Ok(())
    } else {
        Err(AppError::UnsupportedMediaType)
    }
}
