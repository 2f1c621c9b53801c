//! The snapshot an export is written from (SPEC §5.4): one read transaction in which the rows
//! are counted and read by a single query built from the report registry (on PostgreSQL the
//! count runs beside the rows, in a second transaction that imports the first one's snapshot). The file shows
//! the data as of the worker's snapshot, whatever changes meanwhile.
//!
//! A producer reads the snapshot and writes CSV chunks into a bounded channel; the attempt hashes
//! and uploads them as they come, so reading and uploading overlap and memory stays flat. Each
//! backend reads the way its database is fastest at:
//! - PostgreSQL: `BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY` (without JIT), then the rows as
//!   `COPY (SELECT …) TO STDOUT (FORMAT binary)` — the database's own dump path, with no
//!   formatting on the server — decoded here into CSV.
//! - SQLite: one read transaction on a read-only connection of its own (rusqlite, in a blocking
//!   thread), stepping the statement and writing each row as it comes.
//!
//! Both write every cell through [`CsvEncoder`], so defusing, money and instants follow one rule.

use crate::exports::reports::{ColumnSpec, ColumnType, FilterTest, ReportSpec};
use crate::csv_cells::CsvEncoder;
use app::{ExportRequest, ResolvedContract};
use bytes::{Buf, BytesMut};
use futures::StreamExt;
use sea_orm::sea_query::{Alias, Expr, ExprTrait, JoinType, Order, PostgresQueryBuilder, Query, SelectStatement, SqliteQueryBuilder};
use sea_orm::sqlx;
use sea_orm::DbBackend;
use tokio::sync::mpsc;

/// The connections of a worker running `concurrency` jobs: a small pool for short statements
/// (claims, heartbeats, transitions), and apart from it, where snapshots are read — on
/// PostgreSQL one connection per job, on SQLite the file (each snapshot opens its own
/// read-only connection) — so long reads never starve the heartbeats that keep leases alive.
pub async fn worker_pools(url: &str, concurrency: usize, snapshot_lock_timeout: std::time::Duration) -> Result<(sea_orm::DatabaseConnection, Source), sea_orm::DbErr> {
    use crate::db::{connect_pool, sqlite_path, PoolUse};
    use sea_orm::DbErr;
    // Opened in full at start, so a heartbeat never waits for a new connection to be set up.
    let size = 4 + (concurrency as u32).div_ceil(4);
    let control = connect_pool(url, PoolUse::Control, size, size).await?;
    let snapshots = match control.get_database_backend() {
        // One connection per job, and one more that a job's count can borrow while it is idle.
        DbBackend::Postgres => {
            let size = concurrency as u32 + 1;
            let pool = connect_pool(url, PoolUse::Snapshot { lock_timeout: snapshot_lock_timeout }, Ord::min(size, 2), size).await?;
            Source::Postgres { pool: pool.get_postgres_connection_pool().clone(), control: control.clone() }
        }
        _ => Source::Sqlite(sqlite_path(url).ok_or_else(|| DbErr::Custom("a worker needs a SQLite database file, not an in-memory one".into()))?.into()),
    };
    Ok((control, snapshots))
}

/// Bytes of CSV gathered before a chunk is handed over.
pub const CHUNK_BYTES: usize = 256 * 1024;

/// Chunks in flight between the producer and the upload.
const CHUNKS_IN_FLIGHT: usize = 4;

/// What a producer hands over.
#[derive(Debug)]
pub enum Produced {
    /// The snapshot's row count (on PostgreSQL it may come after the first rows).
    Counted(i64),
    /// CSV bytes, and the data rows written so far.
    Chunk(Vec<u8>, i64),
    /// A part's read is complete: its first and last keys (none for a part with no rows) and
    /// the moment its snapshot shows, epoch milliseconds by the database's clock.
    Part { first_key: Option<i64>, last_key: Option<i64>, read_at: i64, last: bool },
}

/// The rows of one part of a checkpointed export (SPEC §5.1): keys above `after` (all, for the
/// first part) up to `max_key`, in key order, at most `limit` of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRange {
    /// The last key of the part before; `None` for the first.
    pub after: Option<i64>,
    /// The highest key of the export, fixed at its first claim.
    pub max_key: i64,
    /// The part's size in rows.
    pub limit: u64,
}

/// Why reading the snapshot failed.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The attempt stopped reading (a cancel, a lost lease, a stall, a shutdown).
    #[error("the attempt stopped reading")]
    Stopped,
    /// The database failed.
    #[error("database: {0}")]
    Database(String),
    /// The rows were not what the registry says.
    #[error("unexpected data: {0}")]
    Data(String),
    /// Writing CSV failed.
    #[error("writing CSV: {0}")]
    Write(std::io::Error),
}

impl From<std::io::Error> for SnapshotError {
    /// A cell the encoder refuses (an instant outside the calendar) is the data's fault, and will
    /// be refused again; anything else is the writer's.
    fn from(e: std::io::Error) -> Self {
        match e.kind() {
            std::io::ErrorKind::InvalidData => SnapshotError::Data(e.to_string()),
            _ => SnapshotError::Write(e),
        }
    }
}

impl SnapshotError {
    /// Whether the same snapshot would fail the same way again (the data, not the database).
    pub fn is_permanent(&self) -> bool {
        matches!(self, SnapshotError::Data(_))
    }
}

