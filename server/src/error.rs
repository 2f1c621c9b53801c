//! The one error type of the HTTP layer and its one `IntoResponse`: RFC 9457 problem+json with
//! the codes of SPEC §3. Internal causes are logged beside a support reference, never sent.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// One field that failed validation: the shared type the browser reads too.
pub use app::ProblemField as FieldError;

/// Every error an API call can answer with.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("authentication required")]
    Unauthenticated,
    #[error("invalid credentials")]
    InvalidCredentials,
    #[error("cross-origin request refused")]
    CrossOrigin,
    #[error("the role may not export")]
    ExportNotPermitted(String),
    #[error("the role may not import")]
    ImportNotPermitted,
    #[error("permission revoked")]
    PermissionRevoked,
    #[error("export not found")]
    ExportNotFound,
    #[error("import not found")]
    ImportNotFound,
    #[error("schedule not found")]
    ScheduleNotFound,
    #[error("only an admin manages schedules")]
    ScheduleNotPermitted,
    #[error("upload not found")]
    UploadNotFound,
    #[error("import already finished")]
    ImportAlreadyFinished,
    #[error("route not found")]
    NotFound,
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("export already finished")]
    ExportAlreadyFinished(Box<app::ExportView>),
    #[error("export not ready")]
    ExportNotReady,
    #[error("artifact expired")]
    ArtifactExpired,
    #[error("body too large")]
    BodyTooLarge,
    /// An upload above `EXPORTD_MAX_UPLOAD_BYTES`; the limit in bytes.
    #[error("upload too large")]
    UploadTooLarge { max: u64 },
    /// An upload that is not declared as CSV or a workbook.
    #[error("upload of an unsupported media type")]
    UploadMediaType,
    #[error("unsupported media type")]
    UnsupportedMediaType,
    #[error("idempotency key missing")]
    IdempotencyKeyMissing,
    #[error("idempotency key invalid: {0}")]
    IdempotencyKeyInvalid(String),
    #[error("malformed json")]
    MalformedJson(String),
    #[error("invalid request")]
    InvalidRequest(Vec<FieldError>),
    #[error("idempotency key reused")]
    IdempotencyKeyReused { operation_ref: String },
    #[error("too many exports")]
    TooManyExports { retry_after_secs: u64 },
    #[error("rate limited")]
    RateLimited { retry_after_secs: u64 },
    #[error("link invalid")]
    LinkInvalid,
    #[error("link expired")]
    LinkExpired,
    /// A `Range` that no byte of the file satisfies; `len` is the file's size.
    #[error("range not satisfiable")]
    RangeNotSatisfiable { len: u64 },
    /// The database or an object store does not answer; the detail names which (a store by its
    /// deployment, never by anything secret).
    #[error("not ready: {0}")]
    NotReady(String),
    /// A bounded wait gave up (a row lock or SQLite's write lock held by another process, a
    /// statement cut off, no connection free): nothing changed; try again in a second.
    #[error("busy")]
    Busy,
    /// The catalog's authority query did not answer (its source is down or too slow): answered
    /// 503 `busy`, never a guess at the role; the cause goes to the log only.
    #[error("authority unanswered: {0}")]
    AuthorityUnanswered(String),
    /// The request had no answer within the server's request timeout (a client too slow to
    /// send its body, most often).
    #[error("request timeout")]
    RequestTimeout,
    /// `exportd drain` is on: no new operations are accepted for now.
    #[error("creation paused")]
    CreationPaused { retry_after_secs: u64 },
    /// Anything else; the cause is logged with a support reference and never sent.
    #[error("internal: {0}")]
    Internal(String),
}

impl From<sea_orm::DbErr> for AppError {
    fn from(e: sea_orm::DbErr) -> Self {
        if crate::db::is_busy(&e) {
            tracing::warn!(error = %e, "a bounded database wait gave up; answered busy");
            return AppError::Busy;
        }
        AppError::Internal(format!("database: {e}"))
    }
}

impl From<crate::storage::StoreError> for AppError {
    fn from(e: crate::storage::StoreError) -> Self {
        AppError::Internal(format!("object store: {e}"))
    }
}

impl From<object_store::Error> for AppError {
    fn from(e: object_store::Error) -> Self {
        AppError::Internal(format!("object store: {e}"))
    }
}

