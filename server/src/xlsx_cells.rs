//! XLSX cells (SPEC §14): a workbook's rows as SpreadsheetML, each sheet's written to a temporary
//! file as they come and packaged at the end by [`crate::xlsx_package`] (which then knows every
//! sheet's range), its cells typed by the catalog: text as inline strings (never a formula,
//! never defused), numbers as numbers unless they have more than 15 significant digits (which a
//! spreadsheet would round), money with its currency's places, dates and date-times as dates in
//! the export's timezone, booleans as booleans. The same rows give the same bytes: the
//! workbook's own time is the operation's acceptance time, and the package's order, times and
//! compression are fixed.

use crate::row_encoder::RowEncoder;
pub use crate::xlsx_package::Kind;
use crate::xlsx_package::{column_letters, FinishedSheet, Package, Styles};
use std::io::Write;

/// The data rows a sheet holds (a sheet's 1,048,576 rows, less the header).
pub const ROWS_PER_SHEET: u32 = 1_048_575;

/// How many characters of the report's name a sheet's name keeps, leaving room for ` (NN)`.
const SHEET_NAME_CHARS: usize = 25;

/// The most significant digits a spreadsheet keeps in a number; a value with more is text.
const SIGNIFICANT_DIGITS: usize = 15;

/// The most characters a cell holds.
const MAX_CELL_CHARS: usize = 32_767;

/// Data rows whose widths set the columns' widths (the same rows give the same widths).
const ROWS_MEASURED: u32 = 200;

/// The widest a column is made, in characters.
const MAX_WIDTH: usize = 60;

/// Bytes of rows gathered before they go to the sheet's temporary file.
const ROWS_BUFFER: usize = 256 * 1024;

/// What a workbook looks like apart from its rows.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The header row's cells (titles; a date-time's with its zone).
    pub titles: Vec<String>,
    /// The columns' kinds, in order.
    pub kinds: Vec<Kind>,
    /// The report's name, of which the sheets' names are made.
    pub report: String,
    /// Right-to-left sheets (Arabic).
    pub right_to_left: bool,
    /// The zone date-times are shown in.
    pub zone: jiff::tz::TimeZone,
    /// The workbook's creation time: the operation's acceptance.
    pub created: jiff::Timestamp,
}

impl Layout {
    /// The header cell of a date-time column: its title and the zone, `placed_at (Asia/Riyadh)`.
    pub fn zoned_title(title: &str, zone: &str) -> String {
        format!("{title} ({zone})")
    }
}

/// The sheet being written: its rows so far, in its temporary file.
struct OpenSheet {
    name: String,
    file: std::fs::File,
}

/// Writes a workbook a row at a time. Nothing is ready before [`RowEncoder::finish`]: each
/// sheet's rows wait in its temporary file.
pub struct XlsxEncoder {
    layout: Layout,
    styles: Styles,
    /// Each column's cell format.
    column_styles: Vec<u32>,
    /// Each column's letters.
    letters: Vec<Vec<u8>>,
    /// The sheets already full.
    done: Vec<FinishedSheet>,
    sheet: OpenSheet,
    /// Rows not yet in the sheet's file.
    buf: Vec<u8>,
    /// The row being written (1 is the header's).
    row: u32,
    /// Its number, as written in each cell's reference.
    row_digits: itoa::Buffer,
    /// Whether the row's element is open.
    row_open: bool,
    /// The next column in the row.
    col: u16,
    /// The widest cell seen in each column, in characters.
    widths: Vec<usize>,
    /// Whether the sheet is full: the next row starts another.
    full: bool,
    /// Room for a cell's text.
    scratch: Vec<u8>,
}

fn invalid(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}

/// A sheet's name: `base`, then ` (2)`, ` (3)`… Characters a sheet's name cannot hold are `_`.
fn sheet_name(report: &str, index: usize) -> String {
    let base: String = report.chars().take(SHEET_NAME_CHARS).map(|c| if "[]:*?/\\".contains(c) { '_' } else { c }).collect();
    let base = base.trim_matches('\'');
    let base = if base.is_empty() { "Sheet" } else { base };
    if index == 0 {
        base.to_owned()
    } else {
        format!("{base} ({})", index + 1)
    }
}