impl From<sqlx::Error> for SnapshotError {
    fn from(e: sqlx::Error) -> Self {
        SnapshotError::Database(e.to_string())
    }
}

impl From<rusqlite::Error> for SnapshotError {
    fn from(e: rusqlite::Error) -> Self {
        SnapshotError::Database(e.to_string())
    }
}

/// The two queries of one export's snapshot, and the file's columns.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The file's columns, in order.
    pub columns: Vec<&'static ColumnSpec>,
    /// Whether the file starts with a UTF-8 byte order mark.
    pub bom: bool,
    count: SelectStatement,
    rows: SelectStatement,
    /// The rows' key (the report's order): a part's rows are read by it.
    key_sql: &'static str,
    /// For a part of a checkpointed export: its rows.
    part: Option<KeyRange>,
}

/// An amount in minor units: a whole number of cents as written (1.10 → 110, despite binary
/// floating point), otherwise rounded with `round` (ceil for a lower bound, floor for an upper).
fn to_cents(amount: f64, round: fn(f64) -> f64) -> i64 {
    let cents = amount * 100.0;
    if (cents - cents.round()).abs() < 1e-6 {
        cents.round() as i64
    } else {
        round(cents) as i64
    }
}

fn strings(value: &serde_json::Value) -> Vec<String> {
    value.as_array().map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect()).unwrap_or_default()
}

fn millis(rfc3339: &str) -> Result<i64, String> {
    rfc3339.parse::<jiff::Timestamp>().map(|t| t.as_millisecond()).map_err(|e| format!("stored instant {rfc3339:?}: {e}"))
}

impl Plan {
    /// The queries of an export of `report` for `tenant_id`, as the operation was resolved.
    pub fn new(report: &'static ReportSpec, request: &ExportRequest, resolved: &ResolvedContract, tenant_id: &str) -> Result<Plan, String> {
        let columns = resolved
            .columns
            .iter()
            .map(|name| report.column(name).ok_or_else(|| format!("{} has no column {name:?}", report.name)))
            .collect::<Result<Vec<_>, _>>()?;
        let (table, alias) = report.source.table;
        let mut rows = Query::select();
        rows.from_as(Alias::new(table), Alias::new(alias));
        rows.and_where(Expr::cust(report.source.tenant_sql).eq(tenant_id))
            .and_where(Expr::cust(report.time_sql()).gte(millis(&resolved.from)?))
            .and_where(Expr::cust(report.time_sql()).lt(millis(&resolved.to)?));
        let mut main_table_only = true;
        for (name, value) in &request.filters {
            let filter = report.filter(name).ok_or_else(|| format!("{} has no filter {name:?}", report.name))?;
            let amount = || value.as_f64().ok_or_else(|| format!("filter {name} is not a number"));
            let test = match filter.test {
                FilterTest::In => Expr::cust(filter.sql).is_in(strings(value)),
                FilterTest::AtLeast => Expr::cust(filter.sql).gte(to_cents(amount()?, f64::ceil)),
                FilterTest::AtMost => Expr::cust(filter.sql).lte(to_cents(amount()?, f64::floor)),
            };
            main_table_only &= filter.sql.starts_with(&format!("{alias}."));
            rows.and_where(test);
        }
        // Every join matches exactly one row (a foreign key says so), so when no filter needs a
        // joined table the rows can be counted on the main table alone.
        let mut count = rows.clone();
        for join in report.source.joins {
            rows.join_as(JoinType::InnerJoin, Alias::new(join.table), Alias::new(join.alias), Expr::cust(join.on));
            if !(join.one_per_row && main_table_only) {
                count.join_as(JoinType::InnerJoin, Alias::new(join.table), Alias::new(join.alias), Expr::cust(join.on));
            }
        }
        count.expr(Expr::cust("COUNT(*)"));
        for column in &columns {
            rows.expr(Expr::cust(column.sql));
        }
        rows.order_by_expr(Expr::cust(report.source.order_sql), Order::Asc);
        Ok(Plan { columns, bom: request.options.bom, count, rows, key_sql: report.source.order_sql, part: None })
    }

    /// The plan of one part: the same rows, in `range`, each with its key after the file's
    /// columns (read, never written).
    pub fn part(&self, range: KeyRange) -> Plan {
        let mut rows = self.rows.clone();
        rows.expr(Expr::cust(self.key_sql));
        if let Some(after) = range.after {
            rows.and_where(Expr::cust(self.key_sql).gt(after));
        }
        rows.limit(range.limit);
        Plan { rows, part: Some(range), ..self.clone() }
    }

    /// The query that gives a part's last key: the key of the `limit`-th row after `after`
    /// (counted like the rows, on the main table unless a filter needs a join), or none when
    /// fewer rows are left; within `max_key`.
    pub fn part_end_sql(&self, backend: DbBackend) -> Option<String> {
        let range = self.part?;
        let mut end = self.count.clone();
        end.clear_selects();
        end.expr(Expr::cust(self.key_sql));
        if let Some(after) = range.after {
            end.and_where(Expr::cust(self.key_sql).gt(after));
        }
        end.and_where(Expr::cust(self.key_sql).lte(range.max_key));
        end.order_by_expr(Expr::cust(self.key_sql), Order::Asc).offset(range.limit.saturating_sub(1)).limit(1);
        Some(match backend {
            DbBackend::Postgres => end.to_string(PostgresQueryBuilder),
            _ => end.to_string(SqliteQueryBuilder),
        })
    }

