//! CSV cells (SPEC §6): text defused against formula injection, numbers and instants as is.

/// A text cell that a spreadsheet would read as a formula gets a leading `'`; never trimmed.
pub fn defuse(text: &str) -> std::borrow::Cow<'_, str> {
    match text.chars().next() {
        Some('=' | '+' | '-' | '@' | '\t' | '\r' | '\n') => std::borrow::Cow::Owned(format!("'{text}")),
        _ => std::borrow::Cow::Borrowed(text),
    }
}

/// Minor units as a decimal amount: `-1250` → `-12.50`.
pub fn money(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let abs = cents.unsigned_abs();
    format!("{sign}{}.{:02}", abs / 100, abs % 100)
}

/// An instant in epoch milliseconds as RFC 3339 UTC, to the second.
pub fn instant(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(ts) => ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        Err(_) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formula_like_text_is_defused_and_nothing_else_changes() {
        for (input, out) in [("=SUM(A1)", "'=SUM(A1)"), ("+1", "'+1"), ("-x", "'-x"), ("@a", "'@a"), ("\tx", "'\tx"), ("\r\nx", "'\r\nx")] {
            assert_eq!(defuse(input), out);
        }
        assert_eq!(defuse(" =x"), " =x");
        assert_eq!(defuse("محمد"), "محمد");
        assert_eq!(defuse(""), "");
    }

    #[test]
    fn money_keeps_its_sign_and_two_decimals() {
        assert_eq!(money(-1250), "-12.50");
        assert_eq!(money(5), "0.05");
        assert_eq!(money(-5), "-0.05");
        assert_eq!(money(123456), "1234.56");
    }
}