/// Writes `text` as an inline string's content, `<is><t>…</t></is>`: escaped for XML; a carriage
/// return as a character reference (which an XML reader keeps, where a literal one becomes a
/// line feed); other control characters, which XML cannot hold, and text that looks like such an
/// escape, escaped as ECMA-376 says (`_x0001_`, `_x005F_x0041_`).
pub fn inline_string(out: &mut Vec<u8>, text: &str) {
    let spaced = text.starts_with(char::is_whitespace) || text.ends_with(char::is_whitespace);
    out.extend_from_slice(if spaced { b"<is><t xml:space=\"preserve\">" } else { b"<is><t>" });
    let bytes = text.as_bytes();
    let (mut start, mut i) = (0, 0);
    while i < bytes.len() {
        let Some(escape) = escape_at(bytes, i) else {
            i += 1;
            continue;
        };
        out.extend_from_slice(&bytes[start..i]);
        let consumed = match escape {
            Escape::Fixed(replacement, consumed) => {
                out.extend_from_slice(replacement);
                consumed
            }
            Escape::Hex(code, consumed) => {
                let _ = write!(out, "_x{code:04X}_");
                consumed
            }
        };
        start = i + consumed;
        i += consumed.max(1);
    }
    out.extend_from_slice(&bytes[start..]);
    out.extend_from_slice(b"</t></is>");
}

/// How a text's bytes at some place are written: as other bytes, or as `_xHHHH_`; with how
/// many bytes of the text that takes (none for an escape put before them).
enum Escape {
    Fixed(&'static [u8], usize),
    Hex(u32, usize),
}

fn escape_at(bytes: &[u8], i: usize) -> Option<Escape> {
    match bytes[i] {
        b'&' => Some(Escape::Fixed(b"&amp;", 1)),
        b'<' => Some(Escape::Fixed(b"&lt;", 1)),
        b'>' => Some(Escape::Fixed(b"&gt;", 1)),
        b'\r' => Some(Escape::Fixed(b"&#13;", 1)),
        b'\t' | b'\n' => None,
        b @ 0..=0x1f => Some(Escape::Hex(u32::from(b), 1)),
        // U+FFFE and U+FFFF, which XML cannot hold either.
        0xEF if bytes.get(i + 1) == Some(&0xBF) && matches!(bytes.get(i + 2), Some(0xBE | 0xBF)) => Some(Escape::Hex(0xFFC0 | u32::from(bytes[i + 2] & 0x3F), 3)),
        b'_' if looks_escaped(&bytes[i..]) => Some(Escape::Fixed(b"_x005F", 0)),
        _ => None,
    }
}

/// Whether `bytes` starts with `_xHHHH_`.
fn looks_escaped(bytes: &[u8]) -> bool {
    bytes.len() >= 7 && bytes[1] == b'x' && bytes[2..6].iter().all(u8::is_ascii_hexdigit) && bytes[6] == b'_'
}

impl XlsxEncoder {
    /// A workbook whose first sheet is open.
    pub fn new(layout: Layout) -> std::io::Result<XlsxEncoder> {
        let styles = Styles::new(&layout.kinds);
        let column_styles = layout.kinds.iter().map(|k| styles.column(*k)).collect();
        let letters = (0..layout.titles.len()).map(|c| column_letters(c).into_bytes()).collect();
        let widths = layout.titles.iter().map(|t| t.chars().count()).collect();
        let sheet = OpenSheet { name: sheet_name(&layout.report, 0), file: tempfile::tempfile()? };
        Ok(XlsxEncoder {
            layout,
            styles,
            column_styles,
            letters,
            done: Vec::new(),
            sheet,
            buf: Vec::with_capacity(ROWS_BUFFER + 64 * 1024),
            row: 2,
            row_digits: itoa::Buffer::new(),
            row_open: false,
            col: 0,
            widths,
            full: false,
            scratch: Vec::with_capacity(32),
        })
    }

    /// Ends the full sheet and opens the next.
    fn next_sheet(&mut self) -> std::io::Result<()> {
        self.flush()?;
        let name = sheet_name(&self.layout.report, self.done.len() + 1);
        let full = std::mem::replace(&mut self.sheet, OpenSheet { name, file: tempfile::tempfile()? });
        self.done.push(FinishedSheet { name: full.name, rows: ROWS_PER_SHEET + 1, data: full.file });
        self.row = 2;
        self.full = false;
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.sheet.file.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }

