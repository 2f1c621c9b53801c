//! A customer's `created_at` defaults to the moment it is inserted, so an import that creates a
//! customer (its dataset, like any table's in a catalog, names only the columns a file carries)
//! leaves the table to fill it. PostgreSQL changes the default in place. SQLite has no `ALTER
//! COLUMN`: its stored `CREATE TABLE` text gains the default under `writable_schema`, which its
//! documentation allows for a change of a default alone (nothing on disk changes), with the
//! schema version raised so every connection reads the table anew.

use sea_orm::{ConnectionTrait, DbBackend, Statement};
use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const POSTGRES_UP: &str = "ALTER TABLE customers ALTER COLUMN created_at SET DEFAULT CAST(floor(extract(epoch FROM clock_timestamp()) * 1000) AS BIGINT)";
const POSTGRES_DOWN: &str = "ALTER TABLE customers ALTER COLUMN created_at DROP DEFAULT";
const SQLITE_DEFAULT: &str = " DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))";

/// The stored `CREATE TABLE customers` with `change` made to the definition of `created_at`:
/// the text from its name to the comma that ends it is given to `change`.
fn with_created_at(sql: &str, change: impl Fn(&str) -> String) -> Result<String, DbErr> {
    let start = sql.find("\"created_at\"").or_else(|| sql.find("created_at")).ok_or_else(|| DbErr::Migration("customers has no created_at".into()))?;
    let end = sql[start..].find([',', ')']).map(|n| start + n).ok_or_else(|| DbErr::Migration("customers' created_at does not end".into()))?;
    Ok(format!("{}{}{}", &sql[..start], change(&sql[start..end]), &sql[end..]))
}

async fn rewrite_sqlite(manager: &SchemaManager<'_>, change: impl Fn(&str) -> Result<String, DbErr>) -> Result<(), DbErr> {
    let db = manager.get_connection();
    let read = |sql: &str| Statement::from_string(DbBackend::Sqlite, sql.to_owned());
    let row = db.query_one_raw(read("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'customers'")).await?.ok_or_else(|| DbErr::Migration("no customers table".into()))?;
    let sql: String = row.try_get_by_index(0)?;
    let version: i64 = db.query_one_raw(read("PRAGMA schema_version")).await?.ok_or_else(|| DbErr::Migration("no schema_version".into()))?.try_get_by_index(0)?;
    let new = change(&sql)?;
    // One call, so one connection, runs the whole change.
    let script = format!(
        "BEGIN IMMEDIATE; PRAGMA writable_schema = ON; UPDATE sqlite_master SET sql = '{}' WHERE type = 'table' AND name = 'customers'; PRAGMA schema_version = {}; PRAGMA writable_schema = OFF; COMMIT;",
        new.replace('\'', "''"),
        version + 1
    );
    db.execute_unprepared(&script).await?;
    Ok(())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() == DbBackend::Postgres {
            manager.get_connection().execute_unprepared(POSTGRES_UP).await?;
            return Ok(());
        }
        rewrite_sqlite(manager, |sql| if sql.contains(SQLITE_DEFAULT) { Ok(sql.to_owned()) } else { with_created_at(sql, |definition| format!("{}{SQLITE_DEFAULT}", definition.trim_end())) }).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() == DbBackend::Postgres {
            manager.get_connection().execute_unprepared(POSTGRES_DOWN).await?;
            return Ok(());
        }
        rewrite_sqlite(manager, |sql| Ok(sql.replace(SQLITE_DEFAULT, ""))).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_goes_at_the_end_of_created_ats_definition_alone() {
        let sql = r#"CREATE TABLE "customers" ( "id" integer NOT NULL PRIMARY KEY AUTOINCREMENT, "created_at" bigint NOT NULL, "lifetime_total_cents" bigint NOT NULL DEFAULT 0 )"#;
        let new = with_created_at(sql, |d| format!("{d}{SQLITE_DEFAULT}")).unwrap();
        assert!(new.contains(&format!(r#""created_at" bigint NOT NULL{SQLITE_DEFAULT}, "lifetime"#)), "{new}");
        assert_eq!(new.replace(SQLITE_DEFAULT, ""), sql);
    }
}