impl AppError {
    /// The problem code, HTTP status and title.
    pub fn parts(&self) -> (&'static str, StatusCode, &'static str) {
        use AppError::*;
        match self {
            Unauthenticated => ("unauthenticated", StatusCode::UNAUTHORIZED, "Authentication required"),
            InvalidCredentials => ("invalid-credentials", StatusCode::UNAUTHORIZED, "Wrong email or password"),
            CrossOrigin => ("cross-origin", StatusCode::FORBIDDEN, "Cross-origin request refused"),
            ExportNotPermitted(_) => ("export-not-permitted", StatusCode::FORBIDDEN, "Your role may not export this"),
            ImportNotPermitted => ("import-not-permitted", StatusCode::FORBIDDEN, "Only an admin may upload and import"),
            PermissionRevoked => ("permission-revoked", StatusCode::FORBIDDEN, "You are no longer allowed to download this export"),
            ExportNotFound => ("export-not-found", StatusCode::NOT_FOUND, "Export not found"),
            ImportNotFound => ("import-not-found", StatusCode::NOT_FOUND, "Import not found"),
            ScheduleNotFound => ("schedule-not-found", StatusCode::NOT_FOUND, "Schedule not found"),
            ScheduleNotPermitted => ("schedule-not-permitted", StatusCode::FORBIDDEN, "Only an admin manages schedules"),
            UploadNotFound => ("upload-not-found", StatusCode::UNPROCESSABLE_ENTITY, "No upload of yours has this id"),
            ImportAlreadyFinished => ("export-already-finished", StatusCode::CONFLICT, "The import has already finished"),
            NotFound => ("not-found", StatusCode::NOT_FOUND, "Not found"),
            MethodNotAllowed => ("method-not-allowed", StatusCode::METHOD_NOT_ALLOWED, "Method not allowed"),
            ExportAlreadyFinished(_) => ("export-already-finished", StatusCode::CONFLICT, "The export has already finished"),
            ExportNotReady => ("export-not-ready", StatusCode::CONFLICT, "The export is not ready"),
            ArtifactExpired => ("artifact-expired", StatusCode::GONE, "The file has expired"),
            BodyTooLarge => ("body-too-large", StatusCode::PAYLOAD_TOO_LARGE, "The body is larger than 64 KiB"),
            UnsupportedMediaType => ("unsupported-media-type", StatusCode::UNSUPPORTED_MEDIA_TYPE, "The body must be application/json"),
            UploadTooLarge { .. } => ("body-too-large", StatusCode::PAYLOAD_TOO_LARGE, "The file is larger than the upload limit"),
            UploadMediaType => ("unsupported-media-type", StatusCode::UNSUPPORTED_MEDIA_TYPE, "The body must be text/csv or an XLSX workbook"),
            IdempotencyKeyMissing => ("idempotency-key-missing", StatusCode::BAD_REQUEST, "The Idempotency-Key header is required"),
            IdempotencyKeyInvalid(_) => ("idempotency-key-invalid", StatusCode::BAD_REQUEST, "The Idempotency-Key header is invalid"),
            MalformedJson(_) => ("malformed-json", StatusCode::BAD_REQUEST, "The body is not valid JSON"),
            InvalidRequest(_) => ("invalid-request", StatusCode::UNPROCESSABLE_ENTITY, "The request is invalid"),
            IdempotencyKeyReused { .. } => ("idempotency-key-reused", StatusCode::UNPROCESSABLE_ENTITY, "This Idempotency-Key was used for a different request"),
            TooManyExports { .. } => ("too-many-exports", StatusCode::TOO_MANY_REQUESTS, "Too many unfinished exports"),
            RateLimited { .. } => ("rate-limited", StatusCode::TOO_MANY_REQUESTS, "Too many attempts"),
            LinkInvalid => ("link-invalid", StatusCode::FORBIDDEN, "The link is invalid"),
            LinkExpired => ("link-expired", StatusCode::FORBIDDEN, "The link has expired"),
            RangeNotSatisfiable { .. } => ("range-not-satisfiable", StatusCode::RANGE_NOT_SATISFIABLE, "The range is outside the file"),
            NotReady(_) => ("not-ready", StatusCode::SERVICE_UNAVAILABLE, "A service this process needs does not answer"),
            Busy | AuthorityUnanswered(_) => ("busy", StatusCode::SERVICE_UNAVAILABLE, "Busy; try again in a moment"),
            RequestTimeout => ("request-timeout", StatusCode::REQUEST_TIMEOUT, "The request took too long"),
            CreationPaused { .. } => ("creation-paused", StatusCode::SERVICE_UNAVAILABLE, "New operations are paused for maintenance"),
            Internal(_) => ("internal", StatusCode::INTERNAL_SERVER_ERROR, "Internal error"),
        }
    }
}

