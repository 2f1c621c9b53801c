//! Claims find their rows per tenant through `exports_tenant_status` (migration 3); the first
//! index of claimable rows, by (status, deployment, created_at), is no longer read by any query
//! and only costs every insert and update of an export.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Exports {
    Table,
    Status,
    Deployment,
    CreatedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_index(Index::drop().name("exports_claimable").table(Exports::Table).to_owned()).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(
                Index::create()
                    .name("exports_claimable")
                    .table(Exports::Table)
                    .col(Exports::Status)
                    .col(Exports::Deployment)
                    .col(Exports::CreatedAt)
                    .to_owned(),
            )
            .await
    }
}
