//! What every request handler shares, and the bounds the handlers and the router agree on. The
//! router (`server.rs`) names the handlers (`controllers/`); both name this, and it names neither.

use crate::clock::SharedClock;
use crate::config::Config;
use crate::service::context::ServiceContext;
use sea_orm::DatabaseConnection;
use std::sync::Arc;

/// What every request handler shares: the services' context, which it derefs to.
#[derive(Clone)]
pub struct AppState {
    /// The service the handlers adapt to.
    pub service: ServiceContext,
}

impl AppState {
    /// Builds the state, loading the link-signing keys.
    pub async fn new(db: DatabaseConnection, config: Arc<Config>, clock: SharedClock) -> Result<AppState, sea_orm::DbErr> {
        Ok(AppState { service: ServiceContext::new(db, config, clock).await? })
    }
}

impl std::ops::Deref for AppState {
    type Target = ServiceContext;
    fn deref(&self) -> &ServiceContext {
        &self.service
    }
}

/// How long a request may take until its answer starts, reading its body included; the bytes of
/// a download that follow are not bound by it.
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

