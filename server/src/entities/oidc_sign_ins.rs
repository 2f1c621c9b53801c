//! The `oidc_sign_ins` table: a sign-in through the provider between its start and its callback.

use sea_orm::entity::prelude::*;

/// A row of `oidc_sign_ins`, found by the hash of the browser's cookie.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "oidc_sign_ins")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub state: String,
    pub nonce: String,
    pub pkce_verifier: String,
    pub expires_at: i64,
}

/// No relations.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
