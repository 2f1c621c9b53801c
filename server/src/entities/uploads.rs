//! The `uploads` table: files sent for imports (SPEC §10).

use sea_orm::entity::prelude::*;

/// A row of `uploads`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "uploads")]
pub struct Model {
    /// `upl_` and 32 hex digits.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub tenant_id: String,
    /// The user who sent it; no other user sees it.
    pub user_id: String,
    /// The deployment whose store holds it.
    pub deployment: String,
    /// Hex SHA-256 of the bytes.
    pub sha256: String,
    pub bytes: i64,
    /// Where the bytes are in the deployment's store.
    pub object_key: String,
    pub created_at: i64,
    /// The last upload of the same bytes or import naming it (database clock).
    pub last_used_at: i64,
}

/// No relations are navigated through the ORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
