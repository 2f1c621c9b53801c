//! Reading an import's files on a blocking thread, a chunk at a time: the upload as records read
//! by the dataset's header — a CSV (RFC 4180, the line each record starts on counted, the record
//! limit enforced while the bytes arrive, so no record longer than any valid one is ever held
//! whole) or an XLSX workbook, told apart by its first bytes (see [`super::import_workbook`]) —
//! and a report as its entries in order. Each read of the store is bounded in time.

use super::attempt::Stop;
use crate::catalog::Dataset;
use crate::imports::cells::{read_record, Checks, Header, Headings, Problem, Value};
use crate::job_store::transitions::Failure;
use crate::storage::ExportStore;
use futures::StreamExt;
use object_store::path::Path;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// Records handed from the parsing thread at a time.
pub(super) const CHUNK: usize = 512;

/// The most bytes one record may take in the file. The longest valid record (every column of
/// a dataset and every column an export adds, `notes` at 10,000 characters and every other
/// text at 1,000, four bytes a character, every quote doubled) is about 140 KiB; a longer one
/// fails the file (`record_too_long`) once this many of its bytes are read.
pub const RECORD_MAX_BYTES: u64 = 1 << 20;

/// How long one read from the store may wait before the file counts as unreadable (a store
/// that stopped answering): the attempt then fails as the store's fault, and is retried.
pub const STORE_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// The code of a problem that means the file is no longer in the store.
const FILE_GONE: &str = "file_gone";

/// Why a read stopped: the object is not in the store (an upload that expired).
#[derive(Debug)]
struct FileGone;

impl std::fmt::Display for FileGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the file is no longer in the store")
    }
}

impl std::error::Error for FileGone {}

/// Runs `read` on a blocking thread over the bytes of `key` in `store`, each wait for the next
/// chunk bounded by [`STORE_READ_TIMEOUT`]. A missing object reads as an error of [`FileGone`].
fn on_reader_thread<T: Send + 'static>(
    store: &ExportStore,
    key: &str,
    tx: tokio::sync::mpsc::Sender<T>,
    failed: fn(std::io::Error) -> T,
    read: impl FnOnce(Box<dyn std::io::Read + Send>, &tokio::sync::mpsc::Sender<T>) + Send + 'static,
) {
    let objects = store.objects().clone();
    let key = Path::from(key);
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let opened = handle.block_on(async { tokio::time::timeout(STORE_READ_TIMEOUT, objects.get(&key)).await });
        let stream = match opened {
            Ok(Ok(r)) => r.into_stream(),
            Ok(Err(object_store::Error::NotFound { .. })) => {
                let _ = tx.blocking_send(failed(std::io::Error::new(std::io::ErrorKind::NotFound, FileGone)));
                return;
            }
            Ok(Err(e)) => {
                let _ = tx.blocking_send(failed(std::io::Error::other(e)));
                return;
            }
            Err(_) => {
                let _ = tx.blocking_send(failed(std::io::Error::new(std::io::ErrorKind::TimedOut, "the store did not answer")));
                return;
            }
        };
        let bounded = futures::stream::unfold(stream, |mut stream| async move {
            match tokio::time::timeout(STORE_READ_TIMEOUT, stream.next()).await {
                Ok(Some(chunk)) => Some((chunk.map_err(std::io::Error::other), stream)),
                Ok(None) => None,
                Err(_) => Some((Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the store stopped answering")), stream)),
            }
        });
        let reader = tokio_util::io::SyncIoBridge::new_with_handle(tokio_util::io::StreamReader::new(Box::pin(bounded)), handle);
        read(Box::new(reader), &tx);
    });
}

/// What reading an upload needs besides its bytes: its dataset, the titles that name the
/// dataset's columns in a workbook, and the most a workbook may inflate to.
#[derive(Clone)]
pub(super) struct Reading {
    pub(super) dataset: Arc<Dataset>,
    pub(super) headings: Arc<Headings>,
    pub(super) inflate_limit: u64,
}

impl Reading {
    /// What a worker reads `dataset`'s uploads with: its catalog's titles, and a workbook's
    /// limit of 20 times the largest upload.
    pub(super) fn of(ctx: &crate::worker::WorkerContext, dataset: &Arc<Dataset>) -> Reading {
        let headings = Arc::new(Headings::of(&ctx.config.catalog, dataset));
        Reading { dataset: dataset.clone(), headings, inflate_limit: ctx.config.max_upload_bytes.saturating_mul(20) }
    }
}

