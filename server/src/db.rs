//! Connecting, migrating, and the few SQL fragments that differ between SQLite and PostgreSQL.

use migrations::{Migrator, MigratorTrait};
use sea_orm::{ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, DbErr, Statement};
use std::time::Duration;

/// Opens the database (creating a SQLite file and its folder when missing) and applies migrations.
pub async fn connect_and_migrate(url: &str) -> Result<DatabaseConnection, DbErr> {
    let db = connect(url).await?;
    Migrator::up(&db, None).await?;
    Ok(db)
}

/// Opens the database without migrating.
pub async fn connect(url: &str) -> Result<DatabaseConnection, DbErr> {
    if let Some(path) = sqlite_path(url) {
        if let Some(parent) = std::path::Path::new(&path).parent() {
            if !parent.as_os_str().is_empty() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| DbErr::Custom(format!("cannot create {}: {e}", parent.display())))?;
            }
        }
    }
    let mut opt = ConnectOptions::new(url.to_owned());
    opt.max_connections(16)
        .min_connections(1)
        .acquire_timeout(Duration::from_secs(30))
        .sqlx_logging(false)
        .map_sqlx_sqlite_opts(|o| {
            o.create_if_missing(true)
                .journal_mode(sea_orm::sqlx::sqlite::SqliteJournalMode::Wal)
                .synchronous(sea_orm::sqlx::sqlite::SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_secs(30))
                .foreign_keys(true)
        });
    Database::connect(opt).await
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
    let row = db
        .query_one_raw(Statement::from_string(backend, sql))
        .await?
        .ok_or_else(|| DbErr::Custom("the clock query returned no row".into()))?;
    row.try_get::<i64>("", "now_ms")
}

/// The `n`th bind placeholder (1-based) in the backend's syntax.
pub fn placeholder(backend: DbBackend, n: usize) -> String {
    match backend {
        DbBackend::Postgres => format!("${n}"),
        _ => "?".to_owned(),
    }
}
