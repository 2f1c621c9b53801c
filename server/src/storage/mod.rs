//! Object stores: a local folder (the embedded default) or S3; one per deployment when configured
//! (`EXPORTD_STORE_<DEPLOYMENT>`), so a report never leaves its deployment.
//!
//! [`ExportStore`] is the seam the worker, the janitor and the downloads use: staging uploads,
//! the digest of a staged object, publish-once into an immutable key, durability before a file
//! is referenced, deletes that treat "not there" as done (and, on a local folder, take the
//! folders they empty with them), listings for the janitor, and reads for downloads.
//!
//! Which store a deployment's files live in is bound in the database ([`identity`]): a process
//! whose configuration points a deployment elsewhere refuses to use it.

pub mod direct_io;
pub mod identity;
pub mod ranged_copy;

use crate::config::Config;
use futures::stream::BoxStream;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey, S3CopyIfNotExists};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{MultipartUpload, ObjectMeta, ObjectStore, PutPayload};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The size of each part of a staging upload to S3 (its smallest part is 5 MiB).
pub const PART_BYTES: usize = 5 * 1024 * 1024;

/// S3's largest part.
pub const S3_PART_MAX: usize = 5 * 1024 * 1024 * 1024;

/// How many parts of a staging upload to S3 keep the base size before they grow, and how many
/// share each size after that (the size doubles from one group to the next).
const FLAT_PARTS: usize = 4_000;
const PARTS_PER_SIZE: usize = 600;

/// The size of part `index` (from 0) of a staging upload to S3 whose parts start at `base`: the
/// first 4,000 parts keep `base` (a file of up to 19.5 GiB at 5 MiB parts: a worker's memory is
/// two or three parts), then each 600 parts double, up to S3's 5 GiB part, so 10,000 parts hold
/// more than S3's largest object (5 TiB) and the part limit is never reached, whatever the file's
/// size. The size is chosen as the parts are sent, because an export's size is known only at its end.
pub fn s3_part_size(base: usize, index: usize) -> usize {
    let doublings = if index < FLAT_PARTS { 0 } else { ((index - FLAT_PARTS) / PARTS_PER_SIZE + 1).min(20) as u32 };
    base.saturating_mul(1usize << doublings).min(S3_PART_MAX)
}

/// The size of each part of a staging upload to a local folder, which has no smallest part:
/// small parts keep a worker's memory small.
pub const LOCAL_PART_BYTES: usize = 1024 * 1024;

/// Parts of one upload in flight at once; with the part size this bounds an upload's memory.
pub const PARTS_IN_FLIGHT: usize = 2;

/// How long a readiness check waits for a store.
pub const CHECK_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Called at every step forward of a long store operation (a part uploaded, a range of a digest
/// read), so a caller can tell a slow store from one that stopped answering.
pub type OnProgress = Arc<dyn Fn() + Send + Sync>;

/// Why a deployment's store cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store's configuration is unusable (a bad URL, missing credentials).
    #[error("{0}")]
    Config(String),
    /// The configured store is not the one the deployment is bound to.
    #[error(transparent)]
    Binding(#[from] identity::BindingError),
    /// The store or the database did not answer.
    #[error("{0}")]
    Unavailable(String),
}

/// What publishing found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// This call created the object.
    Created,
    /// The object was there already (an earlier attempt, or a racing worker, published it):
    /// under a content-addressed key that is the same file, and success.
    AlreadyThere,
}

/// One deployment's object store.
#[derive(Debug, Clone)]
pub struct ExportStore {
    objects: Arc<dyn ObjectStore>,
    /// The folder of a local store, for the cleanup only a local store needs.
    local_root: Option<std::path::PathBuf>,
    /// The same store as `objects` when it is a local folder, for reading files in place.
    local: Option<Arc<LocalFileSystem>>,
    /// The part size of staging uploads (their first parts).
    part_bytes: usize,
    /// Whether a staging upload's later parts grow ([`s3_part_size`]).
    parts_grow: bool,
    /// Presigns downloads (and the requests of ranged copies) on an S3 store.
    presigner: Option<Arc<Presigner>>,
    /// On S3, a staged file larger than this is published in ranged part copies (S3 copies at
    /// most 5 GiB in one part); lower in tests.
    copy_part_max: u64,
    /// The part size of a ranged copy, unless the file's size needs larger parts.
    copy_part_floor: u64,
}

/// Presigned GETs of one S3 bucket (SigV4 query signing, by rusty-s3: object_store's signer takes
/// no response overrides, and the published object carries no Content-Type of its own, as the
/// multipart copy that publishes it drops the staged object's attributes).
#[derive(Debug)]
pub struct Presigner {
    bucket: rusty_s3::Bucket,
    credentials: rusty_s3::Credentials,
    /// The store's key prefix (`s3://bucket/prefix`), without slashes at its ends.
    prefix: String,
    /// Sends the presigned requests of a ranged copy ([`ranged_copy`]).
    http: reqwest::Client,
}

impl Presigner {
    /// From the same `AWS_*` variables object_store's S3 client reads: the endpoint (or AWS's
    /// regional one), path-style unless virtual-hosted style is asked for, static keys.
    fn from_vars(vars: &HashMap<String, String>, bucket: &str, prefix: &str) -> Result<Presigner, String> {
        let var = |names: &[&str]| names.iter().find_map(|n| vars.get(*n).filter(|v| !v.is_empty()).cloned());
        let region = var(&["AWS_REGION", "AWS_DEFAULT_REGION"]).unwrap_or_else(|| "us-east-1".to_owned());
        let endpoint = var(&["AWS_ENDPOINT", "AWS_ENDPOINT_URL"]).unwrap_or_else(|| format!("https://s3.{region}.amazonaws.com"));
        let endpoint: url::Url = endpoint.parse().map_err(|e| format!("AWS_ENDPOINT is not a URL: {e}"))?;
        let virtual_hosted = var(&["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"]).is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let style = if virtual_hosted { rusty_s3::UrlStyle::VirtualHost } else { rusty_s3::UrlStyle::Path };
        let bucket = rusty_s3::Bucket::new(endpoint, style, bucket.to_owned(), region).map_err(|e| format!("cannot presign for s3://{bucket}: {e}"))?;
        let (Some(key), Some(secret)) = (var(&["AWS_ACCESS_KEY_ID"]), var(&["AWS_SECRET_ACCESS_KEY"])) else {
            return Err("an S3 store needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY to presign downloads".into());
        };
        let credentials = match var(&["AWS_SESSION_TOKEN"]) {
            Some(token) => rusty_s3::Credentials::new_with_token(key, secret, token),
            None => rusty_s3::Credentials::new(key, secret),
        };
        Ok(Presigner { bucket, credentials, prefix: prefix.to_owned(), http: ranged_copy::http_client()? })
    }

