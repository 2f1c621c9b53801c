//! The snapshot an export is written from (SPEC §5.4): one read transaction in which the rows
//! are counted and read by a single query built from the catalog's report (on PostgreSQL the
//! count runs beside the rows, in a second transaction that imports the first one's snapshot). The file shows
//! the data as of the worker's snapshot, whatever changes meanwhile.
//!
//! A producer reads the snapshot and writes the file's chunks into a bounded channel; the attempt
//! hashes and uploads them as they come, so reading and uploading overlap and memory stays flat
//! (a workbook's rows wait in temporary files, and its package comes at the end). Each backend
//! reads the way its database is fastest at:
//! - PostgreSQL: `BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY` (without JIT), then the rows as
//!   `COPY (SELECT …) TO STDOUT (FORMAT binary)` — the database's own dump path, with no
//!   formatting on the server — decoded here.
//! - SQLite: one read transaction on a read-only connection of its own (rusqlite, in a blocking
//!   thread), stepping the statement and writing each row as it comes.
//!
//! Both write every cell through one [`RowEncoder`] (CSV or XLSX), so what each type becomes in
//! a file follows one rule per format.

use crate::catalog::{ColumnType, Filter, FilterTest, FilterValue, Report, TimeUnit};
use crate::csv_cells::CsvEncoder;
use crate::worker::spare_chunks::SpareChunks;
use crate::row_encoder::RowEncoder;
use crate::xlsx_cells::{Kind, Layout, XlsxEncoder};
use app::{ExportRequest, FileFormat, FileLanguage, ResolvedContract};
use futures::StreamExt;
use sea_orm::sqlx;
use sea_orm::DbBackend;
use tokio::sync::mpsc;

/// The connections of a worker running `concurrency` jobs: a small pool on the job store for
/// short statements (claims, heartbeats, transitions), and apart from it, on the source
/// `source_url` (the job store's database unless the catalog's source is another), where
/// snapshots are read — on PostgreSQL one connection per job, on SQLite the file (each snapshot
/// opens its own read-only connection) — so long reads never starve the heartbeats that keep
/// leases alive.
pub async fn worker_pools(url: &str, source_url: &str, concurrency: usize, snapshot_lock_timeout: std::time::Duration) -> Result<(sea_orm::DatabaseConnection, Source), sea_orm::DbErr> {
    use crate::db::{connect_pool, sqlite_path, PoolUse};
    use sea_orm::DbErr;
    // Opened in full at start, so a heartbeat never waits for a new connection to be set up.
    let size = 4 + (concurrency as u32).div_ceil(4);
    let control = connect_pool(url, PoolUse::Control, size, size).await?;
    let snapshots = if source_url.starts_with("postgres") {
        // One connection per job, and the spare (`Source::Postgres`), opened in full: a job
        // borrows the spare only when it is open and idle, never waiting for a new connection.
        let size = concurrency as u32 + 1;
        let pool = connect_pool(source_url, PoolUse::Snapshot { lock_timeout: snapshot_lock_timeout }, size, size).await?;
        // A read that must stop is cancelled from a connection of the same server (and role).
        let cancels = if source_url == url { control.clone() } else { connect_pool(source_url, PoolUse::Control, 0, 1).await? };
        let pool = pool.get_postgres_connection_pool().clone();
        let text_is_utf8 = sqlx::query_scalar(TEXT_IS_UTF8).fetch_one(&pool).await.map_err(|e| DbErr::Custom(format!("reading the source's encoding: {e}")))?;
        Source::Postgres { pool, control: cancels, spare: spare_connection(), text_is_utf8 }
    } else {
        Source::Sqlite(sqlite_path(source_url).ok_or_else(|| DbErr::Custom("a worker needs a SQLite database file, not an in-memory one".into()))?.into())
    };
    Ok((control, snapshots))
}

/// Bytes of a file gathered before a chunk is handed over.
pub const CHUNK_BYTES: usize = 256 * 1024;

/// Rows after which a producer reports its progress even when no bytes are ready (a workbook's
/// rows wait in its temporary files until the end).
const PROGRESS_ROWS: i64 = 16 * 1024;

/// Chunks in flight between the producer and the upload. With 4, on two cores, each step
/// of the stream waited on the next in turn and a fifth of the machine stood idle while the rows
/// streamed (measured with `perf record -a`, issue 34).
const CHUNKS_IN_FLIGHT: usize = 16;

/// What a producer hands over.
#[derive(Debug)]
pub enum Produced {
    /// The snapshot's row count (on PostgreSQL it may come after the first rows).
    Counted(i64),
    /// The file's bytes (perhaps none, for progress alone), and the data rows written so far.
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

/// How a part's rows are asked for in key order (PostgreSQL; SQLite reads a part in one step,
/// sorted, walking the key's index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartOrder {
    /// Asked for without `ORDER BY`, planned in one process with room for a join's hash table,
    /// and taken in the order the plan gives them, each key checked above the one before: a
    /// plan that scans the key's index and hashes the tables it joins keeps that order, and
    /// costs the database half the CPU of the parallel join and sort (measured on the demo's
    /// 10M orders: 1.1 core-seconds a part of 1M against 2.1–2.2). A key that comes out of
    /// order (the hash spilled into batches, another plan was chosen) fails the read with
    /// [`SnapshotError::OutOfOrder`], and the part is read again [`PartOrder::Sorted`].
    Checked,
    /// Asked for with `ORDER BY` the key: the database sorts them.
    Sorted,
}

/// Where a part's rows end, known as soon as its snapshot has found its last key (before its rows
/// stream): the next part's read may begin from there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartEnd {
    /// The part's last key; `None` when no row is left.
    pub end: Option<i64>,
    /// Whether no row of the export is left after it.
    pub last: bool,
}

/// A read begun by [`produce`]: its chunks, what stops it, and (for a part on PostgreSQL) where
/// its rows end, as soon as its snapshot knows.
pub struct Reading {
    /// The file's chunks, as they come.
    pub produced: mpsc::Receiver<Produced>,
    /// The read itself.
    pub producer: Producer,
    /// A part's end: sent once, before its rows; dropped unsent by a read that cannot tell
    /// early (SQLite reads a part in one step) or that failed.
    pub part_end: Option<tokio::sync::oneshot::Receiver<PartEnd>>,
    /// Where a chunk's buffer goes back once its bytes are staged, for the producer to fill again.
    pub spares: SpareChunks,
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
    /// A part's rows, asked for without a sort ([`PartOrder::Checked`]), came out of key order.
    #[error("rows out of key order: {0}")]
    OutOfOrder(String),
    /// Writing the file failed.
    #[error("writing the file: {0}")]
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

/// How one of the file's columns is read from the source and written: the catalog's type, as
/// each backend gives it (PostgreSQL in its binary form, after the cast the plan puts on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// Text, defused.
    Text,
    /// A whole number.
    Integer,
    /// A decimal with this many places (PostgreSQL gives it rounded, as text).
    Decimal(u32),
    /// Minor units, written with the places of the currency in the field given (two when none).
    Money(Option<usize>),
    /// A day, `YYYY-MM-DD`.
    Date,
    /// An instant of a timestamp type.
    Instant,
    /// An instant as epoch milliseconds.
    InstantMs,
    /// `true` or `false`.
    Boolean,
}

/// The file a plan's rows are written as.
#[derive(Debug, Clone)]
pub enum FileShape {
    /// CSV, perhaps with a byte order mark.
    Csv {
        /// Whether the file starts with a UTF-8 byte order mark.
        bom: bool,
    },
    /// An XLSX workbook.
    Xlsx(Layout),
}

/// One of the file's columns.
#[derive(Debug, Clone)]
pub struct Cell {
    /// Its name in the header row.
    pub name: String,
    /// How it is read and written.
    pub read: Read,
}

/// The queries of one export's snapshot, and the file's columns, built from the catalog's report
/// for one backend. Values the request gives as free text are bound parameters (`params`), never
/// part of the SQL; everything else in it is the catalog's own SQL, numbers, or literals quoted
/// here.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The file's columns, in order.
    pub columns: Vec<Cell>,
    /// The file they are written as.
    pub file: FileShape,
    backend: DbBackend,
    /// The select list: the file's columns, then the currencies of its money columns.
    select: Vec<String>,
    from: String,
    /// The `FROM` clause the rows are counted over ([`counted_from`]).
    count_from: String,
    conditions: Vec<String>,
    /// The rows' key (the report's order): a part's rows are read by it.
    key: String,
    /// For a part of a checkpointed export: its rows, and how their order is asked for.
    part: Option<KeyRange>,
    part_order: PartOrder,
    /// The request's filter values, bound: their parameter names and values.
    params: Vec<(String, Bound)>,
}

/// Where a plan's two conditions on the report's time are among its conditions.
const TIME_CONDITIONS: std::ops::Range<usize> = 1..3;

/// A request value bound to a query: SQLite binds it as it is; PostgreSQL's `COPY` takes no
/// parameters, so the read sets each as a setting of its transaction (`set_config`) and the query
/// reads it back with `current_setting`, cast to its type.
#[derive(Debug, Clone, PartialEq)]
pub enum Bound {
    /// Text (a text value, a date, a JSON list of listed values).
    Text(String),
    /// A whole number (minor units, an integer).
    Int(i64),
    /// A number (a decimal).
    Real(f64),
}

impl Bound {
    /// The value as text, as `set_config` takes it.
    fn setting(&self) -> String {
        match self {
            Bound::Text(text) => text.clone(),
            Bound::Int(n) => n.to_string(),
            Bound::Real(x) => format!("{x:?}"),
        }
    }
}

/// An amount in minor units of `places`: a whole number of them as written (1.10 → 110, despite
/// binary floating point), otherwise rounded with `round` (ceil for a lower bound, floor for an
/// upper); `None` when it is not a whole number and `round` is `None` (an equality no row meets).
fn to_minor(amount: f64, places: u32, round: Option<fn(f64) -> f64>) -> Option<i64> {
    let minor = amount * 10f64.powi(places as i32);
    if (minor - minor.round()).abs() < 1e-6 {
        Some(minor.round() as i64)
    } else {
        round.map(|round| round(minor) as i64)
    }
}

/// A string as an SQL literal of `backend` (an escape string on PostgreSQL, whatever
/// `standard_conforming_strings` says).
fn literal(backend: DbBackend, text: &str) -> String {
    match backend {
        DbBackend::Postgres => format!("E'{}'", text.replace('\\', "\\\\").replace('\'', "''")),
        _ => format!("'{}'", text.replace('\'', "''")),
    }
}

fn strings(value: &serde_json::Value) -> Vec<String> {
    value.as_array().map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect()).unwrap_or_default()
}

