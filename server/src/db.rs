//! Connecting, migrating, and the few SQL fragments that differ between SQLite and PostgreSQL.
//!
//! Every pool bounds how long its statements may wait (SPEC §4, "No process can stop the
//! others"): a process that freezes while it holds a row lock, a transaction or SQLite's write
//! lock must not stall anyone else for longer than a few seconds. On PostgreSQL each connection
//! of the API's and the worker's short-statement pools starts with `lock_timeout`,
//! `statement_timeout` and `idle_in_transaction_session_timeout`; the snapshot connections get
//! a `lock_timeout` only (their reads are long by nature and bounded by the stall rule). SQLite's
//! writers wait [`SQLITE_BUSY_TIMEOUT`] for the write lock. A wait that runs out is
//! [`is_busy`]: nothing changed, and the caller retries (the API answers 503 `busy`).

use migrations::{Migrator, MigratorTrait};
use sea_orm::{ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, DbErr, RuntimeErr, Statement};
use std::time::Duration;

/// Connections of an API process's pool.
pub const API_POOL: u32 = 16;

/// How long a statement of the API or the worker's short-statement pool waits for a row lock
/// before it gives up (PostgreSQL's `lock_timeout`).
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(2);

/// How long one statement of those pools may run (`statement_timeout`).
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(15);

/// How long a transaction of those pools may sit idle before PostgreSQL ends its session and
/// releases its locks (`idle_in_transaction_session_timeout`): every such transaction runs its
/// statements back to back, so only a frozen process reaches it.
pub const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a SQLite writer waits for the database's one write lock: well under a lease, so a
/// frozen holder costs a few seconds, not a lease.
pub const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a caller waits for a free connection of a pool.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a pool is for, which decides how long its statements may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolUse {
    /// An API process's requests.
    Api,
    /// A worker's claims, heartbeats, transitions and janitor.
    Control,
    /// A worker's snapshot reads: a lock wait gives up after `lock_timeout` (the stall rule ends
    /// the attempt well before), and no statement or idle bound, since a read is as long as
    /// its export and may wait on its upload.
    Snapshot {
        /// The snapshot's `lock_timeout`.
        lock_timeout: Duration,
    },
    /// Migrations: creating an index on a large table may take long; nothing else runs then.
    Migration,
}

impl PoolUse {
    /// The name the connections carry in `pg_stat_activity`.
    fn application_name(self) -> &'static str {
        match self {
            PoolUse::Api => "exportd-api",
            PoolUse::Control => "exportd-worker",
            PoolUse::Snapshot { .. } => "exportd-snapshot",
            PoolUse::Migration => "exportd-migrate",
        }
    }

    /// The PostgreSQL settings every connection of the pool starts with.
    fn postgres_settings(self) -> Vec<(&'static str, String)> {
        let ms = |d: Duration| format!("{}ms", d.as_millis());
        match self {
            PoolUse::Api | PoolUse::Control => vec![
                ("lock_timeout", ms(LOCK_TIMEOUT)),
                ("statement_timeout", ms(STATEMENT_TIMEOUT)),
                ("idle_in_transaction_session_timeout", ms(IDLE_IN_TRANSACTION_TIMEOUT)),
            ],
            PoolUse::Snapshot { lock_timeout } => vec![("lock_timeout", ms(lock_timeout))],
            PoolUse::Migration => vec![],
        }
    }
}

