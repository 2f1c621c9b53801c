//! The worker (SPEC §5): claims jobs with a conditional update, runs them under a lease with
//! generation fencing, and hands them back on shutdown. Runs inside `serve` and as `exportd worker`.

pub mod csv_cells;
pub mod faults;
pub mod jobs;
pub mod queue;

use crate::config::{Config, WorkerConfig};
use crate::storage::Stores;
use sea_orm::DatabaseConnection;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often an idle worker looks for work.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// What a worker process needs.
#[derive(Clone)]
pub struct WorkerContext {
    /// The database pool.
    pub db: DatabaseConnection,
    /// The configuration.
    pub config: Arc<Config>,
    /// What this worker serves.
    pub worker: Arc<WorkerConfig>,
    /// The object stores.
    pub stores: Arc<Stores>,
    /// This worker's name in leases and the audit trail.
    pub worker_id: String,
    /// Cancelled on SIGTERM: stop claiming, hand back running jobs.
    pub shutdown: CancellationToken,
    /// Fault points (tests only).
    pub faults: faults::Faults,
}

impl WorkerContext {
    /// A context with a fresh worker id.
    pub fn new(db: DatabaseConnection, config: Arc<Config>, worker: WorkerConfig, stores: Arc<Stores>, shutdown: CancellationToken) -> WorkerContext {
        WorkerContext {
            db,
            config,
            worker: Arc::new(worker),
            stores,
            worker_id: format!("worker:{}", uuid::Uuid::new_v4().simple()),
            shutdown,
            faults: faults::Faults::default(),
        }
    }
}

/// Runs `concurrency` claim loops until shutdown; returns when every loop has stopped.
pub async fn run(ctx: WorkerContext) {
    let mut loops = tokio::task::JoinSet::new();
    for _ in 0..ctx.worker.concurrency {
        loops.spawn(claim_loop(ctx.clone()));
    }
    while loops.join_next().await.is_some() {}
}

async fn claim_loop(ctx: WorkerContext) {
    while !ctx.shutdown.is_cancelled() {
        match queue::claim(&ctx).await {
            Ok(Some(job)) => jobs::export_csv::run(&ctx, job).await,
            Ok(None) => {
                tokio::select! {
                    _ = tokio::time::sleep(POLL_INTERVAL) => {}
                    _ = ctx.shutdown.cancelled() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "claim failed; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(POLL_INTERVAL * 4) => {}
                    _ = ctx.shutdown.cancelled() => {}
                }
            }
        }
    }
}
