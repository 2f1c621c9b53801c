//! The page's server functions (`app::sfn`), adapted to the export service exactly as the REST
//! controllers are: authenticate from the request head, call the service, answer its error as
//! the same problem.

use crate::auth::Actor;
use crate::error::AppError;
use crate::service::key::IdempotencyKey;
use crate::exports::service::{self, CancelOutcome, CreateOutcome};
use crate::imports::service as imports;
use crate::imports::uploads::ensure_may_import;
use crate::state::AppState;
use app::sfn::backend::{BoxFuture, PageBackend};
use app::schedules::{ScheduleAction, ScheduleList, ScheduleRequest, ScheduleView};
use app::{ExportList, ExportRequest, ExportView, ImportRequest, ImportView, Problem};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use std::future::Future;

/// The server functions' backend over the app's state.
pub struct PageFunctions(pub AppState);

impl PageFunctions {
    /// Runs `call` as the request's actor; any error becomes its problem.
    fn as_actor<'a, T, F, Fut>(&'a self, mut parts: Parts, call: F) -> BoxFuture<'a, Result<T, Problem>>
    where
        T: Send + 'a,
        F: FnOnce(&'a AppState, Actor) -> Fut + Send + 'a,
        Fut: Future<Output = Result<T, AppError>> + Send + 'a,
    {
        Box::pin(async move {
            let actor = Actor::from_request_parts(&mut parts, &self.0).await.map_err(AppError::into_problem)?;
            call(&self.0, actor).await.map_err(AppError::into_problem)
        })
    }
}

impl PageBackend for PageFunctions {
    fn create_export(&self, parts: Parts, key: String, request: ExportRequest) -> BoxFuture<'_, Result<ExportView, Problem>> {
        self.as_actor(parts, move |state, actor| async move {
            service::ensure_may_export(&actor)?;
            let key = IdempotencyKey::from_header_values(std::iter::once(key.as_bytes()))?;
            let request = serde_json::to_value(&request).map_err(|e| AppError::Internal(format!("request serialisation: {e}")))?;
            match service::create_export(state, &actor, &key, request).await? {
                CreateOutcome::Created(view) | CreateOutcome::Replayed(view) => Ok(view),
            }
        })
    }

    fn export_status(&self, parts: Parts, id: String) -> BoxFuture<'_, Result<ExportView, Problem>> {
        self.as_actor(parts, move |state, actor| async move { service::get_export(state, &actor, &id).await })
    }

    fn list_exports(&self, parts: Parts, cursor: Option<String>) -> BoxFuture<'_, Result<ExportList, Problem>> {
        self.as_actor(parts, move |state, actor| async move { service::list_exports(state, &actor, None, cursor.as_deref()).await })
    }

    fn cancel_export(&self, parts: Parts, id: String) -> BoxFuture<'_, Result<ExportView, Problem>> {
        self.as_actor(parts, move |state, actor| async move {
            match service::cancel_export(state, &actor, &id).await? {
                CancelOutcome::Cancelled(view) | CancelOutcome::Requested(view) => Ok(view),
            }
        })
    }

    fn download_link(&self, parts: Parts, id: String, part: Option<i32>) -> BoxFuture<'_, Result<String, Problem>> {
        let served = part.map_or(crate::service::artifacts::Served::Artifact, crate::service::artifacts::Served::Part);
        self.as_actor(parts, move |state, actor| async move { service::download_link(state, &actor, &id, served).await })
    }

    fn create_import(&self, parts: Parts, key: String, request: ImportRequest) -> BoxFuture<'_, Result<ImportView, Problem>> {
        self.as_actor(parts, move |state, actor| async move {
            ensure_may_import(&actor)?;
            let key = IdempotencyKey::from_header_values(std::iter::once(key.as_bytes()))?;
            let request = serde_json::to_value(&request).map_err(|e| AppError::Internal(format!("request serialisation: {e}")))?;
            match imports::create_import(state, &actor, &key, request).await? {
                imports::CreateOutcome::Created(view) | imports::CreateOutcome::Replayed(view) => Ok(view),
            }
        })
    }

    fn import_status(&self, parts: Parts, id: String) -> BoxFuture<'_, Result<ImportView, Problem>> {
        self.as_actor(parts, move |state, actor| async move { imports::get_import(state, &actor, &id).await })
    }

    fn cancel_import(&self, parts: Parts, id: String) -> BoxFuture<'_, Result<ImportView, Problem>> {
        self.as_actor(parts, move |state, actor| async move {
            match imports::cancel_import(state, &actor, &id).await? {
                imports::CancelOutcome::Cancelled(view) | imports::CancelOutcome::Requested(view) => Ok(view),
            }
        })
    }

    fn report_link(&self, parts: Parts, id: String) -> BoxFuture<'_, Result<String, Problem>> {
        self.as_actor(parts, move |state, actor| async move { imports::report_download(state, &actor, &id).await })
    }

    fn list_schedules(&self, parts: Parts) -> BoxFuture<'_, Result<ScheduleList, Problem>> {
        self.as_actor(parts, move |state, actor| async move { crate::schedules::list(state, &actor).await })
    }

    fn show_schedule(&self, parts: Parts, id: String) -> BoxFuture<'_, Result<ScheduleView, Problem>> {
        self.as_actor(parts, move |state, actor| async move { crate::schedules::show(state, &actor, &id).await })
    }

    fn create_schedule(&self, parts: Parts, key: String, request: ScheduleRequest) -> BoxFuture<'_, Result<ScheduleView, Problem>> {
        self.as_actor(parts, move |state, actor| async move {
            crate::schedules::ensure_admin(&actor)?;
            let key = IdempotencyKey::from_header_values(std::iter::once(key.as_bytes()))?;
            let request = serde_json::to_value(&request).map_err(|e| AppError::Internal(format!("request serialisation: {e}")))?;
            Ok(crate::schedules::create(state, &actor, key.as_str(), request).await?.0)
        })
    }

    fn change_schedule(&self, parts: Parts, id: String, action: ScheduleAction) -> BoxFuture<'_, Result<Option<ScheduleView>, Problem>> {
        self.as_actor(parts, move |state, actor| async move {
            match action {
                ScheduleAction::Pause => crate::schedules::set_paused(state, &actor, &id, true).await.map(Some),
                ScheduleAction::Resume => crate::schedules::set_paused(state, &actor, &id, false).await.map(Some),
                ScheduleAction::Delete => crate::schedules::delete(state, &actor, &id).await.map(|()| None),
            }
        })
    }
}

