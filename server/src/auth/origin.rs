//! The same-origin rule for cookie-authenticated unsafe requests (SPEC §2).

use crate::error::AppError;
use axum::http::{header, request::Parts};

/// Refuses a request whose `Origin` is another origin than the `Host` it was sent to, or whose
/// `Sec-Fetch-Site` says it came from another site. A request with neither header is not from a
/// browser that would attach our cookie to a cross-site form, and passes.
pub fn require_same_origin(parts: &Parts) -> Result<(), AppError> {
    if let Some(site) = parts.headers.get("sec-fetch-site") {
        let site = site.to_str().unwrap_or("");
        if site != "same-origin" && site != "none" {
            return Err(AppError::CrossOrigin);
        }
    }
    if let Some(origin) = parts.headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let host = parts.headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
        let authority = origin.split_once("://").map(|(_, rest)| rest).unwrap_or("");
        if host.is_empty() || authority != host {
            return Err(AppError::CrossOrigin);
        }
    }
    Ok(())
}
