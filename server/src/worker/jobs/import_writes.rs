//! How an import's rows reach its dataset's table (contract §10, §12): the lookups by key and
//! by reference, what each row does (creates, updates, leaves unchanged, or is refused), the
//! writes, the dataset's `after_batch`, and the ledger a source apart from the job store keeps.
//! The SQL is built from the catalog; every value from a file is a bound parameter, cast on
//! PostgreSQL to its column's declared type.

use super::import_file::Row;
use crate::catalog::{Catalog, ColumnType, Compare, Dataset, TimeUnit};
use crate::imports::cells::Value;
use crate::imports::stored::{Mark, Refused};
use sea_orm::{ConnectionTrait, DatabaseTransaction, DbBackend, DbErr, Statement, TransactionTrait};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The most values one statement binds: under SQLite's 32,766 and PostgreSQL's 65,535.
const MAX_BOUND: usize = 30_000;

/// The dataset's table, as one attempt writes it for one tenant.
pub(super) struct Target {
    dataset: Arc<Dataset>,
    backend: DbBackend,
    /// The tenant's source id: what the dataset's tenant column holds.
    tenant: String,
    /// On PostgreSQL, each stored column's declared type, by `(table, column)`, for casts.
    types: HashMap<(String, String), String>,
    /// Per dataset column, the table and key a reference column is looked up in.
    references: Vec<Option<Referred>>,
}

/// Where a reference column's cell is looked up.
#[derive(Debug, Clone)]
struct Referred {
    table: String,
    tenant: String,
    key_column: String,
    compare: Compare,
    store: String,
}

/// A statement being built, its values bound in order.
struct Sql {
    backend: DbBackend,
    text: String,
    values: Vec<sea_orm::Value>,
}

impl Sql {
    fn new(backend: DbBackend) -> Sql {
        Sql { backend, text: String::with_capacity(256), values: Vec::new() }
    }

    fn push(&mut self, s: &str) -> &mut Sql {
        self.text.push_str(s);
        self
    }

    /// Binds `value`; on PostgreSQL cast to `pg_type` when known (text is bound as text, and
    /// PostgreSQL casts text to other types only when asked).
    fn bind(&mut self, value: sea_orm::Value, pg_type: Option<&str>) -> &mut Sql {
        self.values.push(value);
        match (self.backend, pg_type) {
            (DbBackend::Postgres, Some(ty)) => self.text.push_str(&format!("CAST(${} AS {ty})", self.values.len())),
            (DbBackend::Postgres, None) => self.text.push_str(&format!("${}", self.values.len())),
            _ => self.text.push('?'),
        }
        self
    }

    fn statement(self) -> Statement {
        Statement::from_sql_and_values(self.backend, self.text, self.values)
    }
}

fn text_value(text: Option<String>) -> sea_orm::Value {
    text.into()
}

/// The declared types of `table`'s columns on PostgreSQL.
async fn pg_types<C: ConnectionTrait>(conn: &C, table: &str, into: &mut HashMap<(String, String), String>) -> Result<(), DbErr> {
    // The type by its own name, without its length or precision: an explicit cast to
    // `varchar(200)` or `numeric(9,3)` would cut or round a value silently, where the column's
    // own assignment refuses one that does not fit, and the row is reported refused. (Not
    // `format_type`'s name: its `character` is `char(1)` in a cast, `bpchar` is not.)
    let sql = "SELECT a.attname, quote_ident(n.nspname) || '.' || quote_ident(t.typname) FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
               JOIN pg_namespace n ON n.oid = t.typnamespace WHERE a.attrelid = CAST($1 AS regclass) AND a.attnum > 0 AND NOT a.attisdropped";
    for row in conn.query_all_raw(Statement::from_sql_and_values(DbBackend::Postgres, sql, [table.into()])).await? {
        let name: String = row.try_get_by_index(0)?;
        let ty: String = row.try_get_by_index(1)?;
        into.insert((table.to_owned(), name), ty);
    }
    Ok(())
}

