//! On PostgreSQL the database itself announces claimable work: a row of `exports` that becomes
//! `queued` (a create, a hand-back) sends `NOTIFY exportd_jobs`, delivered when its transaction
//! commits. Before this, each such transaction sent the NOTIFY as a statement of its own — one
//! more round trip on every create. SQLite has no NOTIFY (one process wakes its own loops).

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

const UP: &str = r#"
CREATE FUNCTION exportd_announce() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('exportd_jobs', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER exports_announce
    AFTER INSERT OR UPDATE OF status ON exports
    FOR EACH ROW WHEN (NEW.status = 'queued')
    EXECUTE FUNCTION exportd_announce();
"#;

const DOWN: &str = "DROP TRIGGER IF EXISTS exports_announce ON exports; DROP FUNCTION IF EXISTS exportd_announce();";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() == DbBackend::Postgres {
            manager.get_connection().execute_unprepared(UP).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() == DbBackend::Postgres {
            manager.get_connection().execute_unprepared(DOWN).await?;
        }
        Ok(())
    }
}
