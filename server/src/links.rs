//! HMAC-signed, expiring download links (SPEC §6). A link covers the export id, the artifact
//! digest, the minting actor, its expiry and the key id; it is checked in constant time before
//! any storage path is built.
//!
//! The keys live in the database (`signing_keys`), so every instance can check every link, and
//! rotate (`exportd keys rotate`, SPEC §9): every instance re-reads them at least every
//! [`KEYS_READ_EVERY`] (and at once, at most once a second, when a link names a key it does not
//! know), so new links use the new key without a restart; a link of a key retired longer ago
//! than `EXPORTD_LINK_TTL_SECS` is refused. `EXPORTD_SIGNING_KEY` replaces them with one fixed key.

use crate::entities::signing_keys;
use crate::error::AppError;
use hmac::{Hmac, Mac};
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, Set};
use serde::Deserialize;
use sha2::Sha256;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type HmacSha256 = Hmac<Sha256>;

/// The key id used when `EXPORTD_SIGNING_KEY` is set.
const ENV_KEY_ID: &str = "env";

/// How long an instance trusts the keys it last read.
pub const KEYS_READ_EVERY: Duration = Duration::from_secs(5);

/// The least time between two reads caused by links that name an unknown key.
const UNKNOWN_KEY_READ_EVERY: Duration = Duration::from_secs(1);

/// One key: its secret, and when it was retired (epoch milliseconds), if it was.
#[derive(Debug, Clone)]
struct Key {
    secret: Vec<u8>,
    retired_at: Option<i64>,
}

/// The keys as last read: the one new links are signed with, and every one that may check.
#[derive(Debug, Clone)]
struct Keyring {
    current: String,
    keys: HashMap<String, Key>,
}

/// The keys that sign and check links.
pub struct LinkSigner {
    /// Where they are read from; `None` with a fixed key.
    db: Option<DatabaseConnection>,
    /// How long a link lasts, and so how long a retired key still checks.
    link_ttl: Duration,
    read: Mutex<(Instant, Arc<Keyring>)>,
}

/// The query of a signed link: `/files/{id}?d=&a=&e=&k=&s=`.
#[derive(Debug, Deserialize)]
pub struct LinkQuery {
    /// Artifact digest.
    pub d: String,
    /// Minting actor's user id.
    pub a: String,
    /// Expiry, epoch seconds.
    pub e: i64,
    /// Key id.
    pub k: String,
    /// Hex HMAC-SHA256.
    pub s: String,
    /// The part of a checkpointed export the link is for; absent: its file or bundle.
    #[serde(default)]
    pub p: Option<i32>,
}

/// What a valid link grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkGrant {
    /// The export.
    pub export_id: String,
    /// The artifact's digest.
    pub sha256: String,
    /// Who minted it.
    pub actor_id: String,
    /// The part it is for, if it is for one.
    pub part: Option<i32>,
}

async fn read_keyring<C: ConnectionTrait>(db: &C) -> Result<Keyring, DbErr> {
    let rows = signing_keys::Entity::find().all(db).await?;
    let current = rows
        .iter()
        .filter(|k| k.retired_at.is_none())
        .max_by_key(|k| (k.created_at, k.id.clone()))
        .map(|k| k.id.clone())
        .ok_or_else(|| DbErr::Custom("no link-signing key in the database".into()))?;
    let keys = rows.into_iter().map(|k| (k.id, Key { secret: k.secret.into_bytes(), retired_at: k.retired_at })).collect();
    Ok(Keyring { current, keys })
}

impl LinkSigner {
    /// Reads the keys from the database, or uses the fixed one from the environment.
    pub async fn load(db: &DatabaseConnection, fixed: Option<&str>, link_ttl: Duration) -> Result<LinkSigner, DbErr> {
        let (db, keyring) = match fixed {
            Some(secret) => {
                let keys = HashMap::from([(ENV_KEY_ID.to_owned(), Key { secret: secret.as_bytes().to_vec(), retired_at: None })]);
                (None, Keyring { current: ENV_KEY_ID.to_owned(), keys })
            }
            None => (Some(db.clone()), read_keyring(db).await?),
        };
        Ok(LinkSigner { db, link_ttl, read: Mutex::new((Instant::now(), Arc::new(keyring))) })
    }

