//! Waking workers when a job becomes claimable, so they do not wait for their next poll.
//!
//! Within one process (the embedded default: `serve` with its worker, on SQLite) a create or a
//! hand-back wakes the local claim loops directly. On PostgreSQL the database announces it: a
//! trigger on `exports` (migration 5) sends `NOTIFY exportd_jobs` for every row that becomes
//! `queued`, delivered when its transaction commits, and every worker process LISTENs. Polling
//! stays as the fallback: a lost notification delays a claim by one poll at most.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The PostgreSQL channel workers listen on (migration 5's trigger names it too).
pub const CHANNEL: &str = "exportd_jobs";

/// The wake-up of this process's claim loops.
#[derive(Debug, Clone, Default)]
pub struct Wakeup {
    notify: Arc<Notify>,
}

impl Wakeup {
    /// Wakes every claim loop of this process that is waiting.
    pub fn wake(&self) {
        self.notify.notify_waiters();
    }

    /// A future that completes at the next [`Wakeup::wake`]; `enable` it before looking for
    /// work, so a wake-up between the look and the wait is not lost.
    pub fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }
}

/// Listens on PostgreSQL at `database_url` and wakes `wakeup` on every notification until
/// `shutdown`; reconnects with backoff when the connection drops.
pub async fn listen(database_url: String, wakeup: Wakeup, shutdown: CancellationToken) {
    use sea_orm::sqlx::postgres::PgListener;
    let mut delay = Duration::from_millis(200);
    while !shutdown.is_cancelled() {
        let listener = async {
            let mut listener = PgListener::connect(&database_url).await?;
            listener.listen(CHANNEL).await?;
            Ok::<_, sea_orm::sqlx::Error>(listener)
        };
        let mut listener = match listener.await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "cannot LISTEN for new jobs; polling meanwhile");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = shutdown.cancelled() => return,
                }
                delay = (delay * 2).min(Duration::from_secs(30));
                continue;
            }
        };
        delay = Duration::from_millis(200);
        // A claim may have been missed while (re)connecting.
        wakeup.wake();
        loop {
            tokio::select! {
                n = listener.recv() => match n {
                    Ok(_) => wakeup.wake(),
                    Err(e) => {
                        tracing::warn!(error = %e, "LISTEN connection lost; reconnecting");
                        break;
                    }
                },
                _ = shutdown.cancelled() => return,
            }
        }
    }
}
