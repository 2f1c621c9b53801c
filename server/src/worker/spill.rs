//! Where the upper half of a whole export waits, on the worker's disk, while the lower half is
//! written ([`crate::worker::snapshot`]'s read in halves): a temporary file, written and read
//! back once, past the page cache where the file system allows it (see
//! [`crate::storage::direct_io`] for why), so that memory stays flat however many rows wait.
//!
//! The file is made in the system's temporary folder (`TMPDIR`) and has no name once open: a
//! process that ends leaves nothing behind.

use crate::storage::direct_io::{self, ALIGN};
use std::fs::File;
use std::os::unix::fs::FileExt;

/// Bytes gathered before they are written: whole blocks, so each write can go direct.
const BLOCK: usize = 1024 * 1024;

/// Bytes set aside to be read back in the order they came.
pub struct Spill {
    /// The file, written the ordinary way (a file system that refuses direct I/O).
    buffered: File,
    /// The same file opened direct, while the file system allows it.
    direct: Option<File>,
    /// The aligned buffer the next block is gathered in, and how much of it is filled.
    block: Vec<u8>,
    filled: usize,
    /// Bytes in the file: whole blocks.
    written: u64,
}

impl Spill {
    /// A new, empty spill.
    pub fn new() -> std::io::Result<Spill> {
        let named = tempfile::NamedTempFile::new()?;
        let direct = direct_io::open_to_write_direct(named.path());
        // The name goes now; the open file stays until the spill is dropped.
        let buffered = named.into_file();
        Ok(Spill { buffered, direct, block: direct_io::buffer(BLOCK), filled: 0, written: 0 })
    }

    /// Sets `bytes` aside after those before them.
    pub fn write(&mut self, mut bytes: &[u8]) -> std::io::Result<()> {
        while !bytes.is_empty() {
            let window = direct_io::aligned(&mut self.block, BLOCK);
            let n = (BLOCK - self.filled).min(bytes.len());
            window[self.filled..self.filled + n].copy_from_slice(&bytes[..n]);
            self.filled += n;
            bytes = &bytes[n..];
            if self.filled == BLOCK {
                self.write_block()?;
            }
        }
        Ok(())
    }

    /// Writes the full block at the end of the file: direct, or the ordinary way once the file
    /// system has refused.
    fn write_block(&mut self) -> std::io::Result<()> {
        let window = direct_io::aligned(&mut self.block, BLOCK);
        if let Some(direct) = &self.direct {
            match direct.write_all_at(window, self.written) {
                Ok(()) => {
                    self.written += BLOCK as u64;
                    self.filled = 0;
                    return Ok(());
                }
                Err(e) if direct_io::refused(&e) => self.direct = None,
                Err(e) => return Err(e),
            }
        }
        self.buffered.write_all_at(window, self.written)?;
        self.written += BLOCK as u64;
        self.filled = 0;
        Ok(())
    }

    /// Whether nothing was set aside.
    pub fn is_empty(&self) -> bool {
        self.written == 0 && self.filled == 0
    }

    /// Hands every byte set aside to `each`, in order, in pieces of at most a block; the last
    /// piece is marked. The spill is gone after.
    pub fn replay<E: From<std::io::Error>>(mut self, mut each: impl FnMut(&[u8], bool) -> Result<(), E>) -> Result<(), E> {
        let mut read = direct_io::buffer(BLOCK);
        let mut at = 0u64;
        while at < self.written {
            let window = direct_io::aligned(&mut read, BLOCK);
            self.read_block(window, at)?;
            at += BLOCK as u64;
            each(window, at == self.written && self.filled == 0)?;
        }
        if self.filled > 0 {
            let window = direct_io::aligned(&mut self.block, BLOCK);
            each(&window[..self.filled], true)?;
        }
        direct_io::keep(read);
        direct_io::keep(std::mem::take(&mut self.block));
        Ok(())
    }

    /// Reads the block at `at` (a whole block, at a block's start) into `window`.
    fn read_block(&mut self, window: &mut [u8], at: u64) -> std::io::Result<()> {
        if let Some(direct) = &self.direct {
            match direct.read_exact_at(window, at) {
                Ok(()) => return Ok(()),
                Err(e) if direct_io::refused(&e) => self.direct = None,
                Err(e) => return Err(e),
            }
        }
        self.buffered.read_exact_at(window, at)
    }
}

// A block is whole pages, so a block's offset in the file is always aligned for direct I/O.
const _: () = assert!(BLOCK % ALIGN == 0);

#[cfg(test)]
mod tests {
    use super::*;

    fn replayed(spill: Spill) -> (Vec<u8>, Vec<bool>) {
        let (mut bytes, mut marks) = (Vec::new(), Vec::new());
        spill
            .replay(|piece, last| {
                bytes.extend_from_slice(piece);
                marks.push(last);
                Ok::<(), std::io::Error>(())
            })
            .unwrap();
        (bytes, marks)
    }

    #[test]
    fn bytes_set_aside_in_pieces_of_any_size_come_back_in_order_with_the_last_piece_marked() {
        let mut spill = Spill::new().unwrap();
        assert!(spill.is_empty());
        let mut all = Vec::new();
        // Pieces that straddle blocks, and one larger than a block.
        for (i, len) in [7usize, BLOCK - 3, 5, 3 * BLOCK + 11, 1].into_iter().enumerate() {
            let piece: Vec<u8> = (0..len).map(|j| ((i * 31 + j) % 251) as u8).collect();
            spill.write(&piece).unwrap();
            all.extend_from_slice(&piece);
        }
        assert!(!spill.is_empty());
        let (bytes, marks) = replayed(spill);
        assert_eq!(bytes.len(), all.len());
        assert!(bytes == all, "the same bytes in the same order");
        assert_eq!(marks.iter().filter(|m| **m).count(), 1);
        assert_eq!(marks.last(), Some(&true));
    }

    #[test]
    fn a_spill_of_whole_blocks_marks_its_last_block() {
        let mut spill = Spill::new().unwrap();
        spill.write(&vec![9u8; 2 * BLOCK]).unwrap();
        let (bytes, marks) = replayed(spill);
        assert_eq!(bytes, vec![9u8; 2 * BLOCK]);
        assert_eq!(marks, vec![false, true]);
    }

    #[test]
    fn an_empty_spill_replays_nothing() {
        let (bytes, marks) = replayed(Spill::new().unwrap());
        assert!(bytes.is_empty() && marks.is_empty());
    }
}
