//! Login throttling per (IP, email), kept in the database so every instance applies it.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum LoginThrottle {
    Table,
    Id,
    Failures,
    BlockedUntil,
    UpdatedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(LoginThrottle::Table)
                    .col(ColumnDef::new(LoginThrottle::Id).string().not_null().primary_key())
                    .col(ColumnDef::new(LoginThrottle::Failures).integer().not_null())
                    .col(ColumnDef::new(LoginThrottle::BlockedUntil).big_integer().not_null())
                    .col(ColumnDef::new(LoginThrottle::UpdatedAt).big_integer().not_null())
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table(LoginThrottle::Table).to_owned()).await
    }
}
