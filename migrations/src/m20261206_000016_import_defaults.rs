//! Defaults for the demo's columns an import's file may leave out: a customer's `created_at` is
//! the moment it is inserted, and its `name` and `phone` and an order's `notes` are empty text. An
//! import that creates a record (its dataset, like any table's in a catalog, names only the
//! columns a file carries) leaves the table to fill them. PostgreSQL changes each default in
//! place. SQLite has no `ALTER COLUMN`: the stored `CREATE TABLE` text gains the defaults under
//! `writable_schema`, which its documentation allows for a change of defaults alone (nothing on
//! disk changes), with the schema version raised so every connection reads the tables anew.

use sea_orm::{ConnectionTrait, DbBackend, Statement};
use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// Each table's column, its PostgreSQL default and its SQLite default.
const DEFAULTS: [(&str, &str, &str, &str); 4] = [
    ("customers", "created_at", "CAST(floor(extract(epoch FROM clock_timestamp()) * 1000) AS BIGINT)", " DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))"),
    ("customers", "name", "''", " DEFAULT ''"),
    ("customers", "phone", "''", " DEFAULT ''"),
    ("orders", "notes", "''", " DEFAULT ''"),
];

/// The stored `CREATE TABLE` text `sql` with `default` added to `column`'s definition (the text
/// from its name to the comma or parenthesis that ends it), unless it has a default already.
fn with_default(sql: &str, column: &str, default: &str) -> Result<String, DbErr> {
    let quoted = format!("\"{column}\"");
    let start = sql.find(&quoted).ok_or_else(|| DbErr::Migration(format!("no column {column} in {sql}")))?;
    let end = sql[start..].find([',', ')']).map(|n| start + n).ok_or_else(|| DbErr::Migration(format!("{column}'s definition does not end")))?;
    let definition = &sql[start..end];
    if definition.contains("DEFAULT") {
        return Ok(sql.to_owned());
    }
    Ok(format!("{}{}{}{}", &sql[..start], definition.trim_end(), default, &sql[end..]))
}

/// `sql` with `default` taken out of `column`'s definition, where `with_default` put it.
fn without_default(sql: &str, column: &str, default: &str) -> Result<String, DbErr> {
    let start = sql.find(&format!("\"{column}\"")).ok_or_else(|| DbErr::Migration(format!("no column {column} in {sql}")))?;
    match sql[start..].find(default).map(|n| start + n) {
        Some(at) if !sql[start..at].contains(',') => Ok(format!("{}{}", &sql[..at], &sql[at + default.len()..])),
        _ => Ok(sql.to_owned()),
    }
}

/// Rewrites the stored `CREATE TABLE` of each table by `change`, in one transaction of one
/// connection.
async fn rewrite_sqlite(manager: &SchemaManager<'_>, change: impl Fn(&str, &str) -> Result<String, DbErr>) -> Result<(), DbErr> {
    let db = manager.get_connection();
    let read = |sql: String| Statement::from_string(DbBackend::Sqlite, sql);
    let version: i64 = db.query_one_raw(read("PRAGMA schema_version".into())).await?.ok_or_else(|| DbErr::Migration("no schema_version".into()))?.try_get_by_index(0)?;
    let mut updates = String::new();
    for table in ["customers", "orders"] {
        let row = db.query_one_raw(read(format!("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = '{table}'"))).await?.ok_or_else(|| DbErr::Migration(format!("no {table} table")))?;
        let sql: String = row.try_get_by_index(0)?;
        let new = change(table, &sql)?;
        updates.push_str(&format!("UPDATE sqlite_master SET sql = '{}' WHERE type = 'table' AND name = '{table}'; ", new.replace('\'', "''")));
    }
    // One call, so one connection, runs the whole change.
    let script = format!("BEGIN IMMEDIATE; PRAGMA writable_schema = ON; {updates}PRAGMA schema_version = {}; PRAGMA writable_schema = OFF; COMMIT;", version + 1);
    db.execute_unprepared(&script).await?;
    Ok(())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() == DbBackend::Postgres {
            for (table, column, default, _) in DEFAULTS {
                manager.get_connection().execute_unprepared(&format!("ALTER TABLE {table} ALTER COLUMN {column} SET DEFAULT {default}")).await?;
            }
            return Ok(());
        }
        rewrite_sqlite(manager, |table, sql| {
            DEFAULTS.iter().filter(|d| d.0 == table).try_fold(sql.to_owned(), |sql, (_, column, _, default)| with_default(&sql, column, default))
        })
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() == DbBackend::Postgres {
            for (table, column, _, _) in DEFAULTS {
                manager.get_connection().execute_unprepared(&format!("ALTER TABLE {table} ALTER COLUMN {column} DROP DEFAULT")).await?;
            }
            return Ok(());
        }
        rewrite_sqlite(manager, |table, sql| {
            DEFAULTS.iter().filter(|d| d.0 == table).try_fold(sql.to_owned(), |sql, (_, column, _, default)| without_default(&sql, column, default))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_goes_at_the_end_of_its_columns_definition_alone_and_once() {
        let sql = r#"CREATE TABLE "customers" ( "id" integer NOT NULL PRIMARY KEY AUTOINCREMENT, "name" varchar NOT NULL, "created_at" bigint NOT NULL, "lifetime_total_cents" bigint NOT NULL DEFAULT 0 )"#;
        let (created, name) = (DEFAULTS[0].3, DEFAULTS[1].3);
        let new = with_default(&with_default(sql, "created_at", created).unwrap(), "name", name).unwrap();
        assert!(new.contains(&format!(r#""created_at" bigint NOT NULL{created}, "lifetime"#)), "{new}");
        assert!(new.contains(r#""name" varchar NOT NULL DEFAULT '', "#), "{new}");
        assert_eq!(with_default(&new, "name", name).unwrap(), new, "a second run adds nothing");
        assert_eq!(with_default(sql, "lifetime_total_cents", " DEFAULT 1").unwrap(), sql, "a default there is kept");
        assert_eq!(without_default(&without_default(&new, "created_at", created).unwrap(), "name", name).unwrap(), sql);
    }
}
