//! What the export service works with: the database, the clock, the configuration, the object
//! stores, the link signer, the worker's wake-up and the metrics. No HTTP type is part of it, so
//! the REST controllers, the page's server functions and the tests all call the service the same
//! way.

use crate::auth::oidc::Provider;
use crate::auth::Authority;
use crate::clock::SharedClock;
use crate::config::Config;
use crate::job_store::wakeup::Wakeup;
use crate::links::LinkSigner;
use crate::metrics::Metrics;
use crate::operations::Drain;
use crate::storage::Stores;
use sea_orm::DatabaseConnection;
use std::sync::Arc;

/// The export service's own context; every adapter holds one and passes it in.
#[derive(Clone)]
pub struct ServiceContext {
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
    /// This process's metrics, shared with its worker.
    pub metrics: Metrics,
    /// This instance's view of `exportd drain`.
    pub drain: Arc<Drain>,
    /// Password checks that may run at once (one per core, less one); a login beyond them answers
    /// 503 `busy`.
    pub password_checks: Arc<tokio::sync::Semaphore>,
    /// Where a user's role is read at every check of "authorised" (contract §2, §13).
    pub authority: Authority,
    /// The organisation's OpenID Connect provider, when one is configured.
    pub oidc: Option<Arc<Provider>>,
}

/// How many password checks run at once: one per core the process may use, less one, so a flood
/// of logins never takes every core from the answers to everyone else (at least one).
pub fn password_checks_at_once() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().saturating_sub(1)).max(1)
}

impl ServiceContext {
    /// Builds the context, loading the link-signing keys.
    pub async fn new(db: DatabaseConnection, config: Arc<Config>, clock: SharedClock) -> Result<ServiceContext, sea_orm::DbErr> {
        let links = LinkSigner::load(&db, config.signing_key.as_deref(), config.link_ttl).await?;
        let authority = Authority::from_catalog(config.catalog.authority_sql.as_deref(), config.export_source_url(), config.authority_timeout).await?;
        let oidc = match config.oidc.clone() {
            Some(oidc) => Some(Arc::new(Provider::new(oidc).map_err(sea_orm::DbErr::Custom)?)),
            None => None,
        };
        Ok(ServiceContext {
            authority,
            oidc,
            stores: Arc::new(Stores::new(config.clone())),
            db,
            config,
            clock,
            links: Arc::new(links),
            wakeup: Wakeup::default(),
            metrics: Metrics::default(),
            drain: Arc::new(Drain::default()),
            password_checks: Arc::new(tokio::sync::Semaphore::new(password_checks_at_once())),
        })
    }

    /// Now, in epoch milliseconds, from the injectable clock.
    pub fn now_ms(&self) -> i64 {
        self.clock.now().as_millisecond()
    }
}
