//! The `tenants` table.

use sea_orm::entity::prelude::*;

/// A row of `tenants`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "tenants")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub slug: String,
    pub name: String,
    pub deployment: String,
    /// What a catalog report's `tenant` expression is compared with; unique, by default `id`.
    pub source_id: String,
    pub created_at: i64,
    /// When a worker last claimed a job of this tenant (claims rotate between tenants).
    pub last_claimed_at: i64,
}

/// No relations are navigated through the ORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

/// The source id of the tenant `tenant_id` (what a catalog report's `tenant` expression is
/// compared with); an unknown tenant is an error.
pub async fn source_id_of<C: ConnectionTrait>(db: &C, tenant_id: &str) -> Result<String, DbErr> {
    let tenant = Entity::find_by_id(tenant_id.to_owned()).one(db).await?;
    tenant.map(|t| t.source_id).ok_or_else(|| DbErr::RecordNotFound(format!("tenant {tenant_id}")))
}