/// The records of the file at `key` in `store`, read by the dataset's header.
pub(super) fn rows(store: &ExportStore, key: &str, reading: &Reading) -> Rows {
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    let failed = |e: std::io::Error| {
        let code = if e.get_ref().is_some_and(|inner| inner.is::<FileGone>()) { FILE_GONE } else { "storage" };
        Err(Problem::new("", code, e.to_string()))
    };
    let on_thread = reading.clone();
    on_reader_thread(store, key, tx, failed, move |reader, tx| {
        use std::io::Read as _;
        let mut reader = reader;
        match super::import_workbook::sniff(&mut reader) {
            Ok((head, true)) => super::import_workbook::parse(head.chain(reader), &on_thread, tx),
            Ok((head, false)) => parse(head.chain(reader), tx),
            Err(e) => drop(tx.blocking_send(Err(Problem::new("", "storage", e.to_string())))),
        }
    });
    Rows { rx, header: None, checks: Checks::of(&reading.dataset), dataset: reading.dataset.clone() }
}

/// Whether the file at `key` in `store` is a workbook (its first bytes are a ZIP's). A file no
/// longer in the store (or shorter than a signature) counts as a CSV: its reading says why.
pub(super) async fn is_workbook(store: &ExportStore, key: &str) -> Result<bool, Stop> {
    let path = Path::from(key);
    let read = async {
        let size = store.objects().head(&path).await?.size;
        if size < 4 {
            return Ok(false);
        }
        Ok::<_, object_store::Error>(store.objects().get_range(&path, 0..4).await?.as_ref() == super::import_workbook::SIGNATURE)
    };
    match tokio::time::timeout(STORE_READ_TIMEOUT, read).await {
        Ok(Ok(workbook)) => Ok(workbook),
        Ok(Err(object_store::Error::NotFound { .. })) => Ok(false),
        Ok(Err(e)) => Err(Stop::storage(e)),
        Err(_) => Err(Stop::storage("the store did not answer")),
    }
}

/// One entry of a report: a record's line, and one of its problems.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    /// The line where the record starts.
    pub(super) line: i64,
    /// The column, or empty for the record as a whole.
    pub(super) column: String,
    /// The problem's code.
    pub(super) code: String,
    /// The problem in words.
    pub(super) message: String,
}

/// A report's entries in line order (as it was written), read a chunk at a time.
pub(super) struct Entries {
    rx: Option<tokio::sync::mpsc::Receiver<Result<Vec<Entry>, String>>>,
    buffered: VecDeque<Entry>,
}

impl Entries {
    /// No report: no entries.
    pub(super) fn none() -> Entries {
        Entries { rx: None, buffered: VecDeque::new() }
    }

    /// The entries of the report at `key` in `store`.
    pub(super) fn open(store: &ExportStore, key: &str) -> Entries {
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        on_reader_thread(store, key, tx, |e| Err(e.to_string()), |reader, tx| {
            let mut csv = csv::ReaderBuilder::new().flexible(true).from_reader(reader);
            let mut record = csv::StringRecord::new();
            let mut chunk = Vec::with_capacity(CHUNK);
            loop {
                match csv.read_record(&mut record) {
                    Ok(false) => break,
                    Ok(true) => {}
                    Err(e) => {
                        let _ = tx.blocking_send(Err(e.to_string()));
                        return;
                    }
                }
                let Some(line) = record.get(0).and_then(|l| l.parse::<i64>().ok()) else { continue };
                let cell = |i: usize| record.get(i).unwrap_or("").to_owned();
                chunk.push(Entry { line, column: cell(1), code: cell(2), message: cell(3) });
                if chunk.len() == CHUNK && tx.blocking_send(Ok(std::mem::take(&mut chunk))).is_err() {
                    return;
                }
            }
            if !chunk.is_empty() {
                let _ = tx.blocking_send(Ok(chunk));
            }
        });
        Entries { rx: Some(rx), buffered: VecDeque::new() }
    }

