//! The bundle of a checkpointed export (SPEC §5.1): a ZIP of `manifest.json` and the parts, in
//! that order, deterministic — stored entries, DOS time 1980-01-01 00:00, no extra time fields,
//! each part's CRC-32 and size from its checkpoint, ZIP64 records only where a size or an offset
//! needs them — so the same export always downloads as the same bytes, and its size is known
//! before a byte of it is read.
//!
//! The bundle is never stored: exportd serves it from the stored parts. So every byte of it that
//! is not a part's — headers, offsets, the central directory — is computed here from the
//! checkpoints, and any range of it maps to pieces: bytes made here, and ranges of stored
//! objects. This is why it is written by hand: the maintained ZIP crates (`zip`, `async_zip`)
//! write an archive as they read its data and compute each CRC themselves; neither lays an
//! archive out from known sizes and CRCs, so neither can answer a `Range` without reading (or
//! storing) everything before it.

use bytes::{BufMut, Bytes, BytesMut};
use object_store::path::Path;
use std::ops::Range;

/// Where an entry's bytes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Bytes held here (the manifest).
    Bytes(Bytes),
    /// A stored object (a part), whole.
    Object(Path),
}

/// One entry of the bundle.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its name in the archive (ASCII).
    pub name: String,
    /// Its size (stored: the same compressed and uncompressed).
    pub size: u64,
    /// The CRC-32 of its bytes.
    pub crc32: u32,
    /// Its bytes.
    pub source: Source,
}

/// A piece of a range of the bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Bytes made here.
    Bytes(Bytes),
    /// A range of a stored object.
    Object(Path, Range<u64>),
}

/// A bundle laid out: its segments, each at its offset.
#[derive(Debug, Clone)]
pub struct Bundle {
    segments: Vec<(u64, Piece)>,
    size: u64,
}

/// The largest size or offset a plain ZIP field holds; at or above it, ZIP64 carries the value.
const ZIP32_MAX: u64 = 0xFFFF_FFFF;
/// The most entries a plain end record counts.
const ENTRIES_MAX: usize = 0xFFFF;
/// DOS date 1980-01-01 (year 0 from 1980, month 1, day 1); the time is 00:00:00.
const DOS_DATE: u16 = (1 << 5) | 1;

impl Bundle {
    /// Lays out `entries` in order.
    pub fn new(entries: Vec<Entry>) -> Bundle {
        Bundle::with_zip64_at(entries, ZIP32_MAX)
    }

