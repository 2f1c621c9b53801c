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

/// A number as RFC 8785 §3.2.2.3 writes it: the IEEE 754 double it denotes (`10000000000000000000`
/// and `1e19` are one number), written as ECMAScript's `Number.prototype.toString` writes it
/// (`1e+21`, `1e-7`, `0` for −0). JSON has no other numbers; serde_json refuses them on input.
fn canonical_number(n: &serde_json::Number) -> String {
    match n.as_f64() {
        Some(f) if f.is_finite() => ryu_js::Buffer::new().format_finite(f).to_owned(),
        _ => "null".to_owned(),
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

    /// RFC 8785 Appendix B: IEEE 754 binary64 values (hex) and their canonical text.
    const APPENDIX_B: [(u64, &str); 24] = [
        (0x0000000000000000, "0"),
        (0x8000000000000000, "0"),
        (0x0000000000000001, "5e-324"),
        (0x8000000000000001, "-5e-324"),
        (0x7fefffffffffffff, "1.7976931348623157e+308"),
        (0xffefffffffffffff, "-1.7976931348623157e+308"),
        (0x4340000000000000, "9007199254740992"),
        (0xc340000000000000, "-9007199254740992"),
        (0x4430000000000000, "295147905179352830000"),
        (0x44b52d02c7e14af5, "9.999999999999997e+22"),
        (0x44b52d02c7e14af6, "1e+23"),
        (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
        (0x444b1ae4d6e2ef4e, "999999999999999700000"),
        (0x444b1ae4d6e2ef4f, "999999999999999900000"),
        (0x444b1ae4d6e2ef50, "1e+21"),
        (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
        (0x3eb0c6f7a0b5ed8d, "0.000001"),
        (0x41b3de4355555553, "333333333.3333332"),
        (0x41b3de4355555554, "333333333.33333325"),
        (0x41b3de4355555555, "333333333.3333333"),
        (0x41b3de4355555556, "333333333.3333334"),
        (0x41b3de4355555557, "333333333.33333343"),
        (0xbecbf647612f3696, "-0.0000033333333333333333"),
        (0x43143ff3c1cb0959, "1424953923781206.2"),
    ];

    fn number(f: f64) -> String {
        canonical_json(&serde_json::Value::from(f))
    }

    #[test]
    fn numbers_are_written_as_the_rfcs_appendix_b_writes_them() {
        for (bits, expected) in APPENDIX_B {
            assert_eq!(number(f64::from_bits(bits)), expected, "{bits:016x}");
        }
    }

    #[test]
    fn a_number_is_the_double_it_denotes_however_it_is_spelled() {
        let parsed = |text: &str| canonical_json(&serde_json::from_str::<serde_json::Value>(text).unwrap());
        // One number, three spellings: one fingerprint.
        assert_eq!(parsed("1e19"), "10000000000000000000");
        assert_eq!(parsed("10000000000000000000"), "10000000000000000000");
        assert_eq!(parsed("1.0e19"), "10000000000000000000");
        // Two numbers that a saturating cast once wrote alike stay apart.
        assert_eq!(parsed("5e20"), "500000000000000000000");
        assert_ne!(fingerprint(&json!({"n": 1e19})), fingerprint(&json!({"n": 5e20})));
        assert_eq!(parsed("1e-7"), "1e-7");
        assert_eq!(parsed("-0.0"), "0");
        assert_eq!(parsed("9007199254740993"), "9007199254740992", "above 2^53 an integer is its nearest double");
        assert_eq!(parsed("[1.5, 100, 1E+2]"), "[1.5,100,100]");
    }

    /// The doubles of the property test: the appendix's, each side of every power of ten, and
    /// many drawn at random from all bit patterns (a fixed seed, so a failure repeats).
    fn doubles() -> Vec<f64> {
        let mut all: Vec<f64> = APPENDIX_B.iter().map(|(bits, _)| f64::from_bits(*bits)).collect();
        for e in -324..=308 {
            let p = 10f64.powi(e);
            all.extend([p, f64::from_bits(p.to_bits().wrapping_add(1)), f64::from_bits(p.to_bits().wrapping_sub(1)), -p]);
        }
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        while all.len() < 20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let f = f64::from_bits(state);
            if f.is_finite() {
                all.push(f);
            }
        }
        all.retain(|f| f.is_finite());
        all
    }

    #[test]
    fn numbers_are_written_as_an_independent_ecmascript_engine_writes_them() {
        use std::io::Write;
        // V8 (Node.js), which the project's browser tests already need: JSON.stringify of each double.
        let doubles = doubles();
        let script = "const lines = require('fs').readFileSync(0, 'utf8').trim().split('\\n');\
                      const view = new DataView(new ArrayBuffer(8));\
                      process.stdout.write(lines.map(h => { view.setBigUint64(0, BigInt('0x' + h)); return JSON.stringify(view.getFloat64(0)); }).join('\\n'));";
        let mut node = std::process::Command::new("node")
            .args(["-e", script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("node (Node.js) runs the independent implementation");
        let input: String = doubles.iter().map(|f| format!("{:016x}\n", f.to_bits())).collect();
        node.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        let out = node.wait_with_output().unwrap();
        assert!(out.status.success());
        let theirs: Vec<String> = String::from_utf8(out.stdout).unwrap().lines().map(str::to_owned).collect();
        assert_eq!(theirs.len(), doubles.len());
        for (f, expected) in doubles.iter().zip(&theirs) {
            assert_eq!(&number(*f), expected, "{:016x}", f.to_bits());
        }
    }

    #[test]
    fn the_same_request_in_another_order_has_the_same_fingerprint() {
        let a = json!({"report": "orders", "filters": {"status": ["paid"], "country": ["SA"]}});
        let b = json!({"filters": {"country": ["SA"], "status": ["paid"]}, "report": "orders"});
        assert_eq!(fingerprint(&a), fingerprint(&b));
        assert_ne!(fingerprint(&a), fingerprint(&json!({"report": "customers"})));
    }
}
