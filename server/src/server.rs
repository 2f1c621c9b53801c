//! The HTTP application: shared state and the router of the API, the page and the file links.

use crate::controllers;
use crate::error::AppError;
use crate::metrics::Metrics;
pub use crate::state::{AppState, REQUEST_TIMEOUT};
use crate::site_assets::{SiteAssets, SiteFiles};
use axum::extract::{DefaultBodyLimit, State};
use axum::routing::{get, post};
use axum::Router;
use leptos::prelude::LeptosOptions;
use leptos_axum::{generate_route_list, LeptosRoutes};
use sea_orm::DatabaseConnection;
use std::sync::Arc;

/// The largest request body accepted.
pub const BODY_LIMIT: usize = 64 * 1024;

/// Counts every answer of the API by its route pattern (never the path itself: ids would make a
/// series per export) and status.
async fn count_requests(State(metrics): State<Metrics>, req: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    let route = req.extensions().get::<axum::extract::MatchedPath>().map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let resp = next.run(req).await;
    metrics.http_requests.with_label_values(&[route.as_str(), resp.status().as_str()]).inc();
    resp
}

async fn unknown_route() -> AppError {
    AppError::NotFound
}

async fn method_not_allowed() -> AppError {
    AppError::MethodNotAllowed
}

/// The JSON API, the file links and the health endpoints.
pub fn api_router(state: AppState) -> Router {
    let api = Router::new()
        .route("/session", post(controllers::session::login).get(controllers::session::whoami).delete(controllers::session::logout))
        .route("/exports", post(controllers::exports::create).get(controllers::exports::list))
        .route("/exports/{id}/cancel", post(controllers::exports::cancel))
        .route("/exports/{id}", get(controllers::exports::show))
        .route("/notifications", get(controllers::notifications::list))
        .route("/schedules", post(controllers::schedules::create).get(controllers::schedules::list))
        .route("/schedules/{id}", get(controllers::schedules::show).put(controllers::schedules::update).delete(controllers::schedules::delete))
        .route("/schedules/{id}/pause", post(controllers::schedules::pause))
        .route("/schedules/{id}/resume", post(controllers::schedules::resume))
        .route("/exports/{id}/download", get(controllers::downloads::download))
        .route("/exports/{id}/parts/{n}/download", get(controllers::downloads::download_part))
        .route("/uploads", post(controllers::uploads::create))
        .route("/imports", post(controllers::imports::create).get(controllers::imports::list))
        .route("/imports/{id}/cancel", post(controllers::imports::cancel))
        .route("/imports/{id}", get(controllers::imports::show))
        .route("/imports/{id}/report", get(controllers::imports::report))
        .route("/openapi.json", get(controllers::openapi::openapi_json))
        .fallback(unknown_route)
        .method_not_allowed_fallback(method_not_allowed);
    Router::new()
        .nest("/api", api)
        .route("/files/{id}", get(controllers::downloads::serve_link))
        .route("/auth/oidc/start", get(controllers::oidc::start))
        .route("/auth/oidc/callback", get(controllers::oidc::callback))
        .route("/auth/oidc/sign-out", get(controllers::oidc::sign_out))
        .route("/healthz", get(controllers::health::healthz))
        .route("/readyz", get(controllers::health::readyz))
        .route("/metrics", get(controllers::health::metrics))
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn_with_state(state.metrics.clone(), count_requests))
        .with_state(state)
}

/// The whole application: the API beside the server-rendered page and its static files.
pub fn app_router(state: AppState) -> Router {
    let assets = SiteAssets::choose(state.config.site_root.as_deref(), "exportd");
    match &assets.files {
        SiteFiles::Embedded => tracing::info!("the page's files are those inside the binary"),
        SiteFiles::Folder(root) => tracing::info!(site_root = %root.display(), hashed = assets.hashed(), "the page's files are read from a folder"),
    }
    // The page names its files itself (`app::PageFiles`): Leptos reads no hash file.
    let options = LeptosOptions::builder().output_name("exportd").site_pkg_dir("pkg").build();
    let files = assets.page_files("exportd");
    let routes = generate_route_list(app::App);
    let backend = app::sfn::backend::Backend(Arc::new(controllers::page::PageFunctions(state.clone())));
    let page = Router::new()
        .leptos_routes_with_context(
            &options,
            routes,
            move || leptos::prelude::provide_context(backend.clone()),
            {
                let options = options.clone();
                move || app::shell(options.clone(), files.clone())
            },
        )
        .route("/sfn/{*rest}", axum::routing::any(unknown_route))
        // The page is one route; anything else is a file of the site (its precompressed copy
        // when the browser takes it) or a 404 problem.
        .fallback_service(site_files(&assets.files))
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn_with_state(state.clone(), controllers::page::guard_server_functions))
        .layer(axum::middleware::from_fn_with_state(state.clone(), controllers::page::find_page_session))
        .with_state(options);
    let assets = Arc::new(assets);
    traced(
        api_router(state)
            .merge(page)
            .layer(axum::middleware::from_fn_with_state(assets, answer_headers))
            .layer(axum::middleware::from_fn(bounded)),
    )
}

