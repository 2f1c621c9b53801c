//! CSV cells (SPEC §6): RFC 4180 records (CRLF, quoted only when needed, `""` for a quote) in
//! UTF-8, text defused against formula injection, numbers and instants as they are.

use std::io::Write;

/// A text cell that a spreadsheet would read as a formula gets a leading `'`; never trimmed.
pub fn defuse(text: &str) -> std::borrow::Cow<'_, str> {
    if needs_defusing(text.as_bytes()) {
        std::borrow::Cow::Owned(format!("'{text}"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// A cell of an exported file read back (SPEC §10): the `'` that [`defuse`] put before a cell a
/// spreadsheet would read as a formula is removed, so an export imports unchanged; any other
/// cell is as it is.
pub fn undefuse(cell: &str) -> &str {
    match cell.strip_prefix('\'') {
        Some(rest) if needs_defusing(rest.as_bytes()) => rest,
        _ => cell,
    }
}

/// Minor units as a decimal amount: `-1250` → `-12.50`.
pub fn money(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let abs = cents.unsigned_abs();
    format!("{sign}{}.{:02}", abs / 100, abs % 100)
}

/// Minor units of a currency with `places` places as a decimal amount: `-1250` with 3 is
/// `-1.250`, with 0 `-1250`.
pub fn amount(minor: i64, places: u32) -> String {
    let mut out = Vec::with_capacity(24);
    write_amount(&mut out, minor, places);
    String::from_utf8_lossy(&out).into_owned()
}

/// Writes [`amount`] into `out`, allocating nothing: every file's money goes through here.
pub fn write_amount(out: &mut Vec<u8>, minor: i64, places: u32) {
    let mut digits = itoa::Buffer::new();
    let Some(unit) = 10u64.checked_pow(places).filter(|_| places > 0) else {
        out.extend_from_slice(digits.format(minor).as_bytes());
        return;
    };
    if minor < 0 {
        out.push(b'-');
    }
    let abs = minor.unsigned_abs();
    out.extend_from_slice(digits.format(abs / unit).as_bytes());
    out.push(b'.');
    let fraction = digits.format(abs % unit);
    out.extend(std::iter::repeat_n(b'0', (places as usize).saturating_sub(fraction.len())));
    out.extend_from_slice(fraction.as_bytes());
}

/// An instant in epoch milliseconds as RFC 3339 UTC, to the second; `None` outside the
/// calendar's range.
pub fn instant(ms: i64) -> Option<String> {
    jiff::Timestamp::from_millisecond(ms).ok().map(|ts| ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
}

/// A decimal number's text rounded (half away from zero, as PostgreSQL's `round`) to `scale`
/// places: `"1.2345"` with 3 is `"1.235"`, `"-0.0004"` with 3 is `"0.000"`. `None` for text that
/// is not a plain decimal (no exponent).
pub fn decimal(text: &str, scale: u32) -> Option<String> {
    let text = text.trim();
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (whole, fraction) = body.split_once('.').unwrap_or((body, ""));
    let digits_only = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !digits_only(whole) || !digits_only(fraction) {
        return None;
    }
    let scale = scale as usize;
    let mut digits: Vec<u8> = if whole.is_empty() { vec![b'0'] } else { whole.bytes().collect() };
    let kept: Vec<u8> = fraction.bytes().chain(std::iter::repeat(b'0')).take(scale).collect();
    digits.extend_from_slice(&kept);
    if fraction.as_bytes().get(scale).is_some_and(|d| *d >= b'5') {
        let mut at = digits.len();
        loop {
            if at == 0 {
                digits.insert(0, b'1');
                break;
            }
            at -= 1;
            if digits[at] == b'9' {
                digits[at] = b'0';
            } else {
                digits[at] += 1;
                break;
            }
        }
    }
    let point = digits.len() - scale;
    let whole = std::str::from_utf8(&digits[..point]).ok()?.trim_start_matches('0');
    let whole = if whole.is_empty() { "0" } else { whole };
    let fraction = std::str::from_utf8(&digits[point..]).ok()?;
    let zero = whole == "0" && fraction.bytes().all(|b| b == b'0');
    let sign = if negative && !zero { "-" } else { "" };
    Some(if scale == 0 { format!("{sign}{whole}") } else { format!("{sign}{whole}.{fraction}") })
}

/// Writes a CSV file's bytes a row at a time into a buffer the caller drains in chunks; one
/// scratch buffer serves every cell, so no cell allocates.
///
/// The records are written here rather than by the `csv` crate's writer (which reads every file
/// exportd imports): that writer keeps a buffer of its own, copied into this one as it fills,
/// and steps a state machine per field; writing straight into the chunk took a tenth of a
/// worker's CPU off a 1M-row export (performance.md). The bytes are the same: RFC 4180, a field
/// quoted only when it holds `,` `"` CR or LF, a quote doubled, CRLF after each record, and a
/// record of one empty field written `""` (a test compares both writers).
pub struct CsvEncoder {
    out: Vec<u8>,
    /// Where the current record began in `out`.
    record_start: usize,
    /// Fields written in the current record.
    fields: usize,
    /// Fields in every record: the header's.
    width: usize,
    scratch: Vec<u8>,
}

/// Whether a field holding this byte is quoted.
fn quoted(b: u8) -> bool {
    matches!(b, b',' | b'"' | b'\r' | b'\n')
}

impl CsvEncoder {
    /// A file that starts (after an optional UTF-8 byte order mark) with the header row.
    pub fn new(bom: bool, header: &[&str]) -> std::io::Result<CsvEncoder> {
        let out = if bom { "\u{feff}".as_bytes().to_vec() } else { Vec::new() };
        let mut encoder = CsvEncoder { record_start: out.len(), out, fields: 0, width: header.len(), scratch: Vec::with_capacity(256) };
        for name in header {
            encoder.field(name.as_bytes());
        }
        encoder.end_row()?;
        Ok(encoder)
    }

    /// Starts one more field of the current record: a comma after the first.
    fn next_field(&mut self) {
        if self.fields > 0 {
            self.out.push(b',');
        }
        self.fields += 1;
    }

    /// Appends one field of the current record.
    fn field(&mut self, bytes: &[u8]) {
        self.next_field();
        if !bytes.iter().any(|b| quoted(*b)) {
            self.out.extend_from_slice(bytes);
            return;
        }
        self.out.reserve(bytes.len() + 2);
        self.out.push(b'"');
        for piece in bytes.split_inclusive(|b| *b == b'"') {
            self.out.extend_from_slice(piece);
            if piece.last() == Some(&b'"') {
                self.out.push(b'"');
            }
        }
        self.out.push(b'"');
    }

    /// Appends a field this encoder wrote itself from a number, a time or a boolean: it holds
    /// none of the bytes that need quotes (`-`, `.`, `:`, digits and letters), so it is not
    /// looked through for them.
    fn plain(&mut self, bytes: &[u8]) {
        debug_assert!(!bytes.iter().any(|b| quoted(*b)), "{bytes:?}");
        self.next_field();
        self.out.extend_from_slice(bytes);
    }

    /// A text cell, defused.
    pub fn text(&mut self, text: &str) -> std::io::Result<()> {
        self.text_bytes(text.as_bytes());
        Ok(())
    }

    /// A text cell given as UTF-8 bytes, defused.
    fn text_bytes(&mut self, text: &[u8]) {
        if !needs_defusing(text) {
            return self.field(text);
        }
        let mut cell = std::mem::take(&mut self.scratch);
        cell.clear();
        cell.push(b'\'');
        cell.extend_from_slice(text);
        self.field(&cell);
        self.scratch = cell;
    }

    /// A whole number.
    pub fn integer(&mut self, n: i64) -> std::io::Result<()> {
        let mut digits = itoa::Buffer::new();
        self.plain(digits.format(n).as_bytes());
        Ok(())
    }

    /// Money in minor units, as a decimal amount.
    pub fn money(&mut self, cents: i64) -> std::io::Result<()> {
        self.scratch.clear();
        if cents < 0 {
            self.scratch.push(b'-');
        }
        let abs = cents.unsigned_abs();
        let mut digits = itoa::Buffer::new();
        self.scratch.extend_from_slice(digits.format(abs / 100).as_bytes());
        let fraction = (abs % 100) as u8;
        self.scratch.extend_from_slice(&[b'.', b'0' + fraction / 10, b'0' + fraction % 10]);
        self.scratch_field();
        Ok(())
    }

    /// An instant in epoch milliseconds, as RFC 3339 UTC to the second. An instant outside the
    /// calendar's range is an error of kind `InvalidData`: an empty cell would be a silent loss.
    pub fn instant(&mut self, ms: i64) -> std::io::Result<()> {
        self.scratch.clear();
        let ts = jiff::Timestamp::from_millisecond(ms)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{ms} ms is outside the range of an instant")))?;
        {
            let t = jiff::tz::Offset::UTC.to_datetime(ts);
            // Written digit by digit: this runs for every row, and a format string is parsed
            // on every call. Years outside 0–9999 (never seen in practice) take the slow path.
            if (0..=9999).contains(&t.year()) {
                let two = |n: i8| [b'0' + n as u8 / 10, b'0' + n as u8 % 10];
                let year = t.year() as u16;
                let [m0, m1] = two(t.month());
                let [d0, d1] = two(t.day());
                let [h0, h1] = two(t.hour());
                let [i0, i1] = two(t.minute());
                let [s0, s1] = two(t.second());
                self.scratch.extend_from_slice(&[
                    b'0' + (year / 1000) as u8,
                    b'0' + (year / 100 % 10) as u8,
                    b'0' + (year / 10 % 10) as u8,
                    b'0' + (year % 10) as u8,
                    b'-', m0, m1, b'-', d0, d1, b'T', h0, h1, b':', i0, i1, b':', s0, s1, b'Z',
                ]);
            } else {
                write!(self.scratch, "{}", ts.strftime("%Y-%m-%dT%H:%M:%SZ"))?;
            }
        }
        self.scratch_field();
        Ok(())
    }

    /// An empty cell (a NULL).
    pub fn empty(&mut self) -> std::io::Result<()> {
        self.field(b"");
        Ok(())
    }

    /// A number already in its written form (a decimal); never defused, so `-0.500` stays a
    /// number.
    pub fn number(&mut self, digits: &str) -> std::io::Result<()> {
        self.field(digits.as_bytes());
        Ok(())
    }

    /// Money in minor units of a currency with `places` places: `-1250` with 2 is `-12.50`,
    /// with 3 `-1.250`, with 0 `-1250`.
    pub fn money_in(&mut self, minor: i64, places: u32) -> std::io::Result<()> {
        if places == 2 {
            return self.money(minor);
        }
        self.scratch.clear();
        write_amount(&mut self.scratch, minor, places);
        self.scratch_field();
        Ok(())
    }

    /// A day, `YYYY-MM-DD`.
    pub fn date(&mut self, day: jiff::civil::Date) -> std::io::Result<()> {
        self.scratch.clear();
        write!(self.scratch, "{}", day.strftime("%Y-%m-%d"))?;
        self.scratch_field();
        Ok(())
    }

    /// `true` or `false`.
    pub fn boolean(&mut self, value: bool) -> std::io::Result<()> {
        self.plain(if value { b"true" } else { b"false" });
        Ok(())
    }

    /// Writes the scratch buffer, a number or a time this encoder wrote, as a field.
    fn scratch_field(&mut self) {
        let cell = std::mem::take(&mut self.scratch);
        self.plain(&cell);
        self.scratch = cell;
    }

    /// Ends the current row; a row of another width than the header's is refused (kind
    /// `InvalidData`), as the `csv` crate's writer refused it.
    pub fn end_row(&mut self) -> std::io::Result<()> {
        if self.fields != self.width {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("a row of {} fields under a header of {}", self.fields, self.width)));
        }
        // A record with no bytes (one empty field) would read back as no record at all.
        if self.out.len() == self.record_start {
            self.out.extend_from_slice(b"\"\"");
        }
        self.out.extend_from_slice(b"\r\n");
        self.fields = 0;
        self.record_start = self.out.len();
        Ok(())
    }

    /// About how many bytes wait to be taken.
    pub fn buffered(&self) -> usize {
        self.out.len()
    }

    /// Takes every byte written so far (between records).
    pub fn take(&mut self) -> std::io::Result<Vec<u8>> {
        let next = Vec::with_capacity(self.buffered() + 64 * 1024);
        Ok(self.take_leaving(next))
    }

    /// Takes every byte written so far (between records), leaving `next`, emptied, to write on.
    pub fn take_leaving(&mut self, mut next: Vec<u8>) -> Vec<u8> {
        next.clear();
        self.record_start = 0;
        std::mem::replace(&mut self.out, next)
    }
}

impl crate::row_encoder::RowEncoder for CsvEncoder {
    fn text(&mut self, text: &str) -> std::io::Result<()> {
        CsvEncoder::text(self, text)
    }

    fn text_utf8(&mut self, text: &[u8]) -> std::io::Result<()> {
        self.text_bytes(text);
        Ok(())
    }

    fn integer(&mut self, n: i64) -> std::io::Result<()> {
        CsvEncoder::integer(self, n)
    }

    fn decimal(&mut self, digits: &str, _scale: u32) -> std::io::Result<()> {
        self.number(digits)
    }

    fn money_in(&mut self, minor: i64, places: u32) -> std::io::Result<()> {
        CsvEncoder::money_in(self, minor, places)
    }

    fn date(&mut self, day: jiff::civil::Date) -> std::io::Result<()> {
        CsvEncoder::date(self, day)
    }

    fn instant(&mut self, ms: i64) -> std::io::Result<()> {
        CsvEncoder::instant(self, ms)
    }

    fn boolean(&mut self, value: bool) -> std::io::Result<()> {
        CsvEncoder::boolean(self, value)
    }

    fn empty(&mut self) -> std::io::Result<()> {
        CsvEncoder::empty(self)
    }

    fn end_row(&mut self) -> std::io::Result<()> {
        CsvEncoder::end_row(self)
    }

    fn buffered(&self) -> usize {
        CsvEncoder::buffered(self)
    }

    fn take(&mut self, next: Vec<u8>) -> std::io::Result<Vec<u8>> {
        Ok(self.take_leaving(next))
    }

    fn finish(mut self, out: &mut (dyn Write + Send)) -> std::io::Result<()> {
        let rest = CsvEncoder::take(&mut self)?;
        out.write_all(&rest)
    }
}

/// Whether a spreadsheet would read this text as a formula.
// A `'` before such a cell is defused too (`'=x` is written `''=x`), so that reading a `'`
// back off any defused cell gives the cell exactly (SPEC §10's export imported unchanged).
fn needs_defusing(text: &[u8]) -> bool {
    match text.first() {
        Some(b'=' | b'+' | b'-' | b'@' | b'\t' | b'\r' | b'\n') => true,
        Some(b'\'') => needs_defusing(&text[1..]),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_defused_cell_reads_back_as_it_was_and_no_other_cell_changes() {
        for text in ["=SUM(A1)", "+1", "-12.50", "@x", "\tx", "\r\n", "'", "'=x", "plain", "", "'quoted'", "محمد"] {
            assert_eq!(undefuse(&defuse(text)), text, "{text:?}");
        }
        assert_eq!(undefuse("'plain"), "'plain", "a quote before harmless text is the text's own");
    }

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
        use crate::row_encoder::RowEncoder;
        e.text_utf8("=1+1".as_bytes()).unwrap();
        e.text_utf8("a \"b\"".as_bytes()).unwrap();
        e.empty().unwrap();
        e.text_utf8("محمد".as_bytes()).unwrap();
        e.end_row().unwrap();
        assert_eq!(String::from_utf8(e.take().unwrap()).unwrap(), "'=1+1,\"a \"\"b\"\"\",,محمد\r\n", "text given as bytes is written as text given as a str");
        let mut bom = CsvEncoder::new(true, &["x"]).unwrap();
        assert!(bom.take().unwrap().starts_with("\u{feff}x\r\n".as_bytes()));
    }

    #[test]
    fn the_encoder_writes_the_same_bytes_as_the_csv_crates_writer() {
        let cells = ["", "plain", "a,b", "say \"hi\"", "\"", "\"\"", "line\nfeed", "cr\r", "crlf\r\n", " spaced ", "محمد", "'", "#x", "tab\tin", ",", "x\"y,z\nw"];
        for width in [1, 2, 3] {
            let header: Vec<&str> = ["x", "y", "z"][..width].to_vec();
            let mut ours = CsvEncoder::new(false, &header).unwrap();
            let mut theirs = csv::WriterBuilder::new().terminator(csv::Terminator::CRLF).from_writer(Vec::new());
            theirs.write_record(&header).unwrap();
            for (i, first) in cells.iter().enumerate() {
                for second in cells {
                    let record: Vec<&str> = [*first, second, cells[(i + 3) % cells.len()]][..width].to_vec();
                    for cell in &record {
                        ours.field(cell.as_bytes());
                    }
                    ours.end_row().unwrap();
                    theirs.write_record(&record).unwrap();
                }
            }
            let theirs = theirs.into_inner().unwrap();
            assert_eq!(String::from_utf8(ours.take().unwrap()).unwrap(), String::from_utf8(theirs).unwrap(), "{width} columns");
        }
    }

    #[test]
    fn the_encoder_writes_money_and_instants_as_the_reference_formats_do() {
        let cases = [i64::MIN, -253_402_300_800_000, -46_388_678_400_000, -1, 0, 1, 999, 1_000, 59_999, 951_782_400_000, 1_767_225_599_999, 253_402_300_799_999, 253_402_300_800_000, i64::MAX];
        for n in cases {
            let mut e = CsvEncoder::new(false, &["a", "b", "c"]).unwrap();
            e.take().unwrap();
            e.money(n).unwrap();
            match instant(n) {
                Some(reference) => {
                    e.instant(n).unwrap();
                    e.integer(n).unwrap();
                    e.end_row().unwrap();
                    assert_eq!(String::from_utf8(e.take().unwrap()).unwrap(), format!("{},{reference},{n}\r\n", money(n)), "{n}");
                }
                None => {
                    let refused = e.instant(n).expect_err("an instant outside the calendar is refused, never an empty cell");
                    assert_eq!(refused.kind(), std::io::ErrorKind::InvalidData, "{n}");
                }
            }
        }
    }

    #[test]
    fn a_decimal_is_rounded_half_away_from_zero_to_its_scale() {
        assert_eq!(decimal("1.2345", 3).as_deref(), Some("1.235"));
        assert_eq!(decimal("-1.2345", 3).as_deref(), Some("-1.235"));
        assert_eq!(decimal("9.9995", 3).as_deref(), Some("10.000"));
        assert_eq!(decimal("-0.0004", 3).as_deref(), Some("0.000"));
        assert_eq!(decimal("15", 2).as_deref(), Some("15.00"));
        assert_eq!(decimal(".5", 0).as_deref(), Some("1"));
        assert_eq!(decimal("007.10", 1).as_deref(), Some("7.1"));
        for bad in ["", "-", ".", "1e3", "1.2.3", "abc", "1,5"] {
            assert_eq!(decimal(bad, 2), None, "{bad:?}");
        }
    }

    #[test]
    fn money_is_written_with_its_currencys_places_and_other_types_as_the_contract_says() {
        let mut csv = CsvEncoder::new(false, &["a", "b", "c", "d", "e", "f", "g"]).unwrap();
        csv.money_in(-1250, 3).unwrap();
        csv.money_in(1250, 0).unwrap();
        csv.money_in(5, 3).unwrap();
        csv.money_in(-5, 2).unwrap();
        csv.date(jiff::civil::date(2026, 2, 28)).unwrap();
        csv.boolean(false).unwrap();
        csv.empty().unwrap();
        csv.end_row().unwrap();
        assert_eq!(String::from_utf8(csv.take().unwrap()).unwrap(), "a,b,c,d,e,f,g\r\n-1.250,1250,0.005,-0.05,2026-02-28,false,\r\n");
    }

    #[test]
    fn an_amount_has_its_currencys_places() {
        assert_eq!(amount(-1250, 3), "-1.250");
        assert_eq!(amount(1250, 0), "1250");
        assert_eq!(amount(5, 3), "0.005");
        assert_eq!(amount(-5, 2), "-0.05");
        assert_eq!(amount(i64::MIN, 4), "-922337203685477.5808");
    }

    #[test]
    fn money_keeps_its_sign_and_two_decimals() {
        assert_eq!(money(-1250), "-12.50");
        assert_eq!(money(5), "0.05");
        assert_eq!(money(-5), "-0.05");
        assert_eq!(money(123456), "1234.56");
    }
}
