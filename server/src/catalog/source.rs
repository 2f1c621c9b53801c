//! The half of a catalog's check that needs its source database (contract §12): every report's
//! `from`, `tenant`, `key`, `time.sql`, columns and filters run with `LIMIT 0`, every dataset's
//! table and stored columns likewise, and each key has a unique index on it (alone, or with the
//! tenant column). Each report column's type must fit what the source gives: on PostgreSQL by the
//! result's column type ([`pg_fits`]), on SQLite by the storage class of the first value that is
//! not NULL, if any ([`sqlite_fits`]). Each error is placed at the value in the file. Nothing is
//! written.

use super::{Catalog, CatalogError, ColumnType, Place, TimeUnit};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};

/// What the source said of a catalog.
#[derive(Debug, Default)]
pub struct Checked {
    /// What the source refused: errors of the catalog.
    pub errors: Vec<CatalogError>,
    /// What could not be checked because the source was busy (a lock held past `lock_timeout`, a
    /// statement past `statement_timeout`, no connection in time): not the catalog's fault, and
    /// no reason for a process not to start.
    pub unchecked: Vec<CatalogError>,
}

/// Checks `catalog` (read from `file`) against the source `db`; every error found.
pub async fn check(db: &DatabaseConnection, file: &str, catalog: &Catalog) -> Checked {
    let mut checked = Checked::default();
    let place = |at: Place, message: String| CatalogError { file: file.to_owned(), line: at.line, column: at.column, message };
    let mut fail = |at: Place, message: String, refusal: Option<&Refusal>| match refusal {
        Some(r) if r.busy => checked.unchecked.push(place(at, format!("{message} (not checked: the source is busy)"))),
        _ => checked.errors.push(place(at, message)),
    };
    for report in &catalog.reports {
        let what = format!("report {:?}", report.name);
        if let Err(e) = runs(db, &format!("SELECT 1 FROM {} LIMIT 0", report.from)).await {
            fail(report.at.from, format!("{what}: `from` fails on the source: {e}"), Some(&e));
            continue;
        }
        let mut expressions = vec![(report.at.tenant, "`tenant`".to_owned(), &report.tenant), (report.at.key, "`key`".to_owned(), &report.key), (report.at.time, "`time.sql`".to_owned(), &report.time_sql)];
        expressions.extend(report.columns.iter().map(|c| (c.at, format!("column {:?}", c.name), &c.sql)));
        expressions.extend(report.filters.iter().map(|f| (f.at, format!("filter {:?}", f.name), &f.sql)));
        for (at, name, sql) in expressions {
            if let Err(e) = runs(db, &format!("SELECT {sql} FROM {} LIMIT 0", report.from)).await {
                fail(at, format!("{what}: {name} fails on the source: {e}"), Some(&e));
            }
        }
        // What each typed expression must give: the columns, the time, and money's currencies.
        let mut typed: Vec<(Place, String, &String, ColumnType)> = report.columns.iter().map(|c| (c.at, format!("column {:?}", c.name), &c.sql, c.ty.clone())).collect();
        typed.push((report.at.time, "`time.sql`".to_owned(), &report.time_sql, ColumnType::Timestamp { unit: report.time_unit }));
        for c in &report.columns {
            if let ColumnType::Money { currency: Some(currency) } = &c.ty {
                typed.push((c.at, format!("column {:?}'s currency", c.name), currency, ColumnType::Text));
            }
        }
        for (at, name, sql, ty) in typed {
            match source_type(db, sql, &report.from).await {
                Ok(Some(found)) if !fits(db.get_database_backend(), &ty, &found, name.ends_with("currency")) => {
                    fail(at, format!("{what}: {name} is {} on the source, which does not fit its type {}", found, type_name(&ty)), None);
                }
                // A failing expression was reported above.
                _ => {}
            }
        }
        match main_table(&report.from).and_then(|(table, alias)| Some((table, column_of(&report.key, &alias)?, column_of(&report.tenant, &alias)))) {
            None => fail(report.at.key, format!("{what}: `key` must be a column of the first table in `from` (`alias.column`)"), None),
            Some((table, key, tenant)) => match unique_sets(db, &table).await {
                Err(e) => fail(report.at.key, format!("{what}: the indexes of {table:?} could not be read: {e}"), Some(&e)),
                Ok(sets) if !is_unique(&sets, &[key.as_str()], tenant.as_deref()) => {
                    fail(report.at.key, format!("{what}: no unique index on {table}.{key}, alone or with the tenant column"), None);
                }
                Ok(_) => {}
            },
        }
    }
    if let Some(sql) = &catalog.authority_sql {
        // Run as a sign-in would run it, for a subject no one has: it must run, whatever it finds.
        match super::placeholders::statement(sql, db.get_database_backend(), |_| Some(String::new())) {
            Ok(statement) => {
                if let Err(e) = db.query_all_raw(statement).await.map_err(Refusal::from) {
                    fail(catalog.authority_at, format!("`[authority] sql` fails on the source: {e}"), Some(&e));
                }
            }
            Err(e) => fail(catalog.authority_at, format!("`[authority] sql`: {e}"), None),
        }
    }
    for dataset in &catalog.datasets {
        let what = format!("dataset {:?}", dataset.name);
        if let Err(e) = runs(db, &format!("SELECT 1 FROM {} LIMIT 0", dataset.table)).await {
            fail(dataset.at, format!("{what}: `table` fails on the source: {e}"), Some(&e));
            continue;
        }
        let mut columns: Vec<(Place, &String)> = dataset.columns.iter().map(|c| (c.at, &c.column)).collect();
        columns.extend(dataset.key.iter().map(|k| (k.at, &k.column)));
        for (at, column) in columns {
            if let Err(e) = runs(db, &format!("SELECT {column} FROM {} LIMIT 0", dataset.table)).await {
                fail(at, format!("{what}: column {column:?} fails on the source: {e}"), Some(&e));
            }
        }
        let key: Vec<&str> = dataset.key.iter().map(|k| k.column.as_str()).collect();
        let at = dataset.key.first().map_or(dataset.at, |k| k.at);
        match unique_sets(db, &dataset.table).await {
            Err(e) => fail(at, format!("{what}: the indexes of {:?} could not be read: {e}", dataset.table), Some(&e)),
            Ok(sets) if !is_unique(&sets, &key, Some(dataset.tenant.as_str())) => {
                fail(at, format!("{what}: no unique index on {}({}), alone or with the tenant column", dataset.table, key.join(", ")), None);
            }
            Ok(_) => {}
        }
    }
    checked
}