    /// The keys, read again when they are older than `max_age`.
    async fn keyring(&self, max_age: Duration) -> Result<Arc<Keyring>, AppError> {
        let (read_at, keyring) = self.read.lock().map(|r| r.clone()).map_err(|_| AppError::Internal("link keys poisoned".into()))?;
        let Some(db) = &self.db else { return Ok(keyring) };
        if read_at.elapsed() < max_age {
            return Ok(keyring);
        }
        let fresh = Arc::new(read_keyring(db).await?);
        if let Ok(mut read) = self.read.lock() {
            *read = (Instant::now(), fresh.clone());
        }
        Ok(fresh)
    }

    fn mac(keyring: &Keyring, kid: &str, export_id: &str, sha256: &str, actor_id: &str, expires: i64, part: Option<i32>) -> Option<HmacSha256> {
        let key = keyring.keys.get(kid)?;
        let mut mac = HmacSha256::new_from_slice(&key.secret).ok()?;
        mac.update(format!("exportd-link-v1\n{export_id}\n{sha256}\n{actor_id}\n{expires}\n{kid}").as_bytes());
        if let Some(part) = part {
            mac.update(format!("\npart {part}").as_bytes());
        }
        Some(mac)
    }

    /// A link for `actor_id` to download the artifact `sha256` of `export_id` (or its part
    /// `part`) until `expires` (epoch seconds), signed with the current key.
    pub async fn mint(&self, export_id: &str, sha256: &str, actor_id: &str, expires: i64, part: Option<i32>) -> Result<String, AppError> {
        let keyring = self.keyring(KEYS_READ_EVERY).await?;
        let mac = Self::mac(&keyring, &keyring.current, export_id, sha256, actor_id, expires, part)
            .ok_or_else(|| AppError::Internal("the current signing key is missing".into()))?;
        let sig = hex::encode(mac.finalize().into_bytes());
        let part = part.map(|p| format!("&p={p}")).unwrap_or_default();
        Ok(format!("/files/{export_id}?d={sha256}&a={actor_id}&e={expires}&k={}&s={sig}{part}", keyring.current))
    }

    /// Checks a link at `now` (epoch seconds): signature first, in constant time, then expiry,
    /// then its key: one retired longer ago than a link's lifetime signs nothing any more.
    pub async fn check(&self, export_id: &str, q: &LinkQuery, now: i64) -> Result<LinkGrant, AppError> {
        let mut keyring = self.keyring(KEYS_READ_EVERY).await?;
        if !keyring.keys.contains_key(&q.k) {
            // A key made since the last read (by another instance's rotation)?
            keyring = self.keyring(UNKNOWN_KEY_READ_EVERY).await?;
        }
        let sig = hex::decode(&q.s).map_err(|_| AppError::LinkInvalid)?;
        let mac = Self::mac(&keyring, &q.k, export_id, &q.d, &q.a, q.e, q.p).ok_or(AppError::LinkInvalid)?;
        mac.verify_slice(&sig).map_err(|_| AppError::LinkInvalid)?;
        if now >= q.e {
            return Err(AppError::LinkExpired);
        }
        let retired_long_ago = keyring.keys.get(&q.k).and_then(|k| k.retired_at).is_some_and(|at| now * 1000 > at + self.link_ttl.as_millis() as i64);
        if retired_long_ago {
            return Err(AppError::LinkExpired);
        }
        Ok(LinkGrant { export_id: export_id.to_owned(), sha256: q.d.clone(), actor_id: q.a.clone(), part: q.p })
    }
}