fn millis(rfc3339: &str) -> Result<i64, String> {
    rfc3339.parse::<jiff::Timestamp>().map(|t| t.as_millisecond()).map_err(|e| format!("stored instant {rfc3339:?}: {e}"))
}

/// Currencies by their places, for a money comparison converted per row.
const PLACES_OTHER_THAN_TWO: [u32; 3] = [0, 3, 4];

impl Plan {
    /// The queries of an export of `report` for the tenant whose source id is `source_id`, as
    /// the operation was resolved, on `backend`.
    pub fn new(report: &Report, request: &ExportRequest, resolved: &ResolvedContract, source_id: &str, backend: DbBackend) -> Result<Plan, String> {
        let pg = backend == DbBackend::Postgres;
        let mut columns = Vec::with_capacity(resolved.columns.len());
        let mut select = Vec::with_capacity(resolved.columns.len());
        let mut currencies = Vec::new();
        for name in &resolved.columns {
            let column = report.column(name).ok_or_else(|| format!("{} has no column {name:?}", report.name))?;
            let sql = &column.sql;
            let cast = |ty: &str| if pg { format!("CAST(({sql}) AS {ty})") } else { sql.clone() };
            let (read, expr) = match &column.ty {
                ColumnType::Text => (Read::Text, cast("TEXT")),
                ColumnType::Integer => (Read::Integer, cast("BIGINT")),
                ColumnType::Decimal { scale } => (Read::Decimal(*scale), if pg { format!("CAST(ROUND(CAST(({sql}) AS NUMERIC), {scale}) AS TEXT)") } else { sql.clone() }),
                ColumnType::Money { currency } => {
                    let field = currency.as_ref().map(|currency| {
                        currencies.push(if pg { format!("CAST(({currency}) AS TEXT)") } else { currency.clone() });
                        currencies.len() - 1
                    });
                    (Read::Money(field), cast("BIGINT"))
                }
                ColumnType::Date => (Read::Date, cast("DATE")),
                ColumnType::Timestamp { unit: TimeUnit::Instant } => (Read::Instant, cast("TIMESTAMPTZ")),
                ColumnType::Timestamp { unit: TimeUnit::Ms } => (Read::InstantMs, cast("BIGINT")),
                ColumnType::Boolean => (Read::Boolean, cast("BOOLEAN")),
            };
            columns.push(Cell { name: column.name.clone(), read });
            select.push(expr);
        }
        // The currencies follow the file's columns: a money cell's currency field is found there.
        let first_currency = columns.len();
        for cell in &mut columns {
            if let Read::Money(Some(field)) = &mut cell.read {
                *field += first_currency;
            }
        }
        select.extend(currencies);

        // The tenant's condition first, then the time's two (TIME_CONDITIONS), then the filters'.
        let mut conditions = vec![format!("({}) = {}", report.tenant, literal(backend, source_id))];
        let time = &report.time_sql;
        match report.time_unit {
            TimeUnit::Ms => {
                conditions.push(format!("({time}) >= {}", millis(&resolved.from)?));
                conditions.push(format!("({time}) < {}", millis(&resolved.to)?));
            }
            TimeUnit::Instant if pg => {
                conditions.push(format!("({time}) >= CAST({} AS TIMESTAMPTZ)", literal(backend, &resolved.from)));
                conditions.push(format!("({time}) < CAST({} AS TIMESTAMPTZ)", literal(backend, &resolved.to)));
            }
            // SQLite keeps instants as text in more than one shape; julianday reads them all.
            TimeUnit::Instant => {
                conditions.push(format!("julianday({time}) >= julianday({})", literal(backend, &resolved.from)));
                conditions.push(format!("julianday({time}) < julianday({})", literal(backend, &resolved.to)));
            }
        }
        let mut params = Vec::new();
        for (name, value) in &request.filters {
            let filter = report.filter(name).ok_or_else(|| format!("{} has no filter {name:?}", report.name))?;
            conditions.push(filter_condition(backend, filter, value, &mut params)?);
        }
        let count_from = counted_from(&report.from, &conditions);
        let file = match request.format {
            FileFormat::Csv => FileShape::Csv { bom: request.options.bom },
            FileFormat::Xlsx => FileShape::Xlsx(layout(report, &columns, request.options.language, &resolved.timezone)?),
        };
        Ok(Plan { columns, file, backend, select, from: report.from.clone(), count_from, conditions, key: report.key.clone(), part: None, part_order: PartOrder::Sorted, params })
    }

    /// The plan with its workbook's creation time set to `accepted` (the operation's acceptance),
    /// so the same rows give the same bytes.
    pub fn accepted_at(mut self, accepted: jiff::Timestamp) -> Plan {
        if let FileShape::Xlsx(layout) = &mut self.file {
            layout.created = accepted;
        }
        self
    }

    /// The plan of one part: the same rows, in `range`, each with its key after the file's
    /// columns (read, never written).
    pub fn part(&self, range: KeyRange, order: PartOrder) -> Plan {
        let mut part = self.clone();
        part.part_order = order;
        part.select.push(part.key_read());
        if let Some(after) = range.after {
            part.conditions.push(format!("({}) > {after}", self.key));
        }
        part.part = Some(range);
        part
    }

    /// The key as a part reads it: a bigint (on SQLite the bare key, so that its index serves
    /// `MAX`).
    fn key_read(&self) -> String {
        match self.backend {
            DbBackend::Postgres => format!("CAST(({}) AS BIGINT)", self.key),
            _ => self.key.clone(),
        }
    }

    fn query(&self, select: &str, extra: Option<String>, order: bool, limit: Option<(u64, u64)>) -> String {
        self.query_from(&self.from, select, extra, order, limit)
    }

    fn query_from(&self, from: &str, select: &str, extra: Option<String>, order: bool, limit: Option<(u64, u64)>) -> String {
        let mut sql = format!("SELECT {select} FROM {from} WHERE {}", self.conditions.join(" AND "));
        if let Some(extra) = extra {
            sql.push_str(" AND ");
            sql.push_str(&extra);
        }
        if order {
            sql.push_str(&format!(" ORDER BY {} ASC", self.key));
        }
        if let Some((limit, offset)) = limit {
            sql.push_str(&format!(" LIMIT {limit}"));
            if offset > 0 {
                sql.push_str(&format!(" OFFSET {offset}"));
            }
        }
        sql
    }

    /// The query that gives a part's last key: the key of the `limit`-th row after `after`, or
    /// none when fewer rows are left; within `max_key`.
    pub fn part_end_sql(&self) -> Option<String> {
        let range = self.part?;
        Some(self.query_from(&self.count_from, &self.key_read(), Some(format!("({}) <= {}", self.key, range.max_key)), true, Some((1, range.limit.saturating_sub(1)))))
    }

    /// A part's rows up to `end`, its last key found in the same snapshot (or the export's
    /// highest key when fewer rows are left), in key order: sorted, or asked for unsorted and
    /// checked ([`PartOrder`]). No `LIMIT`: the range holds the
    /// part's rows and no more, and a `LIMIT` made the planner pick a plan that stops early (a
    /// customer looked up per row in key order) when it guessed more rows in the range than
    /// there are, another tenant's keys among them: 6.6 s for a part of 1M where the join and
    /// sort take 2.5 s. A join that repeats a key fails the part (`invalid_data`: [`Keys::saw`])
    /// instead of having its rows cut off at the limit.
    pub fn part_rows_sql(&self, end: i64) -> String {
        self.query(&self.select.join(", "), Some(format!("({}) <= {end}", self.key)), self.part_order == PartOrder::Sorted, None)
    }

    /// Whether a part's rows are asked for without a sort ([`PartOrder::Checked`]).
    fn part_checked(&self) -> bool {
        self.part.is_some() && self.part_order == PartOrder::Checked
    }

    /// The rows of `range` (the part this plan was made for) read in one step, without their
    /// end found first (SQLite): the next `range.limit` rows in key order, up to its highest key,
    /// and one more, which is not written: it shows a key repeated across the part's end.
    pub fn next_part_rows_sql(&self, range: KeyRange) -> String {
        self.query(&self.select.join(", "), Some(format!("({}) <= {}", self.key, range.max_key)), true, Some((range.limit.saturating_add(1).min(i64::MAX as u64), 0)))
    }

    /// The query that gives the highest key and the number of the export's rows, in one
    /// snapshot: what a checkpointed export fixes at its first claim.
    pub fn bounds_sql(&self) -> String {
        self.query_from(&self.count_from, &format!("MAX({}), COUNT(*)", self.key_read()), None, false, None)
    }

    /// The fields a row of the query has beyond the file's columns (currencies, a part's key).
    fn extra_fields(&self) -> usize {
        self.select.len() - self.columns.len()
    }

    /// The query that counts the rows.
    pub fn count_sql(&self) -> String {
        self.query_from(&self.count_from, "COUNT(*)", None, false, None)
    }

    /// The query that reads the rows, in file order.
    pub fn rows_sql(&self) -> String {
        self.query(&self.select.join(", "), None, true, None)
    }

    /// The same rows read by walking the tenant's rows in key order, each row's time checked as
    /// it is read: each of the time's conditions is compared with 1, a term no index serves,
    /// which keeps SQLite from reading them from an index (and then sorting every row by key).
    /// SQLite has no statistics of a range's size, so it takes the time's index even when the
    /// range holds nearly all the rows. The comparison itself is left as it is, so it matches
    /// the same rows as the count's: a unary `+` on the time (the usual way) drops the column's
    /// affinity, and a time kept as text then compares above every number.
    pub fn rows_sql_in_key_order(&self) -> String {
        let mut walk = self.clone();
        for condition in &mut walk.conditions[TIME_CONDITIONS] {
            *condition = format!("({condition}) = 1");
        }
        walk.rows_sql()
    }

    /// The query that counts the tenant's rows, whatever their time, up to `limit`: it reads no
    /// more index entries than that, so a small export of a large tenant stays cheap.
    pub fn tenant_count_sql(&self, limit: i64) -> String {
        format!("SELECT COUNT(*) FROM (SELECT 1 FROM {} WHERE {} LIMIT {limit})", self.count_from, self.conditions[0])
    }

    /// The bound values: parameter names and values.
    pub fn params(&self) -> &[(String, Bound)] {
        &self.params
    }

    fn csv(&self, bom: bool) -> Result<CsvEncoder, SnapshotError> {
        let header: Vec<&str> = self.columns.iter().map(|c| c.name.as_str()).collect();
        Ok(CsvEncoder::new(bom, &header)?)
    }
}

