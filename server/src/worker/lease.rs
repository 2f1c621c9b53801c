//! The lease a worker holds on a claimed job, and the attempt's progress, kept apart (SPEC §4:
//! liveness is not progress). A heartbeat renews the lease about once a second and carries the
//! job's progress; it tells the attempt to stop when cancel was asked or the job is no longer its
//! own. A heartbeat that cannot reach the database for a whole lease makes the attempt stop too:
//! by then another worker may own the job.
//!
//! Progress is every step forward an attempt makes: rows written, bytes uploaded, digest read,
//! the copy. An attempt whose lease is renewed but which has made no progress for
//! `EXPORTD_STALL_SECS` (a read blocked on a lock, a half-open connection, a store that stopped
//! answering) is told it has [`Holding::Stalled`], and ends itself with a fenced `stalled`
//! transition; the database's `last_progress_at` lets the janitor end one whose worker did not.

use super::WorkerContext;
use crate::entities::jobs;
use crate::job_store::transitions::{self, Beat, Heartbeat};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
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
    /// No progress for `EXPORTD_STALL_SECS`: stop, and end the attempt `stalled`.
    Stalled,
}

/// How often the lease is renewed.
pub fn heartbeat_every(lease: Duration) -> Duration {
    (lease / 3).clamp(Duration::from_millis(100), Duration::from_secs(1))
}

#[derive(Debug)]
struct Progress {
    written: AtomicI64,
    /// −1 until the snapshot is counted.
    total: AtomicI64,
    /// Bumped by every step forward.
    steps: AtomicU64,
    nudge: Notify,
}

/// A handle that records progress from wherever the work happens (an upload's part, a digest
/// read on a blocking thread).
#[derive(Debug, Clone)]
pub struct Ticker(Arc<Progress>);

impl Ticker {
    /// Records one step forward.
    pub fn tick(&self) {
        self.0.steps.fetch_add(1, Ordering::Relaxed);
    }
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
    pub async fn start(ctx: &WorkerContext, job: &jobs::Model) -> Option<Lease> {
        let beat = Beat { progressed: true, ..Beat::default() };
        let first = renew(ctx, &job.id, job.generation, beat).await;
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
        let progress = Arc::new(Progress { written: AtomicI64::new(0), total: AtomicI64::new(-1), steps: AtomicU64::new(0), nudge: Notify::new() });
        let heartbeat = tokio::spawn(beat_until_dropped(ctx.clone(), job.id.clone(), job.generation, progress.clone(), tx));
        Some(Lease { holding: rx, progress, heartbeat })
    }

    /// What the attempt may do now.
    pub fn holding(&self) -> Holding {
        *self.holding.borrow()
    }

    /// Waits until the attempt may no longer simply carry on; returns why.
    pub async fn interrupted(&self) -> Holding {
        let mut holding = self.holding.clone();
        let changed = match holding.wait_for(|h| *h != Holding::Held).await {
            Ok(h) => *h,
            // The heartbeat ended without saying why: treat it as lost.
            Err(_) => Holding::Lost,
        };
        changed
    }

    /// Waits until the attempt is no longer this worker's (lost, or stalled); a cancel asked
    /// meanwhile is left for the attempt to meet at its next checkpoint.
    pub async fn lost(&self) -> Holding {
        let mut holding = self.holding.clone();
        let changed = match holding.wait_for(|h| matches!(h, Holding::Lost | Holding::Stalled)).await {
            Ok(h) => *h,
            Err(_) => Holding::Lost,
        };
        changed
    }

    /// Records the snapshot's row count; the next heartbeat carries it at once.
    pub fn counted(&self, total: i64) {
        self.progress.total.store(total, Ordering::Relaxed);
        self.progress.steps.fetch_add(1, Ordering::Relaxed);
        self.progress.nudge.notify_one();
    }

    /// Records how many rows the attempt will write in all, known from its plan: the next
    /// regular heartbeat carries it. Unlike [`Lease::counted`] it does not wake the heartbeat,
    /// so resuming an attempt adds no write beside its first batch (on SQLite, one more holder
    /// of the one write lock at the moment a process may be frozen between batches).
    pub fn total(&self, total: i64) {
        self.progress.total.store(total, Ordering::Relaxed);
    }

    /// Records that at least `rows` are written (a step forward), never fewer than recorded
    /// before: parts that stream side by side, or one read again, report out of turn.
    pub fn wrote_at_least(&self, rows: i64) {
        self.progress.written.fetch_max(rows, Ordering::Relaxed);
        self.progress.steps.fetch_add(1, Ordering::Relaxed);
    }

    /// Records rows written so far (a step forward); the next heartbeat carries them.
    pub fn wrote(&self, rows: i64) {
        self.progress.written.store(rows, Ordering::Relaxed);
        self.progress.steps.fetch_add(1, Ordering::Relaxed);
    }

    /// A handle that records steps forward.
    pub fn ticker(&self) -> Ticker {
        Ticker(self.progress.clone())
    }
}

impl Drop for Lease {
    /// However the attempt ends — even by a panic — its heartbeat stops with it, so a job is
    /// never kept leased while no one works on it.
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

/// One heartbeat, bounded by half a lease on this side too: a statement on a connection that
/// went half-open would otherwise wait for ever, and the server's timeouts cannot reach it.
async fn renew(ctx: &WorkerContext, id: &str, generation: i32, beat: Beat) -> Result<Heartbeat, sea_orm::DbErr> {
    let bound = (ctx.config.lease / 2).max(Duration::from_millis(100));
    match tokio::time::timeout(bound, transitions::heartbeat(&ctx.db, id, generation, ctx.config.lease, beat)).await {
        Ok(result) => result,
        Err(_) => Err(sea_orm::DbErr::Custom(format!("the heartbeat got no answer within {bound:?}"))),
    }
}

async fn beat_until_dropped(ctx: WorkerContext, id: String, generation: i32, progress: Arc<Progress>, tx: watch::Sender<Holding>) {
    let lease = ctx.config.lease;
    let every = heartbeat_every(lease);
    let mut renewed = Instant::now();
    let (mut steps_seen, mut last_step) = (0u64, Instant::now());
    let mut carried = true;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = progress.nudge.notified() => {}
        }
        let steps = progress.steps.load(Ordering::Relaxed);
        if steps != steps_seen {
            (steps_seen, last_step, carried) = (steps, Instant::now(), false);
        }
        if last_step.elapsed() >= ctx.config.stall {
            // The lease is still renewed until the attempt has ended itself: the janitor must
            // not take the job back as lost while its worker is recording why it stopped.
            tx.send_if_modified(|h| {
                let changed = *h == Holding::Held;
                if changed {
                    *h = Holding::Stalled;
                }
                changed
            });
        }
        let total = progress.total.load(Ordering::Relaxed);
        let beat = Beat { rows_written: progress.written.load(Ordering::Relaxed), rows_total: (total >= 0).then_some(total), progressed: !carried };
        match renew(&ctx, &id, generation, beat).await {
            Ok(outcome) => {
                renewed = Instant::now();
                carried = true;
                match outcome {
                    Heartbeat::Renewed => {}
                    Heartbeat::CancelRequested => {
                        tx.send_if_modified(|h| {
                            let changed = *h == Holding::Held;
                            if changed {
                                *h = Holding::CancelRequested;
                            }
                            changed
                        });
                    }
                    Heartbeat::Lost => {
                        let _ = tx.send(Holding::Lost);
                        return;
                    }
                }
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