    /// A GET of `key` valid for `ttl`, answered as `media_type` and as an attachment named
    /// `filename`.
    pub fn get(&self, key: &str, ttl: std::time::Duration, filename: &str, media_type: &str) -> String {
        use rusty_s3::S3Action;
        let object = if self.prefix.is_empty() { key.to_string() } else { format!("{}/{key}", self.prefix) };
        let disposition = format!("attachment; filename=\"{filename}\"");
        let mut action = rusty_s3::actions::GetObject::new(&self.bucket, Some(&self.credentials), &object);
        action.query_mut().insert("response-content-type", media_type);
        action.query_mut().insert("response-content-disposition", disposition.as_str());
        // A link is a credential for its lifetime: no cache along the way may keep the file.
        action.query_mut().insert("response-cache-control", "private, no-store");
        action.sign(ttl).to_string()
    }
}

impl ExportStore {
    /// Opens a store from its URL: `file://folder` or `s3://bucket[/prefix]` (with the `AWS_*`
    /// variables; an S3-compatible server through `AWS_ENDPOINT` and `AWS_ALLOW_HTTP`).
    pub fn open(url: &str) -> Result<ExportStore, String> {
        ExportStore::open_with(url, &std::env::vars().collect())
    }

    /// [`ExportStore::open`] with the `AWS_*` settings taken from `vars` instead of the process's
    /// environment.
    pub fn open_with(url: &str, vars: &HashMap<String, String>) -> Result<ExportStore, String> {
        if let Some(path) = url.strip_prefix("file://") {
            let path = if path.is_empty() { "." } else { path };
            std::fs::create_dir_all(path).map_err(|e| format!("cannot create {path}: {e}"))?;
            let root = std::fs::canonicalize(path).map_err(|e| format!("cannot open {path}: {e}"))?;
            // Deletes take the folders they empty with them: otherwise every export leaves its
            // staging folder behind, and every sweep walks them all.
            let store = Arc::new(LocalFileSystem::new_with_prefix(&root).map_err(|e| format!("cannot open {path}: {e}"))?.with_automatic_cleanup(true));
            return Ok(ExportStore {
                objects: store.clone(),
                local_root: Some(root),
                local: Some(store),
                part_bytes: LOCAL_PART_BYTES,
                parts_grow: false,
                presigner: None,
                copy_part_max: ranged_copy::COPY_PART_MAX,
                copy_part_floor: ranged_copy::PART_FLOOR,
            });
        }
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            // Publishing copies a staged object only if the final key is absent; on S3 that is a
            // conditional multipart copy (`If-None-Match: *` on completion).
            let s3 = vars
                .iter()
                .filter(|(name, _)| name.starts_with("AWS_"))
                .filter_map(|(name, value)| Some((name.to_ascii_lowercase().parse::<AmazonS3ConfigKey>().ok()?, value)))
                .fold(AmazonS3Builder::new(), |builder, (key, value)| builder.with_config(key, value))
                .with_bucket_name(bucket)
                .with_copy_if_not_exists(S3CopyIfNotExists::Multipart)
                .build()
                .map_err(|e| format!("cannot open s3://{bucket}: {e}"))?;
            let prefix = prefix.trim_matches('/');
            let presigner = Some(Arc::new(Presigner::from_vars(vars, bucket, prefix)?));
            let objects: Arc<dyn ObjectStore> = if prefix.is_empty() { Arc::new(s3) } else { Arc::new(PrefixStore::new(s3, prefix.to_owned())) };
            return Ok(ExportStore {
                objects,
                local_root: None,
                local: None,
                part_bytes: PART_BYTES,
                parts_grow: true,
                presigner,
                copy_part_max: ranged_copy::COPY_PART_MAX,
                copy_part_floor: ranged_copy::PART_FLOOR,
            });
        }
        Err(format!("unsupported store URL {url:?}: use file://… or s3://…"))
    }

    /// The underlying object store.
    pub fn objects(&self) -> &Arc<dyn ObjectStore> {
        &self.objects
    }

    /// On S3, what presigns its downloads; a local folder's are served by exportd itself.
    pub fn presigner(&self) -> Option<&Presigner> {
        self.presigner.as_deref()
    }

    /// Whether the store answers within [`CHECK_WITHIN`]: a local folder is still a folder (read
    /// off the async threads: a hung mount must not stall them); an S3 bucket answers a HEAD (a
    /// missing probe object is an answer).
    pub async fn check(&self) -> Result<(), object_store::Error> {
        let generic = |source: Box<dyn std::error::Error + Send + Sync>| object_store::Error::Generic { store: "check", source };
        let answered = match &self.local_root {
            Some(root) => {
                let root = root.clone();
                let metadata = tokio::task::spawn_blocking(move || std::fs::metadata(root));
                match tokio::time::timeout(CHECK_WITHIN, metadata).await {
                    Ok(Ok(Ok(meta))) if meta.is_dir() => Ok(()),
                    Ok(Ok(Ok(_))) => Err(generic("the store's folder is not a folder".into())),
                    Ok(Ok(Err(e))) => Err(generic(Box::new(e))),
                    Ok(Err(e)) => Err(generic(Box::new(e))),
                    Err(_) => Err(generic("the store's folder did not answer in time".into())),
                }
            }
            None => match tokio::time::timeout(CHECK_WITHIN, self.objects.head(&Path::from("readyz-probe"))).await {
                Ok(Ok(_)) | Ok(Err(object_store::Error::NotFound { .. })) => Ok(()),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(generic("the store did not answer in time".into())),
            },
        };
        answered
    }

    /// An upload to `key` that sends parts as they fill, calling `on_progress` as each one lands.
    pub fn stage(&self, key: &Path, on_progress: OnProgress) -> StagingUpload {
        StagingUpload {
            objects: self.objects.clone(),
            local: self.local.clone(),
            key: key.clone(),
            pending: Vec::new(),
            part_bytes: self.part_bytes,
            parts_grow: self.parts_grow,
            parts_sent: 0,
            multipart: None,
            on_progress,
            sent: Vec::new(),
        }
    }

    /// Reads an object through and returns its size, hex SHA-256 and CRC-32: a local file in
    /// place, read past the page cache on a thread beside the hashing ([`read_beside`]), any
    /// other store in ranges of [`PART_BYTES`]; `on_progress` is called after each buffer or range.
    pub async fn digest(&self, key: &Path, on_progress: OnProgress) -> Result<Digests, object_store::Error> {
        if let Some(local) = &self.local {
            let file = local.path_to_filesystem(key)?;
            return on_local_files(key.to_string(), move || digest_file(&file, &*on_progress)).await;
        }
        let size = self.objects.head(key).await?.size;
        let mut digests = Reading::default();
        let mut at = 0u64;
        while at < size {
            let end = (at + PART_BYTES as u64).min(size);
            let range = self.objects.get_range(key, at..end).await?;
            digests.update(&range);
            on_progress();
            at = end;
        }
        Ok(digests.finish())
    }

    /// This store with ranged copies for files above `max` bytes, in parts of `floor` bytes or
    /// more (S3's own limits still apply): for tests, which cannot stage files above 5 GiB.
    pub fn with_ranged_copies_above(mut self, max: u64, floor: u64) -> ExportStore {
        self.copy_part_max = max;
        self.copy_part_floor = floor;
        self
    }

    /// Copies `staged` to `key` only if `key` does not exist yet; `on_progress` as a long copy
    /// goes on. On S3 a file above 5 GiB is copied in ranged parts ([`ranged_copy`]).
    pub async fn publish(&self, staged: &Path, key: &Path, on_progress: OnProgress) -> Result<Published, object_store::Error> {
        if let Some(s3) = &self.presigner {
            let size = self.objects.head(staged).await?.size;
            if size > self.copy_part_max {
                return s3.copy_in_ranges(staged, key, size, self.copy_part_floor, on_progress).await;
            }
        }
        match self.objects.copy_if_not_exists(staged, key).await {
            Ok(()) => Ok(Published::Created),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(Published::AlreadyThere),
            Err(e) => Err(e),
        }
    }

    /// Makes the object at `key` durable before anything references it (SPEC §5.13): on a local
    /// folder the file and every folder from it up to the store's root are fsynced (a hard link
    /// or a rename is durable only once its folder is); an S3 store has made it durable by the
    /// time it answered.
    pub async fn make_durable(&self, key: &Path) -> Result<(), object_store::Error> {
        let (Some(local), Some(root)) = (&self.local, &self.local_root) else { return Ok(()) };
        let file = local.path_to_filesystem(key)?;
        let root = root.clone();
        let synced = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            std::fs::File::open(&file)?.sync_all()?;
            let mut folder = file.parent();
            while let Some(dir) = folder {
                std::fs::File::open(dir)?.sync_all()?;
                if dir == root {
                    break;
                }
                folder = dir.parent();
            }
            Ok(())
        });
        synced
            .await
            .map_err(|e| object_store::Error::Generic { store: "local", source: Box::new(e) })?
            .map_err(|e| object_store::Error::Generic { store: "local", source: Box::new(e) })
    }

    /// Writes the file at `key` of a local folder out to its disk (`fdatasync`), so that a later
    /// [`ExportStore::make_durable`] of the file (or of a hard link to it) finds little left to
    /// write; nothing on S3. Its error is the caller's to act on: Linux reports a failed
    /// write-back once, to the first sync that asks, so a later fsync of the same file may not
    /// hear of it.
    pub async fn write_out(&self, key: &Path) -> Result<(), object_store::Error> {
        let Some(local) = &self.local else { return Ok(()) };
        let file = local.path_to_filesystem(key)?;
        on_local_files(key.to_string(), move || std::fs::File::open(&file)?.sync_data()).await
    }

    /// Writes `bytes` at `key` unless an object is there already (create-if-absent: under a
    /// content-addressed key, the same bytes).
    pub async fn put_once(&self, key: &Path, bytes: bytes::Bytes) -> Result<(), object_store::Error> {
        let create = object_store::PutOptions { mode: object_store::PutMode::Create, ..Default::default() };
        match self.objects.put_opts(key, PutPayload::from(bytes), create).await {
            Ok(_) | Err(object_store::Error::AlreadyExists { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The bytes of `range` of the object at `key`, as they arrive.
    pub async fn read_range(&self, key: &Path, range: std::ops::Range<u64>) -> Result<BoxStream<'static, Result<bytes::Bytes, object_store::Error>>, object_store::Error> {
        let options = object_store::GetOptions { range: Some(object_store::GetRange::Bounded(range)), ..Default::default() };
        Ok(self.objects.get_opts(key, options).await?.into_stream())
    }

    /// The bytes `pieces` make (of a bundle: its own bytes and ranges of this store's objects),
    /// in order, as they arrive.
    pub fn stream_pieces(&self, pieces: Vec<crate::bundle::Piece>) -> BoxStream<'static, Result<bytes::Bytes, object_store::Error>> {
        use crate::bundle::Piece;
        use futures::{StreamExt, TryStreamExt};
        let store = self.clone();
        futures::stream::iter(pieces)
            .then(move |piece| {
                let store = store.clone();
                async move {
                    match piece {
                        Piece::Bytes(b) => Ok(futures::stream::once(std::future::ready(Ok(b))).boxed()),
                        Piece::Object(key, range) => store.read_range(&key, range).await,
                    }
                }
            })
            .try_flatten()
            .boxed()
    }

    /// The hex SHA-256 of the bytes `pieces` make; `on_progress` after each chunk read
    /// ([`ExportStore::hash_pieces`] from the start).
    pub async fn digest_pieces(&self, pieces: &[crate::bundle::Piece], on_progress: OnProgress) -> Result<String, object_store::Error> {
        Ok(hex::encode(self.hash_pieces(Sha256::new(), pieces, on_progress).await?.finalize()))
    }

    /// `hasher` carried on over the bytes `pieces` make, in order, and given back (a bundle's
    /// digest is begun over its first pieces and ended over the rest later); `on_progress` after
    /// each chunk read. On a local folder the files are read in place, past the page cache on a
    /// thread beside the hashing ([`read_beside`]; object_store's local reads come in small
    /// chunks, and a bundle is the size of the whole export); dropped before it ends, that
    /// thread stops at its next buffer.
    pub async fn hash_pieces(&self, mut hasher: Sha256, pieces: &[crate::bundle::Piece], on_progress: OnProgress) -> Result<Sha256, object_store::Error> {
        use futures::TryStreamExt;
        if let Some(local) = &self.local {
            let mut local_pieces = Vec::with_capacity(pieces.len());
            for piece in pieces {
                local_pieces.push(match piece {
                    crate::bundle::Piece::Bytes(b) => LocalPiece::Bytes(b.clone()),
                    crate::bundle::Piece::Object(key, range) => LocalPiece::File(local.path_to_filesystem(key)?, range.clone()),
                });
            }
            let named = local_pieces.iter().find_map(|p| match p {
                LocalPiece::File(path, _) | LocalPiece::Whole(path) => Some(path.display().to_string()),
                LocalPiece::Bytes(_) => None,
            });
            let wanted = WantedWhileHeld::default();
            let still_wanted = wanted.flag();
            return on_local_files(named.unwrap_or_default(), move || {
                read_beside(&local_pieces, |bytes| {
                    hasher.update(bytes);
                    on_progress();
                    still_wanted.load(std::sync::atomic::Ordering::Relaxed)
                })?;
                Ok(hasher)
            })
            .await;
        }
        let mut bytes = self.stream_pieces(pieces.to_vec());
        while let Some(chunk) = bytes.try_next().await? {
            hasher.update(&chunk);
            on_progress();
        }
        Ok(hasher)
    }

    /// Deletes `key`; an object that is already gone counts as deleted.
    pub async fn delete(&self, key: &Path) -> Result<(), object_store::Error> {
        match self.objects.delete(key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Every object under `prefix`.
    pub fn list(&self, prefix: &str) -> BoxStream<'static, Result<ObjectMeta, object_store::Error>> {
        self.objects.list(Some(&Path::from(prefix)))
    }

    /// The partial files of uploads in progress, or that a crashed process left, under a local
    /// store's `staging/` (the store's own listing does not show them; a partial of
    /// `staging/{id}/{generation}` is named `…/{generation}#{n}`). S3 keeps multipart uploads out of
    /// sight too: a bucket lifecycle rule (`AbortIncompleteMultipartUpload`) removes those.
    pub fn partial_uploads(&self) -> Vec<PartialUpload> {
        let Some(root) = &self.local_root else { return Vec::new() };
        let mut found = Vec::new();
        let mut stack = vec![root.join("staging")];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                let path = entry.path();
                let Ok(meta) = entry.metadata() else { continue };
                if meta.is_dir() {
                    stack.push(path);
                    continue;
                }
                let Some((name, suffix)) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.rsplit_once('#')) else { continue };
                if suffix.is_empty() || !suffix.bytes().all(|b| b.is_ascii_digit()) {
                    continue;
                }
                let Ok(relative) = path.with_file_name(name).strip_prefix(root).map(|p| p.to_string_lossy().into_owned()) else { continue };
                let modified_ms = meta.modified().ok().and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok()).map_or(0, |d| d.as_millis() as i64);
                found.push(PartialUpload { file: path, key: Path::from(relative), modified_ms });
            }
        }
        found
    }

    /// Removes a partial upload's file, and the folders that leaves empty.
    pub fn remove_partial(&self, partial: &PartialUpload) -> bool {
        let removed = std::fs::remove_file(&partial.file).is_ok();
        if let Some(root) = &self.local_root {
            let mut folder = partial.file.parent();
            while let Some(dir) = folder {
                if dir == root || std::fs::remove_dir(dir).is_err() {
                    break;
                }
                folder = dir.parent();
            }
        }
        removed
    }
}