/// Why the source did not run a statement: the first line of its message, and whether it was
/// only busy ([`crate::db::is_busy`]).
#[derive(Debug)]
pub struct Refusal {
    message: String,
    busy: bool,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<sea_orm::DbErr> for Refusal {
    fn from(e: sea_orm::DbErr) -> Self {
        Refusal { busy: crate::db::is_busy(&e), message: first_line(e) }
    }
}

/// The type the source gives `sql` over `from`: on PostgreSQL the result column's type name
/// (`INT8`, `TEXT`, …), on SQLite the storage class of its first value that is not NULL
/// (`integer`, `real`, `text`, `blob`), `None` when every value is NULL or there is no row.
async fn source_type(db: &DatabaseConnection, sql: &str, from: &str) -> Result<Option<String>, String> {
    match db.get_database_backend() {
        DbBackend::Postgres => {
            use sea_orm::sqlx::{Column, Executor, SqlSafeStr, Statement as _, TypeInfo};
            let pool = db.get_postgres_connection_pool();
            let query = sea_orm::sqlx::AssertSqlSafe(format!("SELECT {sql} FROM {from} LIMIT 0")).into_sql_str();
            let prepared = pool.prepare(query).await.map_err(|e| e.to_string())?;
            Ok(prepared.columns().first().map(|c| c.type_info().name().to_owned()))
        }
        backend => {
            let row = db
                .query_one_raw(Statement::from_string(backend, format!("SELECT typeof({sql}) FROM {from} WHERE ({sql}) IS NOT NULL LIMIT 1")))
                .await
                .map_err(first_line)?;
            Ok(row.and_then(|r| r.try_get_by_index::<String>(0).ok()))
        }
    }
}

/// Whether a PostgreSQL result type fits a catalog type: the types the export casts from
/// without losing what the type means (docs/catalog.md lists them).
/// The ledger of import batches a source apart from the job store keeps (contract §12): one
/// row per applied batch, inserted first in the batch's transaction.
pub const LEDGER_TABLE: &str = "CREATE TABLE IF NOT EXISTS exportd_import_batches (job_id VARCHAR(64) NOT NULL, first_record BIGINT NOT NULL, last_record BIGINT NOT NULL, counts TEXT NOT NULL, PRIMARY KEY (job_id, first_record))";

/// Creates the ledger in the source (`exportd catalog migrate-source`); a ledger that is there
/// is left as it is.
pub async fn migrate(db: &DatabaseConnection) -> Result<(), sea_orm::DbErr> {
    db.execute_unprepared(LEDGER_TABLE).await.map(|_| ())
}

/// Whether the source holds the ledger: an error in words when it does not.
pub async fn ledger_ready(db: &DatabaseConnection) -> Result<(), String> {
    let probe = "SELECT job_id, first_record, last_record, counts FROM exportd_import_batches WHERE 1 = 0";
    match db.execute_unprepared(probe).await {
        Ok(_) => Ok(()),
        Err(e) if crate::db::is_busy(&e) => Ok(()),
        Err(_) => Err("the source is a database apart from the job store and has no exportd_import_batches, which imports need: run `exportd catalog migrate-source`".into()),
    }
}

/// Whether a column of type `ty` can hold what PostgreSQL's type `found` holds (by name).
pub fn pg_fits(ty: &ColumnType, found: &str) -> bool {
    let is = |names: &[&str]| names.contains(&found);
    match ty {
        // Every type has a text form.
        ColumnType::Text => true,
        ColumnType::Integer | ColumnType::Money { .. } | ColumnType::Timestamp { unit: TimeUnit::Ms } => is(&["INT2", "INT4", "INT8"]),
        ColumnType::Decimal { .. } => is(&["NUMERIC", "INT2", "INT4", "INT8", "FLOAT4", "FLOAT8"]),
        ColumnType::Date => is(&["DATE", "TIMESTAMP", "TIMESTAMPTZ"]),
        ColumnType::Timestamp { unit: TimeUnit::Instant } => is(&["TIMESTAMP", "TIMESTAMPTZ"]),
        ColumnType::Boolean => is(&["BOOL"]),
    }
}

/// Whether a SQLite storage class fits a catalog type (the classes the export reads).
pub fn sqlite_fits(ty: &ColumnType, class: &str) -> bool {
    let is = |classes: &[&str]| classes.contains(&class);
    match ty {
        ColumnType::Text => is(&["text", "integer", "real"]),
        ColumnType::Integer | ColumnType::Money { .. } | ColumnType::Timestamp { unit: TimeUnit::Ms } => is(&["integer"]),
        ColumnType::Decimal { .. } => is(&["integer", "real", "text"]),
        ColumnType::Date | ColumnType::Timestamp { unit: TimeUnit::Instant } => is(&["text"]),
        ColumnType::Boolean => is(&["integer", "text"]),
    }
}

fn fits(backend: DbBackend, ty: &ColumnType, found: &str, currency: bool) -> bool {
    match backend {
        // A currency is a code: text, not any type's text form.
        // sqlx names `bpchar` (`CHAR(n)`) `CHAR`.
        DbBackend::Postgres if currency => ["TEXT", "VARCHAR", "CHAR", "BPCHAR", "NAME"].contains(&found),
        DbBackend::Postgres => pg_fits(ty, found),
        _ => sqlite_fits(ty, found),
    }
}

fn type_name(ty: &ColumnType) -> &'static str {
    match ty {
        ColumnType::Text => "text",
        ColumnType::Integer => "integer",
        ColumnType::Decimal { .. } => "decimal",
        ColumnType::Money { .. } => "money",
        ColumnType::Date => "date",
        ColumnType::Timestamp { unit: TimeUnit::Instant } => "timestamp",
        ColumnType::Timestamp { unit: TimeUnit::Ms } => "timestamp (ms)",
        ColumnType::Boolean => "boolean",
    }
}

