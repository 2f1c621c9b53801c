//! XLSX cells (SPEC §14): an Office Open XML workbook written with `rust_xlsxwriter` in its
//! constant-memory mode (each sheet's rows go to a temporary file as they come; the package is
//! assembled at the end), its cells typed by the catalog: text as inline strings (never a
//! formula, never defused), numbers as numbers unless they have more than 15 significant digits
//! (which a spreadsheet would round), money with its currency's places, dates and date-times as
//! dates in the export's timezone, booleans as booleans. The same rows give the same bytes: the
//! workbook's own times are the operation's acceptance time, and the ZIP's entry order, times
//! and compression are the library's, fixed for a release.

use crate::row_encoder::RowEncoder;
use rust_xlsxwriter::{DocProperties, ExcelDateTime, Format, Workbook, XlsxError};
use std::io::Write;

/// The data rows a sheet holds (a sheet's 1,048,576 rows, less the header).
pub const ROWS_PER_SHEET: u32 = 1_048_575;

/// How many characters of the report's name a sheet's name keeps, leaving room for ` (NN)`.
const SHEET_NAME_CHARS: usize = 25;

/// The most significant digits a spreadsheet keeps in a number; a value with more is text.
const SIGNIFICANT_DIGITS: usize = 15;

/// Data rows whose widths set the columns' widths (the same rows give the same widths).
const ROWS_MEASURED: u32 = 200;

/// The widest a column is made, in characters.
const MAX_WIDTH: usize = 60;

/// What a workbook's columns hold, for their number formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Text, booleans, whole numbers: no number format.
    Plain,
    /// A decimal of this many places.
    Decimal(u32),
    /// Money: two places unless the row's currency has other.
    Money,
    /// A day.
    Date,
    /// A date-time in the export's timezone.
    DateTime,
}

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

/// The number formats of a workbook's cells.
struct Formats {
    header: Format,
    date: Format,
    date_time: Format,
    /// Money of 0 to 4 places.
    money: Vec<Format>,
}

impl Formats {
    fn new() -> Formats {
        let places = |n: u32| if n == 0 { "#,##0".to_owned() } else { format!("#,##0.{}", "0".repeat(n as usize)) };
        Formats {
            header: Format::new().set_bold(),
            date: Format::new().set_num_format("yyyy-mm-dd"),
            date_time: Format::new().set_num_format("yyyy-mm-dd hh:mm:ss"),
            money: (0..=4).map(|n| Format::new().set_num_format(places(n))).collect(),
        }
    }

    fn decimal(scale: u32) -> Format {
        let zeros = "0".repeat(scale as usize);
        Format::new().set_num_format(if scale == 0 { "0".to_owned() } else { format!("0.{zeros}") })
    }
}

/// Writes a workbook a row at a time. Nothing is ready before [`RowEncoder::finish`]: each
/// sheet's rows wait in its temporary file.
pub struct XlsxEncoder {
    workbook: Workbook,
    layout: Layout,
    formats: Formats,
    /// The sheet being written (its index).
    sheet: usize,
    /// The row being written in it (0 is the header).
    row: u32,
    /// The next column in the row.
    col: u16,
    /// The widest cell seen in each column, in characters.
    widths: Vec<usize>,
    /// Whether the sheet is full: the next row starts another.
    full: bool,
}

fn io(e: XlsxError) -> std::io::Error {
    match e {
        XlsxError::IoError(e) => e,
        other => std::io::Error::other(other.to_string()),
    }
}

fn invalid(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}

impl XlsxEncoder {
    /// A workbook whose first sheet has its header row written.
    pub fn new(layout: Layout) -> std::io::Result<XlsxEncoder> {
        let mut workbook = Workbook::new();
        let created = ExcelDateTime::from_timestamp(layout.created.as_second()).map_err(io)?;
        workbook.set_properties(&DocProperties::new().set_creation_datetime(&created));
        let widths = layout.titles.iter().map(|t| t.chars().count()).collect();
        let mut encoder = XlsxEncoder { workbook, layout, formats: Formats::new(), sheet: 0, row: 0, col: 0, widths, full: false };
        encoder.add_sheet()?;
        Ok(encoder)
    }