/// The service that answers a file of the site: from its folder (its precompressed copy when
/// the browser takes it), or from inside the binary; anything else is a 404 problem.
fn site_files(files: &SiteFiles) -> axum::routing::MethodRouter {
    match files {
        SiteFiles::Folder(root) => axum::routing::any_service(
            tower_http::services::ServeDir::new(root).precompressed_br().precompressed_gzip().fallback(axum::routing::any(unknown_route)),
        ),
        SiteFiles::Embedded => axum::routing::any(|method: axum::http::Method, uri: axum::http::Uri, headers: axum::http::HeaderMap| async move {
            use axum::response::IntoResponse;
            if method != axum::http::Method::GET && method != axum::http::Method::HEAD {
                return AppError::MethodNotAllowed.into_response();
            }
            let value = |name| headers.get(name).and_then(|v: &axum::http::HeaderValue| v.to_str().ok());
            let path = uri.path().trim_start_matches('/');
            crate::site_assets::embedded_file(path, value(axum::http::header::ACCEPT_ENCODING), value(axum::http::header::IF_NONE_MATCH), method == axum::http::Method::HEAD)
                .unwrap_or_else(|| AppError::NotFound.into_response())
        }),
    }
}

/// Headers every answer carries, by what it is: the page may not be framed by another site
/// (`frame-ancestors 'none'`); the API's and the server functions' JSON may carry a freshly minted
/// download link, a credential, so no cache keeps it (`no-store`, unless the answer set its own);
/// a static file of the page is kept a year when named by its hash, else revalidated.
async fn answer_headers(State(assets): State<Arc<SiteAssets>>, req: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    use axum::http::{header, HeaderValue};
    let path = req.uri().path();
    let api = path.starts_with("/api/") || path.starts_with(app::sfn::PREFIX);
    let static_file = path.starts_with("/pkg/").then(|| assets.cache_control(path));
    let mut resp = next.run(req).await;
    let served = resp.status().is_success() || resp.status() == axum::http::StatusCode::NOT_MODIFIED;
    let h = resp.headers_mut();
    if api {
        h.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    } else {
        if let Some(cache) = static_file.filter(|_| served) {
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
            // The same path answers brotli, gzip or plain by Accept-Encoding: a shared cache must
            // keep them apart.
            h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
        }
        h.entry(header::CONTENT_SECURITY_POLICY).or_insert(HeaderValue::from_static("frame-ancestors 'none'"));
        h.entry(header::X_FRAME_OPTIONS).or_insert(HeaderValue::from_static("DENY"));
    }
    resp
}

/// How long a client may take to send a request's head (a slowloris client is cut off).
pub const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a shutdown waits for the answers in flight.
const DRAIN_CONNECTIONS: std::time::Duration = std::time::Duration::from_secs(30);

/// Serves `router` on `listener` until `shutdown`, then lets the answers in flight finish (for a
/// bounded time). Each request carries its peer (`ConnectInfo`); a client that does not send a
/// request's head within [`HEADER_READ_TIMEOUT`] is disconnected.
pub async fn serve(listener: tokio::net::TcpListener, router: Router, shutdown: tokio_util::sync::CancellationToken) {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use tower::ServiceExt;
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, say: wait a moment rather than spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(axum::extract::ConnectInfo(peer));
            router.clone().oneshot(req.map(axum::body::Body::new))
        });
        let connection = graceful.watch(builder.serve_connection_with_upgrades(TokioIo::new(stream), service).into_owned());
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended");
            }
        });
    }
    if tokio::time::timeout(DRAIN_CONNECTIONS, graceful.shutdown()).await.is_err() {
        tracing::warn!("answers still in flight after {DRAIN_CONNECTIONS:?}; stopping anyway");
    }
}

/// Answers 408 `request-timeout` for a request that has no answer within [`REQUEST_TIMEOUT`].
/// An upload is bound differently: its body may take long to arrive, but never pause for longer
/// than [`REQUEST_TIMEOUT`] (see [`crate::imports::uploads::upload`]).
async fn bounded(req: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    use axum::response::IntoResponse;
    if req.method() == axum::http::Method::POST && req.uri().path() == "/api/uploads" {
        return next.run(req).await;
    }
    match tokio::time::timeout(REQUEST_TIMEOUT, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => AppError::RequestTimeout.into_response(),
    }
}

/// A worker process's own listener: `GET /metrics` only.
pub fn metrics_router(metrics: Metrics, db: DatabaseConnection) -> Router {
    async fn scrape(State((metrics, db)): State<(Metrics, DatabaseConnection)>) -> Result<axum::response::Response, AppError> {
        use axum::response::IntoResponse;
        let text = metrics.render(&db).await?;
        Ok(([(axum::http::header::CONTENT_TYPE, controllers::health::PROMETHEUS_TEXT)], text).into_response())
    }
    Router::new().route("/metrics", get(scrape)).with_state((metrics, db))
}

/// The name of the request id header, taken from the request or made, and sent back.
pub const REQUEST_ID: &str = "x-request-id";

/// Every request in a span that carries its request id, so each log line of the request names
/// it, with the id sent back in `X-Request-Id`, and one line per answer (status, latency). The
/// span shows the path only: the query of a signed link is a credential.
fn traced(router: Router) -> Router {
    use axum::http::{HeaderName, Request};
    use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
    use tower_http::trace::{DefaultOnResponse, TraceLayer};
    let header = HeaderName::from_static(REQUEST_ID);
    let trace = TraceLayer::new_for_http()
        .make_span_with(|req: &Request<axum::body::Body>| {
            let id = req.headers().get(REQUEST_ID).and_then(|v| v.to_str().ok()).unwrap_or("");
            tracing::info_span!("request", request_id = %id, method = %req.method(), path = %req.uri().path())
        })
        .on_response(DefaultOnResponse::new().level(tracing::Level::INFO));
    router.layer(
        tower::ServiceBuilder::new()
            .layer(SetRequestIdLayer::new(header.clone(), MakeRequestUuid))
            .layer(trace)
            .layer(PropagateRequestIdLayer::new(header)),
    )
}