/// A partial file of an upload to a local store.
#[derive(Debug, Clone)]
pub struct PartialUpload {
    /// The partial file.
    pub file: std::path::PathBuf,
    /// The object it becomes when its upload completes.
    pub key: Path,
    /// Its last write, in epoch milliseconds of this host's file system.
    pub modified_ms: i64,
}

/// Runs `work`, file I/O in a local store's folder, on a blocking thread; its errors are the
/// store's (a missing file is `NotFound`, named `path`).
async fn on_local_files<T: Send + 'static>(path: String, work: impl FnOnce() -> std::io::Result<T> + Send + 'static) -> Result<T, object_store::Error> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| object_store::Error::Generic { store: "local", source: Box::new(e) })?
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => object_store::Error::NotFound { path, source: Box::new(e) },
            _ => object_store::Error::Generic { store: "local", source: Box::new(e) },
        })
}

/// An upload of one staging object: one `put` when it stays under a part, else a multipart
/// upload of parts of the store's part size with at most [`PARTS_IN_FLIGHT`] in flight. Every failure of
/// a multipart upload aborts it, so no incomplete upload is left in the store.
pub struct StagingUpload {
    objects: Arc<dyn ObjectStore>,
    /// The same store when it is a local folder: its multipart uploads are written direct
    /// ([`direct_io`]).
    local: Option<Arc<LocalFileSystem>>,
    key: Path,
    /// The part being filled: allocated once at its full size, sent when full.
    pending: Vec<u8>,
    /// The first part's size.
    part_bytes: usize,
    /// Whether later parts grow ([`s3_part_size`]): S3's uploads have at most 10,000 parts.
    parts_grow: bool,
    parts_sent: usize,
    multipart: Option<Multipart>,
    on_progress: OnProgress,
    /// The buffers of the parts sent, shared with the store until it is done with them; then
    /// one is filled again rather than a new part mapped and faulted in afresh.
    sent: Vec<bytes::Bytes>,
}