    /// Adds a sheet with its header row, its columns' formats, frozen first row and direction.
    fn add_sheet(&mut self) -> std::io::Result<()> {
        let index = self.workbook.worksheets().len();
        let base: String = self.layout.report.chars().take(SHEET_NAME_CHARS).collect();
        let name = if index == 0 { base } else { format!("{base} ({})", index + 1) };
        let (layout, formats) = (&self.layout, &self.formats);
        let sheet = self.workbook.add_worksheet_with_constant_memory();
        sheet.set_name(name).map_err(io)?;
        for (col, kind) in layout.kinds.iter().enumerate() {
            let col = col as u16;
            match kind {
                Kind::Plain => {}
                Kind::Decimal(scale) => drop(sheet.set_column_format(col, &Formats::decimal(*scale)).map_err(io)?),
                Kind::Money => drop(sheet.set_column_format(col, &formats.money[2]).map_err(io)?),
                Kind::Date => drop(sheet.set_column_format(col, &formats.date).map_err(io)?),
                Kind::DateTime => drop(sheet.set_column_format(col, &formats.date_time).map_err(io)?),
            }
        }
        for (col, title) in layout.titles.iter().enumerate() {
            sheet.write_string_with_format(0, col as u16, title, &formats.header).map_err(io)?;
        }
        sheet.set_freeze_panes(1, 0).map_err(io)?;
        sheet.set_right_to_left(layout.right_to_left);
        self.sheet = index;
        self.row = 1;
        self.col = 0;
        self.full = false;
        Ok(())
    }

    /// The sheet being written, and the place of the next cell (starting another sheet when this
    /// one is full); the column moves on.
    fn next_cell(&mut self) -> std::io::Result<(u32, u16)> {
        if self.full && self.col == 0 {
            self.add_sheet()?;
        }
        let at = (self.row, self.col);
        self.col += 1;
        Ok(at)
    }

    fn measured(&mut self, col: u16, chars: usize) {
        if self.sheet == 0 && self.row <= ROWS_MEASURED {
            if let Some(width) = self.widths.get_mut(col as usize) {
                *width = (*width).max(chars);
            }
        }
    }

    fn sheet(&mut self) -> &mut rust_xlsxwriter::Worksheet {
        let sheet = self.sheet;
        &mut self.workbook.worksheets_mut()[sheet]
    }

    fn number(&mut self, value: f64, chars: usize) -> std::io::Result<()> {
        let (row, col) = self.next_cell()?;
        self.measured(col, chars);
        self.sheet().write_number(row, col, value).map_err(io)?;
        Ok(())
    }

    fn string(&mut self, text: &str) -> std::io::Result<()> {
        let (row, col) = self.next_cell()?;
        self.measured(col, text.chars().count());
        match self.sheet().write_string(row, col, text) {
            Ok(_) => Ok(()),
            Err(XlsxError::MaxStringLengthExceeded) => {
                let title = self.layout.titles.get(col as usize).cloned().unwrap_or_default();
                Err(invalid(format!("{title}: a text of more than 32,767 characters, more than a workbook's cell holds")))
            }
            Err(e) => Err(io(e)),
        }
    }