    /// A part's rows up to `end` (its last key, or the export's highest one), in key order.
    pub fn part_rows_sql(&self, backend: DbBackend, end: i64) -> String {
        let mut rows = self.rows.clone();
        rows.and_where(Expr::cust(self.key_sql).lte(end));
        match backend {
            DbBackend::Postgres => rows.to_string(PostgresQueryBuilder),
            _ => rows.to_string(SqliteQueryBuilder),
        }
    }

    /// The query that gives the highest key and the number of the export's rows, in one
    /// snapshot: what a checkpointed export fixes at its first claim.
    pub fn bounds_sql(&self, backend: DbBackend) -> String {
        let mut bounds = self.count.clone();
        bounds.clear_selects();
        bounds.expr(Expr::cust(format!("MAX({})", self.key_sql))).expr(Expr::cust("COUNT(*)"));
        match backend {
            DbBackend::Postgres => bounds.to_string(PostgresQueryBuilder),
            _ => bounds.to_string(SqliteQueryBuilder),
        }
    }

    /// The fields a row of the query has beyond the file's columns (a part's key).
    fn extra_fields(&self) -> usize {
        usize::from(self.part.is_some())
    }

    /// The query that counts the rows, with its values inlined (escaped by the query builder).
    pub fn count_sql(&self, backend: DbBackend) -> String {
        match backend {
            DbBackend::Postgres => self.count.to_string(PostgresQueryBuilder),
            _ => self.count.to_string(SqliteQueryBuilder),
        }
    }

    /// The query that reads the rows, in file order, with its values inlined.
    pub fn rows_sql(&self, backend: DbBackend) -> String {
        match backend {
            DbBackend::Postgres => self.rows.to_string(PostgresQueryBuilder),
            _ => self.rows.to_string(SqliteQueryBuilder),
        }
    }

    fn encoder(&self) -> Result<CsvEncoder, SnapshotError> {
        let header: Vec<&str> = self.columns.iter().map(|c| c.name).collect();
        Ok(CsvEncoder::new(self.bom, &header)?)
    }
}

/// Where a snapshot is read from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A PostgreSQL pool of snapshot connections, and the worker's short-statement pool, from
    /// which a read that must stop is cancelled (`pg_cancel_backend`).
    Postgres {
        /// The snapshot connections.
        pool: sqlx::PgPool,
        /// Where the cancel is sent from.
        control: sea_orm::DatabaseConnection,
    },
    /// A SQLite database file.
    Sqlite(std::path::PathBuf),
}

/// How long a stopped read may take to notice before its task is abandoned (its connection is
/// then closed, never handed back to the pool).
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The server processes of a PostgreSQL read that may still be running statements, so that a
/// stop can cancel them. Locked while a cancel is sent, so the reader cannot hand a connection
/// back to the pool (to another export) in between.
#[derive(Debug, Default)]
struct Backends {
    pids: Vec<i32>,
}

/// What stops a read the database may still be running.
#[derive(Clone)]
enum Interrupt {
    Postgres { backends: std::sync::Arc<tokio::sync::Mutex<Backends>>, control: sea_orm::DatabaseConnection },
    Sqlite(std::sync::Arc<std::sync::Mutex<Option<rusqlite::InterruptHandle>>>),
}

impl Interrupt {
    /// Cancels whatever statement the read is running: a query still waiting for its first row
    /// (a lock, a long sort or count), or one blocked on a half-open connection.
    async fn interrupt(&self) {
        match self {
            Interrupt::Postgres { backends, control } => {
                use sea_orm::ConnectionTrait;
                let held = backends.lock().await;
                for pid in &held.pids {
                    let cancel = sea_orm::Statement::from_string(sea_orm::DbBackend::Postgres, format!("SELECT pg_cancel_backend({pid})"));
                    if let Err(e) = control.execute_raw(cancel).await {
                        tracing::warn!(pid, error = %e, "cancelling a snapshot read failed");
                    }
                }
            }
            Interrupt::Sqlite(slot) => {
                if let Some(handle) = slot.lock().ok().as_ref().and_then(|h| h.as_ref()) {
                    handle.interrupt();
                }
            }
        }
    }
}

/// A snapshot being read. Its chunks arrive on the receiver [`produce`] returned; [`Producer::
/// finish`] waits for the end of a read that ran to its last chunk, and [`Producer::stop`] (or
/// dropping it) ends one early, cancelling the statement the database may still be running.
pub struct Producer {
    handle: Option<tokio::task::JoinHandle<Result<(), SnapshotError>>>,
    interrupt: Interrupt,
}

impl Producer {
    /// The read's result, once it has ended by itself.
    pub async fn finish(mut self) -> Result<(), SnapshotError> {
        match self.handle.take() {
            Some(handle) => handle.await.map_err(|e| SnapshotError::Database(format!("the snapshot read stopped: {e}")))?,
            None => Err(SnapshotError::Stopped),
        }
    }

    /// Ends the read now: cancels its statement, then waits (a bounded time) for it to stop.
    pub async fn stop(mut self) {
        if let Some(handle) = self.handle.take() {
            stop_read(self.interrupt.clone(), handle).await;
        }
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(stop_read(self.interrupt.clone(), handle));
            }
        }
    }
}