struct Multipart {
    upload: Box<dyn MultipartUpload>,
    parts: tokio::task::JoinSet<Result<(), object_store::Error>>,
}

impl Multipart {
    /// Waits until at most `in_flight` parts are still uploading.
    async fn settle(&mut self, in_flight: usize, on_progress: &OnProgress) -> Result<(), object_store::Error> {
        while self.parts.len() > in_flight {
            match self.parts.join_next().await {
                Some(Ok(Ok(()))) => on_progress(),
                None => {}
                Some(Ok(Err(e))) => return Err(e),
                Some(Err(e)) => return Err(object_store::Error::Generic { store: "staging", source: Box::new(e) }),
            }
        }
        Ok(())
    }

    async fn abort(mut self) -> Result<(), object_store::Error> {
        self.parts.shutdown().await;
        self.upload.abort().await
    }
}

impl StagingUpload {
    /// Appends bytes; sends every full part.
    pub async fn write(&mut self, mut bytes: &[u8]) -> Result<(), object_store::Error> {
        while !bytes.is_empty() {
            let part_size = self.part_size();
            if self.pending.capacity() == 0 {
                self.pending = self.reclaim(part_size).unwrap_or_default();
                self.pending.reserve_exact(part_size);
            }
            let (now, later) = bytes.split_at(bytes.len().min(part_size - self.pending.len()));
            self.pending.extend_from_slice(now);
            bytes = later;
            if self.pending.len() == part_size {
                self.send_part().await?;
            }
        }
        Ok(())
    }

    /// The size of the part being filled.
    fn part_size(&self) -> usize {
        if self.parts_grow { s3_part_size(self.part_bytes, self.parts_sent) } else { self.part_bytes }
    }