/// What a row does to its record.
pub(super) enum Op {
    /// Nothing: every settable column the file has equals the stored value.
    Unchanged,
    /// A new record, with the values of the insert's columns.
    Insert(Vec<sea_orm::Value>),
    /// The record changes.
    Update(Statement),
    /// The row cannot be written: why.
    Refuse(String),
}

/// A batch's rows with what each does, ready to be written.
pub(super) struct Planned<'r> {
    /// The insert's columns, when any row creates a record.
    columns: Vec<String>,
    /// Each valid row and its operation.
    pub(super) ops: Vec<(&'r Row, Op)>,
    /// The referenced values before and after the batch's writes (`:refs`).
    refs: Vec<String>,
    /// The valid rows' keys (`:keys`), when the dataset has an `after_batch`.
    keys: Vec<String>,
    /// Whether the batch has a valid row.
    any: bool,
}

impl Target {
    /// The table of `dataset` for the tenant whose source id is `tenant`.
    pub(super) async fn load<C: ConnectionTrait>(conn: &C, catalog: &Catalog, dataset: Arc<Dataset>, tenant: String) -> Result<Target, DbErr> {
        let backend = conn.get_database_backend();
        let references: Vec<Option<Referred>> = dataset
            .columns
            .iter()
            .map(|c| {
                let r = c.references.as_ref()?;
                let d = catalog.dataset(&r.dataset)?;
                let part = d.key.iter().find(|k| k.name == r.key)?;
                Some(Referred { table: d.table.clone(), tenant: d.tenant.clone(), key_column: part.column.clone(), compare: part.compare, store: r.store.clone() })
            })
            .collect();
        let mut types = HashMap::new();
        if backend == DbBackend::Postgres {
            pg_types(conn, &dataset.table, &mut types).await?;
            let mut tables: HashSet<&str> = references.iter().flatten().map(|r| r.table.as_str()).collect();
            tables.remove(dataset.table.as_str());
            for table in tables {
                pg_types(conn, table, &mut types).await?;
            }
        }
        Ok(Target { dataset, backend, tenant, types, references })
    }

    fn pg_type(&self, table: &str, column: &str) -> Option<&str> {
        self.types.get(&(table.to_owned(), column.to_owned())).map(String::as_str)
    }

    /// Binds the tenant's source id as `table`'s `column`.
    fn bind_tenant(&self, sql: &mut Sql, table: &str, column: &str) {
        sql.bind(text_value(Some(self.tenant.clone())), self.pg_type(table, column));
    }

    /// A value as it is bound: text on PostgreSQL (cast there to the column's type), the
    /// storage class a SQLite column of the type holds.
    fn encoded(&self, ty: &ColumnType, value: &Value) -> sea_orm::Value {
        let pg = self.backend == DbBackend::Postgres;
        let number = |n: i64| if pg { text_value(Some(n.to_string())) } else { Some(n).into() };
        match value {
            Value::Null => text_value(None),
            Value::Text(t) => text_value(Some(t.clone())),
            Value::Integer(n) | Value::Money(n) => number(*n),
            Value::Decimal(d) | Value::Date(d) => text_value(Some(d.clone())),
            Value::Instant(ms, _) => match ty {
                ColumnType::Timestamp { unit: TimeUnit::Ms } => number(*ms),
                _ => text_value(jiff::Timestamp::from_millisecond(*ms).ok().map(|ts| ts.to_string())),
            },
            Value::Boolean(b) if pg => text_value(Some(b.to_string())),
            Value::Boolean(b) => Some(i64::from(*b)).into(),
        }
    }

    /// The expression that reads `column` (of type `ty`) as text, for comparing.
    fn as_text(&self, column: &str, ty: &ColumnType) -> String {
        match (self.backend, ty) {
            (DbBackend::Postgres, ColumnType::Timestamp { unit: TimeUnit::Instant }) => format!("CAST(CAST(floor(extract(epoch FROM {column}) * 1000) AS BIGINT) AS TEXT)"),
            _ => format!("CAST({column} AS TEXT)"),
        }
    }