/// How often a stop repeats its cancel while the read goes on.
const STOP_AGAIN: std::time::Duration = std::time::Duration::from_millis(100);

/// Cancels the read's statements until it ends: a cancel lands only on a statement that is
/// running, and the read may be between two (or not yet have its connection) when one is sent.
async fn stop_read(interrupt: Interrupt, mut handle: tokio::task::JoinHandle<Result<(), SnapshotError>>) {
    let deadline = tokio::time::Instant::now() + STOP_WAIT;
    loop {
        interrupt.interrupt().await;
        if tokio::time::timeout(STOP_AGAIN, &mut handle).await.is_ok() {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!("a stopped snapshot read did not end; abandoning it and closing its connection");
            handle.abort();
            return;
        }
    }
}

/// Starts reading `plan`'s snapshot; chunks arrive on the receiver. Dropping the receiver stops
/// the producer at its next chunk; [`Producer::stop`] stops it at once.
pub fn produce(source: &Source, plan: Plan) -> (mpsc::Receiver<Produced>, Producer) {
    let (tx, rx) = mpsc::channel(CHUNKS_IN_FLIGHT);
    match source.clone() {
        Source::Postgres { pool, control } => {
            let backends = std::sync::Arc::new(tokio::sync::Mutex::new(Backends::default()));
            let handle = tokio::spawn(produce_postgres(pool, plan, tx, backends.clone()));
            (rx, Producer { handle: Some(handle), interrupt: Interrupt::Postgres { backends, control } })
        }
        Source::Sqlite(path) => {
            let slot = std::sync::Arc::new(std::sync::Mutex::new(None));
            let interrupt = Interrupt::Sqlite(slot.clone());
            let handle = tokio::task::spawn_blocking(move || produce_sqlite(&path, &plan, &tx, &slot));
            (rx, Producer { handle: Some(handle), interrupt })
        }
    }
}

/// A snapshot connection borrowed from the pool: closed when dropped, unless the read that used
/// it ended cleanly. A read stopped part-way (a cancel, an error, an abandoned task) may leave
/// it inside its COPY or its transaction, where the next export's snapshot would fail on it.
struct Borrowed {
    conn: sqlx::pool::PoolConnection<sqlx::Postgres>,
    pid: i32,
    clean: bool,
}

impl Drop for Borrowed {
    fn drop(&mut self) {
        if !self.clean {
            self.conn.close_on_drop();
        }
    }
}

/// Registers a snapshot connection's server process for a stop to cancel.
async fn register(conn: sqlx::pool::PoolConnection<sqlx::Postgres>, backends: &tokio::sync::Mutex<Backends>) -> Result<Borrowed, SnapshotError> {
    let mut borrowed = Borrowed { conn, pid: 0, clean: false };
    borrowed.pid = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut *borrowed.conn).await?;
    backends.lock().await.pids.push(borrowed.pid);
    Ok(borrowed)
}

/// Hands a connection back: no stop can cancel its process any more, and it returns to the pool
/// only when its read ended cleanly.
async fn give_back(mut borrowed: Borrowed, clean: bool, backends: &tokio::sync::Mutex<Backends>) {
    let mut held = backends.lock().await;
    held.pids.retain(|pid| *pid != borrowed.pid);
    borrowed.clean = clean;
    drop(borrowed);
}

/// The receiver is gone: the attempt stopped reading.
#[derive(Debug)]
struct Stopped;

impl From<Stopped> for SnapshotError {
    fn from(_: Stopped) -> Self {
        SnapshotError::Stopped
    }
}

/// Writes rows into `csv` and sets a chunk aside whenever it is full, for the producer to send.
struct Chunker {
    csv: CsvEncoder,
    rows: i64,
    ready: Vec<Produced>,
}

impl Chunker {
    fn new(plan: &Plan) -> Result<Chunker, SnapshotError> {
        Ok(Chunker { csv: plan.encoder()?, rows: 0, ready: Vec::new() })
    }

    fn row_done(&mut self) -> Result<(), SnapshotError> {
        self.csv.end_row()?;
        self.rows += 1;
        if self.csv.buffered() >= CHUNK_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), SnapshotError> {
        let chunk = self.csv.take()?;
        self.ready.push(Produced::Chunk(chunk, self.rows));
        Ok(())
    }
}

async fn produce_postgres(pool: sqlx::PgPool, plan: Plan, tx: mpsc::Sender<Produced>, backends: std::sync::Arc<tokio::sync::Mutex<Backends>>) -> Result<(), SnapshotError> {
    let mut rows = register(pool.acquire().await?, &backends).await?;
    let read = read_postgres(&pool, &mut rows.conn, plan, tx, &backends).await;
    give_back(rows, read.is_ok(), &backends).await;
    read
}