    /// Opens the row's element, `<row r="7">`, in another sheet when this one is full.
    fn open_row(&mut self) -> std::io::Result<()> {
        if self.full {
            self.next_sheet()?;
        }
        let digits = self.row_digits.format(self.row);
        self.buf.extend_from_slice(b"<row r=\"");
        self.buf.extend_from_slice(digits.as_bytes());
        self.buf.extend_from_slice(b"\">");
        self.row_open = true;
        Ok(())
    }

    /// Opens the next cell, `<c r="B7" s="3" t="…">` (with no `s` for the default format, no
    /// `t` for a number), starting another sheet or the row's element as needed; the column
    /// moves on.
    fn open_cell(&mut self, style: u32, kind: &[u8]) -> std::io::Result<u16> {
        if !self.row_open {
            self.open_row()?;
        }
        let col = self.col;
        self.col += 1;
        // A row wider than the header (which never happens) still reads, without references.
        let Some(letters) = self.letters.get(col as usize) else {
            self.buf.extend_from_slice(b"<c");
            self.style_and_kind(style, kind);
            return Ok(col);
        };
        self.buf.extend_from_slice(b"<c r=\"");
        self.buf.extend_from_slice(letters);
        let digits = self.row_digits.format(self.row);
        self.buf.extend_from_slice(digits.as_bytes());
        self.buf.push(b'"');
        self.style_and_kind(style, kind);
        Ok(col)
    }

    fn style_and_kind(&mut self, style: u32, kind: &[u8]) {
        if style != 0 {
            let mut digits = itoa::Buffer::new();
            self.buf.extend_from_slice(b" s=\"");
            self.buf.extend_from_slice(digits.format(style).as_bytes());
            self.buf.push(b'"');
        }
        if !kind.is_empty() {
            self.buf.extend_from_slice(b" t=\"");
            self.buf.extend_from_slice(kind);
            self.buf.push(b'"');
        }
        self.buf.push(b'>');
    }

    fn measured(&mut self, col: u16, chars: impl FnOnce() -> usize) {
        if self.done.is_empty() && self.row <= ROWS_MEASURED + 1 {
            if let Some(width) = self.widths.get_mut(col as usize) {
                *width = (*width).max(chars());
            }
        }
    }

    /// A number cell whose value is `digits` as written.
    fn number(&mut self, style: u32, digits: &[u8]) -> std::io::Result<()> {
        let col = self.open_cell(style, b"")?;
        self.measured(col, || digits.len());
        self.buf.extend_from_slice(b"<v>");
        self.buf.extend_from_slice(digits);
        self.buf.extend_from_slice(b"</v></c>");
        Ok(())
    }

