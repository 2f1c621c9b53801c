//! Argon2 password hashes. Unknown emails are verified against a dummy hash, so a login costs
//! the same time whether or not the email exists.

use argon2::password_hash::{rand_core::OsRng, PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use std::sync::OnceLock;

/// A stored password hash that no password verifies: a user added without a password, or one
/// the provider signs in, signs in only through the provider (or once an operator sets one).
pub const NO_PASSWORD: &str = "!";

/// Hashes a password with a fresh salt.
pub fn hash_password(password: &str) -> Result<String, argon2::password_hash::Error> {
    let salt = SaltString::generate(&mut OsRng);
    Ok(Argon2::default().hash_password(password.as_bytes(), &salt)?.to_string())
}

fn dummy_hash() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| hash_password("exportd-dummy-password").unwrap_or_default())
}

/// Verifies `password` against `stored`, or against a dummy hash when there is no user, and
/// answers false in that case. Both paths run one full Argon2 verification.
pub fn verify_password_or_dummy(password: &str, stored: Option<&str>) -> bool {
    let (hash, real) = match stored {
        Some(h) => (h, true),
        None => (dummy_hash(), false),
    };
    let ok = match PasswordHash::new(hash) {
        Ok(parsed) => Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok(),
        Err(_) => false,
    };
    ok && real
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hashed_password_verifies_and_a_wrong_one_does_not() {
        let h = hash_password("export-demo").unwrap();
        assert!(verify_password_or_dummy("export-demo", Some(&h)));
        assert!(!verify_password_or_dummy("export-demo!", Some(&h)));
    }

    #[test]
    fn an_unknown_user_never_verifies() {
        assert!(!verify_password_or_dummy("exportd-dummy-password", None));
    }
}
