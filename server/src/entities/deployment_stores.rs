//! The `deployment_stores` table: the identity of the object store each deployment's files live in.

use sea_orm::entity::prelude::*;

/// A row of `deployment_stores`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "deployment_stores")]
pub struct Model {
    /// The deployment, in lower case.
    #[sea_orm(primary_key, auto_increment = false)]
    pub deployment: String,
    /// The identity in the store's marker object.
    pub identity: String,
    pub recorded_at: i64,
}

/// No relations are navigated through the ORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