    /// The ids (the `store` column) of the rows each reference column's cells name, in the
    /// tenant, by the compared cell: a cell missing from its map names no row.
    pub(super) async fn referenced<C: ConnectionTrait>(&self, conn: &C, rows: &[&Row]) -> Result<Vec<HashMap<String, String>>, DbErr> {
        let mut found = vec![HashMap::new(); self.references.len()];
        for (index, referred) in self.references.iter().enumerate() {
            let Some(r) = referred else { continue };
            let wanted: HashSet<String> = rows.iter().filter_map(|row| row.value(index)).filter_map(|v| v.compared(r.compare)).collect();
            let wanted: Vec<String> = wanted.into_iter().collect();
            for chunk in wanted.chunks(MAX_BOUND) {
                let mut sql = Sql::new(self.backend);
                sql.push(&format!("SELECT CAST({} AS TEXT), CAST({} AS TEXT) FROM {} WHERE {} = ", r.key_column, r.store, r.table, r.tenant));
                self.bind_tenant(&mut sql, &r.table, &r.tenant);
                sql.push(&format!(" AND {} IN (", r.key_column));
                for (i, key) in chunk.iter().enumerate() {
                    if i > 0 {
                        sql.push(", ");
                    }
                    sql.bind(text_value(Some(key.clone())), self.pg_type(&r.table, &r.key_column));
                }
                sql.push(")");
                for row in conn.query_all_raw(sql.statement()).await? {
                    let key: Option<String> = row.try_get_by_index(0)?;
                    let store: Option<String> = row.try_get_by_index(1)?;
                    if let (Some(key), Some(store)) = (key, store) {
                        found[index].insert(key, store);
                    }
                }
            }
        }
        Ok(found)
    }

    /// The stored records of these keys (each its parts' compared text), by the key joined as
    /// [`Row::key`] joins it: each dataset column's stored value as text.
    async fn existing<C: ConnectionTrait>(&self, conn: &C, keys: &[Vec<String>]) -> Result<HashMap<String, Vec<Option<String>>>, DbErr> {
        let d = &self.dataset;
        let parts = d.key.len();
        let mut found = HashMap::new();
        let key_types: Vec<Option<&ColumnType>> = d.key.iter().map(|k| d.column(&k.name).map(|c| &c.ty)).collect();
        for chunk in keys.chunks((MAX_BOUND / parts).max(1)) {
            let mut sql = Sql::new(self.backend);
            let selected: Vec<String> = d.key.iter().map(|k| format!("CAST({} AS TEXT)", k.column)).chain(d.columns.iter().map(|c| self.as_text(&c.column, if c.references.is_some() { &ColumnType::Text } else { &c.ty }))).collect();
            sql.push(&format!("SELECT {} FROM {} WHERE {} = ", selected.join(", "), d.table, d.tenant));
            self.bind_tenant(&mut sql, &d.table, &d.tenant);
            if parts == 1 {
                sql.push(&format!(" AND {} IN (", d.key[0].column));
            } else {
                let columns: Vec<&str> = d.key.iter().map(|k| k.column.as_str()).collect();
                sql.push(&format!(" AND ({}) IN (VALUES ", columns.join(", ")));
            }
            for (i, key) in chunk.iter().enumerate() {
                if i > 0 {
                    sql.push(", ");
                }
                if parts > 1 {
                    sql.push("(");
                }
                for (p, part) in key.iter().enumerate() {
                    if p > 0 {
                        sql.push(", ");
                    }
                    sql.bind(text_value(Some(part.clone())), self.pg_type(&d.table, &d.key[p].column));
                }
                if parts > 1 {
                    sql.push(")");
                }
            }
            sql.push(")");
            for row in conn.query_all_raw(sql.statement()).await? {
                let mut key = Vec::with_capacity(parts);
                for (p, ty) in key_types.iter().enumerate() {
                    let stored: Option<String> = row.try_get_by_index(p)?;
                    key.push(normal(*ty, stored.as_deref().unwrap_or("")));
                }
                let mut values = Vec::with_capacity(d.columns.len());
                for i in 0..d.columns.len() {
                    values.push(row.try_get_by_index::<Option<String>>(parts + i)?);
                }
                found.insert(key.join("\u{1f}"), values);
            }
        }
        Ok(found)
    }

