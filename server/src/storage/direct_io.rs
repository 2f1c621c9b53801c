//! A local folder's staged files written and read back past the page cache (`O_DIRECT`), where
//! the file system allows it.
//!
//! A staged file is written once, read once to be checked, and read once more for a bundle's
//! digest; kept in the page cache it would take the memory the database reads from, and each
//! page of it must first be found free. On a virtual machine whose freed memory goes back to its
//! host (a balloon with free page reporting, as on the machines the benchmark runs on) every such
//! page costs a fault in the host: 2 GB written through the page cache took 6.4 s of CPU there,
//! written direct 0.27 s (docs/performance.md). Full parts go direct; the file's tail, which
//! is not a whole number of blocks, is written through the page cache. A file system that refuses
//! `O_DIRECT`, when a file is opened or when it is read or written, gets the ordinary way.

use object_store::{MultipartUpload, PutPayload, PutResult, UploadPart};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The alignment direct I/O needs of a buffer's address, a file offset and a length: a page,
/// which is at least any disk's logical block.
pub const ALIGN: usize = 4096;

/// An aligned window of `len` bytes inside `buffer`, which grows to hold it.
pub fn aligned(buffer: &mut Vec<u8>, len: usize) -> &mut [u8] {
    if buffer.len() < len + ALIGN {
        buffer.resize(len + ALIGN, 0);
    }
    let at = buffer.as_ptr().align_offset(ALIGN).min(ALIGN);
    &mut buffer[at..at + len]
}

/// Aligned buffers kept for the next upload's parts or file's reads: one allocated afresh is
/// zero-filled, a page fault a page (a fault in the host, on the machines above).
static KEPT: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// The most buffers kept: two uploads' parts in flight and a read's buffers.
const KEPT_MAX: usize = 8;

/// A buffer with room for an aligned window of `len` bytes ([`aligned`]): a kept one if one is
/// large enough, else a new one.
pub fn buffer(len: usize) -> Vec<u8> {
    let kept = KEPT.lock().ok().and_then(|mut kept| {
        let at = kept.iter().position(|b| b.len() >= len + ALIGN)?;
        Some(kept.swap_remove(at))
    });
    let mut buffer = kept.unwrap_or_default();
    aligned(&mut buffer, len);
    buffer
}

/// Keeps `buffer` for a later upload or read, unless enough are kept.
pub fn keep(buffer: Vec<u8>) {
    if let Ok(mut kept) = KEPT.lock() {
        if kept.len() < KEPT_MAX {
            kept.push(buffer);
        }
    }
}

/// Where an aligned window of `buffer` begins (see [`aligned`]).
pub fn aligned_at(buffer: &[u8]) -> usize {
    buffer.as_ptr().align_offset(ALIGN).min(ALIGN)
}

/// Opens `path` to read past the page cache, or the ordinary way where the file system refuses;
/// whether it is direct.
pub fn open_to_read(path: &Path) -> std::io::Result<(File, bool)> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::fs::OpenOptionsExt;
        if let Ok(file) = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path) {
            return Ok((file, true));
        }
    }
    Ok((File::open(path)?, false))
}

/// Opens `path` to write past the page cache, if the file system allows it.
fn open_to_write_direct(path: &Path) -> Option<File> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::fs::OpenOptionsExt;
        return std::fs::OpenOptions::new().write(true).custom_flags(libc::O_DIRECT).open(path).ok();
    }
    #[allow(unreachable_code)]
    {
        let _ = path;
        None
    }
}

/// A multipart upload to a local folder, as object_store's own (a partial file `{key}#{n}`
/// beside the key, renamed to it when complete, removed when aborted; the janitor finds one a
/// crash left by that name), with whole parts written direct.
#[derive(Debug)]
pub struct DirectUpload {
    state: Arc<UploadState>,
    /// The partial file, until the upload completes or is aborted.
    partial: Option<PathBuf>,
    /// Where the next part goes.
    offset: u64,
}

#[derive(Debug)]
struct UploadState {
    dest: PathBuf,
    /// The partial file, written the ordinary way.
    buffered: File,
    /// The same file opened direct, if the file system allows it (a part is copied into an
    /// aligned buffer to be written so).
    direct: Option<File>,
}

impl DirectUpload {
    /// Begins an upload to the file `dest`, creating its folders.
    pub fn begin(dest: &Path) -> std::io::Result<DirectUpload> {
        let mut n = 1u32;
        let (buffered, partial) = loop {
            let mut partial = dest.as_os_str().to_owned();
            partial.push(format!("#{n}"));
            let partial = PathBuf::from(partial);
            match std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&partial) {
                Ok(file) => break (file, partial),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => match partial.parent() {
                    Some(folder) => std::fs::create_dir_all(folder)?,
                    None => return Err(e),
                },
                Err(e) => return Err(e),
            }
        };
        let direct = open_to_write_direct(&partial);
        Ok(DirectUpload {
            state: Arc::new(UploadState { dest: dest.to_owned(), buffered, direct }),
            partial: Some(partial),
            offset: 0,
        })
    }
}

