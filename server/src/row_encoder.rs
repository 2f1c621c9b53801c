//! One interface for writing an export's rows, whatever the file: CSV ([`crate::csv_cells`]) or
//! an XLSX workbook ([`crate::xlsx_cells`]). The snapshot's readers decode each backend's values
//! once and hand them here typed; what a type becomes in the file is the encoder's business.

use std::io::Write;

/// Writes a file's cells a row at a time. Bytes ready to go are taken with [`RowEncoder::take`]
/// as the rows come (a CSV's); whatever the file keeps to its end (a workbook's package) comes
/// out of [`RowEncoder::finish`].
pub trait RowEncoder: Send + 'static {
    /// A text cell.
    fn text(&mut self, text: &str) -> std::io::Result<()>;
    /// A text cell whose bytes the source guarantees are UTF-8 (PostgreSQL 15 or later's text,
    /// with the database and the connection in UTF8): an encoder that needs them as a `str`
    /// checks them first (an error of kind `InvalidData` when they are not); one that writes
    /// bytes need not.
    fn text_utf8(&mut self, text: &[u8]) -> std::io::Result<()> {
        self.text(std::str::from_utf8(text).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?)
    }
    /// A whole number.
    fn integer(&mut self, n: i64) -> std::io::Result<()>;
    /// A decimal already rounded to its `scale` places (`-0.500`).
    fn decimal(&mut self, digits: &str, scale: u32) -> std::io::Result<()>;
    /// Money in minor units of a currency with `places` places.
    fn money_in(&mut self, minor: i64, places: u32) -> std::io::Result<()>;
    /// A day.
    fn date(&mut self, day: jiff::civil::Date) -> std::io::Result<()>;
    /// An instant, epoch milliseconds. One outside the calendar's range is an error of kind
    /// `InvalidData`: an empty cell would be a silent loss.
    fn instant(&mut self, ms: i64) -> std::io::Result<()>;
    /// `true` or `false`.
    fn boolean(&mut self, value: bool) -> std::io::Result<()>;
    /// An empty cell (a NULL).
    fn empty(&mut self) -> std::io::Result<()>;
    /// Ends the current row.
    fn end_row(&mut self) -> std::io::Result<()>;
    /// About how many bytes wait to be taken.
    fn buffered(&self) -> usize;
    /// Takes every byte ready so far, leaving `next` (an empty buffer, perhaps one whose bytes
    /// were staged already) to be filled with the bytes that follow.
    fn take(&mut self, next: Vec<u8>) -> std::io::Result<Vec<u8>>;
    /// Writes the rest of the file into `out`.
    fn finish(self, out: &mut (dyn Write + Send)) -> std::io::Result<()>;
}