    /// For each key part, whether an insert writes its compared form in a column of its own:
    /// unless a column the file has (`present`) fills that column with the same text.
    fn own_key_columns(&self, present: &[usize]) -> Vec<bool> {
        let d = &self.dataset;
        d.key
            .iter()
            .map(|k| {
                let same = d.column(&k.name).is_some_and(|c| c.column == k.column && k.compare == Compare::Exact);
                !(same && present.iter().any(|&i| d.columns[i].column == k.column))
            })
            .collect()
    }

    /// The columns an insert of a row with these dataset columns writes: the tenant's, each
    /// key part's compared form in a column of its own (`own`), then the file's columns.
    fn insert_columns(&self, present: &[usize], own: &[bool]) -> Vec<String> {
        let d = &self.dataset;
        let mut columns = vec![d.tenant.clone()];
        columns.extend(d.key.iter().zip(own).filter(|(_, own)| **own).map(|(k, _)| k.column.clone()));
        columns.extend(present.iter().map(|&i| d.columns[i].column.clone()));
        columns
    }

    /// What each valid row of `rows` does, by the records stored under their keys and the
    /// rows their references name, read in `conn` (the batch's transaction).
    pub(super) async fn plan<'r, C: ConnectionTrait>(&self, conn: &C, rows: &'r [Row]) -> Result<Planned<'r>, DbErr> {
        let d = &self.dataset;
        let valid: Vec<&Row> = rows.iter().filter(|r| r.problems.is_empty()).collect();
        let (rows_keyed, keys): (Vec<&Row>, Vec<Vec<String>>) = valid.iter().filter_map(|r| r.key_parts(d).map(|k| (*r, k))).unzip();
        // The lookups are prepared statements; a generic plan made while the table was small
        // scans it whole while the import keeps it growing (batches then took seconds each), so
        // on PostgreSQL they alone are planned afresh, and the writes keep their cached plans.
        let postgres = self.backend == DbBackend::Postgres;
        if postgres {
            conn.execute_unprepared("SET LOCAL plan_cache_mode = force_custom_plan").await?;
        }
        let existing = self.existing(conn, &keys).await?;
        let found = self.referenced(conn, &valid).await?;
        if postgres {
            conn.execute_unprepared("SET LOCAL plan_cache_mode = auto").await?;
        }
        let present: Vec<usize> = valid.first().map(|r| {
            let mut p: Vec<usize> = r.values.iter().map(|(i, _)| *i).collect();
            p.sort_unstable();
            p
        }).unwrap_or_default();
        let own = self.own_key_columns(&present);
        let columns = self.insert_columns(&present, &own);
        let missing: Vec<&str> = d.columns.iter().enumerate().filter(|(i, c)| c.required && !present.contains(i)).map(|(_, c)| c.name.as_str()).collect();
        let mut refs = Vec::new();
        let mut ops = Vec::with_capacity(keys.len());
        for (row, parts) in rows_keyed.into_iter().zip(&keys) {
            let key = parts.join("\u{1f}");
            let before = existing.get(&key);
            let mut changed = false;
            let mut refused = None;
            // Each file column's value as written, and whether it differs from the stored one.
            let mut written: Vec<(usize, sea_orm::Value)> = Vec::with_capacity(present.len());
            for &index in &present {
                let Some(value) = row.value(index) else { continue };
                let column = &d.columns[index];
                let stored = before.and_then(|b| b[index].as_deref());
                match &self.references[index] {
                    Some(r) => {
                        if let Some(old) = stored {
                            refs.push(old.to_owned());
                        }
                        match value.compared(r.compare) {
                            Some(cell) => match found[index].get(&cell) {
                                Some(id) => {
                                    changed |= stored != Some(id.as_str());
                                    refs.push(id.clone());
                                    written.push((index, text_value(Some(id.clone()))));
                                }
                                None => refused = Some(format!("{} names no row of yours (any more)", column.name)),
                            },
                            // An empty reference names no row: the column is emptied.
                            None => {
                                changed |= stored.is_some();
                                written.push((index, text_value(None)));
                            }
                        }
                    }
                    None => {
                        changed |= before.is_some() && !same(&column.ty, stored, value);
                        written.push((index, self.encoded(&column.ty, value)));
                    }
                }
            }
            let op = if let Some(why) = refused {
                Op::Refuse(why)
            } else if before.is_some() {
                if changed { Op::Update(self.update(parts, &written)) } else { Op::Unchanged }
            } else if !missing.is_empty() {
                Op::Refuse(format!("a new record needs {}", missing.join(", ")))
            } else {
                let mut values: Vec<sea_orm::Value> = Vec::with_capacity(columns.len());
                values.push(text_value(Some(self.tenant.clone())));
                values.extend(parts.iter().zip(&own).filter(|(_, own)| **own).map(|(part, _)| text_value(Some(part.clone()))));
                values.extend(written.into_iter().map(|(_, v)| v));
                Op::Insert(values)
            };
            ops.push((row, op));
        }
        refs.sort_unstable();
        refs.dedup();
        // `:keys` is made only for an `after_batch` that may read it.
        let keys = if d.after_batch.is_some() { keys.into_iter().map(|k| if k.len() == 1 { k.into_iter().next().unwrap_or_default() } else { serde_json::to_string(&k).unwrap_or_default() }).collect() } else { Vec::new() };
        let any = !ops.is_empty();
        Ok(Planned { columns, ops, refs, keys, any })
    }

    /// The update of the record under `key` to `written`.
    fn update(&self, key: &[String], written: &[(usize, sea_orm::Value)]) -> Statement {
        let d = &self.dataset;
        let mut sql = Sql::new(self.backend);
        sql.push(&format!("UPDATE {} SET ", d.table));
        for (n, (index, value)) in written.iter().enumerate() {
            let column = &d.columns[*index].column;
            if n > 0 {
                sql.push(", ");
            }
            sql.push(&format!("{column} = "));
            sql.bind(value.clone(), self.pg_type(&d.table, column));
        }
        sql.push(&format!(" WHERE {} = ", d.tenant));
        self.bind_tenant(&mut sql, &d.table, &d.tenant);
        for (p, k) in d.key.iter().enumerate() {
            sql.push(&format!(" AND {} = ", k.column));
            sql.bind(text_value(Some(key[p].clone())), self.pg_type(&d.table, &k.column));
        }
        sql.statement()
    }

    /// The inserts of these rows' values, as few statements as the bound-value limit allows.
    fn inserts(&self, columns: &[String], rows: &[&Vec<sea_orm::Value>]) -> Vec<Statement> {
        let d = &self.dataset;
        let per = (MAX_BOUND / columns.len().max(1)).max(1);
        let types: Vec<Option<&str>> = columns.iter().map(|c| self.pg_type(&d.table, c)).collect();
        rows.chunks(per)
            .map(|chunk| {
                let mut sql = Sql::new(self.backend);
                sql.push(&format!("INSERT INTO {} ({}) VALUES ", d.table, columns.join(", ")));
                for (r, values) in chunk.iter().enumerate() {
                    sql.push(if r == 0 { "(" } else { ", (" });
                    for (i, value) in values.iter().enumerate() {
                        if i > 0 {
                            sql.push(", ");
                        }
                        sql.bind(value.clone(), types.get(i).copied().flatten());
                    }
                    sql.push(")");
                }
                sql.statement()
            })
            .collect()
    }

    /// Writes a planned batch inside `txn`: its inserts together and its updates after them
    /// under one savepoint; if the database refuses any of it, each row under a savepoint of
    /// its own, so a refused row is reported without losing the others. Then `after_batch`.
    pub(super) async fn write(&self, txn: &DatabaseTransaction, planned: Planned<'_>, mark: &mut Mark, refused: &mut Vec<Refused>) -> Result<(), DbErr> {
        let Planned { columns, ops, refs, keys, any } = planned;
        let mut all_went = false;
        if !ops.iter().any(|(_, op)| matches!(op, Op::Refuse(_))) {
            let inserts: Vec<&Vec<sea_orm::Value>> = ops.iter().filter_map(|(_, op)| if let Op::Insert(v) = op { Some(v) } else { None }).collect();
            let nested = txn.begin().await?;
            let mut all = Ok(());
            for stmt in self.inserts(&columns, &inserts) {
                if all.is_ok() {
                    all = nested.execute_raw(stmt).await.map(|_| ());
                }
            }
            for (_, op) in &ops {
                if let (Ok(()), Op::Update(stmt)) = (&all, op) {
                    all = updated(nested.execute_raw(stmt.clone()).await);
                }
            }
            match settle(nested, all).await {
                Ok(()) => all_went = true,
                Err(e) if crate::db::is_busy(&e) => return Err(e),
                Err(_) => {}
            }
        }
        for (row, op) in ops {
            let outcome = match op {
                Op::Unchanged => Ok(Change::Unchanged),
                _ if all_went => Ok(if matches!(op, Op::Insert(_)) { Change::Created } else { Change::Updated }),
                Op::Refuse(why) => Err(why),
                Op::Insert(values) => {
                    let nested = txn.begin().await?;
                    let mut done = Ok(Change::Created);
                    for stmt in self.inserts(&columns, &[&values]) {
                        done = nested.execute_raw(stmt).await.map(|_| Change::Created);
                    }
                    verdict(settle(nested, done).await, row)?
                }
                Op::Update(stmt) => {
                    let nested = txn.begin().await?;
                    let done = updated(nested.execute_raw(stmt).await).map(|_| Change::Updated);
                    verdict(settle(nested, done).await, row)?
                }
            };
            count(outcome, row, mark, refused);
        }
        if let Some(after) = &self.dataset.after_batch {
            if any {
                let tenant = self.tenant.clone();
                let keys = serde_json::to_string(&keys).map_err(|e| DbErr::Custom(e.to_string()))?;
                let refs = serde_json::to_string(&refs).map_err(|e| DbErr::Custom(e.to_string()))?;
                let stmt = crate::catalog::placeholders::statement(after, self.backend, |name| match name {
                    "tenant" => Some(tenant.clone()),
                    "keys" => Some(keys.clone()),
                    "refs" => Some(refs.clone()),
                    _ => None,
                })
                .map_err(DbErr::Custom)?;
                txn.execute_raw(stmt).await?;
            }
        }
        Ok(())
    }
}

