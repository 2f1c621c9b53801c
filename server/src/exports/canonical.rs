//! RFC 8785 (JCS) canonical JSON and the request fingerprint built on it.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The fingerprint's version; a change of canonical form or defaults gets a new one.
pub const FINGERPRINT_VERSION: &str = "exportd-fingerprint-v1";

/// Appends the canonical form of `value`: no whitespace, object members sorted by their names'
/// UTF-16 code units, strings with JSON's minimal escapes, numbers in their shortest form.
pub fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&canonical_number(n)),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(k, out);
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
    }
}

fn canonical_number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    match n.as_f64() {
        // ECMAScript prints integral doubles without a fraction.
        Some(f) if f.fract() == 0.0 && f.abs() < 1e21 => format!("{}", f as i64),
        Some(f) => {
            let s = format!("{f}");
            s.replace("e", "e+").replace("e+-", "e-")
        }
        None => "null".to_owned(),
    }
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The canonical JSON text of a value.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

/// Hex SHA-256 of the versioned canonical JSON of a request with its defaults filled in.
pub fn fingerprint(request_with_defaults: &Value) -> String {
    let mut hasher = Sha256::new();
    hasher.update(FINGERPRINT_VERSION.as_bytes());
    hasher.update(b"\n");
    hasher.update(canonical_json(request_with_defaults).as_bytes());
    hex::encode(hasher.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn members_are_sorted_and_whitespace_dropped() {
        let v = json!({"b": [1, {"z": null, "a": true}], "a": "x\ny"});
        assert_eq!(canonical_json(&v), r#"{"a":"x\ny","b":[1,{"a":true,"z":null}]}"#);
    }

    #[test]
    fn members_sort_by_utf16_code_units_not_bytes() {
        // U+10000 is D800 DC00 in UTF-16, which sorts before U+FB33 (bytewise UTF-8 is the other way).
        let v = json!({"\u{fb33}": 1, "\u{10000}": 2});
        assert_eq!(canonical_json(&v), "{\"\u{10000}\":2,\"\u{fb33}\":1}");
    }

    #[test]
    fn numbers_take_their_shortest_form() {
        assert_eq!(canonical_json(&json!([10.0, 1.5, -0.25, 100])), "[10,1.5,-0.25,100]");
    }

    #[test]
    fn the_same_request_in_another_order_has_the_same_fingerprint() {
        let a = json!({"report": "orders", "filters": {"status": ["paid"], "country": ["SA"]}});
        let b = json!({"filters": {"country": ["SA"], "status": ["paid"]}, "report": "orders"});
        assert_eq!(fingerprint(&a), fingerprint(&b));
        assert_ne!(fingerprint(&a), fingerprint(&json!({"report": "customers"})));
    }
}