/// A workbook's layout for `columns` of `report`: titles in `language` (a date-time's with the
/// zone it is shown in), their number formats, the sheets' direction.
fn layout(report: &Report, columns: &[Cell], language: FileLanguage, timezone: &str) -> Result<Layout, String> {
    let zone = jiff::tz::TimeZone::get(timezone).map_err(|e| format!("timezone {timezone:?}: {e}"))?;
    let mut titles = Vec::with_capacity(columns.len());
    let mut kinds = Vec::with_capacity(columns.len());
    for cell in columns {
        let column = report.column(&cell.name).ok_or_else(|| format!("{} has no column {:?}", report.name, cell.name))?;
        let title = column.title.in_language(language.code(), &column.name);
        let kind = match cell.read {
            Read::Text | Read::Integer | Read::Boolean => Kind::Plain,
            Read::Decimal(scale) => Kind::Decimal(scale),
            Read::Money(_) => Kind::Money,
            Read::Date => Kind::Date,
            Read::Instant | Read::InstantMs => Kind::DateTime,
        };
        titles.push(if kind == Kind::DateTime { Layout::zoned_title(title, timezone) } else { title.to_owned() });
        kinds.push(kind);
    }
    Ok(Layout { titles, kinds, report: report.name.clone(), right_to_left: language == FileLanguage::Ar, zone, created: jiff::Timestamp::UNIX_EPOCH })
}

/// The `FROM` clause a count of the report's rows needs: its first table alone when every join
/// after it is a `LEFT JOIN` and no condition names a joined table, else the whole clause. A
/// `LEFT JOIN` drops no row of the first table, and a report's join never multiplies them (its
/// key is unique per row; a file that had more rows than the count fails `invalid_data`), so the
/// count is the same, read from the first table's index alone (SQLite does not drop such a join
/// by itself: it cost a lookup per row, half of a 1M-row export's time on SQLite).
fn counted_from(from: &str, conditions: &[String]) -> String {
    let lower = from.to_ascii_lowercase();
    let Some(at) = [" left join ", " left outer join "].iter().filter_map(|j| lower.find(j)).min() else {
        return from.to_owned();
    };
    let (main, joins) = (from[..at].trim(), lower[at..].split_whitespace().collect::<Vec<_>>());
    let words: Vec<&str> = main.split_whitespace().collect();
    let single_table = match words.as_slice() {
        [_] | [_, _] => true,
        [_, as_, _] => as_.eq_ignore_ascii_case("as"),
        _ => false,
    };
    if !single_table || main.contains(',') {
        return from.to_owned();
    }
    let mut aliases = Vec::new();
    for (i, word) in joins.iter().enumerate() {
        if matches!(*word, "inner" | "cross" | "right" | "full" | "natural") {
            return from.to_owned();
        }
        if *word == "join" {
            let left = i >= 1 && (joins[i - 1] == "left" || (joins[i - 1] == "outer" && i >= 2 && joins[i - 2] == "left"));
            let Some(table) = joins.get(i + 1).filter(|_| left) else { return from.to_owned() };
            let alias = match joins.get(i + 2) {
                Some(&"as") => joins.get(i + 3).copied().unwrap_or(table),
                Some(&"on") | Some(&"using") | None => table,
                Some(alias) => alias,
            };
            aliases.push(alias.to_owned());
        }
    }
    let names = |condition: &String, alias: &str| {
        let lower = condition.to_ascii_lowercase();
        let needle = format!("{alias}.");
        lower.match_indices(&needle).any(|(at, _)| at == 0 || !lower[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_'))
    };
    if conditions.iter().any(|c| aliases.iter().any(|a| names(c, a))) {
        return from.to_owned();
    }
    main.to_owned()
}

/// The condition of one filter with the request's `value` (already validated). The value is
/// bound (`params`), never written into the SQL; on PostgreSQL each is read back with
/// `current_setting` and cast to the type it is compared as.
fn filter_condition(backend: DbBackend, filter: &Filter, value: &serde_json::Value, params: &mut Vec<(String, Bound)>) -> Result<String, String> {
    let sql = &filter.sql;
    let pg = backend == DbBackend::Postgres;
    // The parameter `exportd.f_<filter>[_<suffix>]`: its placeholder in the SQL, once bound.
    let mut bind = |suffix: &str, bound: Bound, cast: &str| {
        let name = format!("f_{}{suffix}", filter.name);
        params.push((format!("exportd.{name}"), bound));
        match (pg, cast) {
            (true, "TEXT") => format!("current_setting('exportd.{name}')"),
            (true, cast) => format!("CAST(current_setting('exportd.{name}') AS {cast})"),
            (false, _) => format!(":{name}"),
        }
    };
    let not_a = |what: &str| format!("filter {} is not {what}", filter.name);
    let (of, op, round): (&FilterValue, &str, Option<fn(f64) -> f64>) = match &filter.test {
        FilterTest::OneOf { .. } | FilterTest::Countries => {
            let list = serde_json::to_string(&strings(value)).map_err(|e| e.to_string())?;
            let list = bind("", Bound::Text(list), "JSON");
            return Ok(if pg {
                format!("CAST(({sql}) AS TEXT) IN (SELECT json_array_elements_text({list}))")
            } else {
                format!("({sql}) IN (SELECT value FROM json_each({list}))")
            });
        }
        FilterTest::Equals { of } => (of, "=", None),
        FilterTest::AtLeast { of } => (of, ">=", Some(f64::ceil)),
        FilterTest::AtMost { of } => (of, "<=", Some(f64::floor)),
    };
    let number = || value.as_f64().filter(|n| n.is_finite()).ok_or_else(|| not_a("a number"));
    Ok(match of {
        FilterValue::Text => {
            let text = value.as_str().ok_or_else(|| not_a("text"))?;
            let bound = bind("", Bound::Text(text.to_owned()), "TEXT");
            // Compared as text whatever the column's type (a uuid, an enum), as SQLite does.
            if pg { format!("CAST(({sql}) AS TEXT) {op} {bound}") } else { format!("({sql}) {op} {bound}") }
        }
        FilterValue::Integer => format!("({sql}) {op} {}", bind("", Bound::Int(value.as_i64().ok_or_else(|| not_a("a whole number"))?), "BIGINT")),
        FilterValue::Decimal => {
            let bound = bind("", Bound::Real(number()?), "NUMERIC");
            // SQLite may keep a decimal as text, which would compare as text.
            if pg { format!("({sql}) {op} {bound}") } else { format!("CAST(({sql}) AS REAL) {op} {bound}") }
        }
        // Minor units; an amount no whole number of them meets matches no row (NULL).
        FilterValue::Money { currency: None } => {
            let bound = match to_minor(number()?, 2, round) {
                Some(minor) => bind("", Bound::Int(minor), "BIGINT"),
                None => "CAST(NULL AS BIGINT)".to_owned(),
            };
            format!("({sql}) {op} {bound}")
        }
        // Major units, converted per row by the row's currency.
        FilterValue::Money { currency: Some(currency) } => {
            let amount = number()?;
            let mut minor = |places: u32| match to_minor(amount, places, round) {
                Some(minor) => bind(&format!("_{places}"), Bound::Int(minor), "BIGINT"),
                None => "CAST(NULL AS BIGINT)".to_owned(),
            };
            let mut case = String::from("CASE");
            for places in PLACES_OTHER_THAN_TWO {
                let codes = crate::iso_codes::currencies_with_places(places);
                // The codes are ISO 4217's, from the code, not the request.
                let listed = codes.iter().map(|c| literal(backend, c)).collect::<Vec<_>>().join(", ");
                case.push_str(&format!(" WHEN ({currency}) IN ({listed}) THEN {}", minor(places)));
            }
            format!("({sql}) {op} ({case} ELSE {} END)", minor(2))
        }
        FilterValue::Date => {
            let day = bind("", Bound::Text(value.as_str().ok_or_else(|| not_a("a date"))?.to_owned()), "DATE");
            // SQLite keeps a date as text, perhaps with a time after it: its first ten characters.
            if pg { format!("CAST(({sql}) AS DATE) {op} {day}") } else { format!("substr(({sql}), 1, 10) {op} {day}") }
        }
        FilterValue::Boolean => {
            let yes = value.as_bool().ok_or_else(|| not_a("a boolean"))?;
            if pg {
                format!("({sql}) {op} {}", bind("", Bound::Text(yes.to_string()), "BOOLEAN"))
            } else {
                // Kept as 0 and 1, or as the text false and true.
                let (number, text) = (bind("", Bound::Int(i64::from(yes)), ""), bind("_text", Bound::Text(yes.to_string()), ""));
                format!("({sql}) IN ({number}, {text})")
            }
        }
    })
}

/// Whether a PostgreSQL source's text is UTF-8 without a check, asked once when a worker opens
/// its snapshot connections: a UTF8 database and connection on PostgreSQL 15 or later (text is
/// checked on its way in, and from 15 on a `"char"` cast to text writes a byte above 127 escaped
/// rather than as it is). sqlx sets every connection's `client_encoding` to UTF8.
const TEXT_IS_UTF8: &str =
    "SELECT current_setting('server_encoding') = 'UTF8' AND current_setting('client_encoding') = 'UTF8' AND CAST(current_setting('server_version_num') AS INTEGER) >= 150000";

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
        /// The one connection beyond a connection per job, as a permit: a job borrows it (a count
        /// beside its read, a part read ahead) only with the permit, so however many jobs want
        /// one, at most one holds it, and no job waits for another's borrowed connection to get
        /// its own.
        spare: std::sync::Arc<tokio::sync::Semaphore>,
        /// Whether the source's text is UTF-8 without a check ([`TEXT_IS_UTF8`]).
        text_is_utf8: bool,
    },
    /// A SQLite database file.
    Sqlite(std::path::PathBuf),
}

impl Source {
    /// The source's database.
    pub fn backend(&self) -> DbBackend {
        match self {
            Source::Postgres { .. } => DbBackend::Postgres,
            Source::Sqlite(_) => DbBackend::Sqlite,
        }
    }
}

/// The permit of a pool's one spare connection ([`Source::Postgres`]'s `spare`).
pub fn spare_connection() -> std::sync::Arc<tokio::sync::Semaphore> {
    std::sync::Arc::new(tokio::sync::Semaphore::new(1))
}

/// The spare connection and its permit.
struct Spare {
    permit: tokio::sync::OwnedSemaphorePermit,
    conn: sqlx::pool::PoolConnection<sqlx::Postgres>,
}

/// The spare connection, with its permit, if both are free now.
fn borrow_spare(pool: &sqlx::PgPool, spare: &std::sync::Arc<tokio::sync::Semaphore>) -> Option<Spare> {
    let permit = spare.clone().try_acquire_owned().ok()?;
    Some(Spare { permit, conn: pool.try_acquire()? })
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
    /// For a read begun ahead ([`produce_ahead`]): the worker's spare, held until the job's
    /// read before it has ended ([`SpareHold::let_go`]) or this read has (a stopped
    /// one: after its connection is let go).
    spare: SpareHold,
}