/// An update's answer: one record changed, or an error (a record deleted since the lookup
/// changed none, and is no update).
fn updated(answer: Result<sea_orm::ExecResult, DbErr>) -> Result<(), DbErr> {
    match answer {
        Ok(done) if done.rows_affected() == 0 => Err(DbErr::RecordNotUpdated),
        Ok(_) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Ends a savepoint: kept when what ran under it succeeded, else rolled back, so a refused row
/// undoes only its own writes.
async fn settle<T>(nested: DatabaseTransaction, result: Result<T, DbErr>) -> Result<T, DbErr> {
    match result {
        Ok(v) => {
            nested.commit().await?;
            Ok(v)
        }
        Err(e) => {
            nested.rollback().await?;
            Err(e)
        }
    }
}

/// What a row did to its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Created,
    Updated,
    Unchanged,
}

/// What the database's answer to one row means: its change, or why it was refused; a bounded
/// wait is no verdict, and is passed up.
fn verdict(answer: Result<Change, DbErr>, row: &Row) -> Result<Result<Change, String>, DbErr> {
    match answer {
        Ok(change) => Ok(Ok(change)),
        Err(e) if crate::db::is_busy(&e) => Err(e),
        Err(e) => {
            tracing::info!(line = row.record.line, error = %e, "a row the database refused");
            Ok(Err("the database refused this row".to_owned()))
        }
    }
}

fn count(outcome: Result<Change, String>, row: &Row, mark: &mut Mark, refused: &mut Vec<Refused>) {
    match outcome {
        Ok(Change::Created) => mark.created += 1,
        Ok(Change::Updated) => mark.updated += 1,
        Ok(Change::Unchanged) => mark.unchanged += 1,
        Err(why) => {
            mark.refused += 1;
            refused.push(Refused { record: row.record.number, line: row.record.line, message: why });
        }
    }
}

/// A stored value's text in the form a file's value of type `ty` compares as.
fn normal(ty: Option<&ColumnType>, stored: &str) -> String {
    match ty {
        Some(ColumnType::Integer | ColumnType::Money { .. }) => stored.trim().parse::<i64>().map(|n| n.to_string()).unwrap_or_else(|_| stored.to_owned()),
        Some(ColumnType::Decimal { scale }) => crate::csv_cells::decimal(stored, *scale).unwrap_or_else(|| stored.to_owned()),
        Some(ColumnType::Date) => stored.get(..10).unwrap_or(stored).to_owned(),
        Some(ColumnType::Boolean) => match stored {
            "true" | "t" | "1" => "true".to_owned(),
            "false" | "f" | "0" => "false".to_owned(),
            other => other.to_owned(),
        },
        Some(ColumnType::Timestamp { .. }) => stored_ms(stored).map_or_else(|| stored.to_owned(), |ms| ms.to_string()),
        Some(ColumnType::Text) | None => stored.to_owned(),
    }
}

/// A stored instant's epoch milliseconds: a number (PostgreSQL's reading, or a column of ms),
/// RFC 3339, or a date and time taken as UTC (SQLite's text).
fn stored_ms(stored: &str) -> Option<i64> {
    stored
        .parse::<i64>()
        .ok()
        .or_else(|| stored.parse::<jiff::Timestamp>().ok().map(|t| t.as_millisecond()))
        .or_else(|| stored.parse::<jiff::civil::DateTime>().ok().and_then(|local| local.to_zoned(jiff::tz::TimeZone::UTC).ok()).map(|z| z.timestamp().as_millisecond()))
}

/// Whether the stored value equals the file's, as parsed: text exactly (an empty cell equals
/// NULL), numbers by value, money in minor units, instants at the file's precision.
fn same(ty: &ColumnType, stored: Option<&str>, value: &Value) -> bool {
    match (value, stored) {
        (Value::Text(t), Some(s)) => t == s,
        (Value::Text(t), None) => t.is_empty(),
        (Value::Null, None) => true,
        (Value::Null, Some(_)) | (_, None) => false,
        (Value::Instant(ms, fraction), Some(s)) => stored_ms(s).is_some_and(|stored| same_instant(stored, *ms, *fraction)),
        (v, Some(s)) => v.compared(Compare::Exact).is_some_and(|file| file == normal(Some(ty), s)),
    }
}

/// Whether an instant stored in ms equals a file's instant at the file's precision.
fn same_instant(stored_ms: i64, file_ms: i64, file_has_fraction: bool) -> bool {
    if file_has_fraction { stored_ms == file_ms } else { stored_ms.div_euclid(1000) == file_ms.div_euclid(1000) }
}

/// A batch's counts, kept in its ledger row.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(super) struct Ledgered {
    pub(super) created: i64,
    pub(super) updated: i64,
    pub(super) unchanged: i64,
    pub(super) refused: i64,
    /// The rows refused: record, line, why.
    pub(super) refusals: Vec<(i64, i64, String)>,
}