async fn read_postgres(
    pool: &sqlx::PgPool,
    rows: &mut sqlx::pool::PoolConnection<sqlx::Postgres>,
    plan: Plan,
    tx: mpsc::Sender<Produced>,
    backends: &std::sync::Arc<tokio::sync::Mutex<Backends>>,
) -> Result<(), SnapshotError> {
    let mut conn = sqlx::Connection::begin(&mut **rows).await?;
    read_only_snapshot(&mut conn, None).await?;
    let count_sql = plan.count_sql(DbBackend::Postgres);
    // The count runs beside the rows, on a second connection that imports this transaction's
    // snapshot, when one is idle; otherwise first, on this one. Dropping the set stops it. A
    // part is not counted: it is known to hold at most its size.
    let mut counting = tokio::task::JoinSet::new();
    let read_at: Option<i64> = match plan.part {
        // The transaction's first statement takes its snapshot: its start is the moment the
        // part shows.
        Some(_) => Some(sqlx::query_scalar("SELECT CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT)").fetch_one(&mut *conn).await?),
        None => None,
    };
    let second = if read_at.is_none() { pool.try_acquire() } else { None };
    match second {
        Some(second) => {
            let snapshot: String = sqlx::query_scalar("SELECT pg_export_snapshot()").fetch_one(&mut *conn).await?;
            let second = register(second, backends).await?;
            counting.spawn(count_in_snapshot(second, snapshot, count_sql, tx.clone(), backends.clone()));
        }
        None if read_at.is_some() => {}
        None => {
            let total = count(&mut conn, count_sql).await?;
            tx.send(Produced::Counted(total)).await.map_err(|_| Stopped)?;
        }
    }
    // A part's last key first, in the same snapshot (one index range read): then its rows are a
    // bounded range, which the planner reads its own best way. Asked for "the next million rows
    // in key order" instead, it either looks each row's customer up in key order or, once few
    // rows are left, joins and sorts all of them (measured on 10M orders: 2.5 s and 2.8 s a part,
    // against 2.0 s).
    let (rows_sql, last) = match plan.part_end_sql(DbBackend::Postgres) {
        Some(end_sql) => {
            let end: Option<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(end_sql)).fetch_optional(&mut *conn).await?;
            let max_key = plan.part.map_or(0, |r| r.max_key);
            (plan.part_rows_sql(DbBackend::Postgres, end.unwrap_or(max_key)), end.is_none_or(|end| end >= max_key))
        }
        None => (plan.rows_sql(DbBackend::Postgres), true),
    };
    let mut out = Chunker::new(&plan)?;
    let mut decoder = CopyBinary::default();
    let mut keys = Keys::default();
    {
        let statement = format!("COPY ({rows_sql}) TO STDOUT (FORMAT binary)");
        let mut copy = conn.copy_out_raw(&statement).await?;
        while let Some(message) = copy.next().await {
            // Rows arrive faster than they are written; a task that never waits would starve the
            // heartbeats that keep this and every other job's lease alive. Give way now and then.
            tokio::task::coop::consume_budget().await;
            decoder.feed(&message?);
            while let Some(tuple) = decoder.next_tuple()? {
                write_fields(&plan.columns, plan.extra_fields(), &tuple, &mut out.csv)?;
                if plan.part.is_some() {
                    keys.saw(key_field(&tuple, plan.columns.len())?);
                }
                out.row_done()?;
            }
            for chunk in out.ready.drain(..) {
                tx.send(chunk).await.map_err(|_| Stopped)?;
            }
        }
    }
    if !decoder.finished() {
        return Err(SnapshotError::Database("the COPY stream ended before its trailer".into()));
    }
    out.flush()?;
    for chunk in out.ready.drain(..) {
        tx.send(chunk).await.map_err(|_| Stopped)?;
    }
    if let Some(read_at) = read_at {
        tx.send(keys.part(read_at, last)).await.map_err(|_| Stopped)?;
    }
    // The exported snapshot lives as long as this transaction: the count ends before it does.
    while let Some(counted) = counting.join_next().await {
        counted.map_err(|e| SnapshotError::Database(format!("the count stopped: {e}")))??;
    }
    conn.commit().await?;
    Ok(())
}

/// Makes the transaction just begun on `conn` a read-only REPEATABLE READ one, in the snapshot
/// another transaction exported when `import` names one.
async fn read_only_snapshot(conn: &mut sqlx::PgConnection, import: Option<&str>) -> Result<(), SnapshotError> {
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY").execute(&mut *conn).await?;
    if let Some(snapshot) = import {
        sqlx::query(sqlx::AssertSqlSafe(format!("SET TRANSACTION SNAPSHOT '{snapshot}'"))).execute(&mut *conn).await?;
    }
    // JIT compiling this scan, join and sort costs more than it saves (about a tenth of a 1M-row
    // export, measured by scripts/bench.sh); it is the default above a cost threshold.
    sqlx::query("SET LOCAL jit = off").execute(&mut *conn).await?;
    Ok(())
}

async fn count(conn: &mut sqlx::PgConnection, count_sql: String) -> Result<i64, SnapshotError> {
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(count_sql)).fetch_one(conn).await?)
}

/// Counts the rows on `conn` in the snapshot `snapshot` that another transaction exported.
async fn count_in_snapshot(
    mut conn: Borrowed,
    snapshot: String,
    count_sql: String,
    tx: mpsc::Sender<Produced>,
    backends: std::sync::Arc<tokio::sync::Mutex<Backends>>,
) -> Result<(), SnapshotError> {
    let counted = async {
        if !snapshot.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
            return Err(SnapshotError::Database(format!("unexpected snapshot id {snapshot:?}")));
        }
        let mut t = sqlx::Connection::begin(&mut *conn.conn).await?;
        read_only_snapshot(&mut t, Some(&snapshot)).await?;
        let total = count(&mut t, count_sql).await?;
        t.commit().await?;
        Ok(total)
    }
    .await;
    give_back(conn, counted.is_ok(), &backends).await;
    tx.send(Produced::Counted(counted?)).await.map_err(|_| Stopped)?;
    Ok(())
}

