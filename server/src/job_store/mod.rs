//! The job store: the one place where a job of any kind (an export, an import; see [`kind`])
//! moves between the states of SPEC §4. The create
//! and cancel calls of the service, the worker and the janitor all move jobs through these
//! functions, never with SQL of their own.
//!
//! | state | moved in by | moved out by |
//! |---|---|---|
//! | `queued` | create; a worker's hand-back on SIGTERM; an operator's [`transitions::redrive`] of a failed job | a worker's [`claims::claim`]; [`transitions::cancel`]; the janitor after `EXPORTD_QUEUE_TTL_SECS` (`no_worker`) |
//! | `running` | [`claims::claim`] (generation+1, attempt+1, lease) | [`transitions::release`]; [`transitions::end_attempt`]; [`transitions::cancel`]; [`transitions::hand_back`]; the janitor when the lease expired or the attempt stalled |
//! | `retry_wait` | [`transitions::end_attempt`] of a transient failure with attempts left (worker, or janitor for a lost or stalled worker) | [`claims::claim`] once `next_attempt_at` passed; [`transitions::cancel`]; the janitor when no claim came `EXPORTD_QUEUE_TTL_SECS` after `next_attempt_at` (`no_worker`) |
//! | `cancel_requested` | [`transitions::cancel`] of a running job | the worker at a checkpoint ([`transitions::acknowledge_cancel`]); any end of the attempt; the janitor when the lease expired |
//! | `ready` | [`transitions::release`] | — (terminal; the janitor may mark its artifact expired, and purge the record) |
//! | `failed` | [`transitions::end_attempt`]; the janitor (`worker_lost`, `stalled`, `no_worker`) | an operator's [`transitions::redrive`] (back to `queued`, attempts reset) |
//! | `cancelled` | [`transitions::cancel`]; the end of an attempt that met `cancel_requested` | — (terminal) |
//!
//! Every transition is one conditional UPDATE naming the states (and, for a worker, the
//! generation) it expects, run in one transaction with its audit row; a zero-row result means
//! someone else won and comes back to the caller as an outcome to handle. Lease and queue times
//! come from the database's clock.
//!
//! No process can stop the others (SPEC §4): no transaction here awaits anything but its own
//! statements (no store, no network, no other lock), every lock wait is bounded by the pool's
//! `lock_timeout` (see [`crate::db`]) and comes back as a "busy" error that changed nothing, and
//! the janitor's transitions skip a row another process holds (`SKIP LOCKED`) instead of
//! waiting for it: they try again on the next pass.

pub mod audit;
pub mod authority;
pub mod checkpoints;
pub mod claims;
pub mod fencing;
pub mod intake;
pub mod kind;
pub mod listing;
pub mod transitions;
pub mod wakeup;

use crate::db::now_ms_sql;
use sea_orm::sea_query::Expr;
use sea_orm::{DatabaseConnection, DatabaseTransaction, DbBackend, DbErr, SqliteTransactionMode, TransactionOptions, TransactionTrait};

/// The statuses of a job that has not finished (`EXPORTD_MAX_ACTIVE_PER_ACTOR` counts them, per
/// kind; an upload an unfinished import names is kept).
pub const UNFINISHED: [&str; 4] = ["queued", "running", "retry_wait", "cancel_requested"];

/// The database's clock in epoch milliseconds, as an expression.
pub fn db_now(backend: DbBackend) -> Expr {
    Expr::cust(now_ms_sql(backend))
}

/// A transaction that will write: on SQLite it takes the write lock at once (`BEGIN IMMEDIATE`),
/// so it waits for other writers instead of failing when it upgrades from reading.
pub async fn begin_write(db: &DatabaseConnection) -> Result<DatabaseTransaction, DbErr> {
    db.begin_with_options(TransactionOptions { sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate), ..Default::default() }).await
}

/// Who moved a job, as the audit trail names them.
#[derive(Debug, Clone, Copy)]
pub enum Mover<'a> {
    /// A user, by id (create, cancel, downloads).
    User(&'a str),
    /// A worker, by its `worker:…` id.
    Worker(&'a str),
    /// The janitor of the worker with this id.
    Janitor(&'a str),
    /// An operator at the command line (`exportd jobs …`).
    Operator,
}

impl Mover<'_> {
    /// The `actor` column of the audit row.
    pub fn name(&self) -> String {
        match self {
            Mover::User(id) | Mover::Worker(id) => (*id).to_owned(),
            Mover::Janitor(worker) => format!("janitor:{}", worker.trim_start_matches("worker:")),
            Mover::Operator => "operator".to_owned(),
        }
    }
}
