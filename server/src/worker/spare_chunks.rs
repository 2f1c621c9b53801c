//! Buffers handed back once their bytes are used, to be filled again: a file's chunks once
//! staged, and on PostgreSQL the COPY stream's batches once decoded.
//!
//! Each is 320 KiB: above glibc's mmap threshold (which `main.rs` keeps low, so that
//! a long export's memory does not fragment), so a buffer allocated afresh is mapped, faulted in
//! a page at a time as it is written, and unmapped once used. On a 1M-row export that was about
//! a tenth of the worker's CPU, in the kernel; buffers that go round do not fault.

use std::sync::{Arc, Mutex};

/// Buffers kept: at least as many as can be out at once (the 16 in flight between the side that
/// fills them and the side that uses them, the one being filled, the one being used, and a few
/// waiting to be sent).
const KEPT: usize = 24;

/// A buffer grown larger than this (by a row wider than a chunk) is let go, not kept.
const KEPT_BYTES_MAX: usize = 1024 * 1024;

/// Spare buffers, shared by the side that fills them and the side that uses them up (a read's
/// producer and its attempt; a COPY's reader and its decoder). Cloning shares the same spares.
#[derive(Debug, Clone, Default)]
pub struct SpareChunks(Arc<Mutex<Vec<Vec<u8>>>>);

impl SpareChunks {
    /// An empty buffer with room for at least `bytes`: a spare if one is kept, else a new one.
    pub fn get(&self, bytes: usize) -> Vec<u8> {
        let spare = self.0.lock().ok().and_then(|mut kept| kept.pop());
        let mut buffer = spare.unwrap_or_default();
        buffer.clear();
        buffer.reserve(bytes);
        buffer
    }

    /// Keeps `buffer` for a later chunk, unless enough are kept already or it has grown large.
    pub fn give_back(&self, buffer: Vec<u8>) {
        if buffer.capacity() == 0 || buffer.capacity() > KEPT_BYTES_MAX {
            return;
        }
        if let Ok(mut kept) = self.0.lock() {
            if kept.len() < KEPT {
                kept.push(buffer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_given_back_is_the_next_one_handed_out_empty() {
        let spares = SpareChunks::default();
        let mut first = spares.get(1024);
        first.extend_from_slice(b"staged bytes");
        let at = first.as_ptr();
        spares.give_back(first);
        let again = spares.get(1024);
        assert_eq!(again.as_ptr(), at, "the same allocation goes round");
        assert!(again.is_empty());
        assert!(again.capacity() >= 1024);
    }

    #[test]
    fn no_more_than_a_few_buffers_are_kept() {
        let spares = SpareChunks::default();
        for _ in 0..KEPT + 3 {
            spares.give_back(Vec::with_capacity(16));
        }
        assert_eq!(spares.0.lock().unwrap().len(), KEPT);
    }

    #[test]
    fn a_buffer_a_wide_row_grew_is_let_go() {
        let spares = SpareChunks::default();
        spares.give_back(Vec::with_capacity(KEPT_BYTES_MAX + 1));
        assert!(spares.0.lock().unwrap().is_empty());
    }
}