/// Makes a new current key and retires every other (`exportd keys rotate`); returns its id.
pub async fn rotate(db: &DatabaseConnection, now_ms: i64) -> Result<String, DbErr> {
    let id = format!("k{}", uuid::Uuid::now_v7().simple());
    let secret = crate::auth::new_secret();
    let txn = crate::job_store::begin_write(db).await?;
    signing_keys::Entity::update_many()
        .col_expr(signing_keys::Column::RetiredAt, sea_orm::sea_query::Expr::val(now_ms))
        .filter(signing_keys::Column::RetiredAt.is_null())
        .exec(&txn)
        .await?;
    signing_keys::ActiveModel { id: Set(id.clone()), secret: Set(secret), created_at: Set(now_ms), retired_at: Set(None) }.insert(&txn).await?;
    txn.commit().await?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A signer with keys `(id, secret, retired_at)`, the last unretired one current.
    fn signer(keys: &[(&str, &str, Option<i64>)], link_ttl: u64) -> LinkSigner {
        let current = keys.iter().filter(|k| k.2.is_none()).last().map(|k| k.0.to_owned()).unwrap();
        let keys = keys.iter().map(|(id, secret, retired_at)| (id.to_string(), Key { secret: secret.as_bytes().to_vec(), retired_at: *retired_at })).collect();
        let keyring = Keyring { current, keys };
        LinkSigner { db: None, link_ttl: Duration::from_secs(link_ttl), read: Mutex::new((Instant::now(), Arc::new(keyring))) }
    }

    fn query(link: &str) -> (String, LinkQuery) {
        let (path, qs) = link.split_once('?').unwrap();
        let id = path.trim_start_matches("/files/").to_owned();
        let mut q = LinkQuery { d: String::new(), a: String::new(), e: 0, k: String::new(), s: String::new(), p: None };
        for pair in qs.split('&') {
            let (k, v) = pair.split_once('=').unwrap();
            match k {
                "d" => q.d = v.into(),
                "a" => q.a = v.into(),
                "e" => q.e = v.parse().unwrap(),
                "k" => q.k = v.into(),
                "s" => q.s = v.into(),
                "p" => q.p = v.parse().ok(),
                _ => {}
            }
        }
        (id, q)
    }

    #[tokio::test]
    async fn a_minted_link_checks_until_it_expires() {
        let s = signer(&[("k1", "secret", None)], 300);
        let (id, q) = query(&s.mint("exp_1", "ab", "u1", 100, None).await.unwrap());
        assert_eq!(s.check(&id, &q, 99).await.unwrap().actor_id, "u1");
        assert!(matches!(s.check(&id, &q, 100).await, Err(AppError::LinkExpired)));
    }

    #[tokio::test]
    async fn any_tampered_part_makes_the_link_invalid() {
        let s = signer(&[("k1", "secret", None)], 300);
        let (id, q) = query(&s.mint("exp_1", "ab", "u1", 100, None).await.unwrap());
        assert!(matches!(s.check("exp_2", &q, 1).await, Err(AppError::LinkInvalid)));
        for tamper in [
            |q: &mut LinkQuery| q.d = "cd".into(),
            |q: &mut LinkQuery| q.a = "u2".into(),
            |q: &mut LinkQuery| q.e = 1000,
            |q: &mut LinkQuery| q.k = "k2".into(),
            |q: &mut LinkQuery| q.s = "00".into(),
            |q: &mut LinkQuery| q.p = Some(2),
        ] {
            let (_, mut q2) = query(&s.mint("exp_1", "ab", "u1", 100, None).await.unwrap());
            tamper(&mut q2);
            assert!(matches!(s.check(&id, &q2, 1).await, Err(AppError::LinkInvalid)));
        }
    }

    #[tokio::test]
    async fn a_link_of_a_retired_key_checks_for_one_link_lifetime_after_the_rotation_and_never_after() {
        // Minted under k1 with a long lifetime (an older configuration), then k1 was retired at 1,000 s.
        let before = signer(&[("k1", "secret-one", None)], 600);
        let (id, q) = query(&before.mint("exp_1", "ab", "u1", 10_000, None).await.unwrap());
        let after = signer(&[("k1", "secret-one", Some(1_000_000)), ("k2", "secret-two", None)], 600);
        assert_eq!(after.check(&id, &q, 1_500).await.unwrap().actor_id, "u1", "within a link's lifetime of the rotation");
        assert!(matches!(after.check(&id, &q, 1_601).await, Err(AppError::LinkExpired)), "a key retired longer ago signs nothing");
        let (_, fresh) = query(&after.mint("exp_1", "ab", "u1", 10_000, None).await.unwrap());
        assert_eq!(fresh.k, "k2", "new links use the new key");
    }
}
