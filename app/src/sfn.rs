//! The page's server functions (`/sfn/…`) and the wire format of their error. Each is a thin
//! call into the server's [`backend::PageBackend`], which adapts to the same export service as
//! the REST API; an error is the same RFC 9457 [`Problem`], with its HTTP status, so the page
//! matches on `code`.

use crate::model::{ExportList, ExportRequest, ExportView, ImportRequest, ImportView, Problem};
use crate::schedules::{ScheduleAction, ScheduleList, ScheduleRequest, ScheduleView};
use leptos::prelude::*;
use leptos::server_fn::codec::Json;
use leptos::server_fn::{Bytes, ContentType, Decodes, Encodes, Format, FormatType};

/// The path prefix of every server function; the same-origin guard covers it.
pub const PREFIX: &str = "/sfn";

/// RFC 9457 JSON: how a [`Problem`] travels as a server function's error.
pub struct ProblemJson;

impl ContentType for ProblemJson {
    const CONTENT_TYPE: &'static str = "application/problem+json";
}

impl FormatType for ProblemJson {
    const FORMAT_TYPE: Format = Format::Text;
}

impl Encodes<Problem> for ProblemJson {
    type Error = serde_json::Error;

    fn encode(output: &Problem) -> Result<Bytes, Self::Error> {
        // Every error answer of a server function passes here, those raised before its body ran
        // too, inside the request's owner: the one place its status is set.
        #[cfg(feature = "ssr")]
        backend::answer_with(output);
        serde_json::to_vec(output).map(Bytes::from)
    }
}

impl Decodes<Problem> for ProblemJson {
    type Error = serde_json::Error;

    fn decode(bytes: Bytes) -> Result<Problem, Self::Error> {
        serde_json::from_slice(&bytes)
    }
}

/// The code the page sees when the server could not be reached (no HTTP status).
pub const NETWORK: &str = "network";

impl FromServerFnError for Problem {
    type Encoder = ProblemJson;

    fn from_server_fn_error(value: ServerFnErrorErr) -> Self {
        use ServerFnErrorErr as E;
        let on_server = cfg!(feature = "ssr");
        let (code, status, title, detail) = match &value {
            E::Args(_) | E::MissingArg(_) => ("malformed-json", 400, "The body is not valid JSON", true),
            E::Deserialization(m) if on_server && m.contains("length limit") => ("body-too-large", 413, "The body is larger than 64 KiB", false),
            E::Deserialization(_) if on_server => ("malformed-json", 400, "The body is not valid JSON", true),
            // In the browser: an answer that is neither the value nor a problem.
            E::Deserialization(_) => ("bad-response", 502, "The server's answer could not be read", false),
            E::Request(_) => (NETWORK, 0, "The server could not be reached", false),
            _ => ("internal", 500, "Internal error", false),
        };
        let mut problem = Problem::new(code, status, title);
        if detail {
            problem.detail = Some(value.to_string());
        }
        problem
    }
}

/// What the server gives the page's server functions: the `app` crate cannot name the server's
/// state, so the server implements this over its export service and provides it as context.
#[cfg(feature = "ssr")]
pub mod backend {
    use crate::model::{ExportList, ExportRequest, ExportView, ImportRequest, ImportView, Problem};
    use crate::schedules::{ScheduleAction, ScheduleList, ScheduleRequest, ScheduleView};
    use axum::http::request::Parts;
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;

    /// A boxed future of a backend call.
    pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

    /// The calls the page makes, each with the request's head (for the session cookie).
    pub trait PageBackend: Send + Sync + 'static {
        /// Creates the export, or replays the one bound to the key.
        fn create_export(&self, parts: Parts, key: String, request: ExportRequest) -> BoxFuture<'_, Result<ExportView, Problem>>;
        /// The caller's export.
        fn export_status(&self, parts: Parts, id: String) -> BoxFuture<'_, Result<ExportView, Problem>>;
        /// A page of the caller's exports, newest first.
        fn list_exports(&self, parts: Parts, cursor: Option<String>) -> BoxFuture<'_, Result<ExportList, Problem>>;
        /// Cancels the caller's export.
        fn cancel_export(&self, parts: Parts, id: String) -> BoxFuture<'_, Result<ExportView, Problem>>;
        /// A fresh download link of the caller's ready export: its file or bundle, or part `part`.
        fn download_link(&self, parts: Parts, id: String, part: Option<i32>) -> BoxFuture<'_, Result<String, Problem>>;
        /// Creates the import, or replays the one bound to the key.
        fn create_import(&self, parts: Parts, key: String, request: ImportRequest) -> BoxFuture<'_, Result<ImportView, Problem>>;
        /// The caller's import.
        fn import_status(&self, parts: Parts, id: String) -> BoxFuture<'_, Result<ImportView, Problem>>;
        /// Cancels the caller's import.
        fn cancel_import(&self, parts: Parts, id: String) -> BoxFuture<'_, Result<ImportView, Problem>>;
        /// A fresh link to the report of the caller's finished import.
        fn report_link(&self, parts: Parts, id: String) -> BoxFuture<'_, Result<String, Problem>>;
        /// The tenant's schedules (admins).
        fn list_schedules(&self, parts: Parts) -> BoxFuture<'_, Result<ScheduleList, Problem>>;
        /// A schedule with its recent runs.
        fn show_schedule(&self, parts: Parts, id: String) -> BoxFuture<'_, Result<ScheduleView, Problem>>;
        /// Creates a schedule, or answers the one the key made.
        fn create_schedule(&self, parts: Parts, key: String, request: ScheduleRequest) -> BoxFuture<'_, Result<ScheduleView, Problem>>;
        /// Pauses, resumes or deletes a schedule; the schedule as it is now (none once deleted).
        fn change_schedule(&self, parts: Parts, id: String, action: ScheduleAction) -> BoxFuture<'_, Result<Option<ScheduleView>, Problem>>;
    }

    /// The backend as context.
    #[derive(Clone)]
    pub struct Backend(pub Arc<dyn PageBackend>);

    /// The backend and the request head of this server function call.
    pub fn current() -> Result<(Backend, Parts), Problem> {
        let internal = || Problem::new("internal", 500, "Internal error");
        let backend = leptos::prelude::use_context::<Backend>().ok_or_else(internal)?;
        let parts = leptos::prelude::use_context::<Parts>().ok_or_else(internal)?;
        Ok((backend, parts))
    }

    /// Sets the answer's status (and `Retry-After`) from the problem.
    pub(super) fn answer_with(problem: &Problem) {
        use axum::http::{header::RETRY_AFTER, HeaderValue, StatusCode};
        if let Some(res) = leptos::prelude::use_context::<leptos_axum::ResponseOptions>() {
            res.set_status(StatusCode::from_u16(problem.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR));
            if let Some(secs) = problem.retry_after {
                res.insert_header(RETRY_AFTER, HeaderValue::from(secs));
            }
        }
    }
}