/// The worker's spare held by a read begun ahead, shared by the read and its attempt: gone back
/// once the attempt lets it go or every holder has dropped it (a stopped read drops its own
/// after its connection is let go).
#[derive(Clone, Default)]
pub struct SpareHold(std::sync::Arc<std::sync::Mutex<Option<tokio::sync::OwnedSemaphorePermit>>>);

impl SpareHold {
    fn holding(permit: tokio::sync::OwnedSemaphorePermit) -> SpareHold {
        SpareHold(std::sync::Arc::new(std::sync::Mutex::new(Some(permit))))
    }

    /// The job's read before this one has ended: its connection is the job's own now, and the
    /// spare goes back for any job to borrow.
    pub fn let_go(&self) {
        if let Ok(mut held) = self.0.lock() {
            held.take();
        }
    }
}

impl Producer {
    /// The worker's spare this read holds (none but for a read begun ahead), for the attempt to
    /// let go once the job's read before it has ended.
    pub fn spare(&self) -> SpareHold {
        self.spare.clone()
    }

    /// The read's result, once it has ended by itself. A wait dropped before then (the attempt
    /// stopped by another of its steps meanwhile) drops the producer with its read, which stops
    /// it.
    pub async fn finish(mut self) -> Result<(), SnapshotError> {
        let ended = match self.handle.as_mut() {
            Some(handle) => handle.await,
            None => return Err(SnapshotError::Stopped),
        };
        self.handle = None;
        ended.map_err(|e| SnapshotError::Database(format!("the snapshot read stopped: {e}")))?
    }

    /// Ends the read now: cancels its statement, then waits (a bounded time) for it to stop.
    /// The stop runs as a task of its own, to its end even when this wait is dropped (the
    /// attempt stopped by another of its steps meanwhile): a stop dropped between two cancels
    /// left a read waiting in the database, on a lock, after its export had ended.
    pub async fn stop(mut self) {
        if let Some(handle) = self.handle.take() {
            let (interrupt, spare) = (self.interrupt.clone(), std::mem::take(&mut self.spare));
            let stopping = tokio::spawn(async move {
                stop_read(interrupt, handle).await;
                drop(spare);
            });
            let _ = stopping.await;
        }
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        let spare = std::mem::take(&mut self.spare);
        if let Some(handle) = self.handle.take() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let interrupt = self.interrupt.clone();
                runtime.spawn(async move {
                    stop_read(interrupt, handle).await;
                    drop(spare);
                });
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
pub fn produce(source: &Source, plan: Plan) -> Reading {
    produce_on(source, plan, None)
}

/// Starts reading a part's snapshot ahead of its turn, on the worker's spare connection: its
/// rows stream (into their own staging upload, [`CHUNKS_IN_FLIGHT`] chunks at most in flight)
/// while the part before it streams. `None` when the spare is taken (by another
/// job's read ahead or count) or no connection is idle, and on SQLite, whose part is read in
/// one step.
pub fn produce_ahead(source: &Source, plan: Plan) -> Option<Reading> {
    match source {
        Source::Postgres { pool, spare, .. } => {
            let Spare { permit, conn } = borrow_spare(pool, spare)?;
            let mut reading = produce_on(source, plan, Some(conn));
            reading.producer.spare = SpareHold::holding(permit);
            Some(reading)
        }
        Source::Sqlite(_) => None,
    }
}

fn produce_on(source: &Source, plan: Plan, idle: Option<sqlx::pool::PoolConnection<sqlx::Postgres>>) -> Reading {
    let (tx, rx) = mpsc::channel(CHUNKS_IN_FLIGHT);
    let (end_tx, end_rx) = tokio::sync::oneshot::channel();
    let part_end = plan.part.is_some().then_some(end_rx);
    let spares = SpareChunks::default();
    let filled = spares.clone();
    match source.clone() {
        Source::Postgres { pool, control, spare, text_is_utf8 } => {
            let backends = std::sync::Arc::new(tokio::sync::Mutex::new(Backends::default()));
            let handle = tokio::spawn(produce_postgres((pool, spare), idle, (plan, text_is_utf8), (tx, filled), end_tx, backends.clone()));
            Reading { produced: rx, producer: Producer { handle: Some(handle), interrupt: Interrupt::Postgres { backends, control }, spare: SpareHold::default() }, part_end, spares }
        }
        Source::Sqlite(path) => {
            let slot = std::sync::Arc::new(std::sync::Mutex::new(None));
            let interrupt = Interrupt::Sqlite(slot.clone());
            let handle = tokio::task::spawn_blocking(move || produce_sqlite(&path, &plan, (&tx, filled), &slot));
            Reading { produced: rx, producer: Producer { handle: Some(handle), interrupt, spare: SpareHold::default() }, part_end, spares }
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
    /// For the worker's spare: its permit, let go after the connection (fields drop in order).
    _spare: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Drop for Borrowed {
    fn drop(&mut self) {
        if !self.clean {
            self.conn.close_on_drop();
        }
    }
}

/// Registers a snapshot connection's server process for a stop to cancel.
async fn register(conn: sqlx::pool::PoolConnection<sqlx::Postgres>, spare: Option<tokio::sync::OwnedSemaphorePermit>, backends: &tokio::sync::Mutex<Backends>) -> Result<Borrowed, SnapshotError> {
    let mut borrowed = Borrowed { conn, pid: 0, clean: false, _spare: spare };
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

/// Writes rows into `file` and sets a chunk aside whenever it is full (or, with nothing ready,
/// every [`PROGRESS_ROWS`] rows), for the producer to send.
struct Chunker<W> {
    file: W,
    rows: i64,
    ready: Vec<Produced>,
    spares: SpareChunks,
}

impl<W: RowEncoder> Chunker<W> {
    fn new(file: W, spares: &SpareChunks) -> Chunker<W> {
        Chunker { file, rows: 0, ready: Vec::new(), spares: spares.clone() }
    }

    fn row_done(&mut self) -> Result<(), SnapshotError> {
        self.file.end_row()?;
        self.rows += 1;
        if self.file.buffered() >= CHUNK_BYTES || self.rows % PROGRESS_ROWS == 0 {
            // Room for the record that takes a chunk past its size, without growing.
            let chunk = self.file.take(self.spares.get(CHUNK_BYTES + 64 * 1024))?;
            self.ready.push(Produced::Chunk(chunk, self.rows));
        }
        Ok(())
    }

    /// Ends the file: its last bytes, sent in chunks as they come. Runs on a blocking thread (a
    /// workbook's package is written here, a deflate of all its rows).
    fn finish(self, tx: &mpsc::Sender<Produced>) -> Result<(), SnapshotError> {
        for chunk in self.ready {
            tx.blocking_send(chunk).map_err(|_| Stopped)?;
        }
        let mut out = ChunkSender { tx, rows: self.rows, buf: Vec::with_capacity(CHUNK_BYTES) };
        match self.file.finish(&mut out) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Err(SnapshotError::Stopped),
            other => other?,
        }
        out.send()
    }
}

/// The bytes of a file's end, sent as chunks of [`CHUNK_BYTES`] from a blocking thread.
struct ChunkSender<'a> {
    tx: &'a mpsc::Sender<Produced>,
    rows: i64,
    buf: Vec<u8>,
}

impl ChunkSender<'_> {
    fn send(&mut self) -> Result<(), SnapshotError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK_BYTES));
        self.tx.blocking_send(Produced::Chunk(chunk, self.rows)).map_err(|_| SnapshotError::Stopped)
    }
}