    /// Sends the full pending part, once fewer than [`PARTS_IN_FLIGHT`] are in flight.
    async fn send_part(&mut self) -> Result<(), object_store::Error> {
        if self.multipart.is_none() {
            let upload: Box<dyn MultipartUpload> = match &self.local {
                Some(local) => {
                    let dest = local.path_to_filesystem(&self.key)?;
                    let begun = tokio::task::spawn_blocking(move || direct_io::DirectUpload::begin(&dest)).await;
                    Box::new(begun.map_err(|e| object_store::Error::Generic { store: "local", source: Box::new(e) })?.map_err(|e| object_store::Error::Generic { store: "local", source: Box::new(e) })?)
                }
                None => self.objects.put_multipart(&self.key).await?,
            };
            self.multipart = Some(Multipart { upload, parts: tokio::task::JoinSet::new() });
        }
        if let Some(m) = self.multipart.as_mut() {
            m.settle(PARTS_IN_FLIGHT - 1, &self.on_progress).await?;
            let part = bytes::Bytes::from(std::mem::take(&mut self.pending));
            if self.sent.len() > PARTS_IN_FLIGHT {
                self.sent.remove(0);
            }
            self.sent.push(part.clone());
            m.parts.spawn(m.upload.put_part(PutPayload::from(part)));
            self.parts_sent += 1;
        }
        Ok(())
    }

    /// An empty buffer of at least `bytes` that held a part the store no longer holds, if any.
    fn reclaim(&mut self, bytes: usize) -> Option<Vec<u8>> {
        for _ in 0..self.sent.len() {
            match self.sent.remove(0).try_into_mut() {
                Ok(mut buffer) if buffer.capacity() >= bytes => {
                    buffer.clear();
                    return Some(Vec::from(buffer));
                }
                // Too small for the part (S3's parts grow): let go.
                Ok(_) => {}
                Err(held) => self.sent.push(held),
            }
        }
        None
    }

    /// Completes the upload; on failure it is aborted.
    pub async fn finish(mut self) -> Result<(), object_store::Error> {
        let rest = bytes::Bytes::from(std::mem::take(&mut self.pending));
        // Left in `self` while it completes: if the attempt is ended meanwhile, dropping the
        // upload aborts it.
        let Some(m) = self.multipart.as_mut() else {
            self.objects.put(&self.key, PutPayload::from(rest)).await?;
            return Ok(());
        };
        if !rest.is_empty() {
            m.parts.spawn(m.upload.put_part(PutPayload::from(rest)));
        }
        let done = match m.settle(0, &self.on_progress).await {
            Ok(()) => m.upload.complete().await.map(|_| ()),
            Err(e) => Err(e),
        };
        let finished = self.multipart.take();
        if let Err(e) = done {
            if let Some(Err(abort)) = match finished {
                Some(m) => Some(m.abort().await),
                None => None,
            } {
                tracing::warn!(key = %self.key, error = %abort, "aborting a failed upload failed too");
            }
            return Err(e);
        }
        Ok(())
    }

    /// Discards the upload and whatever parts it sent.
    pub async fn abort(mut self) -> Result<(), object_store::Error> {
        match self.multipart.take() {
            Some(m) => m.abort().await,
            None => Ok(()),
        }
    }
}

impl Drop for StagingUpload {
    /// An upload dropped part-way (its attempt was ended where it waited) is aborted, so no
    /// incomplete multipart upload is left in the store.
    fn drop(&mut self) {
        if let (Some(m), Ok(runtime)) = (self.multipart.take(), tokio::runtime::Handle::try_current()) {
            let key = self.key.clone();
            runtime.spawn(async move {
                if let Err(e) = m.abort().await {
                    tracing::warn!(key = %key, error = %e, "aborting an abandoned upload failed");
                }
            });
        }
    }
}

/// The stores of every deployment, opened on first use and checked against the deployment's
/// binding ([`identity`]) before their first use.
pub struct Stores {
    config: Arc<Config>,
    opened: Mutex<HashMap<String, ExportStore>>,
    /// Deployments whose configured store was found to be theirs.
    bound: Mutex<std::collections::HashSet<String>>,
}

impl Stores {
    /// Stores configured by `config`.
    pub fn new(config: Arc<Config>) -> Stores {
        Stores { config, opened: Mutex::new(HashMap::new()), bound: Mutex::new(Default::default()) }
    }

    /// The store of a deployment (named in any case), once it is known to be the store the
    /// deployment's files are in; at the deployment's first use it is recorded as such.
    pub async fn for_deployment<C: sea_orm::ConnectionTrait>(&self, db: &C, deployment: &str) -> Result<ExportStore, StoreError> {
        let deployment = deployment.to_ascii_lowercase();
        let store = self.cached(&deployment, || self.config.store_url_for(&deployment)).map_err(StoreError::Config)?;
        if self.bound.lock().is_ok_and(|b| b.contains(&deployment)) {
            return Ok(store);
        }
        let now_ms = crate::db::db_now_ms(db).await.map_err(|e| StoreError::Unavailable(format!("database: {e}")))?;
        identity::bind(db, &deployment, &store, now_ms).await?;
        if let Ok(mut bound) = self.bound.lock() {
            bound.insert(deployment);
        }
        Ok(store)
    }

    /// The configured store of a deployment, without checking its binding (for the operator's
    /// `exportd stores` commands).
    pub fn configured_for(&self, deployment: &str) -> Result<ExportStore, String> {
        let deployment = deployment.to_ascii_lowercase();
        self.cached(&deployment, || self.config.store_url_for(&deployment))
    }

    /// Every store this process is configured with, by name: `default`, then each deployment's
    /// own (`EXPORTD_STORE_<DEPLOYMENT>`).
    pub fn configured(&self) -> Vec<(String, Result<ExportStore, String>)> {
        // Not a deployment name: deployments are the tenants' slugs of letters.
        let mut all = vec![("default".to_owned(), self.cached("\0default", || self.config.store_url.clone()))];
        for deployment in self.config.deployment_stores.keys() {
            all.push((deployment.clone(), self.cached(deployment, || self.config.store_url_for(deployment))));
        }
        all
    }

    fn cached(&self, name: &str, url: impl FnOnce() -> String) -> Result<ExportStore, String> {
        let mut opened = self.opened.lock().map_err(|_| "store registry poisoned".to_owned())?;
        if let Some(store) = opened.get(name) {
            return Ok(store.clone());
        }
        let store = ExportStore::open(&url())?;
        opened.insert(name.to_owned(), store.clone());
        Ok(store)
    }
}

