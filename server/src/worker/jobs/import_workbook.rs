//! Reading an uploaded XLSX workbook for an import (SPEC §14), on the reading thread, into the
//! same records a CSV gives: the workbook is copied to a temporary file (a ZIP is read from its
//! end), its archive checked before anything is inflated for good (at most `inflate_limit`
//! bytes in all, counted while inflating, so a ZIP bomb stops as soon as it passes it; at most
//! [`SHARED_STRINGS_MAX_BYTES`] of shared strings, which are held while the sheets are read),
//! then its sheets read a cell at a time with calamine: every sheet whose header row matches
//! the first's, in order. A header cell names a column by its name or title ([`Headings`]); a
//! typed cell becomes the text its column reads (a date-time in the zone its header names, a
//! whole number without `.0`); a record's line is its sheet's row.

use super::import_file::{Read, Reading, Record, Sheet, CHUNK};
use crate::catalog::ColumnType;
use crate::imports::cells::Problem;
use calamine::{DataRef, Reader, SheetType, Xlsx};
use std::io::{Read as _, Seek, Write};
use std::sync::Arc;
use tokio::sync::mpsc::Sender;

/// The first bytes of a ZIP archive's first entry: a workbook's.
pub(super) const SIGNATURE: &[u8; 4] = b"PK\x03\x04";

/// The most entries a workbook's archive may list.
const MAX_ENTRIES: usize = 10_000;

/// The most any part of a workbook other than a sheet may inflate to: calamine holds them (the
/// shared-string table above all, which a workbook exportd writes does not have: its strings are
/// inline) while the sheets are read.
pub const SHARED_STRINGS_MAX_BYTES: u64 = 128 << 20;

/// The first bytes of `reader` (at most four), and whether they are a workbook's.
pub(super) fn sniff(reader: &mut impl std::io::Read) -> std::io::Result<(std::io::Cursor<Vec<u8>>, bool)> {
    let mut head = Vec::with_capacity(4);
    reader.by_ref().take(4).read_to_end(&mut head)?;
    let workbook = head.as_slice() == SIGNATURE;
    Ok((std::io::Cursor::new(head), workbook))
}

fn invalid(message: impl std::fmt::Display) -> Problem {
    Problem::new("", "invalid_xlsx", format!("not a workbook that can be read: {message}"))
}

/// Reads the workbook `reader` holds, sending the header and then chunks of records; stops at
/// the first whole-file error.
pub(super) fn parse(mut reader: impl std::io::Read, reading: &Reading, tx: &Sender<Result<Read, Problem>>) {
    if let Err(p) = read(&mut reader, reading, tx) {
        let _ = tx.blocking_send(Err(p));
    }
}

/// The receiver is gone: nothing more is wanted.
struct Gone;

fn read(reader: &mut impl std::io::Read, reading: &Reading, tx: &Sender<Result<Read, Problem>>) -> Result<(), Problem> {
    let storage = |e: std::io::Error| Problem::new("", "storage", e.to_string());
    let mut file = tempfile::tempfile().map_err(storage)?;
    std::io::copy(reader, &mut file).map_err(storage)?;
    file.rewind().map_err(storage)?;
    check_archive(&mut file, reading.inflate_limit)?;
    file.rewind().map_err(storage)?;
    let mut workbook: Xlsx<_> = Xlsx::new(std::io::BufReader::new(file)).map_err(invalid)?;
    let sheets: Vec<String> = workbook.sheets_metadata().iter().filter(|s| s.typ == SheetType::WorkSheet).map(|s| s.name.clone()).collect();
    let mut out = Records { tx, header: None, columns: Vec::new(), number: 0, chunk: Vec::with_capacity(CHUNK) };
    for (index, name) in sheets.iter().enumerate() {
        let sheet = Sheet { index: index as u32, name: Arc::from(name.as_str()) };
        let mut cells = workbook.worksheet_cells_reader(name).map_err(invalid)?;
        let mut state = if out.header.is_none() { State::First } else { State::Heading };
        let mut row: Vec<DataRef<'_>> = Vec::new();
        let mut at: Option<u32> = None;
        loop {
            let next = cells.next_cell().map_err(invalid)?;
            let position = next.as_ref().map(|c| c.get_position());
            // Rows come in order (the format says so); one that does not would break the
            // order every later read of the file relies on.
            if let (Some(r), Some((p, _))) = (at, position) {
                if p < r {
                    return Err(invalid(format!("the row {} of sheet {name:?} comes after row {}", p + 1, r + 1)));
                }
            }
            if let Some(r) = at.filter(|r| position.is_none_or(|(p, _)| p != *r)) {
                if out.row(&mut state, &sheet, r, &row, reading).is_err() {
                    return Ok(());
                }
                row.clear();
            }
            let Some(cell) = next else { break };
            let (r, c) = cell.get_position();
            at = Some(r);
            let c = c as usize;
            if row.len() <= c {
                row.resize(c + 1, DataRef::Empty);
            }
            row[c] = cell.get_value().clone();
        }
    }
    if out.header.is_none() {
        return Err(Problem::new("", "missing_header", "the workbook has no header row"));
    }
    if !out.chunk.is_empty() {
        let _ = tx.blocking_send(Ok(Read::Records(std::mem::take(&mut out.chunk))));
    }
    Ok(())
}

