//! The first schema: tenants, users, sessions, API tokens, signing keys, the demo dataset,
//! exports and their audit trail.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Tenants {
    Table,
    Id,
    Slug,
    Name,
    Deployment,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Users {
    Table,
    Id,
    TenantId,
    Email,
    PasswordHash,
    Role,
    Active,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Sessions {
    Table,
    Id,
    UserId,
    CreatedAt,
    ExpiresAt,
    RevokedAt,
}

#[derive(DeriveIden)]
enum ApiTokens {
    Table,
    Id,
    UserId,
    TokenHash,
    CreatedAt,
    RevokedAt,
}

#[derive(DeriveIden)]
enum SigningKeys {
    Table,
    Id,
    Secret,
    CreatedAt,
    RetiredAt,
}

#[derive(DeriveIden)]
enum Customers {
    Table,
    Id,
    TenantId,
    Name,
    Email,
    Phone,
    Country,
    CreatedAt,
    LifetimeTotalCents,
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
enum Exports {
    Table,
    Id,
    TenantId,
    ActorId,
    IdempotencyKey,
    Fingerprint,
    Report,
    Request,
    Resolved,
    Deployment,
    Status,
    Generation,
    LeaseOwner,
    LeaseExpiresAt,
    Attempt,
    NextAttemptAt,
    RowsWritten,
    RowsTotal,
    ArtifactKey,
    ArtifactSha256,
    ArtifactBytes,
    ArtifactRows,
    ArtifactExpiresAt,
    ArtifactExpired,
    ErrorCode,
    ErrorMessage,
    ErrorRetryable,
    ErrorSupportRef,
    CreatedAt,
    UpdatedAt,
    FinishedAt,
}

#[derive(DeriveIden)]
enum ExportEvents {
    Table,
    Id,
    ExportId,
    TenantId,
    Actor,
    At,
    FromStatus,
    ToStatus,
    Generation,
    Detail,
}

fn id_string<T: IntoIden>(col: T) -> ColumnDef {
    ColumnDef::new(col).string().not_null().primary_key().to_owned()
}

fn text<T: IntoIden>(col: T) -> ColumnDef {
    ColumnDef::new(col).string().not_null().to_owned()
}

fn text_null<T: IntoIden>(col: T) -> ColumnDef {
    ColumnDef::new(col).string().null().to_owned()
}

fn millis<T: IntoIden>(col: T) -> ColumnDef {
    ColumnDef::new(col).big_integer().not_null().to_owned()
}

fn millis_null<T: IntoIden>(col: T) -> ColumnDef {
    ColumnDef::new(col).big_integer().null().to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Tenants::Table)
                    .col(id_string(Tenants::Id))
                    .col(text(Tenants::Slug).unique_key().to_owned())
                    .col(text(Tenants::Name))
                    .col(text(Tenants::Deployment))
                    .col(millis(Tenants::CreatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(Users::Table)
                    .col(id_string(Users::Id))
                    .col(text(Users::TenantId))
                    .col(text(Users::Email).unique_key().to_owned())
                    .col(text(Users::PasswordHash))
                    .col(text(Users::Role))
                    .col(ColumnDef::new(Users::Active).boolean().not_null().default(true))
                    .col(millis(Users::CreatedAt))
                    .foreign_key(
                        ForeignKey::create().from(Users::Table, Users::TenantId).to(Tenants::Table, Tenants::Id),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(Sessions::Table)
                    .col(id_string(Sessions::Id))
                    .col(text(Sessions::UserId))
                    .col(millis(Sessions::CreatedAt))
                    .col(millis(Sessions::ExpiresAt))
                    .col(millis_null(Sessions::RevokedAt))
                    .foreign_key(
                        ForeignKey::create().from(Sessions::Table, Sessions::UserId).to(Users::Table, Users::Id),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(ApiTokens::Table)
                    .col(id_string(ApiTokens::Id))
                    .col(text(ApiTokens::UserId))
                    .col(text(ApiTokens::TokenHash).unique_key().to_owned())
                    .col(millis(ApiTokens::CreatedAt))
                    .col(millis_null(ApiTokens::RevokedAt))
                    .foreign_key(
                        ForeignKey::create().from(ApiTokens::Table, ApiTokens::UserId).to(Users::Table, Users::Id),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(SigningKeys::Table)
                    .col(id_string(SigningKeys::Id))
                    .col(text(SigningKeys::Secret))
                    .col(millis(SigningKeys::CreatedAt))
                    .col(millis_null(SigningKeys::RetiredAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(Customers::Table)
                    .col(ColumnDef::new(Customers::Id).big_integer().not_null().auto_increment().primary_key())
                    .col(text(Customers::TenantId))
                    .col(text(Customers::Name))
                    .col(text(Customers::Email))
                    .col(text(Customers::Phone))
                    .col(text(Customers::Country))
                    .col(millis(Customers::CreatedAt))
                    .col(ColumnDef::new(Customers::LifetimeTotalCents).big_integer().not_null().default(0))
                    .foreign_key(
                        ForeignKey::create().from(Customers::Table, Customers::TenantId).to(Tenants::Table, Tenants::Id),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("customers_tenant_created")
                    .table(Customers::Table)
                    .col(Customers::TenantId)
                    .col(Customers::CreatedAt)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(Orders::Table)
                    .col(ColumnDef::new(Orders::Id).big_integer().not_null().auto_increment().primary_key())
                    .col(text(Orders::TenantId))
                    .col(ColumnDef::new(Orders::CustomerId).big_integer().not_null())
                    .col(millis(Orders::PlacedAt))
                    .col(text(Orders::Country))
                    .col(text(Orders::Status))
                    .col(ColumnDef::new(Orders::TotalCents).big_integer().not_null())
                    .col(text(Orders::Currency))
                    .col(text(Orders::Notes))
                    .foreign_key(
                        ForeignKey::create().from(Orders::Table, Orders::TenantId).to(Tenants::Table, Tenants::Id),
                    )
                    .foreign_key(
                        ForeignKey::create().from(Orders::Table, Orders::CustomerId).to(Customers::Table, Customers::Id),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("orders_tenant_placed")
                    .table(Orders::Table)
                    .col(Orders::TenantId)
                    .col(Orders::PlacedAt)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(Exports::Table)
                    .col(id_string(Exports::Id))
                    .col(text(Exports::TenantId))
                    .col(text(Exports::ActorId))
                    .col(text(Exports::IdempotencyKey))
                    .col(text(Exports::Fingerprint))
                    .col(text(Exports::Report))
                    .col(ColumnDef::new(Exports::Request).text().not_null())
                    .col(ColumnDef::new(Exports::Resolved).text().not_null())
                    .col(text(Exports::Deployment))
                    .col(text(Exports::Status))
                    .col(ColumnDef::new(Exports::Generation).integer().not_null().default(0))
                    .col(text_null(Exports::LeaseOwner))
                    .col(millis_null(Exports::LeaseExpiresAt))
                    .col(ColumnDef::new(Exports::Attempt).integer().not_null().default(0))
                    .col(millis_null(Exports::NextAttemptAt))
                    .col(ColumnDef::new(Exports::RowsWritten).big_integer().not_null().default(0))
                    .col(ColumnDef::new(Exports::RowsTotal).big_integer().null())
                    .col(text_null(Exports::ArtifactKey))
                    .col(text_null(Exports::ArtifactSha256))
                    .col(ColumnDef::new(Exports::ArtifactBytes).big_integer().null())
                    .col(ColumnDef::new(Exports::ArtifactRows).big_integer().null())
                    .col(millis_null(Exports::ArtifactExpiresAt))
                    .col(ColumnDef::new(Exports::ArtifactExpired).boolean().not_null().default(false))
                    .col(text_null(Exports::ErrorCode))
                    .col(text_null(Exports::ErrorMessage))
                    .col(ColumnDef::new(Exports::ErrorRetryable).boolean().null())
                    .col(text_null(Exports::ErrorSupportRef))
                    .col(millis(Exports::CreatedAt))
                    .col(millis(Exports::UpdatedAt))
                    .col(millis_null(Exports::FinishedAt))
                    .foreign_key(
                        ForeignKey::create().from(Exports::Table, Exports::TenantId).to(Tenants::Table, Tenants::Id),
                    )
                    .foreign_key(
                        ForeignKey::create().from(Exports::Table, Exports::ActorId).to(Users::Table, Users::Id),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("exports_tenant_actor_key")
                    .table(Exports::Table)
                    .col(Exports::TenantId)
                    .col(Exports::ActorId)
                    .col(Exports::IdempotencyKey)
                    .unique()
                    .to_owned(),
            )
            .await?;
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
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("exports_actor_created")
                    .table(Exports::Table)
                    .col(Exports::ActorId)
                    .col(Exports::CreatedAt)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(ExportEvents::Table)
                    .col(ColumnDef::new(ExportEvents::Id).big_integer().not_null().auto_increment().primary_key())
                    .col(text(ExportEvents::ExportId))
                    .col(text(ExportEvents::TenantId))
                    .col(text(ExportEvents::Actor))
                    .col(millis(ExportEvents::At))
                    .col(text_null(ExportEvents::FromStatus))
                    .col(text(ExportEvents::ToStatus))
                    .col(ColumnDef::new(ExportEvents::Generation).integer().not_null())
                    .col(text_null(ExportEvents::Detail))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("export_events_export")
                    .table(ExportEvents::Table)
                    .col(ExportEvents::ExportId)
                    .to_owned(),
            )
            .await?;

        // The first link-signing key is made here, so every instance that later starts against
        // this database checks links with the same secret.
        let secret = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
        let insert = Query::insert()
            .into_table(SigningKeys::Table)
            .columns([SigningKeys::Id, SigningKeys::Secret, SigningKeys::CreatedAt])
            .values_panic(["k1".into(), secret.into(), 0i64.into()])
            .to_owned();
        manager.exec_stmt(insert).await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            ExportEvents::Table.into_iden(),
            Exports::Table.into_iden(),
            Orders::Table.into_iden(),
            Customers::Table.into_iden(),
            SigningKeys::Table.into_iden(),
            ApiTokens::Table.into_iden(),
            Sessions::Table.into_iden(),
            Users::Table.into_iden(),
            Tenants::Table.into_iden(),
        ] {
            manager.drop_table(Table::drop().table(table).to_owned()).await?;
        }
        Ok(())
    }
}
