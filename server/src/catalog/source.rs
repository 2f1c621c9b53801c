//! The half of a catalog's check that needs its source database (contract §12): every report's
//! `from`, `tenant`, `key`, `time.sql`, columns and filters run with `LIMIT 0`, every dataset's
//! table and stored columns likewise, and each key has a unique index on it (alone, or with the
//! tenant column). Each error is placed at the value in the file. Nothing is written.

use super::{Catalog, CatalogError, Place};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};

/// Checks `catalog` (read from `file`) against the source `db`; every error found.
pub async fn check(db: &DatabaseConnection, file: &str, catalog: &Catalog) -> Vec<CatalogError> {
    let mut errors = Vec::new();
    let mut fail = |at: Place, message: String| errors.push(CatalogError { file: file.to_owned(), line: at.line, column: at.column, message });
    for report in &catalog.reports {
        let what = format!("report {:?}", report.name);
        if let Err(e) = runs(db, &format!("SELECT 1 FROM {} LIMIT 0", report.from)).await {
            fail(report.at.from, format!("{what}: `from` fails on the source: {e}"));
            continue;
        }
        let mut expressions = vec![(report.at.tenant, "`tenant`".to_owned(), &report.tenant), (report.at.key, "`key`".to_owned(), &report.key), (report.at.time, "`time.sql`".to_owned(), &report.time_sql)];
        expressions.extend(report.columns.iter().map(|c| (c.at, format!("column {:?}", c.name), &c.sql)));
        expressions.extend(report.filters.iter().map(|f| (f.at, format!("filter {:?}", f.name), &f.sql)));
        for (at, name, sql) in expressions {
            if let Err(e) = runs(db, &format!("SELECT {sql} FROM {} LIMIT 0", report.from)).await {
                fail(at, format!("{what}: {name} fails on the source: {e}"));
            }
        }
        match main_table(&report.from).and_then(|(table, alias)| Some((table, column_of(&report.key, &alias)?, column_of(&report.tenant, &alias)))) {
            None => fail(report.at.key, format!("{what}: `key` must be a column of the first table in `from` (`alias.column`)")),
            Some((table, key, tenant)) => match unique_sets(db, &table).await {
                Err(e) => fail(report.at.key, format!("{what}: the indexes of {table:?} could not be read: {e}")),
                Ok(sets) if !is_unique(&sets, &[key.as_str()], tenant.as_deref()) => {
                    fail(report.at.key, format!("{what}: no unique index on {table}.{key}, alone or with the tenant column"));
                }
                Ok(_) => {}
            },
        }
    }
    for dataset in &catalog.datasets {
        let what = format!("dataset {:?}", dataset.name);
        if let Err(e) = runs(db, &format!("SELECT 1 FROM {} LIMIT 0", dataset.table)).await {
            fail(dataset.at, format!("{what}: `table` fails on the source: {e}"));
            continue;
        }
        let mut columns: Vec<(Place, &String)> = dataset.columns.iter().map(|c| (c.at, &c.column)).collect();
        columns.extend(dataset.key.iter().map(|k| (k.at, &k.column)));
        for (at, column) in columns {
            if let Err(e) = runs(db, &format!("SELECT {column} FROM {} LIMIT 0", dataset.table)).await {
                fail(at, format!("{what}: column {column:?} fails on the source: {e}"));
            }
        }
        let key: Vec<&str> = dataset.key.iter().map(|k| k.column.as_str()).collect();
        let at = dataset.key.first().map_or(dataset.at, |k| k.at);
        match unique_sets(db, &dataset.table).await {
            Err(e) => fail(at, format!("{what}: the indexes of {:?} could not be read: {e}", dataset.table)),
            Ok(sets) if !is_unique(&sets, &key, Some(dataset.tenant.as_str())) => {
                fail(at, format!("{what}: no unique index on {}({}), alone or with the tenant column", dataset.table, key.join(", ")));
            }
            Ok(_) => {}
        }
    }
    errors
}

/// Runs `sql`; the first line of the database's message when it fails.
async fn runs(db: &DatabaseConnection, sql: &str) -> Result<(), String> {
    db.query_all_raw(Statement::from_string(db.get_database_backend(), sql.to_owned())).await.map(|_| ()).map_err(first_line)
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
async fn unique_sets(db: &DatabaseConnection, table: &str) -> Result<Vec<Vec<String>>, String> {
    let backend = db.get_database_backend();
    let read = |sql: String, values: Vec<sea_orm::Value>| async move {
        db.query_all_raw(Statement::from_sql_and_values(backend, sql, values)).await.map_err(first_line)
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
    fn a_key_is_unique_alone_or_with_the_tenant_column_and_not_within_a_wider_index() {
        let sets = vec![vec!["id".to_owned()], vec!["email_key".to_owned(), "tenant_id".to_owned()], vec!["a".to_owned(), "b".to_owned(), "c".to_owned()]];
        assert!(is_unique(&sets, &["id"], Some("tenant_id")));
        assert!(is_unique(&sets, &["email_key"], Some("tenant_id")));
        assert!(!is_unique(&sets, &["email_key"], None));
        assert!(!is_unique(&sets, &["a", "b"], Some("tenant_id")), "a unique (a, b, c) does not make (a, b) unique");
    }
}