/// The first and last keys of a part's rows.
#[derive(Debug, Default)]
struct Keys {
    first: Option<i64>,
    last: Option<i64>,
}

impl Keys {
    fn saw(&mut self, key: i64) {
        self.first.get_or_insert(key);
        self.last = Some(key);
    }

    fn part(&self, read_at: i64, last: bool) -> Produced {
        Produced::Part { first_key: self.first, last_key: self.last, read_at, last }
    }
}

/// The key that follows the file's columns in a part's row.
fn key_field(tuple: &Tuple<'_>, at: usize) -> Result<i64, SnapshotError> {
    let bytes = tuple.field(at).ok_or_else(|| SnapshotError::Data("a row's key is NULL".into()))?;
    Ok(i64::from_be_bytes(<[u8; 8]>::try_from(bytes).map_err(|_| SnapshotError::Data("a row's key is not a bigint".into()))?))
}

/// Writes a row's fields as the file's columns; `extra` fields follow them (read, never written).
fn write_fields(columns: &[&ColumnSpec], extra: usize, tuple: &Tuple<'_>, csv: &mut CsvEncoder) -> Result<(), SnapshotError> {
    if tuple.len() != columns.len() + extra {
        return Err(SnapshotError::Data(format!("{} fields for {} columns", tuple.len(), columns.len())));
    }
    for (i, column) in columns.iter().enumerate() {
        let Some(bytes) = tuple.field(i) else {
            return Err(SnapshotError::Data(format!("{} is NULL", column.name)));
        };
        match column.ty {
            ColumnType::Text => csv.text(std::str::from_utf8(bytes).map_err(|e| SnapshotError::Data(e.to_string()))?)?,
            ty => {
                let n = i64::from_be_bytes(<[u8; 8]>::try_from(bytes).map_err(|_| SnapshotError::Data(format!("{} is not a bigint", column.name)))?);
                write_number(ty, n, csv)?;
            }
        }
    }
    Ok(())
}

fn write_number(ty: ColumnType, n: i64, csv: &mut CsvEncoder) -> std::io::Result<()> {
    match ty {
        ColumnType::Money => csv.money(n),
        ColumnType::Timestamp => csv.instant(n),
        _ => csv.integer(n),
    }
}

/// Decodes PostgreSQL's binary COPY format: a signature and header, then tuples (a field
/// count, and per field a length, −1 for NULL, and its bytes), then a −1 trailer. Cells are
/// read where they lie in the buffer; only their offsets are kept, in one reused list.
#[derive(Debug, Default)]
struct CopyBinary {
    buf: BytesMut,
    /// Where the next tuple starts in `buf`; what lies before it has been read.
    at: usize,
    /// The last tuple's cells: start and length in `buf`, `None` for NULL.
    cells: Vec<Option<(usize, usize)>>,
    header_read: bool,
    finished: bool,
}

/// One decoded tuple, borrowed from the decoder's buffer.
struct Tuple<'a> {
    buf: &'a [u8],
    cells: &'a [Option<(usize, usize)>],
}

impl Tuple<'_> {
    fn len(&self) -> usize {
        self.cells.len()
    }

    /// The bytes of cell `i`, or `None` for NULL.
    fn field(&self, i: usize) -> Option<&[u8]> {
        self.cells[i].map(|(start, len)| &self.buf[start..start + len])
    }
}

const SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0";

fn be_i16(b: &[u8]) -> i16 {
    i16::from_be_bytes([b[0], b[1]])
}

fn be_i32(b: &[u8]) -> i32 {
    i32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

impl CopyBinary {
    fn feed(&mut self, bytes: &[u8]) {
        self.buf.advance(self.at);
        self.at = 0;
        self.buf.extend_from_slice(bytes);
    }

    fn finished(&self) -> bool {
        self.finished
    }

    /// The next complete tuple, if the buffer holds one.
    fn next_tuple(&mut self) -> Result<Option<Tuple<'_>>, SnapshotError> {
        if !self.header_read {
            let buf = &self.buf[self.at..];
            if buf.len() < SIGNATURE.len() + 8 {
                return Ok(None);
            }
            if &buf[..SIGNATURE.len()] != SIGNATURE {
                return Err(SnapshotError::Data("not a binary COPY stream".into()));
            }
            let extension = be_i32(&buf[15..19]) as u32 as usize;
            if buf.len() < 19 + extension {
                return Ok(None);
            }
            self.at += 19 + extension;
            self.header_read = true;
        }
        let buf = &self.buf[..];
        if self.finished || buf.len() < self.at + 2 {
            return Ok(None);
        }
        let count = be_i16(&buf[self.at..]);
        if count == -1 {
            self.at += 2;
            self.finished = true;
            return Ok(None);
        }
        // Check the whole tuple is here before taking any of it.
        self.cells.clear();
        let mut at = self.at + 2;
        for _ in 0..count {
            if buf.len() < at + 4 {
                return Ok(None);
            }
            let len = be_i32(&buf[at..]);
            at += 4;
            let len = usize::try_from(len).ok();
            self.cells.push(len.map(|len| (at, len)));
            at += len.unwrap_or(0);
            if buf.len() < at {
                return Ok(None);
            }
        }
        self.at = at;
        Ok(Some(Tuple { buf, cells: &self.cells }))
    }
}

