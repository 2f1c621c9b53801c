//! What the fenced worker and the janitor need: the state a transition moved from (for the audit
//! trail), the fair rotation of claims between tenants, the indexes of the claim and the janitor,
//! and a composite key so an order can only point at a customer of its own tenant.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Exports {
    Table,
    PreviousStatus,
    ActorId,
    TenantId,
    Status,
    CreatedAt,
    LeaseExpiresAt,
    ArtifactExpiresAt,
    FinishedAt,
}

#[derive(DeriveIden)]
enum Tenants {
    Table,
    Id,
    LastClaimedAt,
}

#[derive(DeriveIden)]
enum Customers {
    Table,
    Id,
    TenantId,
}

#[derive(DeriveIden)]
enum Orders {
    Table,
    Id,
    TenantId,
    CustomerId,
    PlacedAt,
    Country,
    Status,
    TotalCents,
    Currency,
    Notes,
}

#[derive(DeriveIden)]
enum OrdersRebuilt {
    Table,
}

fn text<T: IntoIden>(col: T) -> ColumnDef {
    ColumnDef::new(col).string().not_null().to_owned()
}

/// The orders table as it is from now on (built as `orders_rebuilt`): its customer is one of
/// its tenant's.
fn orders_rebuilt() -> TableCreateStatement {
    Table::create()
        .table(OrdersRebuilt::Table)
        .col(ColumnDef::new(Orders::Id).big_integer().not_null().auto_increment().primary_key())
        .col(text(Orders::TenantId))
        .col(ColumnDef::new(Orders::CustomerId).big_integer().not_null())
        .col(ColumnDef::new(Orders::PlacedAt).big_integer().not_null())
        .col(text(Orders::Country))
        .col(text(Orders::Status))
        .col(ColumnDef::new(Orders::TotalCents).big_integer().not_null())
        .col(text(Orders::Currency))
        .col(text(Orders::Notes))
        .foreign_key(ForeignKey::create().from(OrdersRebuilt::Table, Orders::TenantId).to(Tenants::Table, Tenants::Id))
        .foreign_key(&mut tenant_customer_key(OrdersRebuilt::Table))
        .to_owned()
}

fn tenant_customer_key<T: IntoIden + 'static>(table: T) -> ForeignKeyCreateStatement {
    ForeignKey::create()
        .name("orders_customer_of_tenant")
        .from(table, (Orders::TenantId, Orders::CustomerId))
        .to(Customers::Table, (Customers::TenantId, Customers::Id))
        .to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    /// In one transaction on every backend: the SQLite rebuild of `orders` must not be seen
    /// half done, and must run on one connection.
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(Table::alter().table(Exports::Table).add_column(ColumnDef::new(Exports::PreviousStatus).string().null()).to_owned())
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Tenants::Table)
                    .add_column(ColumnDef::new(Tenants::LastClaimedAt).big_integer().not_null().default(0))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create().name("customers_tenant_id").table(Customers::Table).col(Customers::TenantId).col(Customers::Id).unique().to_owned(),
            )
            .await?;
        match manager.get_database_backend() {
            DbBackend::Sqlite => {
                // SQLite cannot add a constraint to a table: rebuild it with the key.
                manager.create_table(orders_rebuilt()).await?;
                let db = manager.get_connection();
                db.execute_unprepared("INSERT INTO orders_rebuilt SELECT id, tenant_id, customer_id, placed_at, country, status, total_cents, currency, notes FROM orders").await?;
                db.execute_unprepared("DROP TABLE orders").await?;
                db.execute_unprepared("ALTER TABLE orders_rebuilt RENAME TO orders").await?;
                manager
                    .create_index(Index::create().name("orders_tenant_placed").table(Orders::Table).col(Orders::TenantId).col(Orders::PlacedAt).to_owned())
                    .await?;
            }
            _ => {
                manager.create_foreign_key(tenant_customer_key(Orders::Table)).await?;
            }
        }
        manager
            .create_index(
                Index::create()
                    .name("exports_tenant_status")
                    .table(Exports::Table)
                    .col(Exports::TenantId)
                    .col(Exports::Status)
                    .col(Exports::CreatedAt)
                    .to_owned(),
            )
            .await?;
        // The per-actor limit counts an actor's unfinished exports; their finished history must not slow it.
        manager
            .create_index(Index::create().name("exports_actor_status").table(Exports::Table).col(Exports::ActorId).col(Exports::Status).to_owned())
            .await?;
        for (name, col) in [
            ("exports_status_lease", Exports::LeaseExpiresAt),
            ("exports_status_artifact_expiry", Exports::ArtifactExpiresAt),
            ("exports_status_finished", Exports::FinishedAt),
        ] {
            manager.create_index(Index::create().name(name).table(Exports::Table).col(Exports::Status).col(col).to_owned()).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for name in ["exports_status_finished", "exports_status_artifact_expiry", "exports_status_lease", "exports_actor_status", "exports_tenant_status"] {
            manager.drop_index(Index::drop().name(name).table(Exports::Table).to_owned()).await?;
        }
        if manager.get_database_backend() != DbBackend::Sqlite {
            manager.drop_foreign_key(ForeignKey::drop().name("orders_customer_of_tenant").table(Orders::Table).to_owned()).await?;
            manager.drop_index(Index::drop().name("customers_tenant_id").table(Customers::Table).to_owned()).await?;
        }
        manager.alter_table(Table::alter().table(Tenants::Table).drop_column(Tenants::LastClaimedAt).to_owned()).await?;
        manager.alter_table(Table::alter().table(Exports::Table).drop_column(Exports::PreviousStatus).to_owned()).await
    }
}