/// Where a sheet's reading is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Looking for the workbook's header row (no sheet had one yet).
    First,
    /// Looking for this sheet's header row, to compare with the first's.
    Heading,
    /// Reading data rows.
    Rows,
    /// Passing over a sheet whose header is not the first's.
    Skipping,
}

/// The records read so far, sent a chunk at a time.
struct Records<'t> {
    tx: &'t Sender<Result<Read, Problem>>,
    /// The first sheet's header row, as its cells' text.
    header: Option<Vec<String>>,
    /// Per position of the header: the column's name, its type (none for an ignored or unknown
    /// column) and the zone of its date-time cells.
    columns: Vec<(String, Option<ColumnType>, jiff::tz::TimeZone)>,
    number: i64,
    chunk: Vec<Record>,
}

impl Records<'_> {
    /// Takes a row that holds at least one cell: the header, a data record, or neither.
    fn row(&mut self, state: &mut State, sheet: &Sheet, r: u32, row: &[DataRef<'_>], reading: &Reading) -> Result<(), Gone> {
        if row.iter().all(|c| matches!(c, DataRef::Empty) || matches!(c, DataRef::String(s) if s.is_empty())) {
            return Ok(());
        }
        match *state {
            State::First => {
                let mut texts: Vec<String> = row.iter().map(heading).collect();
                // Empty cells after the last title (a styled but empty cell) name no column.
                while texts.last().is_some_and(|t| t.trim().is_empty()) {
                    texts.pop();
                }
                let mut names = Vec::with_capacity(texts.len());
                for text in &texts {
                    let (name, zone) = reading.headings.read(&reading.dataset, text);
                    let ty = reading.dataset.column(&name).map(|c| c.ty.clone());
                    self.columns.push((name.clone(), ty, zone.unwrap_or(jiff::tz::TimeZone::UTC)));
                    names.push(name);
                }
                self.header = Some(texts);
                *state = State::Rows;
                self.tx.blocking_send(Ok(Read::Header(names, true))).map_err(|_| Gone)
            }
            State::Heading => {
                let texts: Vec<String> = row.iter().map(heading).collect();
                let same = self.header.as_ref().is_some_and(|h| trimmed(h) == trimmed(&texts));
                *state = if same { State::Rows } else { State::Skipping };
                Ok(())
            }
            State::Skipping => Ok(()),
            State::Rows => {
                self.number += 1;
                let width = self.columns.len();
                let mut cells = Vec::with_capacity(width);
                let mut flagged = Vec::new();
                let mut outside = None;
                for (i, cell) in row.iter().enumerate() {
                    match self.columns.get(i) {
                        Some((name, ty, zone)) => match text_of(cell, ty.as_ref(), zone) {
                            Ok(text) => cells.push(text),
                            Err(mut p) => {
                                p.column = name.clone();
                                cells.push(String::new());
                                flagged.push(p);
                            }
                        },
                        None if matches!(cell, DataRef::Empty) => {}
                        None => {
                            outside.get_or_insert(i + 1);
                        }
                    }
                }
                if let Some(column) = outside {
                    flagged.push(Problem::new("", "outside_header", format!("a cell in column {column} is right of the header's last")));
                }
                cells.resize(width, String::new());
                self.chunk.push(Record { number: self.number, line: i64::from(r) + 1, sheet: Some(sheet.clone()), cells, flagged });
                if self.chunk.len() == CHUNK {
                    self.tx.blocking_send(Ok(Read::Records(std::mem::take(&mut self.chunk)))).map_err(|_| Gone)?;
                }
                Ok(())
            }
        }
    }
}