impl UploadState {
    /// Writes `data` at `offset`: direct when it is whole blocks at a block's start, otherwise
    /// (the file's tail, or a file system that refused a direct write) the ordinary way.
    fn write_at(&self, data: &PutPayload, offset: u64) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let len = data.content_length();
        if let Some(direct) = self.direct.as_ref().filter(|_| len > 0 && len % ALIGN == 0 && offset % ALIGN as u64 == 0) {
            let mut buffer = buffer(len);
            let window = aligned(&mut buffer, len);
            let mut at = 0;
            for piece in data.iter() {
                window[at..at + piece.len()].copy_from_slice(piece);
                at += piece.len();
            }
            let written = direct.write_all_at(window, offset);
            keep(buffer);
            match written {
                Ok(()) => return Ok(()),
                // A block larger than a page: this part the ordinary way.
                Err(e) if refused(&e) => {}
                Err(e) => return Err(e),
            }
        }
        let mut at = offset;
        for piece in data.iter() {
            self.buffered.write_all_at(piece, at)?;
            at += piece.len() as u64;
        }
        Ok(())
    }
}

/// Whether `e` is a direct read or write the file system refused (its alignment, or no direct
/// I/O at all): the ordinary way then.
pub fn refused(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(EINVAL)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
const EINVAL: i32 = libc::EINVAL;
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
const EINVAL: i32 = 22;

fn store_error(e: impl std::error::Error + Send + Sync + 'static) -> object_store::Error {
    object_store::Error::Generic { store: "local", source: Box::new(e) }
}

impl MultipartUpload for DirectUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let offset = self.offset;
        self.offset += data.content_length() as u64;
        let state = Arc::clone(&self.state);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || state.write_at(&data, offset)).await.map_err(store_error)?.map_err(store_error)
        })
    }

    fn complete<'life0, 'async_trait>(&'life0 mut self) -> std::pin::Pin<Box<dyn std::future::Future<Output = object_store::Result<PutResult>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            let partial = self.partial.take().ok_or_else(|| store_error(std::io::Error::other("the upload was already completed or aborted")))?;
            let state = Arc::clone(&self.state);
            tokio::task::spawn_blocking(move || std::fs::rename(&partial, &state.dest)).await.map_err(store_error)?.map_err(store_error)?;
            Ok(PutResult { e_tag: None, version: None })
        })
    }

    fn abort<'life0, 'async_trait>(&'life0 mut self) -> std::pin::Pin<Box<dyn std::future::Future<Output = object_store::Result<()>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            let Some(partial) = self.partial.take() else { return Ok(()) };
            match tokio::task::spawn_blocking(move || std::fs::remove_file(&partial)).await.map_err(store_error)? {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(store_error(e)),
                _ => Ok(()),
            }
        })
    }
}

impl Drop for DirectUpload {
    /// An upload dropped before it completed or was aborted (a process ending while its abort
    /// could not run) removes its partial file, as object_store's own does.
    fn drop(&mut self) {
        let Some(partial) = self.partial.take() else { return };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn_blocking(move || std::fs::remove_file(partial));
            }
            Err(_) => {
                let _ = std::fs::remove_file(partial);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_aligned_window_starts_on_a_page_and_holds_what_was_asked() {
        let mut buffer = Vec::new();
        let window = aligned(&mut buffer, 3 * ALIGN);
        assert_eq!(window.as_ptr() as usize % ALIGN, 0);
        assert_eq!(window.len(), 3 * ALIGN);
        let at = aligned_at(&buffer);
        assert_eq!(buffer[at..].as_ptr() as usize % ALIGN, 0);
    }

    #[tokio::test]
    async fn an_upload_of_whole_parts_and_a_tail_is_the_file_once_complete_and_nothing_once_aborted() {
        let folder = tempfile::tempdir().unwrap();
        let dest = folder.path().join("staging/x/1/3");
        let mut upload = DirectUpload::begin(&dest).unwrap();
        let first: Vec<u8> = (0..2 * ALIGN).map(|i| (i % 251) as u8).collect();
        let tail = b"the last rows\r\n".to_vec();
        upload.put_part(PutPayload::from(first.clone())).await.unwrap();
        upload.put_part(PutPayload::from(tail.clone())).await.unwrap();
        assert!(!dest.exists(), "not there before it completes");
        upload.complete().await.unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), [first, tail].concat());
        assert_eq!(std::fs::read_dir(dest.parent().unwrap()).unwrap().count(), 1, "no partial file left");

        let other = folder.path().join("staging/x/1/4");
        let mut upload = DirectUpload::begin(&other).unwrap();
        upload.put_part(PutPayload::from(vec![7u8; ALIGN])).await.unwrap();
        upload.abort().await.unwrap();
        assert!(!other.exists());
        assert_eq!(std::fs::read_dir(other.parent().unwrap()).unwrap().count(), 1, "the partial file is gone");
    }

    #[test]
    fn an_upload_dropped_before_it_ends_removes_its_partial_file() {
        let folder = tempfile::tempdir().unwrap();
        let upload = DirectUpload::begin(&folder.path().join("uploading/u1")).unwrap();
        let partial = upload.partial.clone().unwrap();
        assert!(partial.exists());
        drop(upload);
        assert!(!partial.exists());
    }
}
