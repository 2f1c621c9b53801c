//! Secrets handed to clients (session cookies, API tokens) and their stored hashes.

use crate::entities::api_tokens;
use sea_orm::{ActiveModelTrait, ConnectionTrait, DbErr, Set};
use sha2::{Digest, Sha256};

/// A new random secret: 256 bits from the OS's generator, hex.
pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    bytes[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    bytes[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    hex::encode(bytes)
}

/// The stored form of a secret: hex SHA-256. Secrets are long and random, so no salt is needed.
pub fn hash_secret(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Creates an API token for a user and returns the token (shown once; only its hash is kept).
pub async fn create_token<C: ConnectionTrait>(db: &C, user_id: &str, now_ms: i64) -> Result<String, DbErr> {
    let secret = format!("exp_tok_{}", new_secret());
    api_tokens::ActiveModel {
        id: Set(uuid::Uuid::now_v7().to_string()),
        user_id: Set(user_id.to_owned()),
        token_hash: Set(hash_secret(&secret)),
        created_at: Set(now_ms),
        revoked_at: Set(None),
    }
    .insert(db)
    .await?;
    Ok(secret)
}