/// Runs `sql`; the first line of the database's message when it fails.
async fn runs(db: &DatabaseConnection, sql: &str) -> Result<(), Refusal> {
    db.query_all_raw(Statement::from_string(db.get_database_backend(), sql.to_owned())).await.map(|_| ()).map_err(Refusal::from)
}

/// The first line of a database error's message.
fn first_line(e: sea_orm::DbErr) -> String {
    e.to_string().lines().next().unwrap_or_default().to_owned()
}

/// The first table of a `FROM` clause and its alias (the table itself when it has none).
fn main_table(from: &str) -> Option<(String, String)> {
    let mut words = from.split_whitespace();
    let table = words.next()?.trim_matches('"').to_owned();
    let alias = match words.next() {
        Some(w) if w.eq_ignore_ascii_case("as") => words.next().map(str::to_owned),
        Some(w) if !is_keyword(w) => Some(w.to_owned()),
        _ => None,
    };
    let alias = alias.unwrap_or_else(|| table.clone());
    Some((table, alias))
}

fn is_keyword(word: &str) -> bool {
    ["join", "inner", "left", "right", "full", "cross", "natural", "where", "on", ","].iter().any(|k| word.eq_ignore_ascii_case(k))
}

/// The column an expression names, when it is `alias.column` (or a bare column).
fn column_of(expression: &str, alias: &str) -> Option<String> {
    let expression = expression.trim();
    let column = match expression.split_once('.') {
        Some((a, column)) if a == alias => column,
        Some(_) => return None,
        None => expression,
    };
    column.chars().all(|c| c.is_ascii_alphanumeric() || c == '_').then(|| column.to_owned())
}