    /// The entries of the record at `position` ([`Record::position`], which the validation's
    /// report writes as its line), passing over any before it: positions are asked for in order.
    pub(super) async fn take(&mut self, line: i64) -> Result<Vec<Entry>, Stop> {
        let mut found = Vec::new();
        loop {
            while let Some(front) = self.buffered.front() {
                if front.line > line {
                    return Ok(found);
                }
                if let Some(entry) = self.buffered.pop_front().filter(|e| e.line == line) {
                    found.push(entry);
                }
            }
            let Some(rx) = &mut self.rx else { return Ok(found) };
            match rx.recv().await {
                Some(Ok(chunk)) => self.buffered.extend(chunk),
                Some(Err(e)) => return Err(Stop::storage(format!("the validation's report: {e}"))),
                None => self.rx = None,
            }
        }
    }
}

/// One record of the file: where it starts and its cells as the file has them.
#[derive(Debug, Clone)]
pub(super) struct Record {
    /// 1-based among the data records.
    pub(super) number: i64,
    /// The physical line where it starts (the header is line 1); in a workbook, its sheet's row.
    pub(super) line: i64,
    /// In a workbook, its sheet.
    pub(super) sheet: Option<Sheet>,
    /// Its cells (a workbook's as text, read by their columns' types).
    pub(super) cells: Vec<String>,
    /// What the reader found wrong with it (a workbook's cell holding an error).
    pub(super) flagged: Vec<Problem>,
}

/// A sheet of a workbook.
#[derive(Debug, Clone)]
pub(super) struct Sheet {
    /// Its place among the workbook's sheets, from 0.
    pub(super) index: u32,
    /// Its name.
    pub(super) name: Arc<str>,
}

impl Record {
    /// Where it is in the file, as one number that grows with every record: its line, after its
    /// sheet's index. A CSV's is its line.
    pub(super) fn position(&self) -> i64 {
        (i64::from(self.sheet.as_ref().map_or(0, |s| s.index)) << 32) | self.line
    }

    /// Its sheet's name, in a workbook.
    pub(super) fn sheet_name(&self) -> Option<&str> {
        self.sheet.as_ref().map(|s| s.name.as_ref())
    }
}

/// A record read by the header's rules.
#[derive(Debug, Clone)]
pub(super) struct Row {
    pub(super) record: Record,
    /// The settable columns the file has (by their index in the dataset), with their values.
    pub(super) values: Vec<(usize, Value)>,
    /// What is wrong with it.
    pub(super) problems: Vec<Problem>,
}

impl Row {
    /// The compared text of each part of the record's key, when every key cell is valid.
    pub(super) fn key_parts(&self, dataset: &Dataset) -> Option<Vec<String>> {
        dataset.key.iter().map(|k| self.value_of(dataset, &k.name).and_then(|v| v.compared(k.compare))).collect()
    }

    /// The record's key as one text (its parts joined by a unit separator), when valid.
    pub(super) fn key(&self, dataset: &Dataset) -> Option<String> {
        match dataset.key.as_slice() {
            // The common case, read for every record of every pass: no list, no join.
            [only] => self.value_of(dataset, &only.name).and_then(|v| v.compared(only.compare)),
            _ => self.key_parts(dataset).map(|parts| parts.join("\u{1f}")),
        }
    }

    /// The value of the column `name`, when the file has it and it is valid.
    pub(super) fn value_of(&self, dataset: &Dataset, name: &str) -> Option<&Value> {
        self.values.iter().find_map(|(i, v)| (dataset.columns[*i].name == name).then_some(v))
    }

    /// The value of the column at `index`, when the file has it and it is valid.
    pub(super) fn value(&self, index: usize) -> Option<&Value> {
        self.values.iter().find_map(|(i, v)| (*i == index).then_some(v))
    }
}

/// What reading the file gave: the header, then chunks of records, or a whole-file error.
pub(super) enum Read {
    /// The header row's names, and whether they head a workbook's cells (not defused).
    Header(Vec<String>, bool),
    /// Data records.
    Records(Vec<Record>),
}


/// What the next read of the file gave.
pub(super) enum Next {
    /// Records, read by the header's rules.
    Rows(Vec<Row>),
    /// The end of the file.
    End,
    /// A whole-file error.
    Invalid(Problem),
}

/// The file's records, a chunk at a time, as the parsing thread sends them.
pub(super) struct Rows {
    rx: tokio::sync::mpsc::Receiver<Result<Read, Problem>>,
    header: Option<Header>,
    dataset: Arc<Dataset>,
    checks: Checks,
}