/// Takes the ledger row of the batch of `job_id` starting at `first`, first in the batch's
/// transaction on the source: `None` when it is this batch's to apply, or the counts of the
/// batch an earlier attempt applied.
pub(super) async fn ledger_take(txn: &DatabaseTransaction, job_id: &str, first: i64, last: i64) -> Result<Option<Ledgered>, DbErr> {
    let backend = txn.get_database_backend();
    let mut sql = Sql::new(backend);
    sql.push("INSERT INTO exportd_import_batches (job_id, first_record, last_record, counts) VALUES (");
    sql.bind(job_id.into(), None).push(", ").bind(first.into(), None).push(", ").bind(last.into(), None);
    sql.push(", '{}') ON CONFLICT (job_id, first_record) DO NOTHING");
    if txn.execute_raw(sql.statement()).await?.rows_affected() == 1 {
        return Ok(None);
    }
    let mut sql = Sql::new(backend);
    sql.push("SELECT counts, last_record FROM exportd_import_batches WHERE job_id = ");
    sql.bind(job_id.into(), None).push(" AND first_record = ").bind(first.into(), None);
    let row = txn.query_one_raw(sql.statement()).await?.ok_or_else(|| DbErr::RecordNotFound(format!("ledger row of {job_id} at {first}")))?;
    let counts: String = row.try_get_by_index(0)?;
    let ledgered_last: i64 = row.try_get_by_index(1)?;
    // Batches of another size would apply rows twice or skip them: never go on past one.
    if ledgered_last != last {
        return Err(DbErr::Custom(format!("the ledger's batch of {job_id} at record {first} ends at {ledgered_last}, this one at {last}: the batch size changed")));
    }
    serde_json::from_str(&counts).map(Some).map_err(|e| DbErr::Custom(format!("ledger row of {job_id} at {first}: {e}")))
}

