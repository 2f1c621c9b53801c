//! A checkpointed export's parts as its checkpoints record them, and what is made of them: its
//! manifest and its bundle (SPEC §5.1). The worker writes them; the downloads serve them.

use crate::bundle::{Bundle, Entry, Source};
use crate::entities::job_checkpoints;
use app::PartView;
use bytes::Bytes;
use object_store::path::Path;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// What a checkpointed export's first attempt fixes for every later one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartsPlan {
    /// Rows per part (`EXPORTD_PART_ROWS` then); the last part may be shorter.
    pub part_rows: u64,
    /// The highest key of the export's rows then; rows with higher keys are not in it. `None`:
    /// no rows (one part, with the header only).
    pub max_key: Option<i64>,
    /// The rows then (the parts read later may find some changed).
    pub rows_total: i64,
}

impl PartsPlan {
    /// The parts the export is expected to have.
    pub fn parts_expected(&self) -> i64 {
        (self.rows_total.max(0) as u64).div_ceil(self.part_rows.max(1)).max(1) as i64
    }
}

/// One checkpointed part: the payload of its checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartRecord {
    /// 1, 2, …
    pub index: i32,
    /// Its object.
    pub key: String,
    /// Its first and last rows' keys; none for a part with no rows.
    pub first_key: Option<i64>,
    /// See `first_key`.
    pub last_key: Option<i64>,
    /// Data rows.
    pub rows: i64,
    /// Bytes (compressed, with gzip).
    pub bytes: i64,
    /// Hex SHA-256 of its bytes.
    pub sha256: String,
    /// CRC-32 of its bytes.
    pub crc32: u32,
    /// The moment its snapshot shows, epoch milliseconds by the database's clock.
    pub read_at: i64,
    /// The attempt that read it.
    pub attempt: i32,
    /// The generation that read it.
    pub generation: i32,
    /// Whether it is the export's last part (no row was left after it when it was read).
    #[serde(default)]
    pub last: bool,
}

impl PartRecord {
    /// Its name in the bundle: `part-00001.csv` (or `.csv.gz`, `.xlsx`).
    pub fn entry_name(&self) -> String {
        let extension = crate::file_type::FileType::of_name(&self.key).unwrap_or(crate::file_type::FileType::Csv).extension();
        format!("part-{:05}.{extension}", self.index)
    }

    /// As the view shows it.
    pub fn view(&self) -> PartView {
        PartView {
            index: i64::from(self.index),
            rows: self.rows,
            bytes: self.bytes,
            sha256: self.sha256.clone(),
            first_key: self.first_key,
            last_key: self.last_key,
            read_at: crate::clock::rfc3339(self.read_at),
        }
    }
}

/// The parts a job's checkpoints record, in order.
pub fn from_checkpoints(checkpoints: &[job_checkpoints::Model]) -> Result<Vec<PartRecord>, String> {
    checkpoints
        .iter()
        .map(|c| serde_json::from_str::<PartRecord>(&c.payload).map_err(|e| format!("checkpoint {} of {}: {e}", c.seq, c.job_id)))
        .collect()
}

/// The manifest of a checkpointed export: what it is (its id, request, resolved contract,
/// consistency and compression), its totals, and its parts in order with the moment, attempt
/// and generation of each. No time of release: the same parts make the same manifest.
pub fn manifest(export_id: &str, request: &app::ExportRequest, resolved: &app::ResolvedContract, parts: &[PartRecord]) -> Value {
    json!({
        "version": 1,
        "export": export_id,
        "report": request.report,
        "consistency": request.consistency,
        "compression": request.options.compression,
        "request": request,
        "resolved": resolved,
        "totals": {
            "parts": parts.len(),
            "rows": parts.iter().map(|p| p.rows).sum::<i64>(),
            "bytes": parts.iter().map(|p| p.bytes).sum::<i64>(),
        },
        "parts": parts.iter().map(|p| json!({
            "name": p.entry_name(),
            "index": p.index,
            "rows": p.rows,
            "bytes": p.bytes,
            "sha256": p.sha256,
            "crc32": format!("{:08x}", p.crc32),
            "first_key": p.first_key,
            "last_key": p.last_key,
            "read_at": crate::clock::rfc3339(p.read_at),
            "attempt": p.attempt,
            "generation": p.generation,
        })).collect::<Vec<_>>(),
    })
}

/// The bundle of `manifest` (its canonical bytes) and `parts`.
pub fn bundle(manifest: Bytes, parts: &[PartRecord]) -> Bundle {
    let mut entries = vec![Entry { name: "manifest.json".into(), size: manifest.len() as u64, crc32: crc32fast::hash(&manifest), source: Source::Bytes(manifest) }];
    entries.extend(parts.iter().map(|p| Entry {
        name: p.entry_name(),
        size: p.bytes.max(0) as u64,
        crc32: p.crc32,
        source: Source::Object(Path::from(p.key.as_str())),
    }));
    Bundle::new(entries)
}
