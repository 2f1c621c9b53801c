//! The lease a worker holds on a claimed job: a heartbeat renews it (and carries the job's
//! progress) about once a second, and tells the attempt to stop when cancel was asked or the job
//! is no longer its own. A heartbeat that cannot reach the database for a whole lease makes the
//! attempt stop too: by then another worker may own the job.

use super::WorkerContext;
use crate::entities::exports;
use crate::job_store::transitions::{self, Heartbeat};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

/// What the attempt may do, as of the last heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holding {
    /// The lease is held: carry on.
    Held,
    /// Cancel was asked: stop at the next checkpoint.
    CancelRequested,
    /// The job is not this attempt's any more: stop, publish nothing.
    Lost,
}

/// How often the lease is renewed.
pub fn heartbeat_every(lease: Duration) -> Duration {
    (lease / 3).clamp(Duration::from_millis(100), Duration::from_secs(1))
}

struct Progress {
    written: AtomicI64,
    /// −1 until the snapshot is counted.
    total: AtomicI64,
    nudge: Notify,
}

/// A held lease and its heartbeat.
pub struct Lease {
    holding: watch::Receiver<Holding>,
    progress: Arc<Progress>,
    heartbeat: tokio::task::JoinHandle<()>,
}

impl Lease {
    /// Starts holding `job`: one heartbeat first, so an attempt on a job that is not (or no
    /// longer) this generation's — a duplicate delivery — stops before it reads anything.
    pub async fn start(ctx: &WorkerContext, job: &exports::Model) -> Option<Lease> {
        let first = transitions::heartbeat(&ctx.db, &job.id, job.generation, ctx.config.lease, 0, None).await;
        let holding = match first {
            Ok(Heartbeat::Renewed) => Holding::Held,
            Ok(Heartbeat::CancelRequested) => Holding::CancelRequested,
            Ok(Heartbeat::Lost) => return None,
            Err(e) => {
                tracing::warn!(export = %job.id, error = %e, "first heartbeat failed; carrying on under the claim's lease");
                Holding::Held
            }
        };
        let (tx, rx) = watch::channel(holding);
        let progress = Arc::new(Progress { written: AtomicI64::new(0), total: AtomicI64::new(-1), nudge: Notify::new() });
        let heartbeat = tokio::spawn(beat(ctx.clone(), job.id.clone(), job.generation, progress.clone(), tx));
        Some(Lease { holding: rx, progress, heartbeat })
    }

    /// What the attempt may do now.
    pub fn holding(&self) -> Holding {
        *self.holding.borrow()
    }

    /// Records the snapshot's row count; the next heartbeat carries it at once.
    pub fn counted(&self, total: i64) {
        self.progress.total.store(total, Ordering::Relaxed);
        self.progress.nudge.notify_one();
    }

    /// Records rows written so far; the next heartbeat carries them.
    pub fn wrote(&self, rows: i64) {
        self.progress.written.store(rows, Ordering::Relaxed);
    }

}

impl Drop for Lease {
    /// However the attempt ends — even by a panic — its heartbeat stops with it, so a job is
    /// never kept leased while no one works on it.
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

async fn beat(ctx: WorkerContext, id: String, generation: i32, progress: Arc<Progress>, tx: watch::Sender<Holding>) {
    let lease = ctx.config.lease;
    let every = heartbeat_every(lease);
    let mut renewed = Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = progress.nudge.notified() => {}
        }
        let total = progress.total.load(Ordering::Relaxed);
        let written = progress.written.load(Ordering::Relaxed);
        match transitions::heartbeat(&ctx.db, &id, generation, lease, written, (total >= 0).then_some(total)).await {
            Ok(Heartbeat::Renewed) => renewed = Instant::now(),
            Ok(Heartbeat::CancelRequested) => {
                renewed = Instant::now();
                let _ = tx.send(Holding::CancelRequested);
            }
            Ok(Heartbeat::Lost) => {
                let _ = tx.send(Holding::Lost);
                return;
            }
            Err(e) => {
                tracing::warn!(export = %id, error = %e, "heartbeat failed; retrying");
                if renewed.elapsed() >= lease {
                    let _ = tx.send(Holding::Lost);
                    return;
                }
            }
        }
    }
}