/// A new opaque reference that ties a response to a log line.
pub fn new_support_ref() -> String {
    format!("ref_{}", uuid::Uuid::new_v4().simple())
}

impl AppError {
    /// The RFC 9457 body of this error, the same for the REST API and the page's server
    /// functions. An internal cause is logged beside a new support reference and never sent.
    pub fn into_problem(self) -> app::Problem {
        let (code, status, title) = self.parts();
        let mut problem = app::Problem::new(code, status.as_u16(), title);
        match self {
            AppError::ExportNotPermitted(detail)
            | AppError::IdempotencyKeyInvalid(detail)
            | AppError::MalformedJson(detail)
            | AppError::NotReady(detail) => {
                problem.detail = Some(detail);
            }
            AppError::InvalidRequest(errors) => problem.errors = Some(errors),
            AppError::UploadTooLarge { max } => problem.detail = Some(format!("at most {max} bytes")),
            AppError::IdempotencyKeyReused { operation_ref } => problem.operation_ref = Some(operation_ref),
            AppError::ExportAlreadyFinished(view) => problem.export = Some(view),
            AppError::TooManyExports { retry_after_secs } | AppError::RateLimited { retry_after_secs } | AppError::CreationPaused { retry_after_secs } => {
                problem.retry_after = Some(retry_after_secs);
            }
            AppError::Busy => problem.retry_after = Some(1),
            AppError::AuthorityUnanswered(cause) => {
                tracing::warn!(cause = %cause, "the authority source did not answer; answered busy");
                problem.retry_after = Some(1);
            }
            AppError::Internal(cause) => {
                let support_ref = new_support_ref();
                tracing::error!(support_ref = %support_ref, cause = %cause, "internal error");
                problem.support_ref = Some(support_ref);
            }
            _ => {}
        }
        problem
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let content_range = match &self {
            AppError::RangeNotSatisfiable { len } => Some(format!("bytes */{len}")),
            _ => None,
        };
        let problem = self.into_problem();
        let status = StatusCode::from_u16(problem.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let retry_after = problem.retry_after;
        let body = serde_json::to_string(&problem).unwrap_or_default();
        let mut resp = (status, body).into_response();
        resp.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        if let Some(v) = content_range.and_then(|v| HeaderValue::from_str(&v).ok()) {
            resp.headers_mut().insert(header::CONTENT_RANGE, v);
        }
        if let Some(secs) = retry_after {
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body_of(err: AppError) -> (StatusCode, String, serde_json::Value) {
        let resp = err.into_response();
        let status = resp.status();
        let ct = resp.headers()[header::CONTENT_TYPE].to_str().unwrap().to_owned();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        (status, ct, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn an_internal_error_is_opaque_and_carries_a_support_reference() {
        let (status, ct, body) = body_of(AppError::Internal("database: relation \"exports\" at /var/lib/secret".into())).await;
        assert_eq!(status, 500);
        assert_eq!(ct, "application/problem+json");
        assert_eq!(body["code"], "internal");
        assert_eq!(body["status"], 500);
        assert!(body["support_ref"].as_str().unwrap().starts_with("ref_"));
        let text = body.to_string();
        assert!(!text.contains("relation") && !text.contains("/var/lib"), "{text}");
    }

    #[tokio::test]
    async fn a_database_error_becomes_an_opaque_internal_problem() {
        let (status, _, body) = body_of(sea_orm::DbErr::Custom("syntax error at or near SELECT".into()).into()).await;
        assert_eq!(status, 500);
        assert!(!body.to_string().contains("SELECT"));
    }
}
