//! The shapes of what a client names (SPEC §11): an id, a cursor or an email that cannot exist
//! (a NUL, bytes that are not UTF-8, the wrong length or alphabet) is answered as an unknown one
//! before any query sees it, on both backends.

/// Whether `id` has the shape of an export id: `exp_` and 32 lower-case hex digits (a UUID in
/// its simple form).
pub fn is_export_id(id: &str) -> bool {
    crate::job_store::kind::JobKind::of_id(id) == Some(crate::job_store::kind::JobKind::Export)
}

/// The longest email address (RFC 5321's path limit less its brackets).
pub const EMAIL_MAX: usize = 254;

/// Characters that change how text is shown without being seen: bidirectional controls and
/// zero-width marks. No address has them; spoofed ones do.
fn invisible(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
}

/// Whether `email` (trimmed, lower-cased) could be a user's address: 3–254 characters, one `@`
/// with something on each side, no control, invisible or space character.
pub fn could_be_email(email: &str) -> bool {
    let plausible_chars = !email.chars().any(|c| c.is_control() || c.is_whitespace() || invisible(c));
    let one_at = email.split_once('@').is_some_and(|(local, domain)| !local.is_empty() && !domain.is_empty() && !domain.contains('@'));
    (3..=EMAIL_MAX).contains(&email.len()) && plausible_chars && one_at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exp_and_thirty_two_lower_case_hex_digits_is_an_export_id() {
        assert!(is_export_id("exp_01a242dd4de1737ab303db50cc1dfded"));
        for bad in ["", "exp_", "exp_\0", "exp_01A242DD4DE1737AB303DB50CC1DFDED", "exp_01a242dd4de1737ab303db50cc1dfde", "exp_01a242dd4de1737ab303db50cc1dfded0", "imp_01a242dd4de1737ab303db50cc1dfded", "exp_01a242dd4de1737ab303db50cc1dfd\u{e9}"] {
            assert!(!is_export_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn an_email_with_a_nul_a_space_no_at_or_too_long_cannot_be_anyones() {
        assert!(could_be_email("bob@acme.test"));
        for bad in ["a\0b@acme.test", "a b@acme.test", "\u{202e}bob@acme.test", "bob\u{200b}@acme.test", "bob", "@acme.test", "bob@", "a@b@c", "", &format!("{}@acme.test", "a".repeat(250))] {
            assert!(!could_be_email(bad), "{bad:?}");
        }
    }
}