fn produce_sqlite(
    path: &std::path::Path,
    plan: &Plan,
    tx: &mpsc::Sender<Produced>,
    interrupt: &std::sync::Mutex<Option<rusqlite::InterruptHandle>>,
) -> Result<(), SnapshotError> {
    use rusqlite::types::ValueRef;
    let conn = rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
    if let Ok(mut slot) = interrupt.lock() {
        *slot = Some(conn.get_interrupt_handle());
    }
    conn.busy_timeout(crate::db::SQLITE_BUSY_TIMEOUT)?;
    // One read transaction: the count and the rows see the same snapshot. (A part is not
    // counted; its snapshot's moment is read instead, by a statement that reads the database
    // file, so that the snapshot begins with it.)
    conn.execute_batch("BEGIN")?;
    let read_at: Option<i64> = match plan.part {
        Some(_) => Some(conn.query_row(&format!("SELECT {} FROM sqlite_schema LIMIT 1", crate::db::now_ms_sql(DbBackend::Sqlite)), [], |r| r.get(0))?),
        None => {
            let total: i64 = conn.query_row(&plan.count_sql(DbBackend::Sqlite), [], |r| r.get(0))?;
            tx.blocking_send(Produced::Counted(total)).map_err(|_| Stopped)?;
            None
        }
    };
    // SQLite reads a part in one step, by key, up to the export's highest key: it is the last
    // when fewer rows than a part are left, or the last read ends at that key.
    let (rows_sql, max_key) = match plan.part {
        Some(range) => (plan.part_rows_sql(DbBackend::Sqlite, range.max_key), Some(range.max_key)),
        None => (plan.rows_sql(DbBackend::Sqlite), None),
    };
    let mut out = Chunker::new(plan)?;
    let mut keys = Keys::default();
    let mut statement = conn.prepare(&rows_sql)?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        for (i, column) in plan.columns.iter().enumerate() {
            match (column.ty, row.get_ref(i)?) {
                (ColumnType::Text, ValueRef::Text(t)) => out.csv.text(std::str::from_utf8(t).map_err(|e| SnapshotError::Data(e.to_string()))?)?,
                (ty, ValueRef::Integer(n)) if ty != ColumnType::Text => write_number(ty, n, &mut out.csv)?,
                (_, other) => return Err(SnapshotError::Data(format!("{} holds {:?}", column.name, other.data_type()))),
            }
        }
        if plan.part.is_some() {
            keys.saw(row.get::<_, i64>(plan.columns.len())?);
        }
        out.row_done()?;
        for chunk in out.ready.drain(..) {
            tx.blocking_send(chunk).map_err(|_| Stopped)?;
        }
    }
    out.flush()?;
    for chunk in out.ready.drain(..) {
        tx.blocking_send(chunk).map_err(|_| Stopped)?;
    }
    if let Some(read_at) = read_at {
        let limit = plan.part.map_or(0, |r| r.limit);
        let last = out.rows < limit as i64 || keys.last.is_none() || keys.last >= max_key;
        tx.blocking_send(keys.part(read_at, last)).map_err(|_| Stopped)?;
    }
    drop(rows);
    drop(statement);
    conn.execute_batch("COMMIT")?;
    Ok(())
}