fn trimmed(texts: &[String]) -> Vec<&str> {
    let mut t: Vec<&str> = texts.iter().map(|s| s.trim()).collect();
    while t.last().is_some_and(|s| s.is_empty()) {
        t.pop();
    }
    t
}

/// A header cell as text.
fn heading(cell: &DataRef<'_>) -> String {
    match cell {
        DataRef::String(s) => s.clone(),
        DataRef::SharedString(s) => (*s).to_owned(),
        other => text_of(other, None, &jiff::tz::TimeZone::UTC).unwrap_or_default(),
    }
}

/// A number as a cell's text: a whole number without `.0`, any other rounded to the 15
/// significant digits a spreadsheet keeps (so `0.30000000000000004` is `0.3`).
fn number_text(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        return format!("{}", value as i64);
    }
    let rounded: f64 = format!("{value:.14e}").parse().unwrap_or(value);
    format!("{rounded}")
}

/// A date-time cell as a civil date-time (to the millisecond), if it is one a workbook's
/// calendar holds (serials 0 to 9999-12-31's).
fn civil(cell: &calamine::ExcelDateTime) -> Option<jiff::civil::DateTime> {
    if !(0.0..2_958_466.0).contains(&cell.as_f64()) {
        return None;
    }
    let (y, mo, d, h, mi, s, ms) = cell.to_ymd_hms_milli();
    jiff::civil::DateTime::new(i16::try_from(y).ok()?, mo as i8, d as i8, h as i8, mi as i8, s as i8, i32::from(ms) * 1_000_000).ok()
}

/// An instant's text for a timestamp column: RFC 3339 with the offset of `zone` (a repeated local
/// time reads as its earlier instant; one in a gap as the offset before it), with milliseconds
/// only when it has them.
fn instant_text(local: jiff::civil::DateTime, zone: &jiff::tz::TimeZone) -> Option<String> {
    let zoned = zone.to_ambiguous_zoned(local).earlier().ok()?;
    let format = if local.subsec_nanosecond() == 0 { "%Y-%m-%dT%H:%M:%S%:z" } else { "%Y-%m-%dT%H:%M:%S%.3f%:z" };
    Some(zoned.strftime(format).to_string())
}

/// A workbook's cell as the text its column reads: text as it is, numbers and booleans as they
/// would be written, a date-time cell by the column's type. `zone` is the header's.
fn text_of(cell: &DataRef<'_>, ty: Option<&ColumnType>, zone: &jiff::tz::TimeZone) -> Result<String, Problem> {
    Ok(match cell {
        DataRef::Empty => String::new(),
        DataRef::String(s) => s.clone(),
        DataRef::SharedString(s) => (*s).to_owned(),
        DataRef::Bool(b) => b.to_string(),
        DataRef::Int(n) => n.to_string(),
        DataRef::Float(f) => number_text(*f),
        DataRef::DateTime(dt) => {
            let local = civil(dt).ok_or_else(|| Problem::new("", "invalid_date", "a date-time outside the calendar"))?;
            let midnight = local.time() == jiff::civil::Time::midnight();
            match ty {
                Some(ColumnType::Timestamp { .. }) => instant_text(local, zone).ok_or_else(|| Problem::new("", "invalid_instant", "a date-time outside the calendar"))?,
                _ if midnight => local.date().to_string(),
                _ => local.strftime("%Y-%m-%d %H:%M:%S").to_string(),
            }
        }
        DataRef::DateTimeIso(text) => match ty {
            Some(ColumnType::Timestamp { .. }) => match text.parse::<jiff::civil::DateTime>() {
                Ok(local) => instant_text(local, zone).unwrap_or_else(|| text.clone()),
                Err(_) => text.clone(),
            },
            _ => text.clone(),
        },
        DataRef::DurationIso(text) => text.clone(),
        DataRef::Error(e) => return Err(Problem::new("", "cell_error", format!("a cell holds the spreadsheet error {e}"))),
    })
}

