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
mod m20261205_000009_jobs;
mod m20261205_000010_natural_keys;
mod m20261205_000011_uploads;
mod m20261205_000012_orders_by_customer;
mod m20261205_000013_import_refusals;
mod m20261206_000014_tenant_source_ids;
mod m20261206_000015_schema_digests;
mod m20261206_000016_import_defaults;
mod m20261206_000017_oidc_users;
mod m20261207_000018_schedules;
mod m20261207_000019_notifications;
mod m20261207_000020_part_ends_from_the_index;

/// A customer's key in its tenant (SPEC §10): the email trimmed and lower-cased, computed here
/// and never by the database, whose `lower()` differs between backends. The migration that
/// made the column fills it with this, and the server writes it with this.
pub fn email_key(email: &str) -> String {
    email.trim().to_lowercase()
}

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
            Box::new(m20261205_000009_jobs::Migration),
            Box::new(m20261205_000010_natural_keys::Migration),
            Box::new(m20261205_000011_uploads::Migration),
            Box::new(m20261205_000012_orders_by_customer::Migration),
            Box::new(m20261205_000013_import_refusals::Migration),
            Box::new(m20261206_000014_tenant_source_ids::Migration),
            Box::new(m20261206_000015_schema_digests::Migration),
            Box::new(m20261206_000016_import_defaults::Migration),
            Box::new(m20261206_000017_oidc_users::Migration),
            Box::new(m20261207_000018_schedules::Migration),
            Box::new(m20261207_000019_notifications::Migration),
            Box::new(m20261207_000020_part_ends_from_the_index::Migration),
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