/// The records applied as the source's ledger shows them: `mark` (the job store's last
/// checkpoint) followed by the ledger's batches after it, in order, as far as they run on
/// without a gap, and the rows those batches refused. A batch that committed in the source and
/// whose checkpoint the job store refused is applied all the same, and a report must say so.
pub(super) async fn ledger_through<C: ConnectionTrait>(source: &C, job_id: &str, mark: Mark) -> Result<(Mark, Vec<Refused>), DbErr> {
    let mut sql = Sql::new(source.get_database_backend());
    sql.push("SELECT first_record, last_record, counts FROM exportd_import_batches WHERE job_id = ").bind(job_id.into(), None);
    sql.push(" AND first_record > ").bind(mark.last_record.into(), None).push(" ORDER BY first_record");
    let mut through = mark;
    let mut refused = Vec::new();
    for row in source.query_all_raw(sql.statement()).await? {
        let first: i64 = row.try_get_by_index(0)?;
        let last: i64 = row.try_get_by_index(1)?;
        if first != through.last_record + 1 {
            break;
        }
        let counts: String = row.try_get_by_index(2)?;
        let counts: Ledgered = serde_json::from_str(&counts).map_err(|e| DbErr::Custom(format!("ledger row of {job_id} at {first}: {e}")))?;
        through.last_record = last;
        through.created += counts.created;
        through.updated += counts.updated;
        through.unchanged += counts.unchanged;
        through.refused += counts.refused;
        refused.extend(counts.refusals.into_iter().map(|(record, line, message)| Refused { record, line, message }));
    }
    Ok((through, refused))
}