    fn string(&mut self, text: &str) -> std::io::Result<()> {
        let chars = if text.len() > MAX_CELL_CHARS { text.chars().count() } else { text.len() };
        if chars > MAX_CELL_CHARS {
            let title = self.layout.titles.get(self.col as usize).cloned().unwrap_or_default();
            return Err(invalid(format!("{title}: a text of more than 32,767 characters, more than a workbook's cell holds")));
        }
        let col = self.open_cell(0, b"inlineStr")?;
        self.measured(col, || text.chars().count());
        inline_string(&mut self.buf, text);
        self.buf.extend_from_slice(b"</c>");
        Ok(())
    }
}

/// Whether `digits` (an optional minus, digits, an optional point and digits) has more
/// significant digits than a spreadsheet keeps.
fn too_precise(digits: &str) -> bool {
    let significant = digits.bytes().filter(u8::is_ascii_digit).skip_while(|b| *b == b'0').count();
    significant > SIGNIFICANT_DIGITS
}

/// Days from 1970-01-01 to a civil date (proleptic Gregorian).
fn unix_days(date: jiff::civil::Date) -> i64 {
    let (y, m, d) = (i64::from(date.year()), i64::from(date.month()), i64::from(date.day()));
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A day's serial in a workbook (the 1900 date system, with its phantom 1900-02-29), or `None`
/// before 1900-01-01, which a workbook cannot hold.
pub fn day_serial(date: jiff::civil::Date) -> Option<i64> {
    let days = unix_days(date);
    // 1900-03-01 is serial 61; before it, a day less (1900-02-29 does not exist, serial 60).
    let march_1900 = -25_508;
    let january_1900 = -25_567;
    match days {
        d if d >= march_1900 => Some(d + 25_569),
        d if d >= january_1900 => Some(d + 25_568),
        _ => None,
    }
}

impl RowEncoder for XlsxEncoder {
    fn text(&mut self, text: &str) -> std::io::Result<()> {
        // Empty text is an empty cell, as a spreadsheet keeps it.
        if text.is_empty() {
            return self.empty();
        }
        self.string(text)
    }

    fn integer(&mut self, n: i64) -> std::io::Result<()> {
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(n);
        if too_precise(digits) {
            return self.string(digits);
        }
        self.number(0, digits.as_bytes())
    }

    fn decimal(&mut self, digits: &str, scale: u32) -> std::io::Result<()> {
        // A decimal's digits are a number as a workbook writes one (`-0.500`), exactly.
        if too_precise(digits) || digits.parse::<f64>().is_err() {
            return self.string(digits);
        }
        let style = self.styles.decimal(scale);
        self.number(style, digits.as_bytes())
    }

    fn money_in(&mut self, minor: i64, places: u32) -> std::io::Result<()> {
        let mut amount = std::mem::take(&mut self.scratch);
        amount.clear();
        crate::csv_cells::write_amount(&mut amount, minor, places);
        // More than 15 significant digits, whatever the places.
        let written = if minor.unsigned_abs() >= 1_000_000_000_000_000 {
            self.string(&String::from_utf8_lossy(&amount))
        } else {
            self.number(Styles::money(places), &amount)
        };
        self.scratch = amount;
        written
    }

    fn date(&mut self, day: jiff::civil::Date) -> std::io::Result<()> {
        match day_serial(day) {
            Some(serial) => {
                let col = self.open_cell(Styles::DATE, b"")?;
                self.measured(col, || 10);
                let mut digits = itoa::Buffer::new();
                self.buf.extend_from_slice(b"<v>");
                self.buf.extend_from_slice(digits.format(serial).as_bytes());
                self.buf.extend_from_slice(b"</v></c>");
                Ok(())
            }
            None => self.string(&day.to_string()),
        }
    }

    fn instant(&mut self, ms: i64) -> std::io::Result<()> {
        let ts = jiff::Timestamp::from_millisecond(ms).map_err(|_| invalid(format!("{ms} ms is outside the range of an instant")))?;
        // To the second, as every instant of a file.
        let local = self.layout.zone.to_datetime(ts);
        let seconds = i64::from(local.hour()) * 3600 + i64::from(local.minute()) * 60 + i64::from(local.second());
        match day_serial(local.date()) {
            Some(days) => {
                let serial = days as f64 + seconds as f64 / 86_400.0;
                let col = self.open_cell(Styles::DATE_TIME, b"")?;
                self.measured(col, || 19);
                let mut digits = ryu_js::Buffer::new();
                self.buf.extend_from_slice(b"<v>");
                self.buf.extend_from_slice(digits.format_finite(serial).as_bytes());
                self.buf.extend_from_slice(b"</v></c>");
                Ok(())
            }
            // Before 1900 a workbook has no date: the instant as RFC 3339 UTC text, which imports
            // back exactly (a zone's offset then may have seconds, which RFC 3339 cannot write).
            None => self.string(&ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
        }
    }

    fn boolean(&mut self, value: bool) -> std::io::Result<()> {
        let col = self.open_cell(0, b"b")?;
        self.measured(col, || 5);
        self.buf.extend_from_slice(if value { b"<v>1</v></c>" } else { b"<v>0</v></c>" });
        Ok(())
    }

    fn empty(&mut self) -> std::io::Result<()> {
        self.col += 1;
        Ok(())
    }

    fn end_row(&mut self) -> std::io::Result<()> {
        if !self.row_open {
            // A row of empty cells has its element too.
            self.open_row()?;
        }
        self.buf.extend_from_slice(b"</row>");
        self.row_open = false;
        self.col = 0;
        if self.row == ROWS_PER_SHEET + 1 {
            self.full = true;
        } else {
            self.row += 1;
        }
        if self.buf.len() >= ROWS_BUFFER {
            self.flush()?;
        }
        Ok(())
    }

    fn buffered(&self) -> usize {
        0
    }

    fn take(&mut self, next: Vec<u8>) -> std::io::Result<Vec<u8>> {
        // Nothing is ready before the end: the buffer goes back as it came, for progress alone.
        Ok(next)
    }

    fn finish(mut self, out: &mut (dyn Write + Send)) -> std::io::Result<()> {
        self.flush()?;
        // The last sheet's rows end before its next row, unless it is full.
        let rows = if self.full { ROWS_PER_SHEET + 1 } else { self.row - 1 };
        let mut sheets = std::mem::take(&mut self.done);
        sheets.push(FinishedSheet { name: self.sheet.name, rows, data: self.sheet.file });
        let widths: Vec<f64> = self.widths.iter().map(|w| (*w).clamp(8, MAX_WIDTH) as f64 + 2.0).collect();
        let package = Package {
            titles: &self.layout.titles,
            column_styles: &self.column_styles,
            widths: &widths,
            right_to_left: self.layout.right_to_left,
            created: self.layout.created,
            styles: &self.styles,
        };
        package.write(sheets, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_excels_serials_with_its_phantom_leap_day() {
        let serial = |y, m, d| day_serial(jiff::civil::date(y, m, d));
        assert_eq!(serial(1899, 12, 31), None, "before 1900 a workbook has no date");
        assert_eq!(serial(1900, 1, 1), Some(1));
        assert_eq!(serial(1900, 2, 28), Some(59));
        assert_eq!(serial(1900, 3, 1), Some(61), "serial 60 is Excel's 1900-02-29");
        assert_eq!(serial(1970, 1, 1), Some(25_569));
        assert_eq!(serial(2025, 10, 13), Some(45_943));
        assert_eq!(serial(9999, 12, 31), Some(2_958_465));
    }

    fn layout(right_to_left: bool) -> Layout {
        Layout {
            titles: vec!["Phone".into(), "Total".into(), "Placed at (Asia/Riyadh)".into(), "Id".into(), "Day".into(), "Paid".into(), "Notes".into()],
            kinds: vec![Kind::Plain, Kind::Money, Kind::DateTime, Kind::Plain, Kind::Date, Kind::Plain, Kind::Plain],
            report: "a_report_name_longer_than_a_sheet_name".into(),
            right_to_left,
            zone: jiff::tz::TimeZone::get("Asia/Riyadh").unwrap(),
            created: jiff::Timestamp::from_second(1_767_225_600).unwrap(),
        }
    }

    fn workbook(right_to_left: bool) -> Vec<u8> {
        let mut e = XlsxEncoder::new(layout(right_to_left)).unwrap();
        for i in 0..3i64 {
            e.text("+966501234567").unwrap();
            e.money_in(-1250 - i, 2).unwrap();
            e.instant(1_769_841_000_000 + i * 1000).unwrap();
            e.integer(12_345_678_901_234_567).unwrap();
            e.date(jiff::civil::date(2026, 2, 28)).unwrap();
            e.boolean(i == 1).unwrap();
            e.text(if i == 2 { "" } else { "=1+1" }).unwrap();
            e.end_row().unwrap();
        }
        // An instant before 1900, which a workbook cannot hold as a date.
        for _ in 0..2 {
            e.empty().unwrap();
        }
        e.instant(-2_240_524_800_000).unwrap();
        e.end_row().unwrap();
        let mut out = Vec::new();
        e.finish(&mut out).unwrap();
        out
    }

    #[test]
    fn the_same_rows_give_the_same_bytes() {
        assert_eq!(workbook(false), workbook(false));
        assert_ne!(workbook(false), workbook(true));
    }

    #[test]
    fn cells_keep_their_types_and_text_is_never_a_formula() {
        use calamine::{Data, Reader};
        let mut book = calamine::Xlsx::new(std::io::Cursor::new(workbook(false))).unwrap();
        assert_eq!(book.sheet_names(), vec!["a_report_name_longer_than".to_owned()], "the report's name cut to 25 characters");
        let range = book.worksheet_range("a_report_name_longer_than").unwrap();
        let row = |r: u32| (0..7).map(|c| range.get_value((r, c)).cloned().unwrap_or(Data::Empty)).collect::<Vec<_>>();
        assert_eq!(row(0)[2], Data::String("Placed at (Asia/Riyadh)".into()));
        let first = row(1);
        assert_eq!(first[0], Data::String("+966501234567".into()));
        assert_eq!(first[1], Data::Float(-12.5));
        match &first[2] {
            Data::DateTime(dt) => assert_eq!(dt.to_ymd_hms_milli(), (2026, 1, 31, 9, 30, 0, 0), "06:30 UTC in Riyadh"),
            other => panic!("a date-time, not {other:?}"),
        }
        assert_eq!(first[3], Data::String("12345678901234567".into()), "more digits than a spreadsheet keeps: text");
        assert!(matches!(&first[4], Data::DateTime(dt) if dt.to_ymd_hms_milli().0 == 2026));
        assert_eq!(first[5], Data::Bool(false));
        assert_eq!(first[6], Data::String("=1+1".into()));
        assert_eq!(row(3)[6], Data::Empty, "empty text is an empty cell");
        assert_eq!(row(4)[2], Data::String("1899-01-01T00:00:00Z".into()), "before 1900: RFC 3339 text, which imports back");
        assert!(book.worksheet_formula("a_report_name_longer_than").unwrap().used_cells().next().is_none(), "no formulas");
    }

    #[test]
    fn text_is_escaped_so_that_any_xml_reader_gives_it_back_as_written() {
        let escaped = |text: &str| {
            let mut out = Vec::new();
            inline_string(&mut out, text);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(escaped("a&b<c>\"d'"), "<is><t>a&amp;b&lt;c&gt;\"d'</t></is>");
        assert_eq!(escaped("one\r\ntwo"), "<is><t>one&#13;\ntwo</t></is>", "a literal CR would read as a LF");
        assert_eq!(escaped(" padded\t"), "<is><t xml:space=\"preserve\"> padded\t</t></is>");
        assert_eq!(escaped("bell\u{7}"), "<is><t>bell_x0007_</t></is>");
        assert_eq!(escaped("_x0041_ and _x00_"), "<is><t>_x005F_x0041_ and _x00_</t></is>");
        assert_eq!(escaped("\u{FFFE}ok\u{FFFF}"), "<is><t>_xFFFE_ok_xFFFF_</t></is>");
        assert_eq!(escaped("محمد"), "<is><t>محمد</t></is>");
    }

    #[test]
    fn a_workbook_reads_back_every_text_as_written() {
        use calamine::{Data, Reader};
        let texts = ["a&b<c>", "one\r\ntwo", " padded ", "_x0041_", "=HYPERLINK(\"x\")", "+966501234567", "007", "محمد"];
        let mut e = XlsxEncoder::new(Layout { titles: vec!["Note".into()], kinds: vec![Kind::Plain], ..layout(false) }).unwrap();
        for text in texts {
            e.text(text).unwrap();
            e.end_row().unwrap();
        }
        let mut out = Vec::new();
        e.finish(&mut out).unwrap();
        let mut book = calamine::Xlsx::new(std::io::Cursor::new(out)).unwrap();
        let range = book.worksheet_range_at(0).unwrap().unwrap();
        let read: Vec<Data> = (1..=texts.len() as u32).map(|r| range.get_value((r, 0)).cloned().unwrap_or(Data::Empty)).collect();
        assert_eq!(read, texts.iter().map(|t| Data::String((*t).into())).collect::<Vec<_>>());
    }

    #[test]
    fn the_package_has_excels_order_and_each_sheet_its_range() {
        let mut archive = zip::ZipArchive::new(std::io::Cursor::new(workbook(false))).unwrap();
        let names: Vec<String> = archive.file_names().map(str::to_owned).collect();
        assert_eq!(
            names,
            ["[Content_Types].xml", "_rels/.rels", "docProps/app.xml", "docProps/core.xml", "xl/workbook.xml", "xl/_rels/workbook.xml.rels", "xl/worksheets/sheet1.xml", "xl/styles.xml"]
        );
        let mut sheet = String::new();
        std::io::Read::read_to_string(&mut archive.by_name("xl/worksheets/sheet1.xml").unwrap(), &mut sheet).unwrap();
        assert!(sheet.contains("<dimension ref=\"A1:G5\"/>"), "a header and four rows of seven columns");
        assert!(sheet.contains("<autoFilter ref=\"A1:G5\"/>"));
        assert!(sheet.contains("<pane ySplit=\"1\" topLeftCell=\"A2\" activePane=\"bottomLeft\" state=\"frozen\"/>"));
        let mut core = String::new();
        std::io::Read::read_to_string(&mut archive.by_name("docProps/core.xml").unwrap(), &mut core).unwrap();
        assert!(core.contains(">2026-01-01T00:00:00Z</dcterms:created>"), "the acceptance time: {core}");
    }

    #[test]
    fn more_than_fifteen_significant_digits_is_too_precise_for_a_number() {
        assert!(!too_precise("999999999999999"));
        assert!(too_precise("1000000000000000"));
        assert!(!too_precise("-0.000000000012345"));
        assert!(too_precise("1234567890.1234567"));
        assert!(!too_precise("0012.50"));
    }
}
