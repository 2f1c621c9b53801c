//! Finding the keys a file carries more than once, in memory that does not grow with the file.
//!
//! Each key is kept as a 64-bit digest. Digests gather in a buffer of `RUN` digests; a full
//! buffer is sorted and written to an unnamed temporary file (a "run"), and at the end the runs
//! are merged: a digest met twice in a row is a duplicated key. What stays in memory is one
//! buffer, a small read buffer per run, and the duplicated digests themselves, which grow with
//! the invalid rows a file has, not with its rows.

use std::collections::{BinaryHeap, HashSet};
use std::cmp::Reverse;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, Write};

/// Digests per run: 2 MiB of them.
const RUN: usize = 256 * 1024;
/// The read buffer of each run while they are merged.
const READ_BUFFER: usize = 16 * 1024;

/// The digests of one file's keys, gathered in sorted runs.
pub struct KeyRuns {
    buffer: Vec<u64>,
    runs: Vec<File>,
    run_len: usize,
}

impl Default for KeyRuns {
    fn default() -> Self {
        KeyRuns::with_run(RUN)
    }
}

impl KeyRuns {
    /// Runs of `run_len` digests (small ones in unit tests).
    fn with_run(run_len: usize) -> KeyRuns {
        KeyRuns { buffer: Vec::new(), runs: Vec::new(), run_len: run_len.max(1) }
    }

    /// Adds one key's digest; a full buffer is written out as a sorted run (blocking I/O on the
    /// calling thread: call from a blocking thread, or accept a short write to the page cache).
    pub fn push(&mut self, digest: u64) -> std::io::Result<()> {
        if self.buffer.capacity() == 0 {
            self.buffer.reserve_exact(self.run_len);
        }
        self.buffer.push(digest);
        if self.buffer.len() >= self.run_len {
            self.spill()?;
        }
        Ok(())
    }

    fn spill(&mut self) -> std::io::Result<()> {
        self.buffer.sort_unstable();
        let mut file = BufWriter::new(tempfile::tempfile()?);
        for d in &self.buffer {
            file.write_all(&d.to_le_bytes())?;
        }
        let mut file = file.into_inner().map_err(|e| e.into_error())?;
        file.rewind()?;
        self.runs.push(file);
        self.buffer.clear();
        Ok(())
    }

    /// The digests pushed more than once.
    pub fn duplicated(mut self) -> std::io::Result<HashSet<u64>> {
        let mut twice = HashSet::new();
        if self.runs.is_empty() {
            self.buffer.sort_unstable();
            for pair in self.buffer.windows(2) {
                if pair[0] == pair[1] {
                    twice.insert(pair[0]);
                }
            }
            return Ok(twice);
        }
        if !self.buffer.is_empty() {
            self.spill()?;
        }
        self.buffer = Vec::new();
        let mut readers: Vec<BufReader<File>> = self.runs.into_iter().map(|f| BufReader::with_capacity(READ_BUFFER, f)).collect();
        let mut heads = BinaryHeap::new();
        for (i, r) in readers.iter_mut().enumerate() {
            if let Some(d) = next_digest(r)? {
                heads.push(Reverse((d, i)));
            }
        }
        let mut last = None;
        while let Some(Reverse((d, i))) = heads.pop() {
            if last == Some(d) {
                twice.insert(d);
            }
            last = Some(d);
            if let Some(next) = next_digest(&mut readers[i])? {
                heads.push(Reverse((next, i)));
            }
        }
        Ok(twice)
    }
}

fn next_digest(r: &mut impl Read) -> std::io::Result<Option<u64>> {
    let mut bytes = [0u8; 8];
    match r.read_exact(&mut bytes) {
        Ok(()) => Ok(Some(u64::from_le_bytes(bytes))),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn duplicated(run: usize, digests: &[u64]) -> HashSet<u64> {
        let mut runs = KeyRuns::with_run(run);
        for d in digests {
            runs.push(*d).expect("a run is written");
        }
        runs.duplicated().expect("the runs are merged")
    }

    #[test]
    fn a_key_met_twice_is_found_whether_both_are_in_one_run_or_in_two() {
        let digests = [9, 3, 7, 3, 1, 8, 9, 2, 5, 9, 4];
        let expected: HashSet<u64> = [3, 9].into();
        for run in [1, 2, 3, 4, 100] {
            assert_eq!(duplicated(run, &digests), expected, "runs of {run}");
        }
    }

    #[test]
    fn a_file_of_distinct_keys_has_no_duplicates_and_an_empty_one_neither() {
        assert!(duplicated(3, &(0..1000).collect::<Vec<_>>()).is_empty());
        assert!(duplicated(3, &[]).is_empty());
    }

    #[test]
    fn many_runs_merge_to_the_same_answer_as_one() {
        // A spread of digests with every 97th repeated later.
        let mut digests: Vec<u64> = (0..20_000u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
        let repeated: Vec<u64> = digests.iter().step_by(97).copied().collect();
        digests.extend(&repeated);
        let expected: HashSet<u64> = repeated.into_iter().collect();
        assert_eq!(duplicated(1_000, &digests), expected);
        assert_eq!(duplicated(1_000_000, &digests), expected);
    }
}