/// The size and hex SHA-256 of a local file; `on_progress` after each buffer.
fn digest_file(file: &std::path::Path, on_progress: &(dyn Fn() + Send + Sync)) -> std::io::Result<Digests> {
    let mut digests = Reading::default();
    read_beside(&[LocalPiece::Whole(file.to_owned())], |bytes| {
        digests.update(bytes);
        on_progress();
        true
    })?;
    Ok(digests.finish())
}

/// A piece of a bundle on a local folder: bytes, or a range of a file; or a whole file.
enum LocalPiece {
    Bytes(bytes::Bytes),
    File(std::path::PathBuf, std::ops::Range<u64>),
    Whole(std::path::PathBuf),
}

/// A flag that is true while this is held: work on a thread of its own, handed the flag, stops
/// once the future that awaited it is dropped.
#[derive(Default)]
struct WantedWhileHeld(Arc<std::sync::atomic::AtomicBool>);

impl WantedWhileHeld {
    fn flag(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        self.0.clone()
    }
}

impl Drop for WantedWhileHeld {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Bytes read from a local file at a time.
const READ_BYTES: usize = 1024 * 1024;

/// Buffers that go round between the thread that reads and the one that uses the bytes.
const READ_BUFFERS: usize = 3;

/// What the reading thread hands over, in the pieces' order.
enum Handed {
    Piece(bytes::Bytes),
    /// A buffer, and where in it the bytes read are.
    Read(Vec<u8>, std::ops::Range<usize>),
}

/// Hands the bytes of `pieces`, in order, to `use_bytes` (each piece of bytes, each buffer of a
/// file) while a thread of its own reads the files ahead: copying a file out of the page cache
/// took an eighth of reading and hashing it on one thread, and the other core is idle while a
/// checkpointed export's bundle's digest is read at its end. Once `use_bytes` says `false` (no
/// longer wanted) the read stops and fails.
fn read_beside(pieces: &[LocalPiece], mut use_bytes: impl FnMut(&[u8]) -> bool) -> std::io::Result<()> {
    let (read_tx, read_rx) = std::sync::mpsc::sync_channel::<std::io::Result<Handed>>(READ_BUFFERS);
    let (used_tx, used_rx) = std::sync::mpsc::channel::<Vec<u8>>();
    for _ in 0..READ_BUFFERS {
        let _ = used_tx.send(direct_io::buffer(READ_BYTES));
    }
    std::thread::scope(|scope| {
        // Owned here, so that the reader waiting for a buffer hears if this side ends early.
        let used_tx = used_tx;
        scope.spawn(move || {
            let mut spare = None;
            for piece in pieces {
                let read = match piece {
                    LocalPiece::Bytes(b) => Ok(read_tx.send(Ok(Handed::Piece(b.clone()))).is_ok()),
                    LocalPiece::File(path, range) => read_file(path, Some(range.clone()), (&read_tx, &used_rx), &mut spare),
                    LocalPiece::Whole(path) => read_file(path, None, (&read_tx, &used_rx), &mut spare),
                };
                match read {
                    Ok(true) => {}
                    // The one who uses the bytes is gone: it failed, or it has them all.
                    Ok(false) => break,
                    Err(e) => {
                        let _ = read_tx.send(Err(e));
                        break;
                    }
                }
            }
            spare.into_iter().chain(used_rx.try_iter()).for_each(direct_io::keep);
        });
        for read in read_rx {
            let wanted = match read? {
                Handed::Piece(b) => use_bytes(&b),
                Handed::Read(buffer, read) => {
                    let wanted = use_bytes(&buffer[read]);
                    // The reader done: kept for the next read.
                    if let Err(unused) = used_tx.send(buffer) {
                        direct_io::keep(unused.0);
                    }
                    wanted
                }
            };
            if !wanted {
                // Returning drops the channels: the reader, waiting on either, ends.
                return Err(std::io::Error::other("the read was no longer wanted"));
            }
        }
        Ok(())
    })
}

/// Reads `range` of the file at `path` (all of it with `None`) into the buffers `used_rx` gives
/// (or `spare`, the one a file's end left unused), each sent on `read_tx`; `Ok(false)` once no
/// one takes them. A file shorter than its range fails. Read direct where the file system allows
/// it and the range starts on a block: whole blocks into an aligned window, the bytes past the
/// range's end not handed on.
fn read_file(
    path: &std::path::Path,
    range: Option<std::ops::Range<u64>>,
    (read_tx, used_rx): (&std::sync::mpsc::SyncSender<std::io::Result<Handed>>, &std::sync::mpsc::Receiver<Vec<u8>>),
    spare: &mut Option<Vec<u8>>,
) -> std::io::Result<bool> {
    use std::io::{Read, Seek};
    let ordinary = |at: u64| -> std::io::Result<std::fs::File> {
        let mut file = std::fs::File::open(path)?;
        file.seek(std::io::SeekFrom::Start(at))?;
        Ok(file)
    };
    let start = range.as_ref().map_or(0, |r| r.start);
    let (mut file, mut direct) = if start % direct_io::ALIGN as u64 == 0 {
        direct_io::open_to_read(path)?
    } else {
        (std::fs::File::open(path)?, false)
    };
    file.seek(std::io::SeekFrom::Start(start))?;
    let mut at = start;
    let mut left = range.as_ref().map_or(u64::MAX, |r| r.end - r.start);
    while left > 0 {
        let mut buffer = match spare.take() {
            Some(buffer) => buffer,
            None => match used_rx.recv() {
                Ok(buffer) => buffer,
                Err(_) => return Ok(false),
            },
        };
        let want = READ_BYTES.min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = loop {
            let asked = if direct { want.next_multiple_of(direct_io::ALIGN) } else { want };
            match file.read(direct_io::aligned(&mut buffer, asked)) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // Opened direct, but its reads refused: the ordinary way from here.
                Err(e) if direct && direct_io::refused(&e) => {
                    direct = false;
                    file = ordinary(at)?;
                }
                read => break read?,
            }
        };
        if n == 0 {
            *spare = Some(buffer);
            if range.is_none() {
                return Ok(true);
            }
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, format!("{} is shorter than its checkpoint says", path.display())));
        }
        if direct && n % direct_io::ALIGN != 0 {
            // Short of a whole block: the file's end, or a read the file system cut short; what
            // follows, if anything, is read the ordinary way from where this one ended.
            direct = false;
            file = ordinary(at + n as u64)?;
        }
        let n = n.min(want);
        at += n as u64;
        left -= n as u64;
        let from = direct_io::aligned_at(&buffer);
        if read_tx.send(Ok(Handed::Read(buffer, from..from + n))).is_err() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// What reading an object through found: its size, hex SHA-256 and CRC-32.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Digests {
    /// Bytes.
    pub size: u64,
    /// Hex SHA-256.
    pub sha256: String,
    /// CRC-32.
    pub crc32: u32,
}