impl Rows {
    /// The next chunk of rows, the end, or a whole-file error; a store that fails is a `Stop`.
    pub(super) async fn next(&mut self) -> Result<Next, Stop> {
        loop {
            let Some(next) = self.rx.recv().await else {
                return Ok(match self.header {
                    Some(_) => Next::End,
                    None => Next::Invalid(Problem::new("", "missing_header", "the file has no header row")),
                });
            };
            match next {
                Ok(Read::Header(names, workbook)) => {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    match Header::read(&self.dataset, &names) {
                        Ok(mut h) => {
                            h.defused = !workbook;
                            self.header = Some(h);
                        }
                        Err(p) => return Ok(Next::Invalid(p)),
                    }
                }
                Ok(Read::Records(records)) => {
                    let Some(h) = &self.header else { return Ok(Next::Invalid(Problem::new("", "missing_header", "the file has no header row"))) };
                    return Ok(Next::Rows(
                        records
                            .into_iter()
                            .map(|mut record| {
                                let (values, mut problems) = read_record(&self.dataset, &self.checks, h, &record.cells);
                                problems.append(&mut record.flagged);
                                Row { record, values, problems }
                            })
                            .collect(),
                    ));
                }
                Err(p) if p.code == "storage" => return Err(Stop::storage(p.message)),
                Err(p) if p.code == FILE_GONE => return Err(Stop::Failed { failure: Failure::UPLOAD_EXPIRED, detail: p.message }),
                Err(p) => return Ok(Next::Invalid(p)),
            }
        }
    }
}


/// Parses `reader` as CSV on the calling (blocking) thread, sending the header and then chunks
/// of records; stops at the first whole-file error.
fn parse(reader: impl std::io::Read, tx: &tokio::sync::mpsc::Sender<Result<Read, Problem>>) {
    parse_within(reader, RECORD_MAX_BYTES, tx)
}

/// [`parse`] with records of at most `max_record` bytes: a longer one fails the file as soon as
/// that many bytes of it are read, so no more of it is ever held.
fn parse_within(reader: impl std::io::Read, max_record: u64, tx: &tokio::sync::mpsc::Sender<Result<Read, Problem>>) {
    let tally = std::rc::Rc::new(std::cell::RefCell::new(Tally::default()));
    let reader = Tallied { inner: reader, tally: tally.clone(), max_record };
    let mut csv = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(reader);
    let mut record = csv::ByteRecord::new();
    let mut chunk = Vec::with_capacity(CHUNK);
    let mut number = 0i64;
    let mut first = true;
    loop {
        match csv.read_byte_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                let problem = match e.kind() {
                    csv::ErrorKind::Io(io) if io.get_ref().is_some_and(|inner| inner.is::<RecordTooLong>()) => {
                        let line = tally.borrow().passed + 1;
                        Problem::new("", "record_too_long", format!("the record on line {line} is longer than {max_record} bytes, more than any valid record"))
                    }
                    csv::ErrorKind::Io(_) => Problem::new("", "storage", e.to_string()),
                    _ => Problem::new("", "invalid_csv", e.to_string()),
                };
                let _ = tx.blocking_send(Err(problem));
                return;
            }
        }
        let inside = record.iter().map(|f| f.iter().filter(|b| **b == b'\n').count() as u64).sum::<u64>();
        let end = csv.position().byte();
        let line = tally.borrow_mut().start_line(end, inside);
        let mut cells = Vec::with_capacity(record.len());
        for field in record.iter() {
            match std::str::from_utf8(field) {
                Ok(text) => cells.push(text.to_owned()),
                Err(_) => {
                    let _ = tx.blocking_send(Err(Problem::new("", "not_utf8", format!("line {line} is not UTF-8"))));
                    return;
                }
            }
        }
        if first {
            first = false;
            if tx.blocking_send(Ok(Read::Header(cells, false))).is_err() {
                return;
            }
            continue;
        }
        number += 1;
        chunk.push(Record { number, line, sheet: None, cells, flagged: Vec::new() });
        if chunk.len() == CHUNK && tx.blocking_send(Ok(Read::Records(std::mem::take(&mut chunk)))).is_err() {
            return;
        }
    }
    // In RFC 4180 every quote comes in a pair (an opening and a closing one, or `""` for a quote
    // in a quoted cell); the parser reads an unterminated quoted cell to the end of the file.
    if tally.borrow().quotes % 2 == 1 {
        let _ = tx.blocking_send(Err(Problem::new("", "unterminated_quote", "a quoted cell is not closed before the end of the file")));
        return;
    }
    if !chunk.is_empty() {
        let _ = tx.blocking_send(Ok(Read::Records(chunk)));
    }
}