    /// Lays out `entries`, using ZIP64 for sizes and offsets from `zip64_at` (ZIP's own limit;
    /// lower in tests, to read ZIP64 archives of a few bytes).
    fn with_zip64_at(entries: Vec<Entry>, zip64_at: u64) -> Bundle {
        let mut segments = Vec::new();
        let mut at = 0u64;
        let mut central = BytesMut::new();
        let push = |segments: &mut Vec<(u64, Piece)>, at: &mut u64, piece: Piece, len: u64| {
            if len > 0 {
                segments.push((*at, piece));
                *at += len;
            }
        };
        for entry in &entries {
            let offset = at;
            let big = entry.size >= zip64_at;
            let far = offset >= zip64_at;
            let version: u16 = if big || far { 45 } else { 20 };
            // The local header: the sizes in a ZIP64 extra field when they overflow.
            let mut local = BytesMut::new();
            local.put_u32_le(0x0403_4b50);
            local.put_u16_le(version);
            local.put_u16_le(0); // flags
            local.put_u16_le(0); // stored
            local.put_u16_le(0); // time 00:00:00
            local.put_u16_le(DOS_DATE);
            local.put_u32_le(entry.crc32);
            let size32 = if big { ZIP32_MAX as u32 } else { entry.size as u32 };
            local.put_u32_le(size32);
            local.put_u32_le(size32);
            local.put_u16_le(entry.name.len() as u16);
            local.put_u16_le(if big { 20 } else { 0 });
            local.put_slice(entry.name.as_bytes());
            if big {
                local.put_u16_le(0x0001);
                local.put_u16_le(16);
                local.put_u64_le(entry.size);
                local.put_u64_le(entry.size);
            }
            let local = local.freeze();
            let local_len = local.len() as u64;
            push(&mut segments, &mut at, Piece::Bytes(local), local_len);
            let data = match &entry.source {
                Source::Bytes(b) => Piece::Bytes(b.clone()),
                Source::Object(key) => Piece::Object(key.clone(), 0..entry.size),
            };
            push(&mut segments, &mut at, data, entry.size);
            // Its central directory header: the values that overflow, in ZIP64's order.
            let mut extra = BytesMut::new();
            if big {
                extra.put_u64_le(entry.size);
                extra.put_u64_le(entry.size);
            }
            if far {
                extra.put_u64_le(offset);
            }
            central.put_u32_le(0x0201_4b50);
            central.put_u16_le(version); // made by: MS-DOS attributes, this version
            central.put_u16_le(version);
            central.put_u16_le(0);
            central.put_u16_le(0);
            central.put_u16_le(0);
            central.put_u16_le(DOS_DATE);
            central.put_u32_le(entry.crc32);
            central.put_u32_le(size32);
            central.put_u32_le(size32);
            central.put_u16_le(entry.name.len() as u16);
            central.put_u16_le(if extra.is_empty() { 0 } else { extra.len() as u16 + 4 });
            central.put_u16_le(0); // comment
            central.put_u16_le(0); // disk
            central.put_u16_le(0); // internal attributes
            central.put_u32_le(0); // external attributes
            central.put_u32_le(if far { ZIP32_MAX as u32 } else { offset as u32 });
            central.put_slice(entry.name.as_bytes());
            if !extra.is_empty() {
                central.put_u16_le(0x0001);
                central.put_u16_le(extra.len() as u16);
                central.put_slice(&extra);
            }
        }
        let central_at = at;
        let central_len = central.len() as u64;
        push(&mut segments, &mut at, Piece::Bytes(central.freeze()), central_len);
        // The end: ZIP64's record and locator first when a count, size or offset overflows.
        let mut end = BytesMut::new();
        let zip64_end = entries.len() > ENTRIES_MAX || central_len >= zip64_at || central_at >= zip64_at;
        if zip64_end {
            let record_at = at;
            end.put_u32_le(0x0606_4b50);
            end.put_u64_le(44);
            end.put_u16_le(45);
            end.put_u16_le(45);
            end.put_u32_le(0);
            end.put_u32_le(0);
            end.put_u64_le(entries.len() as u64);
            end.put_u64_le(entries.len() as u64);
            end.put_u64_le(central_len);
            end.put_u64_le(central_at);
            end.put_u32_le(0x0706_4b50);
            end.put_u32_le(0);
            end.put_u64_le(record_at);
            end.put_u32_le(1);
        }
        let count = if zip64_end { ENTRIES_MAX as u16 } else { entries.len() as u16 };
        end.put_u32_le(0x0605_4b50);
        end.put_u16_le(0);
        end.put_u16_le(0);
        end.put_u16_le(count);
        end.put_u16_le(count);
        end.put_u32_le(if zip64_end { ZIP32_MAX as u32 } else { central_len as u32 });
        end.put_u32_le(if zip64_end { ZIP32_MAX as u32 } else { central_at as u32 });
        end.put_u16_le(0);
        let end_len = end.len() as u64;
        push(&mut segments, &mut at, Piece::Bytes(end.freeze()), end_len);
        Bundle { segments, size: at }
    }

