//! CSV cells (SPEC §6): RFC 4180 records (CRLF, quoted only when needed, `""` for a quote) in
//! UTF-8, text defused against formula injection, numbers and instants as they are.

use std::io::Write;

/// A text cell that a spreadsheet would read as a formula gets a leading `'`; never trimmed.
pub fn defuse(text: &str) -> std::borrow::Cow<'_, str> {
    if needs_defusing(text) {
        std::borrow::Cow::Owned(format!("'{text}"))
    } else {
        std::borrow::Cow::Borrowed(text)
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

/// Writes a CSV file's bytes a row at a time into a buffer the caller drains in chunks; one
/// scratch buffer serves every cell, so no cell allocates.
pub struct CsvEncoder {
    writer: csv::Writer<Vec<u8>>,
    scratch: Vec<u8>,
}

fn writer_into(buf: Vec<u8>) -> csv::Writer<Vec<u8>> {
    csv::WriterBuilder::new().terminator(csv::Terminator::CRLF).from_writer(buf)
}

impl CsvEncoder {
    /// A file that starts (after an optional UTF-8 byte order mark) with the header row.
    pub fn new(bom: bool, header: &[&str]) -> std::io::Result<CsvEncoder> {
        let start = if bom { "\u{feff}".as_bytes().to_vec() } else { Vec::new() };
        let mut writer = writer_into(start);
        writer.write_record(header)?;
        Ok(CsvEncoder { writer, scratch: Vec::with_capacity(256) })
    }

    /// A text cell, defused.
    pub fn text(&mut self, text: &str) -> std::io::Result<()> {
        self.scratch.clear();
        if needs_defusing(text) {
            self.scratch.push(b'\'');
        }
        self.scratch.extend_from_slice(text.as_bytes());
        Ok(self.writer.write_field(&self.scratch)?)
    }

    /// A whole number.
    pub fn integer(&mut self, n: i64) -> std::io::Result<()> {
        self.scratch.clear();
        write!(self.scratch, "{n}")?;
        Ok(self.writer.write_field(&self.scratch)?)
    }

    /// Money in minor units, as a decimal amount.
    pub fn money(&mut self, cents: i64) -> std::io::Result<()> {
        self.scratch.clear();
        let sign = if cents < 0 { "-" } else { "" };
        let abs = cents.unsigned_abs();
        write!(self.scratch, "{sign}{}.{:02}", abs / 100, abs % 100)?;
        Ok(self.writer.write_field(&self.scratch)?)
    }

    /// An instant in epoch milliseconds, as RFC 3339 UTC to the second.
    pub fn instant(&mut self, ms: i64) -> std::io::Result<()> {
        self.scratch.clear();
        if let Ok(ts) = jiff::Timestamp::from_millisecond(ms) {
            write!(self.scratch, "{}", ts.strftime("%Y-%m-%dT%H:%M:%SZ"))?;
        }
        Ok(self.writer.write_field(&self.scratch)?)
    }

    /// Ends the current row.
    pub fn end_row(&mut self) -> std::io::Result<()> {
        Ok(self.writer.write_record(None::<&[u8]>)?)
    }

    /// About how many bytes wait to be taken.
    pub fn buffered(&self) -> usize {
        self.writer.get_ref().len()
    }

    /// Takes every byte written so far.
    pub fn take(&mut self) -> std::io::Result<Vec<u8>> {
        let next = writer_into(Vec::with_capacity(self.buffered() + 64 * 1024));
        let full = std::mem::replace(&mut self.writer, next);
        full.into_inner().map_err(|e| std::io::Error::other(e.into_error()))
    }
}

/// Whether a spreadsheet would read this text as a formula.
fn needs_defusing(text: &str) -> bool {
    matches!(text.as_bytes().first(), Some(b'=' | b'+' | b'-' | b'@' | b'\t' | b'\r' | b'\n'))
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
    fn the_encoder_writes_rfc_4180_with_defused_text_and_plain_numbers() {
        let mut e = CsvEncoder::new(false, &["a", "b", "c", "d"]).unwrap();
        e.text("=1+1").unwrap();
        e.money(-1250).unwrap();
        e.text("say \"hi\", then\nleave").unwrap();
        e.integer(-7).unwrap();
        e.end_row().unwrap();
        let bytes = e.take().unwrap();
        assert_eq!(String::from_utf8(bytes).unwrap(), "a,b,c,d\r\n'=1+1,-12.50,\"say \"\"hi\"\", then\nleave\",-7\r\n");
        let mut bom = CsvEncoder::new(true, &["x"]).unwrap();
        assert!(bom.take().unwrap().starts_with("\u{feff}x\r\n".as_bytes()));
    }

    #[test]
    fn money_keeps_its_sign_and_two_decimals() {
        assert_eq!(money(-1250), "-12.50");
        assert_eq!(money(5), "0.05");
        assert_eq!(money(-5), "-0.05");
        assert_eq!(money(123456), "1234.56");
    }
}