/// What the bytes read so far hold: their quotes, and where their line feeds are. A record's
/// line is worked out from where it ends (the parser's position after it is exact, where the
/// position it gives for its start is not after a CRLF or blank lines): the line feeds before
/// its end, less those inside its cells and its own terminating one.
#[derive(Default)]
struct Tally {
    /// Bytes read.
    read: u64,
    quotes: u64,
    /// Offsets of the line feeds read but not yet passed by a record's end.
    feeds: std::collections::VecDeque<u64>,
    /// Line feeds passed.
    passed: u64,
    /// The offset of the last line feed passed.
    last_feed: Option<u64>,
    /// The offset just past the last record's end.
    record_end: u64,
    /// The line the last record started on.
    last_start: i64,
}

impl Tally {
    fn saw(&mut self, bytes: &[u8]) {
        for (i, b) in bytes.iter().enumerate() {
            match b {
                b'"' => self.quotes += 1,
                b'\n' => self.feeds.push_back(self.read + i as u64),
                _ => {}
            }
        }
        self.read += bytes.len() as u64;
    }

    /// The 1-based line a record starts on, given the offset just past its end and the line
    /// feeds inside its cells.
    fn start_line(&mut self, end: u64, inside: u64) -> i64 {
        while self.feeds.front().is_some_and(|&at| at < end) {
            self.last_feed = self.feeds.pop_front();
            self.passed += 1;
        }
        self.record_end = end;
        let terminated_by_feed = end > 0 && self.last_feed == Some(end - 1);
        // A file the parser reads leniently (a quote closed mid-cell, another opened and left
        // open to the end) can end in a line feed that is both inside a cell and the last byte:
        // counted twice it would put the record before the one it follows.
        let line = (1 + self.passed).saturating_sub(inside + terminated_by_feed as u64) as i64;
        self.last_start = line.max(self.last_start).max(1);
        self.last_start
    }
}

/// A reader that tallies what passes through it, and refuses to read on once the record being
/// parsed has taken more than `max_record` bytes.
struct Tallied<R> {
    inner: R,
    tally: std::rc::Rc<std::cell::RefCell<Tally>>,
    max_record: u64,
}

/// Why [`Tallied`] stopped: the record being read is longer than any valid record.
#[derive(Debug)]
struct RecordTooLong;

impl std::fmt::Display for RecordTooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a record longer than any valid one")
    }
}

impl std::error::Error for RecordTooLong {}