/// [`Digests`] as the bytes go by.
#[derive(Default)]
struct Reading {
    size: u64,
    sha256: Sha256,
    crc32: crc32fast::Hasher,
}

impl Reading {
    fn update(&mut self, bytes: &[u8]) {
        self.size += bytes.len() as u64;
        self.sha256.update(bytes);
        self.crc32.update(bytes);
    }

    fn finish(self) -> Digests {
        Digests { size: self.size, sha256: hex::encode(self.sha256.finalize()), crc32: self.crc32.finalize() }
    }
}

/// The staging key of one attempt's file.
pub fn staging_key(export_id: &str, generation: i32) -> Path {
    Path::from(format!("staging/{export_id}/{generation}"))
}

/// The staging key of part `index` of one attempt of a checkpointed export.
pub fn staging_part_key(export_id: &str, generation: i32, index: i32) -> Path {
    Path::from(format!("staging/{export_id}/{generation}/{index}"))
}

/// The export id and generation of a staging key (of a file, or of a part).
pub fn parse_staging_key(key: &Path) -> Option<(String, i32)> {
    let mut parts = key.parts();
    if parts.next()?.as_ref() != "staging" {
        return None;
    }
    let id = parts.next()?.as_ref().to_owned();
    let generation = parts.next()?.as_ref().parse().ok()?;
    let part = parts.next().map(|p| p.as_ref().parse::<i32>().is_ok());
    (part != Some(false) && parts.next().is_none()).then_some((id, generation))
}

/// The immutable, content-addressed key of a published file (`extension`: `csv`, `csv.gz`).
pub fn artifact_key(tenant_id: &str, export_id: &str, sha256: &str, extension: &str) -> Path {
    Path::from(format!("exports/{tenant_id}/{export_id}/{sha256}.{extension}"))
}

/// The immutable key of part `index` of a checkpointed export, as generation `generation`
/// published it (content-addressed; the generation tells whose it was before a checkpoint
/// references it).
pub fn part_key(tenant_id: &str, export_id: &str, index: i32, generation: i32, sha256: &str, extension: &str) -> Path {
    Path::from(format!("exports/{tenant_id}/{export_id}/parts/{index:05}.{generation}.{sha256}.{extension}"))
}

/// The generation that published a part, from its key.
pub fn part_generation(key: &Path) -> Option<i32> {
    let file = key.filename()?;
    file.split('.').nth(1)?.parse().ok()
}

/// The immutable, content-addressed key of a checkpointed export's manifest (its artifact).
pub fn manifest_key(tenant_id: &str, export_id: &str, sha256: &str) -> Path {
    Path::from(format!("exports/{tenant_id}/{export_id}/manifest-{sha256}.json"))
}

