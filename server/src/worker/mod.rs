//! The worker (SPEC §5): claim loops that run jobs under a lease with generation fencing, the
//! janitor, and the wake-ups that start a claim as soon as a job is queued. Runs inside `serve`
//! and as `exportd worker`, in any number of processes on any number of machines.

pub mod encoding;
pub mod janitor;
pub mod jobs;
pub mod lease;
pub mod snapshot;
pub mod spare_chunks;

use crate::config::{Config, WorkerConfig};
use crate::faults;
use crate::db;
use crate::metrics::Metrics;
use crate::job_store::claims::{self, Claimant};
use crate::job_store::transitions::RetryPolicy;
use crate::job_store::wakeup::{self, Wakeup};
use crate::storage::Stores;
use sea_orm::{DatabaseConnection, DbBackend, DbErr};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often an idle claim loop looks for work without being woken.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// What a worker process needs.
#[derive(Clone)]
pub struct WorkerContext {
    /// The pool of short statements: claims, heartbeats, transitions, authority checks. Kept
    /// apart from the snapshots, so a worker busy with long reads still renews its leases.
    pub db: DatabaseConnection,
    /// Where snapshots are read: on PostgreSQL a pool of one connection per job running and a
    /// spare that one job at a time borrows.
    pub snapshots: snapshot::Source,
    /// The configuration.
    pub config: Arc<Config>,
    /// What this worker serves.
    pub worker: Arc<WorkerConfig>,
    /// The object stores.
    pub stores: Arc<Stores>,
    /// This worker's name in leases and the audit trail.
    pub worker_id: String,
    /// Cancelled on SIGTERM: stop claiming, finish or hand back running jobs.
    pub shutdown: CancellationToken,
    /// Fault points (tests only).
    pub faults: faults::Faults,
    /// Wakes the claim loops when a job is queued in this process.
    pub wakeup: Wakeup,
    /// This process's metrics.
    pub metrics: Metrics,
    /// The schema versions of this worker's catalog: it claims only jobs of these.
    pub digests: Arc<Vec<String>>,
    /// Where imports write when the source is a database apart from the job store
    /// (`EXPORTD_SOURCE_URL`); `None`: the job store's own, `db`.
    pub source: Option<DatabaseConnection>,
    /// Where the actor's role is read at the worker's checks (contract §2, §13).
    pub authority: crate::auth::Authority,
}

impl WorkerContext {
    /// Opens the worker's own pools on the configured database.
    pub async fn connect(
        config: Arc<Config>,
        worker: WorkerConfig,
        stores: Arc<Stores>,
        shutdown: CancellationToken,
        wakeup: Wakeup,
        metrics: Metrics,
    ) -> Result<WorkerContext, DbErr> {
        let mut worker = worker;
        if config.database_url.starts_with("postgres") {
            let fits = db::jobs_within(config.worker_connections);
            if worker.concurrency > fits {
                tracing::warn!(
                    asked = worker.concurrency, runs = fits, connections = config.worker_connections,
                    "fewer jobs at once than asked: each holds a database connection, and EXPORTD_DB_CONNECTIONS bounds them"
                );
                worker.concurrency = fits;
            }
        }
        // A snapshot's lock wait is ended by the stall rule first; its own bound is the backstop.
        let (db, snapshots) = snapshot::worker_pools(&config.database_url, config.export_source_url(), worker.concurrency, config.stall + config.lease).await?;
        let digests = Arc::new(config.catalog.digests());
        let source = match config.source_apart() {
            // One connection per job that may import at once, and one for the janitor's reports.
            Some(url) => Some(db::connect_pool(url, db::PoolUse::Control, 0, worker.concurrency as u32 + 1).await?),
            None => None,
        };
        let authority = crate::auth::Authority::from_catalog(config.catalog.authority_sql.as_deref(), config.export_source_url(), config.authority_timeout).await?;
        Ok(WorkerContext {
            authority,
            db,
            snapshots,
            config,
            worker: Arc::new(worker),
            stores,
            worker_id: format!("worker:{}", uuid::Uuid::new_v4().simple()),
            shutdown,
            faults: faults::Faults::default(),
            wakeup,
            metrics,
            digests,
            source,
        })
    }

    /// How failed attempts are retried.
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy { max_attempts: self.config.max_attempts, base: self.config.retry_base }
    }

    /// This worker, as a claim names it.
    pub fn claimant(&self) -> Claimant<'_> {
        Claimant { worker_id: &self.worker_id, deployments: &self.worker.deployments, digests: &self.digests, lease: self.config.lease, faults: &self.faults }
    }
}

/// Runs the claim loops, the janitor and (on PostgreSQL) the LISTEN for new jobs until
/// shutdown; returns when every running job has been finished or handed back.
pub async fn run(ctx: WorkerContext) {
    let mut tasks = tokio::task::JoinSet::new();
    if ctx.db.get_database_backend() == DbBackend::Postgres {
        tasks.spawn(wakeup::listen(ctx.config.database_url.clone(), ctx.wakeup.clone(), ctx.shutdown.clone()));
    }
    tasks.spawn(janitor::run(ctx.clone()));
    tasks.spawn(janitor::run_reports(ctx.clone()));
    for _ in 0..ctx.worker.concurrency {
        tasks.spawn(claim_loop(ctx.clone()));
    }
    while tasks.join_next().await.is_some() {}
    ctx.db.close_by_ref().await.ok();
    if let snapshot::Source::Postgres { pool, .. } = &ctx.snapshots {
        pool.close().await;
    }
}

async fn claim_loop(ctx: WorkerContext) {
    while !ctx.shutdown.is_cancelled() {
        // Registered before looking, so a job queued between the look and the wait wakes us.
        let woken = ctx.wakeup.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let wait = match claims::claim(&ctx.db, &ctx.claimant()).await {
            Ok(Some(job)) => {
                ctx.metrics.claims.inc();
                // In a task of its own, so a panic ends only this attempt (its lease stops and the
                // janitor takes the job back), not the claim loop.
                let (id, attempt) = (job.id.clone(), tokio::spawn({
                    let ctx = ctx.clone();
                    async move { jobs::run(&ctx, job).await }
                }));
                if let Err(e) = attempt.await {
                    tracing::error!(job = %id, error = %e, "an attempt panicked; the janitor will take the job back when its lease expires");
                }
                continue;
            }
            Ok(None) => POLL_INTERVAL,
            Err(e) => {
                tracing::warn!(error = %e, "claim failed; retrying");
                POLL_INTERVAL * 2
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = &mut woken => {}
            _ = ctx.shutdown.cancelled() => {}
        }
    }
}