/// Records the batch's counts in its ledger row, before the source's commit.
pub(super) async fn ledger_record(txn: &DatabaseTransaction, job_id: &str, first: i64, counts: &Ledgered) -> Result<(), DbErr> {
    let text = serde_json::to_string(counts).map_err(|e| DbErr::Custom(e.to_string()))?;
    let mut sql = Sql::new(txn.get_database_backend());
    sql.push("UPDATE exportd_import_batches SET counts = ").bind(text.into(), None);
    sql.push(" WHERE job_id = ").bind(job_id.into(), None).push(" AND first_record = ").bind(first.into(), None);
    txn.execute_raw(sql.statement()).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instant_without_a_fraction_compares_to_the_second() {
        assert!(same_instant(1_769_841_000_999, 1_769_841_000_000, false));
        assert!(!same_instant(1_769_841_000_999, 1_769_841_000_000, true));
        assert!(!same_instant(1_769_841_001_000, 1_769_841_000_000, false));
    }

    #[test]
    fn stored_values_compare_by_what_they_mean_not_how_the_database_spells_them() {
        let decimal = ColumnType::Decimal { scale: 3 };
        assert!(same(&decimal, Some("12.5"), &Value::Decimal("12.500".into())));
        assert!(same(&ColumnType::Boolean, Some("1"), &Value::Boolean(true)));
        assert!(same(&ColumnType::Boolean, Some("f"), &Value::Boolean(false)));
        assert!(same(&ColumnType::Date, Some("2026-01-31 00:00:00"), &Value::Date("2026-01-31".into())));
        assert!(same(&ColumnType::Timestamp { unit: TimeUnit::Instant }, Some("2026-01-31 06:30:00"), &Value::Instant(1_769_841_000_000, false)));
        assert!(same(&ColumnType::Text, None, &Value::Text(String::new())));
        assert!(!same(&ColumnType::Integer, None, &Value::Integer(0)));
        assert!(!same(&ColumnType::Money { currency: None }, Some("1250"), &Value::Money(1251)));
    }
}
