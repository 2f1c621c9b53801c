//! The natural keys an import upserts by (SPEC §10): a customer by its email, compared trimmed
//! and lower-cased, stored as `email_key` with a plain unique index per tenant (the databases'
//! `lower()` differ, so the key is computed by [`crate::email_key`], here for the rows that exist
//! and by the server for every row it writes); an order by its `order_ref`, unique per tenant.
//! Every order has one: existing orders get `ORD-<id>`, and so does an order inserted without
//! one, by a trigger, so no writer can leave an order that an import cannot name.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{DbBackend, Statement};

#[derive(DeriveMigrationName)]
pub struct Migration;

const UP: [&str; 2] = [
    "ALTER TABLE customers ADD COLUMN email_key VARCHAR NOT NULL DEFAULT ''",
    "ALTER TABLE orders ADD COLUMN order_ref VARCHAR NULL",
];

const INDEXES: [&str; 3] = [
    "UPDATE orders SET order_ref = 'ORD-' || CAST(id AS VARCHAR) WHERE order_ref IS NULL",
    "CREATE UNIQUE INDEX customers_tenant_email_key ON customers (tenant_id, email_key)",
    "CREATE UNIQUE INDEX orders_tenant_ref ON orders (tenant_id, order_ref)",
];

const SQLITE_TRIGGER: &str = "CREATE TRIGGER orders_default_ref AFTER INSERT ON orders FOR EACH ROW WHEN NEW.order_ref IS NULL \
     BEGIN UPDATE orders SET order_ref = 'ORD-' || NEW.id WHERE id = NEW.id; END";

// Column defaults (the id from its sequence) are in NEW before a BEFORE trigger runs.
const POSTGRES_TRIGGER: &str = r#"
CREATE FUNCTION exportd_order_ref() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.order_ref IS NULL THEN
        NEW.order_ref := 'ORD-' || NEW.id;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER orders_default_ref BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION exportd_order_ref();
"#;

const DOWN: [&str; 4] = [
    "DROP INDEX IF EXISTS orders_tenant_ref",
    "DROP INDEX IF EXISTS customers_tenant_email_key",
    "ALTER TABLE orders DROP COLUMN order_ref",
    "ALTER TABLE customers DROP COLUMN email_key",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::execute_all(manager, &UP).await?;
        let db = manager.get_connection();
        let backend = manager.get_database_backend();
        let rows = db.query_all_raw(Statement::from_string(backend, "SELECT id, email FROM customers")).await?;
        for row in rows {
            let id: i64 = row.try_get_by_index(0)?;
            let email: String = row.try_get_by_index(1)?;
            let update = Query::update()
                .table(Alias::new("customers"))
                .value(Alias::new("email_key"), crate::email_key(&email))
                .and_where(Expr::col(Alias::new("id")).eq(id))
                .to_owned();
            db.execute(&update).await?;
        }
        crate::execute_all(manager, &INDEXES).await?;
        let trigger = if backend == DbBackend::Postgres { POSTGRES_TRIGGER } else { SQLITE_TRIGGER };
        db.execute_unprepared(trigger).await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let drop_trigger = if manager.get_database_backend() == DbBackend::Postgres {
            "DROP TRIGGER IF EXISTS orders_default_ref ON orders; DROP FUNCTION IF EXISTS exportd_order_ref();"
        } else {
            "DROP TRIGGER IF EXISTS orders_default_ref"
        };
        manager.get_connection().execute_unprepared(drop_trigger).await?;
        crate::execute_all(manager, &DOWN).await
    }
}