/// Whether one of `sets` (the column sets of a table's unique indexes) is exactly `key`, or
/// `key` with `tenant`.
fn is_unique(sets: &[Vec<String>], key: &[&str], tenant: Option<&str>) -> bool {
    let mut alone: Vec<&str> = key.to_vec();
    alone.sort_unstable();
    let mut with_tenant = alone.clone();
    if let Some(t) = tenant {
        with_tenant.push(t);
        with_tenant.sort_unstable();
    }
    sets.iter().any(|set| {
        let mut set: Vec<&str> = set.iter().map(String::as_str).collect();
        set.sort_unstable();
        set == alone || set == with_tenant
    })
}

/// The column sets of `table`'s unique indexes, its primary key included.
async fn unique_sets(db: &DatabaseConnection, table: &str) -> Result<Vec<Vec<String>>, Refusal> {
    let backend = db.get_database_backend();
    let read = |sql: String, values: Vec<sea_orm::Value>| async move {
        db.query_all_raw(Statement::from_sql_and_values(backend, sql, values)).await.map_err(Refusal::from)
    };
    match backend {
        DbBackend::Postgres => {
            let rows = read(
                "SELECT i.indexrelid::bigint, a.attname::text FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) \
                 WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indpred IS NULL"
                    .to_owned(),
                vec![table.into()],
            )
            .await?;
            let mut sets: std::collections::BTreeMap<i64, Vec<String>> = Default::default();
            for row in rows {
                let (Ok(index), Ok(column)) = (row.try_get_by_index::<i64>(0), row.try_get_by_index::<String>(1)) else { continue };
                sets.entry(index).or_default().push(column);
            }
            Ok(sets.into_values().collect())
        }
        _ => {
            let mut sets = Vec::new();
            // A rowid alias (`INTEGER PRIMARY KEY`) has no index of its own.
            let pk: Vec<String> = read(format!("SELECT name FROM pragma_table_info('{}') WHERE pk > 0", table.replace('\'', "''")), vec![])
                .await?
                .into_iter()
                .filter_map(|r| r.try_get_by_index::<String>(0).ok())
                .collect();
            if !pk.is_empty() {
                sets.push(pk);
            }
            let indexes: Vec<String> = read(format!("SELECT name FROM pragma_index_list('{}') WHERE \"unique\" = 1 AND partial = 0", table.replace('\'', "''")), vec![])
                .await?
                .into_iter()
                .filter_map(|r| r.try_get_by_index::<String>(0).ok())
                .collect();
            for index in indexes {
                let columns: Vec<String> = read(format!("SELECT name FROM pragma_index_info('{}')", index.replace('\'', "''")), vec![])
                    .await?
                    .into_iter()
                    .filter_map(|r| r.try_get_by_index::<String>(0).ok())
                    .collect();
                sets.push(columns);
            }
            Ok(sets)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_main_table_and_its_alias_are_read_from_the_from_clause() {
        assert_eq!(main_table("orders o JOIN customers c ON c.id = o.customer_id"), Some(("orders".into(), "o".into())));
        assert_eq!(main_table("customers AS c"), Some(("customers".into(), "c".into())));
        assert_eq!(main_table("tickets"), Some(("tickets".into(), "tickets".into())));
        assert_eq!(main_table("tickets LEFT JOIN agents a ON a.id = tickets.agent_id"), Some(("tickets".into(), "tickets".into())));
        assert_eq!(column_of("o.id", "o"), Some("id".into()));
        assert_eq!(column_of("c.id", "o"), None);
        assert_eq!(column_of("lower(o.email)", "o"), None);
    }

    #[test]
    fn a_column_fits_the_source_types_its_export_reads_and_no_other() {
        let ms = ColumnType::Timestamp { unit: TimeUnit::Ms };
        let instant = ColumnType::Timestamp { unit: TimeUnit::Instant };
        assert!(pg_fits(&ColumnType::Text, "INT8"), "every type has a text form");
        assert!(pg_fits(&ms, "INT8") && !pg_fits(&ms, "TIMESTAMPTZ"));
        assert!(pg_fits(&instant, "TIMESTAMP") && !pg_fits(&instant, "INT8"));
        assert!(pg_fits(&ColumnType::Decimal { scale: 2 }, "NUMERIC") && !pg_fits(&ColumnType::Decimal { scale: 2 }, "TEXT"));
        assert!(!pg_fits(&ColumnType::Date, "INT8"));
        assert!(pg_fits(&ColumnType::Boolean, "BOOL") && !pg_fits(&ColumnType::Boolean, "INT4"));
        assert!(sqlite_fits(&ColumnType::Date, "text") && !sqlite_fits(&ColumnType::Date, "integer"));
        assert!(sqlite_fits(&ColumnType::Money { currency: None }, "integer") && !sqlite_fits(&ColumnType::Money { currency: None }, "real"));
        assert!(!sqlite_fits(&ColumnType::Integer, "blob"));
        assert!(fits(DbBackend::Postgres, &ColumnType::Text, "CHAR", true), "a currency kept as CHAR(3)");
        assert!(!fits(DbBackend::Postgres, &ColumnType::Text, "INT4", true), "a currency is a code, not a number");
    }

    #[test]
    fn a_key_is_unique_alone_or_with_the_tenant_column_and_not_within_a_wider_index() {
        let sets = vec![vec!["id".to_owned()], vec!["email_key".to_owned(), "tenant_id".to_owned()], vec!["a".to_owned(), "b".to_owned(), "c".to_owned()]];
        assert!(is_unique(&sets, &["id"], Some("tenant_id")));
        assert!(is_unique(&sets, &["email_key"], Some("tenant_id")));
        assert!(!is_unique(&sets, &["email_key"], None));
        assert!(!is_unique(&sets, &["a", "b"], Some("tenant_id")), "a unique (a, b, c) does not make (a, b) unique");
    }
}
