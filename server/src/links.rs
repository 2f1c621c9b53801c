//! HMAC-signed, expiring download links (SPEC §6). A link covers the export id, the artifact
//! digest, the minting actor, its expiry and the key id; it is checked in constant time before
//! any storage path is built.

use crate::entities::signing_keys;
use crate::error::AppError;
use hmac::{Hmac, Mac};
use sea_orm::{ConnectionTrait, DbErr, EntityTrait};
use serde::Deserialize;
use sha2::Sha256;
use std::collections::HashMap;

type HmacSha256 = Hmac<Sha256>;

/// The key id used when `EXPORTD_SIGNING_KEY` is set.
const ENV_KEY_ID: &str = "env";

/// The keys that sign and check links.
#[derive(Clone)]
pub struct LinkSigner {
    current: String,
    keys: HashMap<String, Vec<u8>>,
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
}

impl LinkSigner {
    /// Loads the keys from the database, or uses the fixed one from the environment.
    pub async fn load<C: ConnectionTrait>(db: &C, fixed: Option<&str>) -> Result<LinkSigner, DbErr> {
        if let Some(secret) = fixed {
            let keys = HashMap::from([(ENV_KEY_ID.to_owned(), secret.as_bytes().to_vec())]);
            return Ok(LinkSigner { current: ENV_KEY_ID.to_owned(), keys });
        }
        let rows = signing_keys::Entity::find().all(db).await?;
        let current = rows
            .iter()
            .filter(|k| k.retired_at.is_none())
            .max_by_key(|k| k.created_at)
            .map(|k| k.id.clone())
            .ok_or_else(|| DbErr::Custom("no link-signing key in the database".into()))?;
        let keys = rows.into_iter().map(|k| (k.id, k.secret.into_bytes())).collect();
        Ok(LinkSigner { current, keys })
    }

    fn mac(&self, kid: &str, export_id: &str, sha256: &str, actor_id: &str, expires: i64) -> Option<HmacSha256> {
        let key = self.keys.get(kid)?;
        let mut mac = HmacSha256::new_from_slice(key).ok()?;
        mac.update(format!("exportd-link-v1\n{export_id}\n{sha256}\n{actor_id}\n{expires}\n{kid}").as_bytes());
        Some(mac)
    }

    /// A link for `actor_id` to download the artifact `sha256` of `export_id` until `expires` (epoch seconds).
    pub fn mint(&self, export_id: &str, sha256: &str, actor_id: &str, expires: i64) -> Result<String, AppError> {
        let mac = self
            .mac(&self.current, export_id, sha256, actor_id, expires)
            .ok_or_else(|| AppError::Internal("the current signing key is missing".into()))?;
        let sig = hex::encode(mac.finalize().into_bytes());
        Ok(format!("/files/{export_id}?d={sha256}&a={actor_id}&e={expires}&k={}&s={sig}", self.current))
    }

    /// Checks a link at `now` (epoch seconds): signature first, in constant time, then expiry.
    pub fn check(&self, export_id: &str, q: &LinkQuery, now: i64) -> Result<LinkGrant, AppError> {
        let sig = hex::decode(&q.s).map_err(|_| AppError::LinkInvalid)?;
        let mac = self.mac(&q.k, export_id, &q.d, &q.a, q.e).ok_or(AppError::LinkInvalid)?;
        mac.verify_slice(&sig).map_err(|_| AppError::LinkInvalid)?;
        if now >= q.e {
            return Err(AppError::LinkExpired);
        }
        Ok(LinkGrant { export_id: export_id.to_owned(), sha256: q.d.clone(), actor_id: q.a.clone() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer() -> LinkSigner {
        LinkSigner { current: "k1".into(), keys: HashMap::from([("k1".to_owned(), b"secret".to_vec())]) }
    }

    fn query(link: &str) -> (String, LinkQuery) {
        let (path, qs) = link.split_once('?').unwrap();
        let id = path.trim_start_matches("/files/").to_owned();
        let mut q = LinkQuery { d: String::new(), a: String::new(), e: 0, k: String::new(), s: String::new() };
        for pair in qs.split('&') {
            let (k, v) = pair.split_once('=').unwrap();
            match k {
                "d" => q.d = v.into(),
                "a" => q.a = v.into(),
                "e" => q.e = v.parse().unwrap(),
                "k" => q.k = v.into(),
                "s" => q.s = v.into(),
                _ => {}
            }
        }
        (id, q)
    }

    #[test]
    fn a_minted_link_checks_until_it_expires() {
        let s = signer();
        let (id, q) = query(&s.mint("exp_1", "ab", "u1", 100).unwrap());
        assert_eq!(s.check(&id, &q, 99).unwrap().actor_id, "u1");
        assert!(matches!(s.check(&id, &q, 100), Err(AppError::LinkExpired)));
    }

    #[test]
    fn any_tampered_part_makes_the_link_invalid() {
        let s = signer();
        let (id, q) = query(&s.mint("exp_1", "ab", "u1", 100).unwrap());
        assert!(matches!(s.check("exp_2", &q, 1), Err(AppError::LinkInvalid)));
        for tamper in [
            |q: &mut LinkQuery| q.d = "cd".into(),
            |q: &mut LinkQuery| q.a = "u2".into(),
            |q: &mut LinkQuery| q.e = 1000,
            |q: &mut LinkQuery| q.k = "k2".into(),
            |q: &mut LinkQuery| q.s = "00".into(),
        ] {
            let (_, mut q2) = query(&s.mint("exp_1", "ab", "u1", 100).unwrap());
            tamper(&mut q2);
            assert!(matches!(s.check(&id, &q2, 1), Err(AppError::LinkInvalid)));
        }
        let _ = q;
    }
}