/// A sink that counts what it is given and refuses past a limit.
struct Counted {
    left: u64,
}

impl Write for Counted {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.left = self.left.checked_sub(bytes.len() as u64).ok_or_else(|| std::io::Error::new(std::io::ErrorKind::FileTooLarge, "past the limit"))?;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Inflates every entry of the archive in `file`, counting: more than `limit` bytes in all, a
/// shared-string table of more than [`SHARED_STRINGS_MAX_BYTES`], or more than [`MAX_ENTRIES`]
/// entries fail the file, as soon as they are passed.
fn check_archive(file: &mut std::fs::File, limit: u64) -> Result<(), Problem> {
    let mut archive = zip::ZipArchive::new(&mut *file).map_err(invalid)?;
    if archive.len() > MAX_ENTRIES {
        return Err(invalid(format!("{} entries; a workbook has at most {MAX_ENTRIES}", archive.len())));
    }
    let mut left = limit;
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).map_err(invalid)?;
        // calamine finds a part whatever its case and separators; so does this.
        let name = entry.name().replace('\\', "/").to_ascii_lowercase();
        let held = !(name.contains("worksheets/") && name.ends_with(".xml"));
        let mut sink = Counted { left: if held { left.min(SHARED_STRINGS_MAX_BYTES) } else { left } };
        let before = sink.left;
        match std::io::copy(&mut entry, &mut sink) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::FileTooLarge && held && left > SHARED_STRINGS_MAX_BYTES => {
                return Err(Problem::new("", "workbook_too_large", format!("{name} inflates past {} MiB, which is held in memory; save it as CSV to import it", SHARED_STRINGS_MAX_BYTES >> 20)));
            }
            Err(e) if e.kind() == std::io::ErrorKind::FileTooLarge => {
                return Err(Problem::new("", "workbook_too_large", format!("it inflates past {limit} bytes, 20 times the largest upload")));
            }
            Err(e) => return Err(invalid(e)),
        }
        left -= before - sink.left;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_reads_as_it_would_be_written() {
        assert_eq!(number_text(12.0), "12");
        assert_eq!(number_text(-12.5), "-12.5");
        assert_eq!(number_text(0.1 + 0.2), "0.3");
        assert_eq!(number_text(966_501_234_567.0), "966501234567");
        assert_eq!(number_text(1e16), "10000000000000000");
    }

    #[test]
    fn a_date_time_reads_in_the_headers_zone_and_a_repeated_hour_as_its_earlier_instant() {
        let zone = jiff::tz::TimeZone::get("America/New_York").unwrap();
        let local = jiff::civil::date(2026, 11, 1).at(1, 30, 0, 0);
        assert_eq!(instant_text(local, &zone).as_deref(), Some("2026-11-01T01:30:00-04:00"));
        let riyadh = jiff::tz::TimeZone::get("Asia/Riyadh").unwrap();
        assert_eq!(instant_text(jiff::civil::date(2026, 1, 31).at(9, 30, 0, 500_000_000), &riyadh).as_deref(), Some("2026-01-31T09:30:00.500+03:00"));
    }

    /// A workbook's entries, with `sheet1.xml` changed by `edit`, zipped again.
    fn edited(edit: impl Fn(String) -> String) -> Vec<u8> {
        let mut book = rust_xlsxwriter::Workbook::new();
        let sheet = book.add_worksheet();
        for (r, row) in [["email", "country"], ["a@acme.test", "SA"], ["b@acme.test", "AE"]].iter().enumerate() {
            for (c, cell) in row.iter().enumerate() {
                sheet.write_string(r as u32, c as u16, *cell).unwrap();
            }
        }
        let bytes = book.save_to_buffer().unwrap();
        let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes)).unwrap();
        let mut out = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        for i in 0..archive.len() {
            let mut entry = archive.by_index(i).unwrap();
            let mut text = String::new();
            std::io::Read::read_to_string(&mut entry, &mut text).unwrap();
            let text = if entry.name().ends_with("sheet1.xml") { edit(text) } else { text };
            out.start_file(entry.name(), zip::write::SimpleFileOptions::default()).unwrap();
            out.write_all(text.as_bytes()).unwrap();
        }
        out.finish().unwrap().into_inner()
    }

    /// What reading `workbook` as customers sends: its records' emails, or its whole-file error.
    fn read_customers(workbook: Vec<u8>) -> Result<Vec<String>, String> {
        let catalog = crate::catalog::Catalog::builtin();
        let dataset = Arc::new(catalog.dataset("customers").unwrap().clone());
        let reading = Reading { headings: Arc::new(crate::imports::cells::Headings::of(&catalog, &dataset)), dataset, inflate_limit: 1 << 30 };
        let (tx, mut rx) = tokio::sync::mpsc::channel(64);
        parse(std::io::Cursor::new(workbook), &reading, &tx);
        drop(tx);
        let mut emails = Vec::new();
        while let Ok(next) = rx.try_recv() {
            match next {
                Ok(Read::Records(records)) => emails.extend(records.into_iter().map(|r| r.cells[0].clone())),
                Ok(Read::Header(..)) => {}
                Err(p) => return Err(p.code.into_owned()),
            }
        }
        Ok(emails)
    }

    #[test]
    fn a_sheets_rows_read_in_order_and_a_row_that_goes_back_fails_the_file() {
        assert_eq!(read_customers(edited(|xml| xml)), Ok(vec!["a@acme.test".to_owned(), "b@acme.test".to_owned()]));
        // The third row claims to be the second: every later read of the file relies on order.
        let back = edited(|xml| xml.replace("<row r=\"3\"", "<row r=\"2\"").replace("r=\"A3\"", "r=\"A1\"").replace("r=\"B3\"", "r=\"B1\""));
        assert_eq!(read_customers(back), Err("invalid_xlsx".to_owned()));
    }

    #[test]
    fn a_part_held_in_memory_is_capped_whatever_the_case_of_its_name() {
        let mut file = tempfile::tempfile().unwrap();
        {
            let mut zip = zip::ZipWriter::new(&mut file);
            zip.start_file("xl/SHAREDstrings.xml", zip::write::SimpleFileOptions::default()).unwrap();
            let chunk = vec![b' '; 1 << 20];
            for _ in 0..(SHARED_STRINGS_MAX_BYTES >> 20) + 1 {
                zip.write_all(&chunk).unwrap();
            }
            zip.finish().unwrap();
        }
        file.rewind().unwrap();
        assert_eq!(check_archive(&mut file, 1 << 40).unwrap_err().code, "workbook_too_large");
    }

    #[test]
    fn an_archive_that_inflates_past_the_limit_fails_while_it_is_inflated() {
        let mut file = tempfile::tempfile().unwrap();
        {
            let mut zip = zip::ZipWriter::new(&mut file);
            zip.start_file("xl/worksheets/sheet1.xml", zip::write::SimpleFileOptions::default()).unwrap();
            zip.write_all(&vec![b'a'; 1 << 20]).unwrap();
            zip.finish().unwrap();
        }
        file.rewind().unwrap();
        assert_eq!(check_archive(&mut file, 1 << 19).unwrap_err().code, "workbook_too_large");
        file.rewind().unwrap();
        assert!(check_archive(&mut file, 1 << 21).is_ok());
        let mut not_zip = tempfile::tempfile().unwrap();
        not_zip.write_all(b"PK\x03\x04 and then nothing").unwrap();
        not_zip.rewind().unwrap();
        assert_eq!(check_archive(&mut not_zip, 1 << 20).unwrap_err().code, "invalid_xlsx");
    }
}