/// Whether `e` is a bounded wait that gave up — a row lock held by another process
/// (`lock_timeout`), a statement cut off by `statement_timeout`, a session ended for sitting
/// idle in its transaction, SQLite's write lock still held after [`SQLITE_BUSY_TIMEOUT`], a
/// serialisation conflict, or no pooled connection in time. Nothing was changed by it, and the
/// same call may be tried again.
pub fn is_busy(e: &DbErr) -> bool {
    let runtime = match e {
        DbErr::ConnectionAcquire(_) => return true,
        DbErr::Conn(r) | DbErr::Exec(r) | DbErr::Query(r) => r,
        _ => return false,
    };
    let RuntimeErr::SqlxError(sqlx) = runtime else { return false };
    match sqlx.as_ref() {
        sea_orm::sqlx::Error::PoolTimedOut => true,
        sea_orm::sqlx::Error::Database(db) => {
            // PostgreSQL: lock_not_available, query_canceled, idle_in_transaction_session_timeout,
            // serialization_failure, deadlock_detected. SQLite: SQLITE_BUSY and SQLITE_LOCKED, with
            // their extended codes.
            const BUSY: [&str; 9] = ["55P03", "57014", "25P03", "40001", "40P01", "5", "6", "261", "517"];
            db.code().is_some_and(|code| BUSY.contains(&code.as_ref()))
        }
        _ => false,
    }
}

/// The key of the PostgreSQL advisory lock that serialises migrations between processes.
const MIGRATION_LOCK: i64 = 0x6578_706f_7274_64; // "exportd"

/// Opens the database (creating a SQLite file and its folder when missing) with the API's pool,
/// and applies migrations, one process at a time.
pub async fn connect_and_migrate(url: &str) -> Result<DatabaseConnection, DbErr> {
    match sqlite_path(url) {
        // On SQLite the lock is taken before the first connection, not only around the
        // migrations: connections opening a fresh file at once (each switching it into WAL mode)
        // can be told "database is locked" straight away, without their busy timeout.
        Some(path) => {
            let lock = sqlite_migration_lock(&path).await?;
            let result = match connect(url).await {
                Ok(db) => Migrator::up(&db, None).await.map(|()| db),
                Err(e) => Err(e),
            };
            drop(lock);
            result
        }
        None => {
            migrate_postgres(url).await?;
            connect(url).await
        }
    }
}

/// Opens the database with the API's pool, without migrating.
pub async fn connect(url: &str) -> Result<DatabaseConnection, DbErr> {
    connect_pool(url, PoolUse::Api, 1, API_POOL).await
}

/// The PostgreSQL connections a worker running `jobs` at once opens at most: one per job for its
/// snapshot and a spare (for a count beside a read, or a part read ahead), `4 + ⌈jobs/4⌉` for
/// short statements, and one to LISTEN.
pub fn worker_connections(jobs: usize) -> u32 {
    let jobs = jobs as u32;
    jobs + 1 + 4 + jobs.div_ceil(4) + 1
}

/// The most jobs a worker runs at once on PostgreSQL within `budget` connections (at least one).
pub fn jobs_within(budget: u32) -> usize {
    (1..=crate::config::MAX_CONCURRENCY).rev().find(|jobs| worker_connections(*jobs) <= budget).unwrap_or(1)
}

/// Opens a pool for `use_` of `min` to `max` connections.
pub async fn connect_pool(url: &str, use_: PoolUse, min: u32, max: u32) -> Result<DatabaseConnection, DbErr> {
    if let Some(path) = sqlite_path(url) {
        create_parent_folder(&path)?;
    }
    let mut opt = ConnectOptions::new(url.to_owned());
    opt.max_connections(max.max(1))
        .min_connections(min.clamp(1, max.max(1)))
        .acquire_timeout(ACQUIRE_TIMEOUT)
        // No ping before each use: it doubled the round trips of every request. A connection that
        // broke while idle fails its statement, and the pool replaces it.
        .test_before_acquire(false)
        .sqlx_logging(false)
        .map_sqlx_postgres_opts(move |o| o.application_name(use_.application_name()).options(use_.postgres_settings()))
        .map_sqlx_sqlite_opts(|o| {
            o.create_if_missing(true)
                .journal_mode(sea_orm::sqlx::sqlite::SqliteJournalMode::Wal)
                .synchronous(sea_orm::sqlx::sqlite::SqliteSynchronous::Normal)
                .busy_timeout(SQLITE_BUSY_TIMEOUT)
                .foreign_keys(true)
                // A page cache big enough for the indexes of a large exports table (64 MiB).
                .pragma("cache_size", "-65536")
                // The write-ahead log is cut back to this size whenever a checkpoint empties it,
                // instead of keeping the largest size it ever reached (see `wal_checkpoint`).
                .pragma("journal_size_limit", WAL_SIZE_LIMIT.to_string())
        });
    Database::connect(opt).await
}