/// The job id of a key under a kind's root (`exports/`, `imports/`): a file, a manifest, or a part.
pub fn parse_artifact_key(key: &Path) -> Option<String> {
    let parts: Vec<_> = key.parts().collect();
    let published = |file: &str| crate::file_type::FileType::of_name(file).is_some() || file.ends_with(".json");
    let is_root = |root: &str| crate::job_store::kind::JobKind::ALL.iter().any(|k| k.artifact_root() == root);
    match parts.as_slice() {
        [root, _tenant, id, file] if is_root(root.as_ref()) && published(file.as_ref()) => Some(id.as_ref().to_owned()),
        [root, _tenant, id, folder, file] if root.as_ref() == "exports" && folder.as_ref() == "parts" && published(file.as_ref()) => Some(id.as_ref().to_owned()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_thousand_growing_s3_parts_hold_more_than_s3s_largest_object_and_none_is_outside_s3s_bounds() {
        let sizes: Vec<u64> = (0..ranged_copy::PARTS_MAX as usize).map(|i| s3_part_size(PART_BYTES, i) as u64).collect();
        assert!(sizes.iter().all(|&s| (PART_BYTES as u64..=S3_PART_MAX as u64).contains(&s)), "every part from 5 MiB to 5 GiB");
        assert!(sizes.windows(2).all(|w| w[0] <= w[1]), "sizes never shrink");
        assert!(sizes.iter().sum::<u64>() > 5 * (1 << 40), "10,000 parts hold more than 5 TiB");
        assert_eq!(sizes[..FLAT_PARTS].iter().sum::<u64>(), FLAT_PARTS as u64 * PART_BYTES as u64, "a file under 19.5 GiB keeps 5 MiB parts");
        assert_eq!(s3_part_size(PART_BYTES, FLAT_PARTS), 2 * PART_BYTES);
        assert_eq!(s3_part_size(PART_BYTES, usize::MAX), S3_PART_MAX, "never above S3's largest part");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_upload_larger_than_a_part_arrives_whole_and_an_aborted_one_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = ExportStore::open(&format!("file://{}", dir.path().display())).unwrap();
        let bytes: Vec<u8> = (0..(2 * LOCAL_PART_BYTES + 12_345)).map(|i| (i % 251) as u8).collect();
        let key = staging_key("exp_big", 1);
        let steps = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = steps.clone();
        let on_progress: OnProgress = Arc::new(move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        let mut upload = store.stage(&key, on_progress.clone());
        for chunk in bytes.chunks(256 * 1024 + 7) {
            upload.write(chunk).await.unwrap();
        }
        upload.finish().await.unwrap();
        assert!(steps.load(std::sync::atomic::Ordering::Relaxed) >= 2, "each part that lands is progress");
        let digests = store.digest(&key, on_progress.clone()).await.unwrap();
        assert_eq!(digests.size as usize, bytes.len());
        assert_eq!(digests.sha256, hex::encode(Sha256::digest(&bytes)));
        assert_eq!(digests.crc32, crc32fast::hash(&bytes));

        let other = staging_key("exp_big", 2);
        let mut upload = store.stage(&other, on_progress.clone());
        upload.write(&bytes).await.unwrap();
        upload.abort().await.unwrap();
        assert!(matches!(store.digest(&other, on_progress).await, Err(object_store::Error::NotFound { .. })));
        assert!(store.partial_uploads().is_empty(), "no partial file left");
    }

    /// A local store holding one part of four read buffers (the last short) at `key`: the
    /// folder, the store, the key and the part's bytes.
    async fn a_store_with_a_part(key: &str) -> (tempfile::TempDir, ExportStore, Path, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let store = ExportStore::open(&format!("file://{}", dir.path().display())).unwrap();
        let bytes: Vec<u8> = (0..(3 * READ_BYTES + 5_000)).map(|i| (i % 253) as u8).collect();
        let key = Path::from(key);
        let mut upload = store.stage(&key, Arc::new(|| {}));
        upload.write(&bytes).await.unwrap();
        upload.finish().await.unwrap();
        (dir, store, key, bytes)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_digest_of_pieces_reads_any_range_of_a_file_in_order_and_fails_a_file_shorter_than_its_range() {
        use crate::bundle::Piece;
        let (_dir, store, key, bytes) = a_store_with_a_part("exports/ten_a/exp_a/parts/00001.1.x.csv").await;
        let len = bytes.len() as u64;
        for range in [0..len, 4096..2 * READ_BYTES as u64 + 100, 7..READ_BYTES as u64 + 3, 8192..8202, len - 10..len, 5..5] {
            let pieces = [Piece::Bytes(bytes::Bytes::from_static(b"head")), Piece::Object(key.clone(), range.clone()), Piece::Bytes(bytes::Bytes::from_static(b"tail"))];
            let whole = [b"head".as_slice(), &bytes[range.start as usize..range.end as usize], b"tail"].concat();
            assert_eq!(store.digest_pieces(&pieces, Arc::new(|| {})).await.unwrap(), hex::encode(Sha256::digest(&whole)), "{range:?}");
            for cut in 0..=pieces.len() {
                let begun = store.hash_pieces(Sha256::new(), &pieces[..cut], Arc::new(|| {})).await.unwrap();
                let ended = store.hash_pieces(begun, &pieces[cut..], Arc::new(|| {})).await.unwrap();
                assert_eq!(hex::encode(ended.finalize()), hex::encode(Sha256::digest(&whole)), "{range:?} carried on after piece {cut}");
            }
        }
        let past_its_end = [Piece::Object(key.clone(), 4096..len + 1)];
        assert!(store.digest_pieces(&past_its_end, Arc::new(|| {})).await.is_err(), "a file shorter than its range");
        let digests = store.digest(&key, Arc::new(|| {})).await.unwrap();
        assert_eq!((digests.size, digests.sha256), (len, hex::encode(Sha256::digest(&bytes))));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_digest_whose_caller_is_gone_stops_reading_at_its_next_buffer() {
        use crate::bundle::Piece;
        let (_dir, store, key, bytes) = a_store_with_a_part("exports/ten_a/exp_gone/parts/00001.1.x.csv").await;
        let pieces = vec![Piece::Object(key.clone(), 0..bytes.len() as u64)];
        // The first buffer's progress waits at the gate until the caller is gone.
        let (progress_tx, progress_rx) = std::sync::mpsc::channel::<()>();
        let gate = Arc::new(std::sync::Barrier::new(2));
        let (held, first) = (gate.clone(), std::sync::atomic::AtomicBool::new(true));
        let on_progress: OnProgress = Arc::new(move || {
            let _ = progress_tx.send(());
            if first.swap(false, std::sync::atomic::Ordering::SeqCst) {
                held.wait();
            }
        });
        let hashing = tokio::spawn({
            let store = store.clone();
            async move { store.hash_pieces(Sha256::new(), &pieces, on_progress).await }
        });
        let progress_rx = tokio::task::spawn_blocking(move || progress_rx.recv().map(|()| progress_rx)).await.unwrap().unwrap();
        hashing.abort();
        assert!(hashing.await.unwrap_err().is_cancelled());
        // Every sender is gone once the reading thread has ended.
        let after = tokio::task::spawn_blocking(move || {
            gate.wait();
            progress_rx.iter().count()
        })
        .await
        .unwrap();
        assert_eq!(after, 0, "no buffer of the four used after the first once its caller was gone");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_part_the_store_is_done_with_is_filled_again_and_one_still_held_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let store = ExportStore::open(&format!("file://{}", dir.path().display())).unwrap();
        let key = staging_key("exp_reuse", 1);
        let mut upload = store.stage(&key, Arc::new(|| {}));
        let part: Vec<u8> = (0..LOCAL_PART_BYTES).map(|i| (i % 251) as u8).collect();
        upload.write(&part).await.unwrap();
        upload.multipart.as_mut().unwrap().settle(0, &upload.on_progress).await.unwrap();
        assert_eq!(upload.sent.len(), 1, "the landed part's buffer is kept");
        let held = upload.sent[0].clone();
        assert!(upload.reclaim(LOCAL_PART_BYTES).is_none(), "a buffer someone still holds is not filled again");
        assert_eq!(upload.sent.len(), 1, "and it stays kept");
        let landed = held.as_ptr();
        drop(held);
        upload.write(&part[..1000]).await.unwrap();
        assert_eq!(upload.pending.as_ptr(), landed, "the next part is written into the landed part's buffer");
        assert_eq!(&upload.pending[..], &part[..1000]);
        upload.finish().await.unwrap();
        let mut expected = part.clone();
        expected.extend_from_slice(&part[..1000]);
        let digests = store.digest(&key, Arc::new(|| {})).await.unwrap();
        assert_eq!(digests.sha256, hex::encode(Sha256::digest(&expected)), "the refilled buffer wrote its own bytes");
    }

    #[test]
    fn keys_read_back_as_what_they_name() {
        assert_eq!(parse_staging_key(&staging_key("exp_1", 3)), Some(("exp_1".to_owned(), 3)));
        assert_eq!(parse_staging_key(&staging_part_key("exp_1", 3, 7)), Some(("exp_1".to_owned(), 3)));
        assert_eq!(parse_staging_key(&Path::from("staging/exp_1")), None);
        assert_eq!(parse_staging_key(&Path::from("staging/exp_1/x")), None);
        assert_eq!(parse_staging_key(&Path::from("staging/exp_1/3/x")), None);
        assert_eq!(parse_artifact_key(&artifact_key("ten_a", "exp_1", "ab", "csv")), Some("exp_1".to_owned()));
        assert_eq!(parse_artifact_key(&artifact_key("ten_a", "exp_1", "ab", "csv.gz")), Some("exp_1".to_owned()));
        assert_eq!(parse_artifact_key(&manifest_key("ten_a", "exp_1", "ab")), Some("exp_1".to_owned()));
        let part = part_key("ten_a", "exp_1", 3, 2, "ab", "csv.gz");
        assert_eq!(parse_artifact_key(&part), Some("exp_1".to_owned()));
        assert_eq!(part_generation(&part), Some(2));
        assert_eq!(parse_artifact_key(&Path::from("exports/ten_a/exp_1")), None);
    }
}