/// What the page's forms offer from `catalog`: each report's name, titles and filters, and each
/// dataset's name and titles.
pub fn page_catalog(catalog: &crate::catalog::Catalog) -> app::PageCatalog {
    use crate::catalog::{FilterTest, FilterValue, Title};
    let titled = |name: &str, title: &Title| app::PageTitled { name: name.to_owned(), en: title.en.clone(), ar: title.ar.clone() };
    let of_name = |of: &FilterValue| {
        match of {
            FilterValue::Text => "text",
            FilterValue::Integer => "integer",
            FilterValue::Decimal => "decimal",
            FilterValue::Money { .. } => "money",
            FilterValue::Date => "date",
            FilterValue::Boolean => "boolean",
        }
        .to_owned()
    };
    let reports = catalog
        .reports
        .iter()
        .map(|r| app::PageReport {
            titled: titled(&r.name, &r.title),
            filters: r
                .filters
                .iter()
                .map(|f| {
                    let (test, of, values) = match &f.test {
                        FilterTest::OneOf { values } => ("one_of", None, values.clone()),
                        FilterTest::Countries => ("countries", None, Vec::new()),
                        FilterTest::Equals { of } => ("equals", Some(of_name(of)), Vec::new()),
                        FilterTest::AtLeast { of } => ("at_least", Some(of_name(of)), Vec::new()),
                        FilterTest::AtMost { of } => ("at_most", Some(of_name(of)), Vec::new()),
                    };
                    app::PageFilter { name: f.name.clone(), test: test.to_owned(), of, values }
                })
                .collect(),
        })
        .collect();
    app::PageCatalog { reports, datasets: catalog.datasets.iter().map(|d| titled(&d.name, &d.title)).collect(), sign_in_with: None }
}

/// Puts who is signed in into the extensions of a request for the page (`app::PageSession`), so
/// that the shell hands it to the page, which then learns it without a round trip of its own. A
/// lookup that fails for another reason than "nobody" (a busy database) puts nothing: the page then
/// asks `/api/session` itself. The answer names the user, so no cache keeps it.
pub async fn find_page_session(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::{header, HeaderValue, Method};
    if req.method() != Method::GET || req.uri().path() != "/" {
        return next.run(req).await;
    }
    let (mut parts, body) = req.into_parts();
    let mut offered = page_catalog(&state.config.catalog);
    offered.sign_in_with = state.oidc.as_ref().map(|p| p.config().name.clone());
    parts.extensions.insert(app::PageCatalogOf(std::sync::Arc::new(offered)));
    match Actor::from_request_parts(&mut parts, &state).await {
        // Without a role known now, the page asks `/api/session` itself.
        Ok(actor) => {
            if let Ok(view) = super::session::session_view(actor) {
                parts.extensions.insert(app::PageSession(Some(view)));
            }
        }
        Err(AppError::Unauthenticated) => {
            parts.extensions.insert(app::PageSession(None));
        }
        Err(_) => {}
    }
    let mut resp = next.run(axum::extract::Request::from_parts(parts, body)).await;
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// Guards every server function (a path under `/sfn`) before it runs, as the REST API's
/// extractors guard its handlers: only POST (405 otherwise); the caller authenticated (401) and,
/// with a cookie, from the same origin (403, SPEC §2's rule: server functions have no CSRF
/// defence of their own) before its arguments are read. The actor found is kept in the request
/// for the function.
pub async fn guard_server_functions(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if !req.uri().path().starts_with(app::sfn::PREFIX) {
        return next.run(req).await;
    }
    if req.method() != axum::http::Method::POST {
        return AppError::MethodNotAllowed.into_response();
    }
    let (mut parts, body) = req.into_parts();
    if let Err(e) = Actor::from_request_parts(&mut parts, &state).await {
        return e.into_response();
    }
    next.run(axum::extract::Request::from_parts(parts, body)).await
}