/// The size SQLite's write-ahead log is cut back to once a checkpoint has emptied it.
pub const WAL_SIZE_LIMIT: u64 = 8 * 1024 * 1024;

/// Applies the migrations on PostgreSQL on a pool of its own (no statement bound: an index on a
/// large table may take long), holding an advisory lock that makes processes starting together
/// on one fresh database take turns.
async fn migrate_postgres(url: &str) -> Result<(), DbErr> {
    let db = connect_pool(url, PoolUse::Migration, 1, 2).await?;
    // A session lock, so it is held on one connection of its own for the whole run.
    let lock = connect_pool(url, PoolUse::Migration, 1, 1).await?;
    let sql = |f: &str| Statement::from_string(DbBackend::Postgres, format!("SELECT {f}({MIGRATION_LOCK})"));
    lock.execute_raw(sql("pg_advisory_lock")).await?;
    let result = Migrator::up(&db, None).await;
    lock.execute_raw(sql("pg_advisory_unlock")).await.ok();
    lock.close().await.ok();
    db.close().await.ok();
    result
}

/// Waits for, then holds until dropped, the lock file beside a SQLite database that processes
/// opening and migrating it take turns on.
async fn sqlite_migration_lock(path: &str) -> Result<std::fs::File, DbErr> {
    create_parent_folder(path)?;
    let lock_path = format!("{path}.migrate-lock");
    tokio::task::spawn_blocking(move || {
        let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path)?;
        file.lock()?;
        Ok::<_, std::io::Error>(file)
    })
    .await
    .map_err(|e| DbErr::Custom(format!("migration lock: {e}")))?
    .map_err(|e| DbErr::Custom(format!("migration lock: {e}")))
}

/// Creates the folder a SQLite database file goes in, when missing.
fn create_parent_folder(path: &str) -> Result<(), DbErr> {
    match std::path::Path::new(path).parent() {
        Some(parent) if !parent.as_os_str().is_empty() => {
            std::fs::create_dir_all(parent).map_err(|e| DbErr::Custom(format!("cannot create {}: {e}", parent.display())))
        }
        _ => Ok(()),
    }
}

pub fn sqlite_path(url: &str) -> Option<String> {
    let rest = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or("");
    (!path.is_empty() && path != ":memory:").then(|| path.to_owned())
}

/// On SQLite, copies the write-ahead log back into the database as far as its readers allow (a
/// PASSIVE checkpoint, which never waits for anyone); once a checkpoint is complete, the next
/// write starts the log again from its beginning and cuts the file back to [`WAL_SIZE_LIMIT`].
/// Nothing to do on PostgreSQL.
pub async fn checkpoint_wal(db: &DatabaseConnection) {
    if db.get_database_backend() == DbBackend::Sqlite {
        if let Err(e) = db.execute_unprepared("PRAGMA wal_checkpoint(PASSIVE)").await {
            tracing::warn!(error = %e, "checkpointing the write-ahead log failed; next time");
        }
    }
}

/// The database's clock in epoch milliseconds, as an SQL expression. Leases use it, so that
/// processes on machines with skewed clocks agree.
pub fn now_ms_sql(backend: DbBackend) -> &'static str {
    match backend {
        DbBackend::Postgres => "(CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT))",
        _ => "(CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))",
    }
}

/// Reads the database's clock.
pub async fn db_now_ms<C: ConnectionTrait>(db: &C) -> Result<i64, DbErr> {
    let backend = db.get_database_backend();
    let sql = format!("SELECT {} AS now_ms", now_ms_sql(backend));
    let row = db.query_one_raw(Statement::from_string(backend, sql)).await?.ok_or_else(|| DbErr::Custom("the clock query returned no row".into()))?;
    row.try_get::<i64>("", "now_ms")
}
