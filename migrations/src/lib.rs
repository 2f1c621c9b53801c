//! exportd's schema: one migration set that runs on SQLite and on PostgreSQL.
//!
//! Every timestamp is a BIGINT of milliseconds since the Unix epoch, so comparisons with the
//! database's clock (leases, queue TTLs) behave the same on both backends.

pub use sea_orm_migration::prelude::*;

mod m20261202_000001_init;
mod m20261202_000002_login_throttle;
mod m20261203_000003_fenced_worker;
mod m20261203_000004_claim_index;
mod m20261203_000005_announce_trigger;
mod m20261203_000006_claim_order_index;
mod m20261204_000007_operations;
mod m20261204_000008_checkpoints;

/// The ordered list of exportd's migrations.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261202_000001_init::Migration),
            Box::new(m20261202_000002_login_throttle::Migration),
            Box::new(m20261203_000003_fenced_worker::Migration),
            Box::new(m20261203_000004_claim_index::Migration),
            Box::new(m20261203_000005_announce_trigger::Migration),
            Box::new(m20261203_000006_claim_order_index::Migration),
            Box::new(m20261204_000007_operations::Migration),
            Box::new(m20261204_000008_checkpoints::Migration),
        ]
    }
}

/// Runs `statements` in order: the body of a migration written as plain SQL that both backends
/// accept.
pub(crate) async fn execute_all(manager: &SchemaManager<'_>, statements: &[&str]) -> Result<(), DbErr> {
    for sql in statements {
        manager.get_connection().execute_unprepared(sql).await?;
    }
    Ok(())
}