    /// A date-time at `serial` (days since 1899-12-30, Excel's count), or its text before 1900.
    fn date_cell(&mut self, serial: Option<f64>, text: impl FnOnce() -> String, format: bool) -> std::io::Result<()> {
        match serial {
            Some(serial) => {
                let chars = if format { 19 } else { 10 };
                self.number(serial, chars)
            }
            None => self.string(&text()),
        }
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
            let digits = digits.to_owned();
            return self.string(&digits);
        }
        self.number(n as f64, digits.len())
    }

    fn decimal(&mut self, digits: &str, _scale: u32) -> std::io::Result<()> {
        match digits.parse::<f64>() {
            Ok(value) if !too_precise(digits) => self.number(value, digits.len()),
            _ => self.string(digits),
        }
    }

    fn money_in(&mut self, minor: i64, places: u32) -> std::io::Result<()> {
        let amount = crate::csv_cells::amount(minor, places);
        if too_precise(&amount) {
            return self.string(&amount);
        }
        let value = minor as f64 / 10f64.powi(places as i32);
        if places == 2 {
            return self.number(value, amount.len());
        }
        let (row, col) = self.next_cell()?;
        self.measured(col, amount.len());
        let format = self.formats.money.get(places as usize).unwrap_or(&self.formats.money[2]).clone();
        self.sheet().write_number_with_format(row, col, value, &format).map_err(io)?;
        Ok(())
    }

    fn date(&mut self, day: jiff::civil::Date) -> std::io::Result<()> {
        self.date_cell(day_serial(day).map(|d| d as f64), || day.to_string(), false)
    }

    fn instant(&mut self, ms: i64) -> std::io::Result<()> {
        let ts = jiff::Timestamp::from_millisecond(ms).map_err(|_| invalid(format!("{ms} ms is outside the range of an instant")))?;
        // To the second, as every instant of a file.
        let local = self.layout.zone.to_datetime(ts);
        let seconds = i64::from(local.hour()) * 3600 + i64::from(local.minute()) * 60 + i64::from(local.second());
        let serial = day_serial(local.date()).map(|d| d as f64 + seconds as f64 / 86_400.0);
        // Before 1900 a workbook has no date: the instant as RFC 3339 UTC text, which imports
        // back exactly (a zone's offset then may have seconds, which RFC 3339 cannot write).
        self.date_cell(serial, || ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(), true)
    }

    fn boolean(&mut self, value: bool) -> std::io::Result<()> {
        let (row, col) = self.next_cell()?;
        self.measured(col, 5);
        self.sheet().write_boolean(row, col, value).map_err(io)?;
        Ok(())
    }

    fn empty(&mut self) -> std::io::Result<()> {
        self.next_cell().map(drop)
    }

    fn end_row(&mut self) -> std::io::Result<()> {
        if self.full && self.col == 0 {
            self.add_sheet()?;
        }
        self.col = 0;
        if self.row == ROWS_PER_SHEET {
            self.full = true;
        } else {
            self.row += 1;
        }
        Ok(())
    }

    fn buffered(&self) -> usize {
        0
    }

    fn take(&mut self) -> std::io::Result<Vec<u8>> {
        Ok(Vec::new())
    }

    fn finish(mut self, out: &mut (dyn Write + Send)) -> std::io::Result<()> {
        let last_col = self.layout.titles.len().saturating_sub(1) as u16;
        let widths: Vec<f64> = self.widths.iter().map(|w| (*w).clamp(8, MAX_WIDTH) as f64 + 2.0).collect();
        let sheets = self.workbook.worksheets().len();
        for index in 0..sheets {
            // The last sheet's rows end before its next row; every other sheet is full.
            let last_row = if index + 1 == sheets && !self.full { self.row - 1 } else { ROWS_PER_SHEET };
            let sheet = &mut self.workbook.worksheets_mut()[index];
            if !self.layout.titles.is_empty() {
                sheet.autofilter(0, 0, last_row, last_col).map_err(io)?;
            }
            for (col, width) in widths.iter().enumerate() {
                sheet.set_column_width(col as u16, *width).map_err(io)?;
            }
        }
        self.workbook.save_to_writer(out).map_err(io)
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
    fn more_than_fifteen_significant_digits_is_too_precise_for_a_number() {
        assert!(!too_precise("999999999999999"));
        assert!(too_precise("1000000000000000"));
        assert!(!too_precise("-0.000000000012345"));
        assert!(too_precise("1234567890.1234567"));
        assert!(!too_precise("0012.50"));
    }
}
