//! The `Idempotency-Key` header (SPEC §3.1): an RFC 8941 sf-string or a raw token of %x21–7E
//! without `"`; decoded 1–255 characters; `"abc"` and `abc` are the same key.

use crate::error::AppError;

/// The longest decoded key.
pub const MAX_KEY_LEN: usize = 255;

/// A decoded idempotency key: 1–255 printable ASCII characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Decodes the values of every `Idempotency-Key` header of a request. None →
    /// `idempotency-key-missing`; anything else that is not one valid key (empty, too long,
    /// non-ASCII, bad quoting, the header twice) → `idempotency-key-invalid`.
    pub fn from_header_values<'a>(mut values: impl Iterator<Item = &'a [u8]>) -> Result<IdempotencyKey, AppError> {
        let Some(value) = values.next() else {
            return Err(AppError::IdempotencyKeyMissing);
        };
        if values.next().is_some() {
            return Err(invalid("the header appears more than once"));
        }
        decode(value).map(IdempotencyKey)
    }

    /// The key as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn invalid(why: &str) -> AppError {
    AppError::IdempotencyKeyInvalid(why.to_owned())
}

/// Decodes one header value into a key.
pub fn decode(raw: &[u8]) -> Result<String, AppError> {
    let key = if raw.first() == Some(&b'"') {
        decode_sf_string(raw)?
    } else {
        if let Some(bad) = raw.iter().find(|b| !(0x21..=0x7e).contains(*b) || **b == b'"') {
            return Err(invalid(if *bad >= 0x80 {
                "the key must be ASCII"
            } else {
                "the key has a character outside %x21-7E, or a stray quote"
            }));
        }
        String::from_utf8_lossy(raw).into_owned()
    };
    if key.is_empty() {
        return Err(invalid("the key is empty"));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(invalid("the key is longer than 255 characters"));
    }
    Ok(key)
}

fn decode_sf_string(raw: &[u8]) -> Result<String, AppError> {
    if raw.len() < 2 || raw[raw.len() - 1] != b'"' {
        return Err(invalid("the quoted key has no closing quote"));
    }
    let inner = &raw[1..raw.len() - 1];
    let mut out = String::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&e @ (b'"' | b'\\')) => out.push(e as char),
                _ => return Err(invalid("a backslash may only escape \" or \\")),
            },
            b'"' => return Err(invalid("an unescaped quote inside the quoted key")),
            0x20..=0x7e => out.push(b as char),
            0x80.. => return Err(invalid("the key must be ASCII")),
            _ => return Err(invalid("the quoted key has a control character")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(values: &[&[u8]]) -> Result<String, AppError> {
        IdempotencyKey::from_header_values(values.iter().copied()).map(|k| k.0)
    }

    #[test]
    fn a_quoted_key_and_a_bare_key_decode_to_the_same_value() {
        assert_eq!(parse(&[b"\"abc\""]).unwrap(), "abc");
        assert_eq!(parse(&[b"abc"]).unwrap(), "abc");
    }

    #[test]
    fn escapes_inside_a_quoted_key_are_decoded() {
        assert_eq!(parse(&[br#""a\"b\\c""#]).unwrap(), r#"a"b\c"#);
        assert_eq!(parse(&[b"\"a b\""]).unwrap(), "a b");
    }

    #[test]
    fn a_missing_key_is_missing_and_every_malformed_key_is_invalid() {
        assert!(matches!(parse(&[]), Err(AppError::IdempotencyKeyMissing)));
        for bad in [&b""[..], b"\"\"", b"\"abc", b"a\"b", b"\"a\\xb\"", "ключ".as_bytes(), b"a b"] {
            assert!(matches!(parse(&[bad]), Err(AppError::IdempotencyKeyInvalid(_))), "{bad:?}");
        }
        assert!(matches!(parse(&[b"a", b"b"]), Err(AppError::IdempotencyKeyInvalid(_))));
    }

    #[test]
    fn the_length_limit_counts_decoded_characters() {
        let max = "k".repeat(255);
        assert_eq!(parse(&[max.as_bytes()]).unwrap(), max);
        let quoted = format!("\"{max}\"");
        assert_eq!(parse(&[quoted.as_bytes()]).unwrap(), max);
        let over = "k".repeat(256);
        assert!(matches!(parse(&[over.as_bytes()]), Err(AppError::IdempotencyKeyInvalid(_))));
    }
}