/// Creates an export under `key`, or answers with the operation the key is bound to.
#[server(prefix = "/sfn", endpoint = "create_export", input = Json, output = Json)]
pub async fn create_export(key: String, request: ExportRequest) -> Result<ExportView, Problem> {
    let (backend, parts) = backend::current()?;
    backend.0.create_export(parts, key, request).await
}

/// The caller's export `id` as it is now.
#[server(prefix = "/sfn", endpoint = "export_status", input = Json, output = Json)]
pub async fn export_status(id: String) -> Result<ExportView, Problem> {
    let (backend, parts) = backend::current()?;
    backend.0.export_status(parts, id).await
}

/// A page of the caller's exports, newest first, after `cursor`.
#[server(prefix = "/sfn", endpoint = "list_exports", input = Json, output = Json)]
pub async fn list_exports(cursor: Option<String>) -> Result<ExportList, Problem> {
    let (backend, parts) = backend::current()?;
    backend.0.list_exports(parts, cursor).await
}

/// Cancels the caller's export `id`.
#[server(prefix = "/sfn", endpoint = "cancel_export", input = Json, output = Json)]
pub async fn cancel_export(id: String) -> Result<ExportView, Problem> {
    let (backend, parts) = backend::current()?;
    backend.0.cancel_export(parts, id).await
}

/// A freshly minted link to the file (or bundle) of the caller's ready export `id`, or to its
/// part `part` (1, 2, …) when given; never runs it again.
#[server(prefix = "/sfn", endpoint = "download_link", input = Json, output = Json)]
pub async fn download_link(id: String, part: Option<i32>) -> Result<String, Problem> {
    let (backend, parts) = backend::current()?;
    backend.0.download_link(parts, id, part).await
}

/// Creates an import under `key`, or answers with the operation the key is bound to.
#[server(prefix = "/sfn", endpoint = "create_import", input = Json, output = Json)]
pub async fn create_import(key: String, request: ImportRequest) -> Result<ImportView, Problem> {
    let (backend, parts) = backend::current()?;
    backend.0.create_import(parts, key, request).await
}

/// The caller's import `id` as it is now.
#[server(prefix = "/sfn", endpoint = "import_status", input = Json, output = Json)]
pub async fn import_status(id: String) -> Result<ImportView, Problem> {
    let (backend, parts) = backend::current()?;
    backend.0.import_status(parts, id).await
}

/// Cancels the caller's import `id`.
#[server(prefix = "/sfn", endpoint = "cancel_import", input = Json, output = Json)]
pub async fn cancel_import(id: String) -> Result<ImportView, Problem> {
    let (backend, parts) = backend::current()?;
    backend.0.cancel_import(parts, id).await
}

/// A freshly minted link to the report of the caller's finished import `id`.
#[server(prefix = "/sfn", endpoint = "report_link", input = Json, output = Json)]
pub async fn report_link(id: String) -> Result<String, Problem> {
    let (backend, parts) = backend::current()?;
    backend.0.report_link(parts, id).await
}

/// The tenant's schedules, newest first (admins only).
#[server(prefix = "/sfn", endpoint = "list_schedules", input = Json, output = Json)]
pub async fn list_schedules() -> Result<ScheduleList, Problem> {
    let (backend, parts) = backend::current()?;
    backend.0.list_schedules(parts).await
}

/// Schedule `id` with its recent runs.
#[server(prefix = "/sfn", endpoint = "show_schedule", input = Json, output = Json)]
pub async fn show_schedule(id: String) -> Result<ScheduleView, Problem> {
    let (backend, parts) = backend::current()?;
    backend.0.show_schedule(parts, id).await
}

/// Creates a schedule under `key`, or answers with the one the key made.
#[server(prefix = "/sfn", endpoint = "create_schedule", input = Json, output = Json)]
pub async fn create_schedule(key: String, request: ScheduleRequest) -> Result<ScheduleView, Problem> {
    let (backend, parts) = backend::current()?;
    backend.0.create_schedule(parts, key, request).await
}

/// Pauses, resumes or deletes schedule `id`.
#[server(prefix = "/sfn", endpoint = "change_schedule", input = Json, output = Json)]
pub async fn change_schedule(id: String, action: ScheduleAction) -> Result<Option<ScheduleView>, Problem> {
    let (backend, parts) = backend::current()?;
    backend.0.change_schedule(parts, id, action).await
}
