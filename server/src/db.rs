//! Connecting, migrating, and the few SQL fragments that differ between SQLite and PostgreSQL.

use migrations::{Migrator, MigratorTrait};
use sea_orm::{ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, DbErr, Statement};
use std::time::Duration;

/// Connections of an API process's pool.
pub const API_POOL: u32 = 16;

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
            let db = connect(url).await?;
            migrate(&db, url).await?;
            Ok(db)
        }
    }
}

/// Opens the database with the API's pool, without migrating.
pub async fn connect(url: &str) -> Result<DatabaseConnection, DbErr> {
    connect_pool(url, API_POOL).await
}

/// The connections of a worker running `concurrency` jobs: a small pool for short statements
/// (claims, heartbeats, transitions), and apart from it, where snapshots are read — on
/// PostgreSQL one connection per job, on SQLite the file (each snapshot opens its own
/// read-only connection) — so long reads never starve the heartbeats that keep leases alive.
pub async fn worker_pools(url: &str, concurrency: usize) -> Result<(DatabaseConnection, crate::worker::snapshot::Source), DbErr> {
    use crate::worker::snapshot::Source;
    // Opened in full at start, so a heartbeat never waits for a new connection to be set up.
    let size = 4 + (concurrency as u32).div_ceil(4);
    let control = connect_pool_with(url, size, size).await?;
    let snapshots = match control.get_database_backend() {
        // One connection per job, and one more that a job's count can borrow while it is idle.
        DbBackend::Postgres => {
            let size = concurrency as u32 + 1;
            Source::Postgres(connect_pool_with(url, size.min(2), size).await?.get_postgres_connection_pool().clone())
        }
        _ => Source::Sqlite(sqlite_path(url).ok_or_else(|| DbErr::Custom("a worker needs a SQLite database file, not an in-memory one".into()))?.into()),
    };
    Ok((control, snapshots))
}

/// Opens a pool of at most `max` connections.
pub async fn connect_pool(url: &str, max: u32) -> Result<DatabaseConnection, DbErr> {
    connect_pool_with(url, 1, max).await
}

/// Opens a pool of `min` to `max` connections.
pub async fn connect_pool_with(url: &str, min: u32, max: u32) -> Result<DatabaseConnection, DbErr> {
    if let Some(path) = sqlite_path(url) {
        create_parent_folder(&path)?;
    }
    let mut opt = ConnectOptions::new(url.to_owned());
    opt.max_connections(max.max(1))
        .min_connections(min.clamp(1, max.max(1)))
        .acquire_timeout(Duration::from_secs(30))
        // No ping before each use: it doubled the round trips of every request. A connection that
        // broke while idle fails its statement, and the pool replaces it.
        .test_before_acquire(false)
        .sqlx_logging(false)
        .map_sqlx_sqlite_opts(|o| {
            o.create_if_missing(true)
                .journal_mode(sea_orm::sqlx::sqlite::SqliteJournalMode::Wal)
                .synchronous(sea_orm::sqlx::sqlite::SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_secs(30))
                .foreign_keys(true)
                // A page cache big enough for the indexes of a large exports table (64 MiB).
                .pragma("cache_size", "-65536")
        });
    Database::connect(opt).await
}

/// Applies the migrations, holding a lock that makes processes starting together on one fresh
/// database take turns: an advisory lock on PostgreSQL, a lock file beside a SQLite database.
pub async fn migrate(db: &DatabaseConnection, url: &str) -> Result<(), DbErr> {
    match db.get_database_backend() {
        DbBackend::Postgres => {
            // A session lock, so it is held on one connection of its own for the whole run.
            let lock = connect_pool(url, 1).await?;
            let sql = |f: &str| Statement::from_string(DbBackend::Postgres, format!("SELECT {f}({MIGRATION_LOCK})"));
            lock.execute_raw(sql("pg_advisory_lock")).await?;
            let result = Migrator::up(db, None).await;
            lock.execute_raw(sql("pg_advisory_unlock")).await.ok();
            lock.close().await.ok();
            result
        }
        _ => match sqlite_path(url) {
            Some(path) => {
                let lock = sqlite_migration_lock(&path).await?;
                let result = Migrator::up(db, None).await;
                drop(lock);
                result
            }
            None => Migrator::up(db, None).await,
        },
    }
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

fn sqlite_path(url: &str) -> Option<String> {
    let rest = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or("");
    (!path.is_empty() && path != ":memory:").then(|| path.to_owned())
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