    /// The bundle's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The pieces that make bytes `range` of the bundle (clamped to its size), in order.
    pub fn pieces(&self, range: Range<u64>) -> Vec<Piece> {
        let end = range.end.min(self.size);
        let mut out = Vec::new();
        for (i, (at, piece)) in self.segments.iter().enumerate() {
            let next = self.segments.get(i + 1).map_or(self.size, |(n, _)| *n);
            if next <= range.start || *at >= end {
                continue;
            }
            let (from, to) = (range.start.max(*at) - at, end.min(next) - at);
            out.push(match piece {
                Piece::Bytes(b) => Piece::Bytes(b.slice(from as usize..to as usize)),
                Piece::Object(key, r) => Piece::Object(key.clone(), r.start + from..r.start + to),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn entry(name: &str, data: &'static [u8]) -> Entry {
        Entry { name: name.to_owned(), size: data.len() as u64, crc32: crc32fast::hash(data), source: Source::Bytes(Bytes::from_static(data)) }
    }

    fn bytes(bundle: &Bundle, range: Range<u64>) -> Vec<u8> {
        bundle
            .pieces(range)
            .into_iter()
            .flat_map(|p| match p {
                Piece::Bytes(b) => b.to_vec(),
                Piece::Object(..) => panic!("in-memory entries only"),
            })
            .collect()
    }

    fn read_back(zip: &[u8]) -> Vec<(String, Vec<u8>)> {
        let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zip)).unwrap();
        (0..archive.len())
            .map(|i| {
                let mut f = archive.by_index(i).unwrap();
                assert_eq!(f.compression(), zip::CompressionMethod::Stored);
                let mut data = Vec::new();
                f.read_to_end(&mut data).unwrap();
                (f.name().to_owned(), data)
            })
            .collect()
    }

    fn sample() -> Vec<Entry> {
        vec![entry("manifest.json", b"{\"parts\":2}"), entry("part-00001.csv", b"a,b\r\n1,2\r\n"), entry("part-00002.csv", b"a,b\r\n3,4\r\n")]
    }

    #[test]
    fn a_bundle_reads_back_as_its_entries_in_order_with_their_crcs() {
        let bundle = Bundle::new(sample());
        let zip = bytes(&bundle, 0..bundle.size());
        assert_eq!(zip.len() as u64, bundle.size());
        let entries = read_back(&zip);
        assert_eq!(entries.iter().map(|e| e.0.as_str()).collect::<Vec<_>>(), ["manifest.json", "part-00001.csv", "part-00002.csv"]);
        assert_eq!(entries[1].1, b"a,b\r\n1,2\r\n");
        assert_eq!(zip, bytes(&Bundle::new(sample()), 0..bundle.size()), "the same entries, the same bytes");
    }

    #[test]
    fn zip64_records_appear_where_a_size_or_an_offset_overflows_and_the_archive_still_reads() {
        // With the threshold at 12 bytes: the first part's size and every later offset overflow.
        let bundle = Bundle::with_zip64_at(sample(), 12);
        let zip = bytes(&bundle, 0..bundle.size());
        let entries = read_back(&zip);
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[2].1, b"a,b\r\n3,4\r\n");
        let find = |sig: &[u8]| zip.windows(4).filter(|w| *w == sig).count();
        assert_eq!(find(&[0x50, 0x4b, 0x06, 0x06]), 1, "a ZIP64 end record");
        assert_eq!(find(&[0x50, 0x4b, 0x06, 0x07]), 1, "a ZIP64 locator");
        assert!(Bundle::new(sample()).size() < bundle.size(), "only where needed");
    }

    #[test]
    fn every_range_of_a_bundle_is_the_same_bytes_as_that_range_of_the_whole() {
        let bundle = Bundle::new(sample());
        let whole = bytes(&bundle, 0..bundle.size());
        for start in 0..whole.len() as u64 {
            for end in [start + 1, start + 7, start + 40, whole.len() as u64 + 10] {
                let end = end.max(start);
                assert_eq!(bytes(&bundle, start..end), whole[start as usize..(end as usize).min(whole.len())], "{start}..{end}");
            }
        }
    }

    #[test]
    fn a_stored_part_is_a_range_of_its_object() {
        let part = Entry { name: "part-00001.csv".into(), size: 1000, crc32: 7, source: Source::Object(Path::from("exports/t/e/p1")) };
        let bundle = Bundle::new(vec![entry("manifest.json", b"{}"), part]);
        let lfh = 30 + "manifest.json".len() as u64 + 2 + 30 + "part-00001.csv".len() as u64;
        let pieces = bundle.pieces(lfh + 10..lfh + 20);
        assert_eq!(pieces, vec![Piece::Object(Path::from("exports/t/e/p1"), 10..20)]);
    }
}