impl std::io::Write for ChunkSender<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= CHUNK_BYTES {
            self.send().map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the attempt stopped reading"))?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

async fn produce_postgres(
    (pool, spare): (sqlx::PgPool, std::sync::Arc<tokio::sync::Semaphore>),
    idle: Option<sqlx::pool::PoolConnection<sqlx::Postgres>>,
    plan: (Plan, bool),
    tx: (mpsc::Sender<Produced>, SpareChunks),
    part_end: tokio::sync::oneshot::Sender<PartEnd>,
    backends: std::sync::Arc<tokio::sync::Mutex<Backends>>,
) -> Result<(), SnapshotError> {
    let conn = match idle {
        Some(conn) => conn,
        None => pool.acquire().await?,
    };
    let mut rows = register(conn, None, &backends).await?;
    let read = read_postgres((&pool, &spare), &mut rows.conn, plan, tx, part_end, &backends).await;
    give_back(rows, read.is_ok(), &backends).await;
    read
}

async fn read_postgres(
    (pool, spare): (&sqlx::PgPool, &std::sync::Arc<tokio::sync::Semaphore>),
    rows: &mut sqlx::pool::PoolConnection<sqlx::Postgres>,
    (plan, text_is_utf8): (Plan, bool),
    (tx, spares): (mpsc::Sender<Produced>, SpareChunks),
    part_end: tokio::sync::oneshot::Sender<PartEnd>,
    backends: &std::sync::Arc<tokio::sync::Mutex<Backends>>,
) -> Result<(), SnapshotError> {
    let mut conn = sqlx::Connection::begin(&mut **rows).await?;
    let read_at = read_only_snapshot(&mut conn, None, plan.params(), plan.part.is_some()).await?;
    let count_sql = plan.count_sql();
    // The count runs beside the rows, on the worker's spare connection importing this
    // transaction's snapshot, when the spare is free; otherwise first, on this one. Dropping the
    // set stops it. A part is not counted: it is known to hold at most its size.
    let mut counting = tokio::task::JoinSet::new();
    let second = if read_at.is_none() { borrow_spare(pool, spare) } else { None };
    match second {
        Some(Spare { permit, conn: second }) => {
            let snapshot: String = sqlx::query_scalar("SELECT pg_export_snapshot()").fetch_one(&mut *conn).await?;
            let second = register(second, Some(permit), backends).await?;
            counting.spawn(count_in_snapshot(second, snapshot, count_sql, plan.params().to_vec(), tx.clone(), backends.clone()));
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
    let (rows_sql, last) = match plan.part_end_sql() {
        Some(end_sql) => {
            let end: Option<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(end_sql)).fetch_optional(&mut *conn).await?;
            let max_key = plan.part.map_or(0, |r| r.max_key);
            let last = end.is_none_or(|end| end >= max_key);
            // Unheard when no one waits for it.
            let _ = part_end.send(PartEnd { end, last });
            if plan.part_checked() {
                // One process, so that the rows come in the order its plan reads them; its hash
                // table may take what a parallel plan's processes would have shared.
                // (PostgreSQL 13 and later: before it a hash had `work_mem` alone, and a part
                // whose hash spills is read again sorted.)
                sqlx::query(
                    "SELECT set_config('hash_mem_multiplier', LEAST(1000, current_setting('hash_mem_multiplier')::float8 \
                     * (1 + LEAST(current_setting('max_parallel_workers_per_gather')::int, current_setting('max_parallel_workers')::int)))::text, true) \
                     WHERE current_setting('hash_mem_multiplier', true) IS NOT NULL",
                )
                    .execute(&mut *conn)
                    .await?;
                sqlx::query("SET LOCAL max_parallel_workers_per_gather = 0").execute(&mut *conn).await?;
            }
            (plan.part_rows_sql(end.unwrap_or(max_key)), last)
        }
        None => (plan.rows_sql(), true),
    };
    let copied = match &plan.file {
        FileShape::Csv { bom } => copy_rows(conn, (&plan, text_is_utf8), &rows_sql, (read_at, last), Chunker::new(plan.csv(*bom)?, &spares), &tx, counting).await?.finisher(),
        FileShape::Xlsx(layout) => copy_rows(conn, (&plan, text_is_utf8), &rows_sql, (read_at, last), Chunker::new(XlsxEncoder::new(layout.clone())?, &spares), &tx, counting).await?.finisher(),
    };
    tokio::task::spawn_blocking(move || copied(&tx)).await.map_err(|e| SnapshotError::Database(format!("the file's end was not written: {e}")))?
}

/// A file whose rows are all written: what ends it, on a blocking thread.
type Finisher = Box<dyn FnOnce(&mpsc::Sender<Produced>) -> Result<(), SnapshotError> + Send>;

impl<W: RowEncoder> Chunker<W> {
    fn finisher(self) -> Finisher {
        Box::new(move |tx| self.finish(tx))
    }
}

/// Copies the rows of `rows_sql` in the snapshot `conn` holds into `out`, sends the part's keys
/// (with `part`: the moment its snapshot shows, and whether it is the last), waits for the count
/// and ends the snapshot; the file's end is left to the caller.
///
/// Three steps overlap: this task takes the COPY's bytes off the connection and hands them on
/// in batches; a blocking thread decodes the rows and writes the file's cells ([`encode_rows`]);
/// the attempt hashes and stores the chunks. A tokio task that wakes another runs it on its own
/// thread next, so the decoding, kept on a task, ran in turn with the reading and the hashing
/// rather than beside them (measured: one thread of the worker busy, the other idle).
async fn copy_rows<W: RowEncoder>(
    mut conn: sqlx::Transaction<'_, sqlx::Postgres>,
    (plan, utf8): (&Plan, bool),
    rows_sql: &str,
    (read_at, last): (Option<i64>, bool),
    out: Chunker<W>,
    tx: &mpsc::Sender<Produced>,
    mut counting: tokio::task::JoinSet<Result<(), SnapshotError>>,
) -> Result<Chunker<W>, SnapshotError> {
    let (raw_tx, raw_rx) = mpsc::channel::<Vec<u8>>(BATCHES_IN_FLIGHT);
    let batches = SpareChunks::default();
    let decoded = batches.clone();
    let shape = RowShape { columns: plan.columns.clone(), extra: plan.extra_fields(), key_at: plan.part.map(|_| plan.select.len() - 1), utf8 };
    let chunks = tx.clone();
    let encoding = tokio::task::spawn_blocking(move || encode_rows(&shape, (raw_rx, &decoded), out, &chunks));
    let read: Result<(), SnapshotError> = async {
        let statement = format!("COPY ({rows_sql}) TO STDOUT (FORMAT binary)");
        let mut copy = conn.copy_out_raw(&statement).await?;
        // A row's message fits in what is left of a batch, without growing it, but for a wide one.
        let batch_room = BATCH_BYTES + 64 * 1024;
        let mut batch = batches.get(batch_room);
        let mut messages = 0u32;
        while let Some(message) = copy.next().await {
            // Rows arrive faster than they are written; a task that never waits would starve the
            // heartbeats that keep this and every other job's lease alive. Give way now and then:
            // every 4,096 rows (tokio's budget is 128 units). Every 128 rows, with fewer chunks
            // in flight, the database and this task took turns ([`CHUNKS_IN_FLIGHT`]).
            messages = messages.wrapping_add(1);
            if messages % 32 == 0 {
                tokio::task::coop::consume_budget().await;
            }
            batch.extend_from_slice(&message?);
            if batch.len() >= BATCH_BYTES {
                let full = std::mem::replace(&mut batch, batches.get(batch_room));
                // The encoder gone means it failed: its own error says why.
                if raw_tx.send(full).await.is_err() {
                    return Ok(());
                }
            }
        }
        if !batch.is_empty() {
            let _ = raw_tx.send(batch).await;
        }
        Ok(())
    }
    .await;
    drop(raw_tx);
    if let Err(e) = read {
        // The encoder ends by itself once the batches already handed over are written (their
        // sender is gone); its chunks then end with the read's error.
        return Err(e);
    }
    let (out, keys) = encoding.await.map_err(|e| SnapshotError::Database(format!("the rows' encoding stopped: {e}")))??;
    if let Some(read_at) = read_at {
        tx.send(keys.part(read_at, last)).await.map_err(|_| Stopped)?;
    }
    // The exported snapshot lives as long as this transaction: the count ends before it does.
    while let Some(counted) = counting.join_next().await {
        counted.map_err(|e| SnapshotError::Database(format!("the count stopped: {e}")))??;
    }
    conn.commit().await?;
    Ok(out)
}

/// Bytes of a COPY stream gathered before they are handed to the encoding thread.
const BATCH_BYTES: usize = 256 * 1024;

/// Batches in flight between the connection and the encoding thread (see [`CHUNKS_IN_FLIGHT`]).
const BATCHES_IN_FLIGHT: usize = 16;

/// What the encoding thread needs of a plan: the file's columns, the fields after them, where
/// a part's key is, and whether the database's text is UTF-8 without a check ([`write_fields`]).
struct RowShape {
    columns: Vec<Cell>,
    extra: usize,
    key_at: Option<usize>,
    utf8: bool,
}

/// Decodes the binary COPY stream arriving in batches on `raw` and writes its rows into `out`,
/// sending each chunk as it fills; on a blocking thread. Returns the file (its end not yet
/// written) and the keys it saw once the stream ends with its trailer.
fn encode_rows<W: RowEncoder>(shape: &RowShape, (mut raw, batches): (mpsc::Receiver<Vec<u8>>, &SpareChunks), mut out: Chunker<W>, tx: &mpsc::Sender<Produced>) -> Result<(Chunker<W>, Keys), SnapshotError> {
    let mut decoder = CopyBinary::default();
    let mut keys = Keys::default();
    while let Some(batch) = raw.blocking_recv() {
        batches.give_back(decoder.feed(batch));
        while let Some(tuple) = decoder.next_tuple()? {
            write_fields(&shape.columns, shape.extra, shape.utf8, &tuple, &mut out.file)?;
            if let Some(at) = shape.key_at {
                keys.saw(key_field(&tuple, at)?)?;
            }
            out.row_done()?;
        }
        for chunk in out.ready.drain(..) {
            tx.blocking_send(chunk).map_err(|_| Stopped)?;
        }
    }
    if !decoder.finished() {
        return Err(SnapshotError::Database("the COPY stream ended before its trailer".into()));
    }
    Ok((out, keys))
}

/// Makes the transaction just begun on `conn` a read-only REPEATABLE READ one, in the snapshot
/// another transaction exported when `import` names one, with the plan's bound values `params`
/// set for its statements (a COPY takes no parameters; its query reads them with
/// `current_setting`). With `read_at`, the moment the snapshot shows, epoch milliseconds by the
/// database's clock: the start of its first statement, which takes the snapshot.
async fn read_only_snapshot(conn: &mut sqlx::PgConnection, import: Option<&str>, params: &[(String, Bound)], read_at: bool) -> Result<Option<i64>, SnapshotError> {
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY").execute(&mut *conn).await?;
    if let Some(snapshot) = import {
        sqlx::query(sqlx::AssertSqlSafe(format!("SET TRANSACTION SNAPSHOT '{snapshot}'"))).execute(&mut *conn).await?;
    }
    // A `timestamp without time zone` is read as UTC, whatever the role's default zone.
    sqlx::query("SET LOCAL TimeZone = 'UTC'").execute(&mut *conn).await?;
    let moment = match read_at {
        true => Some(sqlx::query_scalar("SELECT CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT)").fetch_one(&mut *conn).await?),
        false => None,
    };
    for (name, value) in params {
        sqlx::query("SELECT set_config($1, $2, true)").bind(name).bind(value.setting()).execute(&mut *conn).await?;
    }
    // JIT compiling this scan, join and sort costs more than it saves (about a tenth of a 1M-row
    // export, measured by scripts/bench.sh); it is the default above a cost threshold.
    sqlx::query("SET LOCAL jit = off").execute(&mut *conn).await?;
    Ok(moment)
}

async fn count(conn: &mut sqlx::PgConnection, count_sql: String) -> Result<i64, SnapshotError> {
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(count_sql)).fetch_one(conn).await?)
}

