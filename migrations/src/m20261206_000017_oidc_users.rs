//! Users who sign in through the organisation's OpenID Connect provider (contract §13): a user is
//! `(oidc_issuer, oidc_subject)`, unique, with its email from the claims kept apart in
//! `contact_email` (optional, not unique); `email` stays the unique name the CLI uses, `oidc:SUB`
//! for such users. `role_pinned` marks a role set by `exportd user set-role`, which later claims
//! do not change. `oidc_sign_ins` holds a started sign-in until its callback: the state, nonce and
//! PKCE verifier, found by the hash of the browser's cookie and deleted by the callback that
//! reads it, so a state works once.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const UP: [&str; 6] = [
    "ALTER TABLE users ADD COLUMN oidc_issuer VARCHAR NULL",
    "ALTER TABLE users ADD COLUMN oidc_subject VARCHAR NULL",
    "ALTER TABLE users ADD COLUMN contact_email VARCHAR NULL",
    "ALTER TABLE users ADD COLUMN role_pinned BOOLEAN NOT NULL DEFAULT FALSE",
    "CREATE UNIQUE INDEX users_oidc_identity ON users (oidc_issuer, oidc_subject)",
    "CREATE TABLE oidc_sign_ins (id VARCHAR NOT NULL PRIMARY KEY, state VARCHAR NOT NULL, nonce VARCHAR NOT NULL, pkce_verifier VARCHAR NOT NULL, expires_at BIGINT NOT NULL)",
];

const DOWN: [&str; 6] = [
    "DROP TABLE oidc_sign_ins",
    "DROP INDEX users_oidc_identity",
    "ALTER TABLE users DROP COLUMN role_pinned",
    "ALTER TABLE users DROP COLUMN contact_email",
    "ALTER TABLE users DROP COLUMN oidc_subject",
    "ALTER TABLE users DROP COLUMN oidc_issuer",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::execute_all(manager, &UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::execute_all(manager, &DOWN).await
    }
}