impl<R: std::io::Read> std::io::Read for Tallied<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        {
            let tally = self.tally.borrow();
            if tally.read - tally.record_end > self.max_record {
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, RecordTooLong));
            }
        }
        let n = self.inner.read(buf)?;
        self.tally.borrow_mut().saw(&buf[..n]);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn records_carry_the_line_they_start_on_counting_line_breaks_inside_quotes() {
        let file = "email,name\r\na@x.test,\"two\nlines\"\nb@x.test,plain\r\n\n\r\nc@x.test,after blank lines\r\nd@x.test,\"cr\r\nlf\"";
        let (tx, mut rx) = tokio::sync::mpsc::channel(8);
        parse(file.as_bytes(), &tx);
        drop(tx);
        let mut lines = Vec::new();
        while let Ok(next) = rx.try_recv() {
            if let Ok(Read::Records(records)) = next {
                lines.extend(records.iter().map(|r| (r.number, r.line)));
            }
        }
        assert_eq!(lines, vec![(1, 2), (2, 4), (3, 7), (4, 8)]);
    }

    #[test]
    fn a_line_feed_inside_a_cell_left_open_at_the_end_of_the_file_does_not_put_its_record_before_the_last() {
        // Found by the property below: the parser closes the quote after the first four quotes
        // of the second record, reads `a"` on, and opens a last quote that holds the final line
        // feed; the quotes still pair up, so the file reads.
        let (tx, mut rx) = tokio::sync::mpsc::channel(8);
        parse_within(&b"\"\"\"\"\"\"\r\"\"\"\"a\",\"\n"[..], 9, &tx);
        drop(tx);
        let mut lines = Vec::new();
        while let Ok(next) = rx.try_recv() {
            if let Ok(Read::Records(records)) = next {
                lines.extend(records.iter().map(|r| r.line));
            }
        }
        assert_eq!(lines, vec![1]);
    }

    /// A file whose second record is one quoted cell of `feeds` line feeds, closed.
    struct QuotedFeeds {
        head: std::io::Cursor<Vec<u8>>,
        feeds: u64,
        tail: std::io::Cursor<Vec<u8>>,
    }

    impl QuotedFeeds {
        fn new(feeds: u64) -> QuotedFeeds {
            QuotedFeeds { head: std::io::Cursor::new(b"email,name\na@x.test,\"".to_vec()), feeds, tail: std::io::Cursor::new(b"\"\nb@x.test,after\n".to_vec()) }
        }
    }

    impl std::io::Read for QuotedFeeds {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.head.read(buf)?;
            if n > 0 {
                return Ok(n);
            }
            if self.feeds > 0 {
                let n = buf.len().min(self.feeds as usize);
                buf[..n].fill(b'\n');
                self.feeds -= n as u64;
                return Ok(n);
            }
            self.tail.read(buf)
        }
    }

    #[test]
    fn a_record_longer_than_any_valid_one_fails_the_file_while_it_is_read() {
        // 64 Mi line feeds inside quotes: the old reader held the whole record, and the line
        // feeds' offsets beside it, and then took it as a record.
        let (tx, mut rx) = tokio::sync::mpsc::channel(8);
        parse(QuotedFeeds::new(64 << 20), &tx);
        drop(tx);
        let mut failed = None;
        while let Ok(next) = rx.try_recv() {
            match next {
                Ok(Read::Records(records)) => assert!(records.iter().all(|r| r.cells.iter().map(String::len).sum::<usize>() < 1 << 20), "no record of that size is handed on"),
                Ok(Read::Header(..)) => {}
                Err(p) => failed = Some(p.code),
            }
        }
        assert_eq!(failed.as_deref(), Some("record_too_long"));
    }

    /// A reader that hands out at most `step` bytes a call, as a network stream may.
    struct Trickle<'a> {
        bytes: &'a [u8],
        step: usize,
    }

    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = buf.len().min(self.step).min(self.bytes.len());
            buf[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    /// Everything `parse_within` sends for `bytes`.
    fn sent(bytes: &[u8], step: usize, max_record: u64) -> Vec<Result<Read, Problem>> {
        let (tx, mut rx) = tokio::sync::mpsc::channel(1 << 16);
        parse_within(Trickle { bytes, step }, max_record, &tx);
        drop(tx);
        let mut out = Vec::new();
        while let Ok(next) = rx.try_recv() {
            out.push(next);
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn any_bytes_read_as_records_or_one_whole_file_error_never_a_panic_and_no_record_over_the_limit(
            bytes in proptest::collection::vec(prop_oneof![Just(b'"'), Just(b','), Just(b'\n'), Just(b'\r'), Just(b'a'), any::<u8>()], 0..600),
            step in 1usize..8,
            max_record in 8u64..128,
        ) {
            let out = sent(&bytes, step, max_record);
            let errors = out.iter().filter(|m| m.is_err()).count();
            prop_assert!(errors <= 1, "at most one whole-file error");
            if errors == 1 {
                prop_assert!(out.last().is_some_and(|m| m.is_err()), "the error ends the reading");
            }
            let mut number = 0;
            let mut last_line = 0;
            for message in &out {
                if let Ok(Read::Records(records)) = message {
                    for r in records {
                        number += 1;
                        prop_assert_eq!(r.number, number);
                        // A lone CR ends a record for the parser but is no line feed: two
                        // records can start on one line, never on an earlier one.
                        prop_assert!(r.line >= last_line.max(1), "lines never go back");
                        last_line = r.line;
                        let held: usize = r.cells.iter().map(String::len).sum();
                        // The limit is checked before each read: a record can pass it by one read.
                        prop_assert!(held as u64 <= max_record + step as u64, "a record of {} bytes passed a limit of {}", held, max_record);
                    }
                }
            }
        }
    }
}