/// Counts the rows on `conn` in the snapshot `snapshot` that another transaction exported.
async fn count_in_snapshot(
    mut conn: Borrowed,
    snapshot: String,
    count_sql: String,
    params: Vec<(String, Bound)>,
    tx: mpsc::Sender<Produced>,
    backends: std::sync::Arc<tokio::sync::Mutex<Backends>>,
) -> Result<(), SnapshotError> {
    let counted = async {
        if !snapshot.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
            return Err(SnapshotError::Database(format!("unexpected snapshot id {snapshot:?}")));
        }
        let mut t = sqlx::Connection::begin(&mut *conn.conn).await?;
        read_only_snapshot(&mut t, Some(&snapshot), &params, false).await?;
        // Beside the rows, the count is rarely the last to finish, but its CPU is taken from the
        // rows' join and sort: in one process it costs about half of what a parallel plan's
        // three do (the demo's 1M orders: 0.14 core-seconds against 0.26).
        sqlx::query("SET LOCAL max_parallel_workers_per_gather = 0").execute(&mut *t).await?;
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
    /// Notes the next row's key. A key not above the one before it fails the part. The same key
    /// again names more than one row (a report's join that repeats a row), which a part cut by
    /// key would otherwise write twice or lose at its end: the data's fault. A lower key means
    /// the rows did not come in key order ([`PartOrder::Checked`]): the part is read again,
    /// sorted, and a repeated key then shows as the same key again.
    fn saw(&mut self, key: i64) -> Result<(), SnapshotError> {
        self.may_follow(key)?;
        self.first.get_or_insert(key);
        self.last = Some(key);
        Ok(())
    }

    /// Whether a row with `key` may follow the rows seen so far (see [`Keys::saw`]).
    fn may_follow(&self, key: i64) -> Result<(), SnapshotError> {
        match self.last {
            Some(last) if key == last => Err(SnapshotError::Data(format!(
                "a row's key {key} is not above the key before it ({last}): a report's key must name one row, and this report's join gives a key more than once"
            ))),
            Some(last) if key < last => Err(SnapshotError::OutOfOrder(format!("a row's key {key} came after {last}"))),
            _ => Ok(()),
        }
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

/// Writes a row's fields (PostgreSQL's binary forms of the plan's casts) as the file's columns;
/// `extra` fields follow them (currencies, a part's key). NULL is an empty cell. With `utf8`
/// (the source's text is UTF-8 by [`TEXT_IS_UTF8`]) text is handed on as bytes, unchecked:
/// checking every cell again took a tenth of a worker's CPU. Otherwise text that is not UTF-8
/// fails the export.
fn write_fields(columns: &[Cell], extra: usize, utf8: bool, tuple: &Tuple<'_>, csv: &mut impl RowEncoder) -> Result<(), SnapshotError> {
    if tuple.len() != columns.len() + extra {
        return Err(SnapshotError::Data(format!("{} fields for {} columns", tuple.len(), columns.len())));
    }
    for (i, column) in columns.iter().enumerate() {
        let Some(bytes) = tuple.field(i) else {
            csv.empty()?;
            continue;
        };
        let wrong = || SnapshotError::Data(format!("{} is not of its type", column.name));
        let int8 = || <[u8; 8]>::try_from(bytes).map(i64::from_be_bytes).map_err(|_| wrong());
        match column.read {
            Read::Text if utf8 => csv.text_utf8(bytes)?,
            Read::Text => csv.text(std::str::from_utf8(bytes).map_err(|e| SnapshotError::Data(e.to_string()))?)?,
            Read::Integer => csv.integer(int8()?)?,
            Read::Decimal(scale) => csv.decimal(std::str::from_utf8(bytes).map_err(|e| SnapshotError::Data(e.to_string()))?, scale)?,
            Read::Money(currency) => {
                let currency = match currency.and_then(|at| tuple.field(at)) {
                    Some(code) => Some(std::str::from_utf8(code).map_err(|e| SnapshotError::Data(e.to_string()))?),
                    None => None,
                };
                csv.money_in(int8()?, crate::iso_codes::currency_places(currency))?
            }
            Read::Date => {
                let days = <[u8; 4]>::try_from(bytes).map(i32::from_be_bytes).map_err(|_| wrong())?;
                csv.date(pg_date(days).ok_or_else(|| SnapshotError::Data(format!("{}: a date outside the calendar", column.name)))?)?
            }
            // Microseconds since 2000-01-01 UTC; written to the second, as every instant.
            Read::Instant => csv.instant(int8()?.div_euclid(1000).saturating_add(PG_EPOCH_MS))?,
            Read::InstantMs => csv.instant(int8()?)?,
            Read::Boolean => csv.boolean(bytes.first().is_some_and(|b| *b != 0))?,
        }
    }
    Ok(())
}

/// 2000-01-01T00:00:00Z, PostgreSQL's epoch, in Unix milliseconds.
const PG_EPOCH_MS: i64 = 946_684_800_000;

/// A PostgreSQL date (days since 2000-01-01); `None` for infinity or beyond the calendar.
fn pg_date(days: i32) -> Option<jiff::civil::Date> {
    jiff::civil::date(2000, 1, 1).checked_add(jiff::Span::new().try_days(days).ok()?).ok()
}

/// Writes one SQLite value as the column `cell`; SQLite's columns hold any type, so each is read
/// from the storage classes that can carry it. NULL is an empty cell.
fn write_sqlite(cell: &Cell, value: rusqlite::types::ValueRef<'_>, currency: Option<rusqlite::types::ValueRef<'_>>, csv: &mut impl RowEncoder) -> Result<(), SnapshotError> {
    use rusqlite::types::ValueRef;
    let text = |t: &[u8]| std::str::from_utf8(t).map(str::to_owned).map_err(|e| SnapshotError::Data(e.to_string()));
    let wrong = |v: ValueRef<'_>| SnapshotError::Data(format!("{} holds {:?}, not its type", cell.name, v.data_type()));
    match (cell.read, value) {
        (_, ValueRef::Null) => csv.empty()?,
        (Read::Text, ValueRef::Text(t)) => csv.text(std::str::from_utf8(t).map_err(|e| SnapshotError::Data(e.to_string()))?)?,
        (Read::Text, ValueRef::Integer(n)) => csv.text(&n.to_string())?,
        (Read::Text, ValueRef::Real(f)) => csv.text(&f.to_string())?,
        (Read::Integer, ValueRef::Integer(n)) => csv.integer(n)?,
        (Read::InstantMs, ValueRef::Integer(n)) => csv.instant(n)?,
        (Read::Decimal(scale), v) => {
            let digits = match v {
                ValueRef::Integer(n) => n.to_string(),
                ValueRef::Real(f) => f.to_string(),
                ValueRef::Text(t) => text(t)?,
                other => return Err(wrong(other)),
            };
            csv.decimal(&crate::csv_cells::decimal(&digits, scale).ok_or_else(|| SnapshotError::Data(format!("{}: {digits:?} is not a number", cell.name)))?, scale)?
        }
        (Read::Money(_), ValueRef::Integer(n)) => {
            let code = match currency {
                Some(ValueRef::Text(t)) => Some(std::str::from_utf8(t).map_err(|e| SnapshotError::Data(e.to_string()))?),
                _ => None,
            };
            csv.money_in(n, crate::iso_codes::currency_places(code))?
        }
        (Read::Date, ValueRef::Text(t)) => {
            let t = std::str::from_utf8(t).map_err(|e| SnapshotError::Data(e.to_string()))?;
            let day = t.get(..10).filter(|_| t.len() == 10 || matches!(t.as_bytes()[10], b' ' | b'T')).and_then(|d| d.parse::<jiff::civil::Date>().ok());
            csv.date(day.ok_or_else(|| SnapshotError::Data(format!("{}: {t:?} is not a date YYYY-MM-DD", cell.name)))?)?
        }
        (Read::Instant, ValueRef::Text(t)) => {
            let t = std::str::from_utf8(t).map_err(|e| SnapshotError::Data(e.to_string()))?;
            let instant = t
                .parse::<jiff::Timestamp>()
                .ok()
                .or_else(|| t.parse::<jiff::civil::DateTime>().ok().and_then(|local| local.to_zoned(jiff::tz::TimeZone::UTC).ok()).map(|z| z.timestamp()));
            csv.instant(instant.ok_or_else(|| SnapshotError::Data(format!("{}: {t:?} is not an instant", cell.name)))?.as_millisecond())?
        }
        (Read::Boolean, ValueRef::Integer(n @ (0 | 1))) => csv.boolean(n == 1)?,
        (Read::Boolean, ValueRef::Text(b"true")) => csv.boolean(true)?,
        (Read::Boolean, ValueRef::Text(b"false")) => csv.boolean(false)?,
        (_, other) => return Err(wrong(other)),
    }
    Ok(())
}

/// Decodes PostgreSQL's binary COPY format: a signature and header, then tuples (a field
/// count, and per field a length, −1 for NULL, and its bytes), then a −1 trailer. Cells are
/// read where they lie in the buffer; only their offsets are kept, in one reused list.
#[derive(Debug, Default)]
struct CopyBinary {
    buf: Vec<u8>,
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
    /// Takes the stream's next bytes and gives back a buffer whose bytes are all read, to be
    /// filled again. A batch that begins with a tuple is read where it lies: the COPY's reader
    /// hands over whole messages, one tuple each, so only a tuple split across batches (which
    /// PostgreSQL does not send, but the format allows) is copied.
    fn feed(&mut self, batch: Vec<u8>) -> Vec<u8> {
        if self.at >= self.buf.len() {
            self.at = 0;
            return std::mem::replace(&mut self.buf, batch);
        }
        self.buf.drain(..self.at);
        self.at = 0;
        self.buf.extend_from_slice(&batch);
        batch
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
    (tx, spares): (&mpsc::Sender<Produced>, SpareChunks),
    interrupt: &std::sync::Mutex<Option<rusqlite::InterruptHandle>>,
) -> Result<(), SnapshotError> {
    let conn = rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
    if let Ok(mut slot) = interrupt.lock() {
        *slot = Some(conn.get_interrupt_handle());
    }
    conn.busy_timeout(crate::db::SQLITE_BUSY_TIMEOUT)?;
    conn.execute_batch(SQLITE_READ_CACHE)?;
    // One read transaction: the count and the rows see the same snapshot. (A part is not
    // counted; its snapshot's moment is read instead, by a statement that reads the database
    // file, so that the snapshot begins with it.)
    conn.execute_batch("BEGIN")?;
    let (read_at, rows_sql, max_key) = match plan.part {
        // SQLite reads a part in one step, by key, up to the export's highest key: it is the
        // last when fewer rows than a part are left, or the last read ends at that key.
        Some(range) => {
            let read_at = conn.query_row(&format!("SELECT {} FROM sqlite_schema LIMIT 1", crate::db::now_ms_sql(DbBackend::Sqlite)), [], |r| r.get(0))?;
            (Some(read_at), plan.next_part_rows_sql(range), Some(range.max_key))
        }
        None => {
            let total = count_sqlite(&conn, &plan.count_sql(), plan.params())?;
            tx.blocking_send(Produced::Counted(total)).map_err(|_| Stopped)?;
            // Walking the tenant's rows in key order reads every one of them but sorts none;
            // reading the time's range from its index reads only the range but then sorts it
            // all by key, which costs about as much again as reading it (measured on 1M orders:
            // 9.1 s against 4.5 s for the whole range). So the walk, once the range holds half
            // of the tenant's rows or more (counted up to twice the range's, no further).
            let twice = total.saturating_mul(2);
            let walk = count_sqlite(&conn, &plan.tenant_count_sql(twice.saturating_add(1)), plan.params())? <= twice;
            (None, if walk { plan.rows_sql_in_key_order() } else { plan.rows_sql() }, None)
        }
    };
    let read = (rows_sql.as_str(), read_at, max_key);
    match &plan.file {
        FileShape::Csv { bom } => step_rows(&conn, plan, read, Chunker::new(plan.csv(*bom)?, &spares), tx)?.finish(tx),
        FileShape::Xlsx(layout) => step_rows(&conn, plan, read, Chunker::new(XlsxEncoder::new(layout.clone())?, &spares), tx)?.finish(tx),
    }
}

/// Steps the rows of `rows_sql` in the read transaction `conn` holds into `out`, sends the
/// part's keys (with `read_at`: the moment its snapshot shows; `max_key`: the export's highest)
/// and ends the transaction; the file's end is left to the caller.
fn step_rows<W: RowEncoder>(
    conn: &rusqlite::Connection,
    plan: &Plan,
    (rows_sql, read_at, max_key): (&str, Option<i64>, Option<i64>),
    mut out: Chunker<W>,
    tx: &mpsc::Sender<Produced>,
) -> Result<Chunker<W>, SnapshotError> {
    let mut keys = Keys::default();
    let limit = plan.part.map(|range| i64::try_from(range.limit).unwrap_or(i64::MAX));
    let mut statement = conn.prepare(rows_sql)?;
    bind_sqlite(&mut statement, plan.params())?;
    let mut rows = statement.raw_query();
    while let Some(row) = rows.next()? {
        if limit.is_some_and(|limit| out.rows >= limit) {
            // The row after a full part is read only to see that it does not repeat the part's
            // last key, whose second row the next part (keys above it) would otherwise lose.
            keys.may_follow(row.get::<_, i64>(plan.select.len() - 1)?)?;
            break;
        }
        for (i, column) in plan.columns.iter().enumerate() {
            let currency = match column.read {
                Read::Money(Some(at)) => Some(row.get_ref(at)?),
                _ => None,
            };
            write_sqlite(column, row.get_ref(i)?, currency, &mut out.file)?;
        }
        if plan.part.is_some() {
            keys.saw(row.get::<_, i64>(plan.select.len() - 1)?)?;
        }
        out.row_done()?;
        for chunk in out.ready.drain(..) {
            tx.blocking_send(chunk).map_err(|_| Stopped)?;
        }
    }
    if let Some(read_at) = read_at {
        let last = limit.is_none_or(|limit| out.rows < limit) || keys.last.is_none() || keys.last >= max_key;
        tx.blocking_send(keys.part(read_at, last)).map_err(|_| Stopped)?;
    }
    drop(rows);
    drop(statement);
    conn.execute_batch("COMMIT")?;
    Ok(out)
}

/// The page cache of a SQLite snapshot's connection: 16 MiB (SQLite's default is 2 MiB), which
/// holds the pages a report's join looks up again and again (the customers of 1M orders: 3.9 s
/// against 4.7 s by the `sqlite3` shell on the same query). A read takes this much, and a range
/// it sorts up to as much again for SQLite's sorter.
const SQLITE_READ_CACHE: &str = "PRAGMA cache_size = -16384";

/// The one number `sql` counts, with the plan's values bound.
fn count_sqlite(conn: &rusqlite::Connection, sql: &str, params: &[(String, Bound)]) -> Result<i64, SnapshotError> {
    let mut count = conn.prepare(sql)?;
    bind_sqlite(&mut count, params)?;
    let mut rows = count.raw_query();
    let counted = rows.next()?.ok_or_else(|| SnapshotError::Database("the count gave no row".into()))?.get(0)?;
    Ok(counted)
}

/// Binds the plan's values to a SQLite statement, by name (`exportd.f_x` is `:f_x`).
fn bind_sqlite(statement: &mut rusqlite::Statement<'_>, params: &[(String, Bound)]) -> Result<(), SnapshotError> {
    for (name, value) in params {
        let name = format!(":{}", name.trim_start_matches("exportd."));
        if let Some(at) = statement.parameter_index(&name)? {
            match value {
                Bound::Text(text) => statement.raw_bind_parameter(at, text)?,
                Bound::Int(n) => statement.raw_bind_parameter(at, n)?,
                Bound::Real(x) => statement.raw_bind_parameter(at, x)?,
            }
        }
    }
    Ok(())
}

/// The highest key and the number of `plan`'s rows, read in one snapshot (what a checkpointed
/// export fixes at its first claim); the key is `None` when there are no rows.
pub async fn bounds(source: &Source, plan: &Plan) -> Result<(Option<i64>, i64), SnapshotError> {
    match source {
        Source::Postgres { pool, .. } => {
            let mut conn = pool.acquire().await?;
            let sql = plan.bounds_sql();
            let read: Result<(Option<i64>, i64), SnapshotError> = async {
                let mut t = sqlx::Connection::begin(&mut *conn).await?;
                read_only_snapshot(&mut t, None, plan.params(), false).await?;
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
            let (path, sql, params) = (path.clone(), plan.bounds_sql(), plan.params().to_vec());
            tokio::task::spawn_blocking(move || {
                let conn = rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
                conn.busy_timeout(crate::db::SQLITE_BUSY_TIMEOUT)?;
                let mut bounds = conn.prepare(&sql)?;
                bind_sqlite(&mut bounds, &params)?;
                let mut rows = bounds.raw_query();
                let row = rows.next()?.ok_or_else(|| SnapshotError::Database("the bounds gave no row".into()))?;
                Ok((row.get::<_, Option<i64>>(0)?, row.get::<_, i64>(1)?))
            })
            .await
            .map_err(|e| SnapshotError::Database(format!("the bounds' read stopped: {e}")))?
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    fn orders() -> Report {
        Catalog::demo().unwrap().report("orders").unwrap().clone()
    }

    #[test]
    fn amounts_convert_to_minor_units_exactly_despite_binary_floats() {
        assert_eq!(to_minor(1.10, 2, Some(f64::ceil)), Some(110));
        assert_eq!(to_minor(1.13, 2, Some(f64::floor)), Some(113));
        assert_eq!(to_minor(-12.5, 2, Some(f64::ceil)), Some(-1250));
        assert_eq!(to_minor(1.105, 2, Some(f64::ceil)), Some(111));
        assert_eq!(to_minor(1.105, 2, Some(f64::floor)), Some(110));
        assert_eq!(to_minor(1.105, 3, None), Some(1105));
        assert_eq!(to_minor(1.105, 2, None), None, "an equality no whole number of minor units meets");
        assert_eq!(to_minor(12.0, 0, None), Some(12));
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

    /// An in-memory SQLite database with the demo's orders and customers, the order's time
    /// declared as `time_type`, and its two indexes: by time and by key.
    fn orders_db(time_type: &str) -> rusqlite::Connection {
        let db = rusqlite::Connection::open_in_memory().unwrap();
        db.execute_batch(&format!(
            "CREATE TABLE customers (id INTEGER PRIMARY KEY, tenant_id TEXT, name TEXT); \
             CREATE TABLE orders (id INTEGER PRIMARY KEY, tenant_id TEXT, customer_id INTEGER, placed_at {time_type}, total_cents INTEGER); \
             CREATE INDEX orders_tenant_placed ON orders (tenant_id, placed_at); \
             CREATE INDEX orders_tenant_key ON orders (tenant_id, id);"
        ))
        .unwrap();
        db
    }

    #[test]
    fn on_sqlite_the_rows_can_be_read_by_walking_the_key_index_instead_of_sorting_the_times_range() {
        let db = orders_db("INTEGER");
        let plan = Plan::new(&orders(), &ExportRequest::new("orders"), &resolved(&["order_id", "customer_name", "total"]), "ten_acme", DbBackend::Sqlite).unwrap();
        let explained = |sql: &str| -> String {
            let mut statement = db.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let details: Vec<String> = statement.query_map([], |row| row.get::<_, String>(3)).unwrap().map(Result::unwrap).collect();
            details.join("; ")
        };
        let ranged = explained(&plan.rows_sql());
        assert!(ranged.contains("orders_tenant_placed") && ranged.contains("TEMP B-TREE FOR ORDER BY"), "{ranged}");
        let walked = explained(&plan.rows_sql_in_key_order());
        assert!(walked.contains("orders_tenant_key") && !walked.contains("TEMP B-TREE"), "{walked}");
        assert_eq!(plan.tenant_count_sql(7), "SELECT COUNT(*) FROM (SELECT 1 FROM orders o WHERE (o.tenant_id) = 'ten_acme' LIMIT 7)");
    }

    #[test]
    fn on_sqlite_the_walk_in_key_order_reads_the_same_rows_when_the_time_is_kept_as_text() {
        // A time column declared TEXT holds its milliseconds as text: a unary `+` on it compared
        // text with numbers and read no row at all, and a cast to a number would take row 6,
        // which the count (comparing text) leaves out.
        let db = orders_db("TEXT");
        db.execute_batch(
            "INSERT INTO orders VALUES (1, 'ten_acme', 1, 1767225600000, 100), (2, 'ten_acme', 1, 1767311999999, 200), \
               (3, 'ten_acme', 1, 1767312000000, 300), (4, 'ten_acme', 1, 1767225599999, 400), (5, 'ten_other', 1, 1767225600001, 500), \
               (6, 'ten_acme', 1, ' 1767225600500', 600);",
        )
        .unwrap();
        let plan = Plan::new(&orders(), &ExportRequest::new("orders"), &resolved(&["order_id"]), "ten_acme", DbBackend::Sqlite).unwrap();
        let keys = |sql: &str| -> Vec<i64> {
            let mut statement = db.prepare(sql).unwrap();
            statement.query_map([], |row| row.get::<_, i64>(0)).unwrap().map(Result::unwrap).collect()
        };
        assert_eq!(keys(&plan.rows_sql()), vec![1, 2]);
        assert_eq!(keys(&plan.rows_sql_in_key_order()), vec![1, 2]);
    }

    #[test]
    fn the_snapshot_query_reads_the_catalogs_columns_of_the_tenants_source_id_in_its_interval() {
        let mut request = ExportRequest::new("orders");
        request.filters.insert("status".into(), serde_json::json!(["paid"]));
        request.filters.insert("min_total".into(), serde_json::json!(1.10));
        let plan = Plan::new(&orders(), &request, &resolved(&["order_id", "customer_name", "total"]), "ten_'acme", DbBackend::Postgres).unwrap();
        assert_eq!(
            plan.rows_sql(),
            "SELECT CAST((o.id) AS BIGINT), CAST((c.name) AS TEXT), CAST((o.total_cents) AS BIGINT) \
             FROM orders o LEFT JOIN customers c ON c.tenant_id = o.tenant_id AND c.id = o.customer_id \
             WHERE (o.tenant_id) = E'ten_''acme' AND (o.placed_at) >= 1767225600000 AND (o.placed_at) < 1767312000000 \
             AND (o.total_cents) >= CAST(current_setting('exportd.f_min_total') AS BIGINT) \
             AND CAST((o.status) AS TEXT) IN (SELECT json_array_elements_text(CAST(current_setting('exportd.f_status') AS JSON))) ORDER BY o.id ASC"
        );
        let sqlite = Plan::new(&orders(), &request, &resolved(&["order_id"]), "ten_'acme", DbBackend::Sqlite).unwrap();
        assert_eq!(
            sqlite.count_sql(),
            "SELECT COUNT(*) FROM orders o \
             WHERE (o.tenant_id) = 'ten_''acme' AND (o.placed_at) >= 1767225600000 AND (o.placed_at) < 1767312000000 \
             AND (o.total_cents) >= :f_min_total AND (o.status) IN (SELECT value FROM json_each(:f_status))"
        );
        assert_eq!(sqlite.params(), &[("exportd.f_min_total".to_owned(), Bound::Int(110)), ("exportd.f_status".to_owned(), Bound::Text(r#"["paid"]"#.to_owned()))]);
        assert_eq!(plan.columns.len(), 3);
    }

    #[test]
    fn every_value_of_a_request_is_a_bound_parameter_never_part_of_the_sql() {
        let catalog = crate::catalog::parse(
            "t.toml",
            r#"
[[report]]
name = "tickets"
from = "tickets t"
tenant = "t.org"
key = "t.id"
time = { sql = "t.opened_at" }
columns = [{ name = "id", sql = "t.id", type = "integer" }, { name = "fee", sql = "t.fee", type = "money", currency = "t.cur" }]
filters = [
  { name = "subject", sql = "t.subject", type = "equals", of = "text" },
  { name = "min_fee", sql = "t.fee", type = "at_least", of = "money", currency = "t.cur" },
]
"#,
        )
        .unwrap();
        let report = catalog.report("tickets").unwrap();
        let mut request = ExportRequest::new("tickets");
        request.filters.insert("subject".into(), serde_json::json!("x' OR 1=1 --"));
        request.filters.insert("min_fee".into(), serde_json::json!(1.5));
        for backend in [DbBackend::Postgres, DbBackend::Sqlite] {
            let plan = Plan::new(report, &request, &resolved(&["id", "fee"]), "org-1", backend).unwrap();
            let sql = plan.rows_sql();
            assert!(!sql.contains("OR 1=1") && !sql.contains("1500"), "{sql}");
            let bound: Vec<(&str, &Bound)> = plan.params().iter().map(|(n, v)| (n.as_str(), v)).collect();
            assert_eq!(
                bound,
                vec![
                    ("exportd.f_min_fee_0", &Bound::Int(2)),
                    ("exportd.f_min_fee_3", &Bound::Int(1500)),
                    ("exportd.f_min_fee_4", &Bound::Int(15000)),
                    ("exportd.f_min_fee_2", &Bound::Int(150)),
                    ("exportd.f_subject", &Bound::Text("x' OR 1=1 --".into())),
                ],
                "money in the row's places"
            );
            assert_eq!(plan.extra_fields(), 1, "the fee's currency follows the file's columns");
        }
        let pg = Plan::new(report, &request, &resolved(&["id"]), "org-1", DbBackend::Postgres).unwrap();
        assert!(pg.rows_sql().contains("CAST((t.subject) AS TEXT) = current_setting('exportd.f_subject')"));
        assert!(pg.rows_sql().contains("(t.opened_at) >= CAST(E'2026-01-01T00:00:00Z' AS TIMESTAMPTZ)"));
    }

    #[test]
    fn rows_are_counted_on_the_first_table_alone_only_when_every_join_is_a_left_join_no_condition_needs() {
        let conditions = |c: &[&str]| c.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let from = "orders o LEFT JOIN customers c ON c.tenant_id = o.tenant_id AND c.id = o.customer_id";
        assert_eq!(counted_from(from, &conditions(&["(o.tenant_id) = 'a'", "(o.status) IN ('paid')"])), "orders o");
        assert_eq!(counted_from(from, &conditions(&["(c.country) = 'SA'"])), from, "a condition on the joined table");
        assert_eq!(counted_from(from, &conditions(&["(abc.x) = 1"])), "orders o", "`abc.` is not `c.`");
        let inner = "orders o JOIN customers c ON c.id = o.customer_id";
        assert_eq!(counted_from(inner, &[]), inner, "an inner join may drop rows");
        let mixed = "orders o LEFT JOIN customers c ON c.id = o.customer_id JOIN regions r ON r.id = c.region";
        assert_eq!(counted_from(mixed, &[]), mixed);
        assert_eq!(counted_from("a, b LEFT JOIN c ON c.id = a.id", &[]), "a, b LEFT JOIN c ON c.id = a.id");
        assert_eq!(counted_from("tickets AS t LEFT OUTER JOIN agents AS a ON a.id = t.agent", &conditions(&["(t.org) = 1"])), "tickets AS t");
        assert_eq!(counted_from("tickets", &[]), "tickets");
    }

    #[test]
    fn a_part_is_read_as_its_last_key_then_the_bounded_range_up_to_it() {
        let request = ExportRequest::new("orders");
        let plan = Plan::new(&orders(), &request, &resolved(&["order_id", "customer_name"]), "ten_acme", DbBackend::Postgres).unwrap();
        let part = plan.part(KeyRange { after: Some(1000), max_key: 9000, limit: 500 }, PartOrder::Sorted);
        let filtered = "WHERE (o.tenant_id) = E'ten_acme' AND (o.placed_at) >= 1767225600000 AND (o.placed_at) < 1767312000000 AND (o.id) > 1000";
        let from = format!("FROM orders o LEFT JOIN customers c ON c.tenant_id = o.tenant_id AND c.id = o.customer_id {filtered}");
        // The part's end is found on the first table's index alone.
        assert_eq!(part.part_end_sql().unwrap(), format!("SELECT CAST((o.id) AS BIGINT) FROM orders o {filtered} AND (o.id) <= 9000 ORDER BY o.id ASC LIMIT 1 OFFSET 499"));
        assert_eq!(
            part.part_rows_sql(4321),
            format!("SELECT CAST((o.id) AS BIGINT), CAST((c.name) AS TEXT), CAST((o.id) AS BIGINT) {from} AND (o.id) <= 4321 ORDER BY o.id ASC")
        );
        assert_eq!(
            part.next_part_rows_sql(KeyRange { after: Some(1000), max_key: 9000, limit: 500 }),
            format!("SELECT CAST((o.id) AS BIGINT), CAST((c.name) AS TEXT), CAST((o.id) AS BIGINT) {from} AND (o.id) <= 9000 ORDER BY o.id ASC LIMIT 501"),
            "read in one step, the part is cut at its size, with the row after it to see its key is not repeated"
        );
        let checked = plan.part(KeyRange { after: Some(1000), max_key: 9000, limit: 500 }, PartOrder::Checked);
        assert_eq!(
            checked.part_rows_sql(4321),
            format!("SELECT CAST((o.id) AS BIGINT), CAST((c.name) AS TEXT), CAST((o.id) AS BIGINT) {from} AND (o.id) <= 4321"),
            "asked for unsorted, its order checked as it comes"
        );
        assert_eq!(checked.part_end_sql(), part.part_end_sql(), "its end is found the same way");
        assert!(plan.part_end_sql().is_none(), "a whole export has no part end");
        let first = plan.part(KeyRange { after: None, max_key: 9000, limit: 500 }, PartOrder::Checked);
        assert!(!first.part_end_sql().unwrap().contains("> "), "the first part starts at the first key");
    }

    #[test]
    fn a_repeated_key_is_the_datas_fault_and_a_lower_key_means_the_rows_came_out_of_order() {
        let mut keys = Keys::default();
        keys.saw(5).unwrap();
        keys.saw(9).unwrap();
        assert!(matches!(keys.saw(9), Err(SnapshotError::Data(_))), "the same key again: a join repeats a row");
        assert!(matches!(keys.saw(7), Err(SnapshotError::OutOfOrder(_))), "a lower key: the rows are out of order");
        assert!(matches!(keys.may_follow(9), Err(SnapshotError::Data(_))));
        assert!(keys.may_follow(10).is_ok());
        assert_eq!((keys.first, keys.last), (Some(5), Some(9)), "a refused key is not noted");
        assert!(!SnapshotError::OutOfOrder(String::new()).is_permanent(), "read again, sorted, not failed for good");
    }

    /// The start of a binary COPY stream: its signature, no flags, no header extension.
    fn copy_stream() -> Vec<u8> {
        let mut stream = SIGNATURE.to_vec();
        stream.extend_from_slice(&0u32.to_be_bytes());
        stream.extend_from_slice(&0u32.to_be_bytes());
        stream
    }

    #[test]
    fn binary_copy_tuples_decode_however_the_stream_is_split() {
        let mut stream = copy_stream();
        for (n, text) in [(-1250i64, "=1+1"), (7, "محمد")] {
            stream.extend_from_slice(&2i16.to_be_bytes());
            stream.extend_from_slice(&8i32.to_be_bytes());
            stream.extend_from_slice(&n.to_be_bytes());
            stream.extend_from_slice(&(text.len() as i32).to_be_bytes());
            stream.extend_from_slice(text.as_bytes());
        }
        stream.extend_from_slice(&(-1i16).to_be_bytes());
        let columns = [Cell { name: "total".into(), read: Read::Money(None) }, Cell { name: "notes".into(), read: Read::Text }];
        for split in [1, 3, 7, stream.len()] {
            let mut decoder = CopyBinary::default();
            let mut csv = CsvEncoder::new(false, &["total", "notes"]).unwrap();
            for piece in stream.chunks(split) {
                decoder.feed(piece.to_vec());
                while let Some(tuple) = decoder.next_tuple().unwrap() {
                    write_fields(&columns, 0, true, &tuple, &mut csv).unwrap();
                    csv.end_row().unwrap();
                }
            }
            assert!(decoder.finished());
            assert_eq!(String::from_utf8(csv.take().unwrap()).unwrap(), "total,notes\r\n-12.50,'=1+1\r\n0.07,محمد\r\n", "split {split}");
        }
    }

    #[test]
    fn text_that_is_not_utf8_fails_the_export_unless_the_database_vouches_for_it() {
        let mut stream = copy_stream();
        stream.extend_from_slice(&1i16.to_be_bytes());
        stream.extend_from_slice(&1i32.to_be_bytes());
        stream.push(0xC3);
        stream.extend_from_slice(&(-1i16).to_be_bytes());
        let columns = [Cell { name: "notes".into(), read: Read::Text }];
        let mut decoder = CopyBinary::default();
        decoder.feed(stream);
        let tuple = decoder.next_tuple().unwrap().unwrap();
        let mut csv = CsvEncoder::new(false, &["notes"]).unwrap();
        assert!(matches!(write_fields(&columns, 0, false, &tuple, &mut csv), Err(SnapshotError::Data(_))), "checked, refused");
        let layout = Layout {
            titles: vec!["Notes".into()],
            kinds: vec![Kind::Plain],
            report: "orders".into(),
            right_to_left: false,
            zone: jiff::tz::TimeZone::UTC,
            created: jiff::Timestamp::UNIX_EPOCH,
        };
        let mut workbook = XlsxEncoder::new(layout).unwrap();
        assert!(matches!(write_fields(&columns, 0, true, &tuple, &mut workbook), Err(SnapshotError::Data(_))), "a workbook checks its text whatever the database");
    }
}
