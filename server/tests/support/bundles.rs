//! Reading a checkpointed export's bundle back, for tests: unzipped by the `zip` crate (not by
//! exportd's own layout code, which a test must not trust), its manifest, its parts' rows read
//! by a strict CSV parser, and the checks every ready bundle must pass against its view.

use serde_json::Value;
use std::io::Read;

/// A bundle, unzipped.
pub struct Unzipped {
    /// `manifest.json`'s bytes, as stored.
    pub manifest_bytes: Vec<u8>,
    /// `manifest.json`, parsed.
    pub manifest: Value,
    /// The parts, in order: their names and bytes.
    pub parts: Vec<(String, Vec<u8>)>,
}

/// Unzips `bytes`, checking what SPEC §5.1 pins: stored entries, DOS time 1980-01-01 00:00, the
/// manifest first, then `part-00001.csv` (or `.csv.gz`, `.xlsx`), … in order. The `zip` crate checks
/// each entry's CRC-32 as it reads it.
pub fn unzip(bytes: &[u8]) -> Unzipped {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes)).expect("the bundle is a ZIP");
    let mut entries = Vec::new();
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).unwrap();
        assert_eq!(entry.compression(), zip::CompressionMethod::Stored, "{}: stored", entry.name());
        let time = entry.last_modified().expect("a time");
        assert_eq!((time.year(), time.month(), time.day(), time.hour(), time.minute(), time.second()), (1980, 1, 1, 0, 0, 0), "{}: the fixed time", entry.name());
        assert!(entry.extra_data().is_none_or(|extra| !extra.windows(2).any(|w| w == [0x55, 0x54])), "{}: no extended time field", entry.name());
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap_or_else(|e| panic!("{}: {e} (a wrong CRC-32 fails here)", entry.name()));
        entries.push((entry.name().to_owned(), data));
    }
    let (first, manifest_bytes) = entries.remove(0);
    assert_eq!(first, "manifest.json", "the manifest comes first");
    let manifest: Value = serde_json::from_slice(&manifest_bytes).expect("the manifest is JSON");
    for (i, (name, _)) in entries.iter().enumerate() {
        let stem = format!("part-{:05}", i + 1);
        assert!([".csv", ".csv.gz", ".xlsx"].iter().any(|ext| *name == format!("{stem}{ext}")), "entry {} is {name}", i + 1);
    }
    Unzipped { manifest_bytes, manifest, parts: entries }
}

/// A part's file as CSV: gunzipped when its name says so.
pub fn csv_text(name: &str, bytes: &[u8]) -> Vec<u8> {
    if name.ends_with(".gz") {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes).read_to_end(&mut out).expect("a gzip stream");
        out
    } else {
        bytes.to_vec()
    }
}

/// The header and data rows of a CSV file, read by a strict parser (every record as wide as the
/// header, RFC 4180 quoting).
pub fn records(csv: &[u8]) -> (Vec<String>, Vec<csv::StringRecord>) {
    let mut reader = csv::ReaderBuilder::new().flexible(false).from_reader(csv);
    let header = reader.headers().expect("a header row").iter().map(str::to_owned).collect();
    let rows = reader.records().map(|r| r.expect("strict RFC 4180")).collect();
    (header, rows)
}

/// Hex SHA-256 of bytes.
fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Checks a ready checkpointed export's bundle (`bytes`) against its `view`: the artifact's
/// digest is the manifest's and its size the bundle's; each part's rows, size, digest, keys and
/// moment agree between the view, the manifest and the part's bytes; every part carries the
/// header, and every part but the last has exactly `part_rows` rows. Returns every data row, in
/// order, across the parts.
pub fn check(bytes: &[u8], view: &Value, part_rows: usize) -> (Unzipped, Vec<csv::StringRecord>) {
    let unzipped = unzip(bytes);
    let artifact = &view["artifact"];
    assert_eq!(artifact["sha256"].as_str().unwrap(), sha256(&unzipped.manifest_bytes), "the artifact's digest is the manifest's");
    assert_eq!(artifact["bytes"].as_u64().unwrap(), bytes.len() as u64, "the artifact's size is the bundle's");
    let viewed = artifact["parts"].as_array().expect("a checkpointed export's view lists its parts");
    let listed = unzipped.manifest["parts"].as_array().expect("the manifest lists its parts");
    assert_eq!(viewed.len(), unzipped.parts.len());
    assert_eq!(listed.len(), unzipped.parts.len());
    assert_eq!(unzipped.manifest["export"], view["id"]);
    assert_eq!(unzipped.manifest["consistency"], "checkpointed");
    let mut all = Vec::new();
    let mut header: Option<Vec<String>> = None;
    for (i, ((name, data), (seen, listed))) in unzipped.parts.iter().zip(viewed.iter().zip(listed)).enumerate() {
        let index = i as u64 + 1;
        assert_eq!(seen["index"].as_u64(), Some(index));
        assert_eq!(listed["index"].as_u64(), Some(index));
        assert_eq!(listed["name"].as_str(), Some(name.as_str()));
        assert_eq!(seen["sha256"].as_str().unwrap(), sha256(data), "part {index}: the view's digest");
        assert_eq!(listed["sha256"].as_str().unwrap(), sha256(data), "part {index}: the manifest's digest");
        assert_eq!(listed["crc32"].as_str().unwrap(), format!("{:08x}", crc32fast::hash(data)), "part {index}: the manifest's CRC-32");
        assert_eq!(seen["bytes"].as_u64().unwrap(), data.len() as u64);
        assert_eq!(listed["bytes"].as_u64().unwrap(), data.len() as u64);
        for field in ["rows", "first_key", "last_key", "read_at"] {
            assert_eq!(seen[field], listed[field], "part {index}: {field} in the view and the manifest");
        }
        assert!(listed["attempt"].as_u64().is_some_and(|a| a >= 1) && listed["generation"].as_u64().is_some_and(|g| g >= 1), "part {index}: who read it: {listed}");
        let (h, rows) = records(&csv_text(name, data));
        assert_eq!(seen["rows"].as_u64().unwrap(), rows.len() as u64, "part {index}: its rows");
        if i + 1 < unzipped.parts.len() {
            assert_eq!(rows.len(), part_rows, "part {index}: every part but the last has exactly EXPORTD_PART_ROWS rows");
        }
        if let (Some(first), Some(last)) = (rows.first(), rows.last()) {
            assert_eq!(seen["first_key"].as_i64().unwrap().to_string(), first[0], "part {index}: its first key");
            assert_eq!(seen["last_key"].as_i64().unwrap().to_string(), last[0], "part {index}: its last key");
        }
        match &header {
            None => header = Some(h),
            Some(first) => assert_eq!(&h, first, "part {index}: every part has the same header"),
        }
        all.extend(rows);
    }
    assert_eq!(artifact["rows"].as_u64().unwrap(), all.len() as u64, "the artifact's rows are the parts'");
    assert_eq!(unzipped.manifest["totals"]["rows"].as_u64().unwrap(), all.len() as u64);
    (unzipped, all)
}

/// The first cells (the keys) of `rows`, as numbers.
pub fn keys(rows: &[csv::StringRecord]) -> Vec<i64> {
    rows.iter().map(|r| r[0].parse().expect("a key")).collect()
}