/// The highest key and the number of `plan`'s rows, read in one snapshot (what a checkpointed
/// export fixes at its first claim); the key is `None` when there are no rows.
pub async fn bounds(source: &Source, plan: &Plan) -> Result<(Option<i64>, i64), SnapshotError> {
    match source {
        Source::Postgres { pool, .. } => {
            let mut conn = pool.acquire().await?;
            let sql = plan.bounds_sql(DbBackend::Postgres);
            let read: Result<(Option<i64>, i64), SnapshotError> = async {
                let mut t = sqlx::Connection::begin(&mut *conn).await?;
                read_only_snapshot(&mut t, None).await?;
                let bounds = sqlx::query_as(sqlx::AssertSqlSafe(sql)).fetch_one(&mut *t).await?;
                t.commit().await?;
                Ok(bounds)
            }
            .await;
            if read.is_err() {
                conn.close_on_drop();
            }
            read
        }
        Source::Sqlite(path) => {
            let (path, sql) = (path.clone(), plan.bounds_sql(DbBackend::Sqlite));
            tokio::task::spawn_blocking(move || {
                let conn = rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
                conn.busy_timeout(crate::db::SQLITE_BUSY_TIMEOUT)?;
                Ok(conn.query_row(&sql, [], |r| Ok((r.get::<_, Option<i64>>(0)?, r.get::<_, i64>(1)?)))?)
            })
            .await
            .map_err(|e| SnapshotError::Database(format!("the bounds' read stopped: {e}")))?
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exports::reports::ORDERS;

    #[test]
    fn amounts_with_whole_cents_convert_exactly_despite_binary_floats() {
        assert_eq!(to_cents(1.10, f64::ceil), 110);
        assert_eq!(to_cents(1.13, f64::floor), 113);
        assert_eq!(to_cents(-12.5, f64::ceil), -1250);
        assert_eq!(to_cents(1.105, f64::ceil), 111);
        assert_eq!(to_cents(1.105, f64::floor), 110);
    }

    fn resolved(columns: &[&str]) -> ResolvedContract {
        ResolvedContract {
            from: "2026-01-01T00:00:00Z".into(),
            to: "2026-01-02T00:00:00Z".into(),
            timezone: "UTC".into(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            deployment: "ksa".into(),
        }
    }

    #[test]
    fn the_snapshot_query_reads_the_registry_columns_of_the_tenant_in_its_interval() {
        let mut request = ExportRequest::new("orders");
        request.filters.insert("status".into(), serde_json::json!(["paid"]));
        request.filters.insert("min_total".into(), serde_json::json!(1.10));
        let plan = Plan::new(&ORDERS, &request, &resolved(&["order_id", "customer_name", "total"]), "ten_'acme").unwrap();
        assert_eq!(
            plan.rows_sql(DbBackend::Postgres),
            "SELECT o.id, c.name, o.total_cents FROM \"orders\" AS \"o\" INNER JOIN \"customers\" AS \"c\" ON c.tenant_id = o.tenant_id AND c.id = o.customer_id \
             WHERE (o.tenant_id) = E'ten_\\'acme' AND (o.placed_at) >= 1767225600000 AND (o.placed_at) < 1767312000000 AND (o.total_cents) >= 110 AND (o.status) IN ('paid') ORDER BY o.id ASC"
        );
        // Every order has exactly one customer: the count needs no join.
        assert_eq!(
            plan.count_sql(DbBackend::Sqlite),
            "SELECT COUNT(*) FROM \"orders\" AS \"o\" WHERE (o.tenant_id) = 'ten_''acme' AND (o.placed_at) >= 1767225600000 AND (o.placed_at) < 1767312000000 AND (o.total_cents) >= 110 AND (o.status) IN ('paid')"
        );
        assert_eq!(plan.columns.len(), 3);
    }

    #[test]
    fn a_part_is_read_as_its_last_key_then_the_bounded_range_up_to_it() {
        let request = ExportRequest::new("orders");
        let plan = Plan::new(&ORDERS, &request, &resolved(&["order_id", "customer_name"]), "ten_acme").unwrap();
        let part = plan.part(KeyRange { after: Some(1000), max_key: 9000, limit: 500 });
        assert_eq!(
            part.part_end_sql(DbBackend::Postgres).unwrap(),
            "SELECT o.id FROM \"orders\" AS \"o\" WHERE (o.tenant_id) = 'ten_acme' AND (o.placed_at) >= 1767225600000 AND (o.placed_at) < 1767312000000 \
             AND (o.id) > 1000 AND (o.id) <= 9000 ORDER BY o.id ASC LIMIT 1 OFFSET 499"
        );
        assert_eq!(
            part.part_rows_sql(DbBackend::Postgres, 4321),
            "SELECT o.id, c.name, o.id FROM \"orders\" AS \"o\" INNER JOIN \"customers\" AS \"c\" ON c.tenant_id = o.tenant_id AND c.id = o.customer_id \
             WHERE (o.tenant_id) = 'ten_acme' AND (o.placed_at) >= 1767225600000 AND (o.placed_at) < 1767312000000 AND (o.id) > 1000 AND (o.id) <= 4321 ORDER BY o.id ASC LIMIT 500"
        );
        assert!(plan.part_end_sql(DbBackend::Postgres).is_none(), "a whole export has no part end");
        let first = plan.part(KeyRange { after: None, max_key: 9000, limit: 500 });
        assert!(!first.part_end_sql(DbBackend::Sqlite).unwrap().contains("> "), "the first part starts at the first key");
    }

    #[test]
    fn binary_copy_tuples_decode_however_the_stream_is_split() {
        let mut stream = Vec::new();
        stream.extend_from_slice(SIGNATURE);
        stream.extend_from_slice(&0u32.to_be_bytes());
        stream.extend_from_slice(&0u32.to_be_bytes());
        for (n, text) in [(-1250i64, "=1+1"), (7, "محمد")] {
            stream.extend_from_slice(&2i16.to_be_bytes());
            stream.extend_from_slice(&8i32.to_be_bytes());
            stream.extend_from_slice(&n.to_be_bytes());
            stream.extend_from_slice(&(text.len() as i32).to_be_bytes());
            stream.extend_from_slice(text.as_bytes());
        }
        stream.extend_from_slice(&(-1i16).to_be_bytes());
        let columns = [ORDERS.column("total").unwrap(), ORDERS.column("notes").unwrap()];
        for split in [1, 3, 7, stream.len()] {
            let mut decoder = CopyBinary::default();
            let mut csv = CsvEncoder::new(false, &["total", "notes"]).unwrap();
            for piece in stream.chunks(split) {
                decoder.feed(piece);
                while let Some(tuple) = decoder.next_tuple().unwrap() {
                    write_fields(&columns, 0, &tuple, &mut csv).unwrap();
                    csv.end_row().unwrap();
                }
            }
            assert!(decoder.finished());
            assert_eq!(String::from_utf8(csv.take().unwrap()).unwrap(), "total,notes\r\n-12.50,'=1+1\r\n0.07,محمد\r\n", "split {split}");
        }
    }
}
