//! The HTTP application: shared state and the router of the API, the page and the file links.

use crate::clock::SharedClock;
use crate::config::Config;
use crate::controllers;
use crate::error::AppError;
use crate::job_store::wakeup::Wakeup;
use crate::links::LinkSigner;
use crate::storage::Stores;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use leptos::prelude::LeptosOptions;
use leptos_axum::{generate_route_list, LeptosRoutes};
use sea_orm::DatabaseConnection;
use std::sync::Arc;

/// The largest request body accepted.
pub const BODY_LIMIT: usize = 64 * 1024;

/// What every request handler shares.
#[derive(Clone)]
pub struct AppState {
    /// The database pool.
    pub db: DatabaseConnection,
    /// The configuration.
    pub config: Arc<Config>,
    /// The clock requests are resolved with.
    pub clock: SharedClock,
    /// The object stores.
    pub stores: Arc<Stores>,
    /// Link signing keys.
    pub links: Arc<LinkSigner>,
    /// Wakes this process's worker when a job is queued.
    pub wakeup: Wakeup,
}

impl AppState {
    /// Builds the state, loading the link-signing keys.
    pub async fn new(db: DatabaseConnection, config: Arc<Config>, clock: SharedClock) -> Result<AppState, sea_orm::DbErr> {
        let links = LinkSigner::load(&db, config.signing_key.as_deref()).await?;
        Ok(AppState { stores: Arc::new(Stores::new(config.clone())), db, config, clock, links: Arc::new(links), wakeup: Wakeup::default() })
    }

    /// Now, in epoch milliseconds, from the injectable clock.
    pub fn now_ms(&self) -> i64 {
        self.clock.now().as_millisecond()
    }
}

async fn unknown_api_route() -> AppError {
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
        .route("/exports/{id}/download", get(controllers::downloads::download))
        .route("/openapi.json", get(controllers::openapi::openapi_json))
        .fallback(unknown_api_route)
        .method_not_allowed_fallback(method_not_allowed);
    Router::new()
        .nest("/api", api)
        .route("/files/{id}", get(controllers::downloads::serve_link))
        .route("/healthz", get(controllers::health::healthz))
        .route("/readyz", get(controllers::health::readyz))
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// The whole application: the API beside the server-rendered page and its static files.
pub fn app_router(state: AppState) -> Router {
    let options = LeptosOptions::builder()
        .output_name("exportd")
        .site_root(state.config.site_root.clone())
        .site_pkg_dir("pkg")
        .build();
    let routes = generate_route_list(app::App);
    let page = Router::new()
        .leptos_routes(&options, routes, {
            let options = options.clone();
            move || app::shell(options.clone())
        })
        .fallback(leptos_axum::file_and_error_handler(app::shell))
        .with_state(options);
    api_router(state).merge(page)
}
