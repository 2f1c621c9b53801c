//! The page's static files and how long a browser may keep them.
//!
//! A release build (`cargo leptos build --release`, `hash-files = true` in Cargo.toml) names the
//! wasm, its JavaScript glue and the stylesheet by a hash of their content
//! (`pkg/exportd.<hash>.wasm`) and writes the hashes to `hash.txt` beside the binary. A file so
//! named never changes, so it is served `immutable` for a year: a return visit downloads none of
//! them, and a new release has new names. Without a hash file (a build that did not hash) the
//! plain names are served `no-cache`, so a browser revalidates them each time.
//!
//! A split build (`--split`) also writes the lazily loaded parts — `split_<name>.<hash>.wasm`,
//! their loader `__wasm_split.<hash>.js` and `__wasm_split_manifest.<hash>.json` — named by a hash
//! of their content too, but `hash.txt` does not list those hashes: such a file is recognised by
//! its name's shape (one of those stems, then a hash of cargo-leptos' length and alphabet).
//!
//! Where the files come from: `LEPTOS_SITE_ROOT` when it is set (a development build, a package
//! that ships the folder); else the files inside the binary, which a release build by
//! cargo-leptos carries (see build.rs); else `target/site`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The file cargo-leptos writes the hashes to.
const HASH_FILE: &str = "hash.txt";

/// The page's files, inside a release binary built by cargo-leptos; an empty folder otherwise.
#[derive(rust_embed::Embed)]
#[folder = "$EXPORTD_EMBEDDED_SITE"]
struct Embedded;

/// Where the site's files are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SiteFiles {
    /// A folder on disk.
    Folder(PathBuf),
    /// The binary itself.
    Embedded,
}

/// The hashes of one build's files, if it hashed them, and where the files are.
#[derive(Debug, Clone)]
pub struct SiteAssets {
    /// Where the files are read from.
    pub files: SiteFiles,
    /// Where the hash file was found (beside the binary, or in the site root), or `embedded`.
    pub hash_file: Option<PathBuf>,
    js: Option<Arc<str>>,
    wasm: Option<Arc<str>>,
    css: Option<Arc<str>>,
}

impl Default for SiteAssets {
    fn default() -> SiteAssets {
        SiteAssets { files: SiteFiles::Folder(PathBuf::from(DEFAULT_SITE_ROOT)), hash_file: None, js: None, wasm: None, css: None }
    }
}

/// The site's folder when `LEPTOS_SITE_ROOT` is not set and the binary carries no files.
pub const DEFAULT_SITE_ROOT: &str = "target/site";

impl SiteAssets {
    /// The site this process serves: the folder `site_root` (`LEPTOS_SITE_ROOT`) when it is
    /// set; else the files inside the binary, when it carries them; else `target/site`.
    pub fn choose(site_root: Option<&str>, output_name: &str) -> SiteAssets {
        if let Some(root) = site_root {
            return SiteAssets::find(root, output_name);
        }
        match SiteAssets::embedded(output_name) {
            Some(assets) => assets,
            None => SiteAssets::find(DEFAULT_SITE_ROOT, output_name),
        }
    }

    /// The files inside the binary, if it carries a whole build's: the hashes build.rs found, and
    /// every file they name.
    fn embedded(output_name: &str) -> Option<SiteAssets> {
        let mut assets = SiteAssets::parse(&env!("EXPORTD_EMBEDDED_HASHES").replace(';', "\n"));
        if !assets.is_complete() || !assets.files(output_name).iter().all(|f| Embedded::get(f).is_some()) {
            return None;
        }
        assets.files = SiteFiles::Embedded;
        assets.hash_file = Some(PathBuf::from("embedded"));
        Some(assets)
    }

    /// Reads the hash file beside the running binary, where cargo-leptos writes it, or else in
    /// `site_root` (where a package may put it beside the files). A hash file whose files are not
    /// in `site_root/pkg` (another build's, say the release one's beside a debug binary) is
    /// passed over with an error in the log: the page would name files that are not there.
    pub fn find(site_root: &str, output_name: &str) -> SiteAssets {
        let beside_exe = std::env::current_exe().ok().and_then(|exe| exe.parent().map(|dir| dir.join(HASH_FILE)));
        let candidates = beside_exe.into_iter().chain(std::iter::once(Path::new(site_root).join(HASH_FILE)));
        for path in candidates {
            let Ok(text) = std::fs::read_to_string(&path) else { continue };
            let mut assets = SiteAssets::parse(&text);
            if !assets.is_complete() {
                continue;
            }
            let missing: Vec<PathBuf> = assets.files(output_name).into_iter().map(|f| Path::new(site_root).join(f)).filter(|f| !f.is_file()).collect();
            if missing.is_empty() {
                assets.hash_file = Some(path);
                assets.files = SiteFiles::Folder(PathBuf::from(site_root));
                return assets;
            }
            tracing::error!(hash_file = %path.display(), missing = ?missing, "the site's files are not those the hash file names; rebuild the site for this binary");
        }
        SiteAssets { files: SiteFiles::Folder(PathBuf::from(site_root)), ..SiteAssets::default() }
    }

    /// The site paths of the hashed files, `pkg/<output_name>.<hash>.<ext>`.
    fn files(&self, output_name: &str) -> Vec<String> {
        [("js", &self.js), ("wasm", &self.wasm), ("css", &self.css)]
            .into_iter()
            .filter_map(|(ext, hash)| hash.as_ref().map(|h| format!("pkg/{output_name}.{h}.{ext}")))
            .collect()
    }

    /// Parses `js: …`, `wasm: …` and `css: …` lines.
    pub fn parse(text: &str) -> SiteAssets {
        let mut assets = SiteAssets::default();
        for line in text.lines() {
            let Some((kind, hash)) = line.split_once(':') else { continue };
            let hash = hash.trim();
            // A hash is URL-safe base64: anything else is not one cargo-leptos wrote.
            if hash.is_empty() || !hash.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
                continue;
            }
            let slot = match kind.trim() {
                "js" => &mut assets.js,
                "wasm" => &mut assets.wasm,
                "css" => &mut assets.css,
                _ => continue,
            };
            *slot = Some(hash.into());
        }
        assets
    }

    fn is_complete(&self) -> bool {
        self.js.is_some() && self.wasm.is_some() && self.css.is_some()
    }

    /// Whether the build's files carry hashed names.
    pub fn hashed(&self) -> bool {
        self.hash_file.is_some()
    }

    /// The path on the site of the build's file of extension `ext`, named by `hash` when the
    /// build hashed its files.
    fn path(&self, output_name: &str, hash: &Option<Arc<str>>, ext: &str) -> String {
        match hash {
            Some(hash) if self.hashed() => format!("/pkg/{output_name}.{hash}.{ext}"),
            _ => format!("/pkg/{output_name}.{ext}"),
        }
    }

    /// The stylesheet's path on the site.
    pub fn stylesheet(&self, output_name: &str) -> String {
        self.path(output_name, &self.css, "css")
    }

    /// The paths of the files the page's head names.
    pub fn page_files(&self, output_name: &str) -> app::PageFiles {
        app::PageFiles {
            stylesheet: self.stylesheet(output_name).into(),
            js: self.path(output_name, &self.js, "js").into(),
            wasm: self.path(output_name, &self.wasm, "wasm").into(),
        }
    }

    /// The `Cache-Control` of a static file at `path`: a year and `immutable` for a file named by
    /// this build's hash, revalidation for any other.
    pub fn cache_control(&self, path: &str) -> &'static str {
        let name = path.rsplit('/').next().unwrap_or_default();
        let by_hash_file = [&self.js, &self.wasm, &self.css].into_iter().flatten().any(|hash| name.split('.').any(|part| part == &**hash));
        if self.hashed() && (by_hash_file || is_split_part(name)) {
            "public, max-age=31536000, immutable"
        } else {
            "no-cache"
        }
    }
}

/// Answers a GET or HEAD of a file inside the binary (`path` without its leading `/`): its
/// brotli or gzip copy when the browser takes one and the build made it, else the file as is;
/// `None` when there is no such file. `Cache-Control` and `Vary` are added with every static
/// file's (server.rs).
pub fn embedded_file(path: &str, accept_encoding: Option<&str>, if_none_match: Option<&str>, head: bool) -> Option<axum::response::Response> {
    use axum::http::{header, HeaderValue, StatusCode};
    use axum::response::IntoResponse;
    let plain = Embedded::get(path)?;
    let takes = |coding: &str| accept_encoding.is_some_and(|v| accepts(v, coding));
    let (file, coding) = [("br", "br"), ("gz", "gzip")]
        .into_iter()
        .filter(|(_, coding)| takes(coding))
        .find_map(|(ext, coding)| Embedded::get(&format!("{path}.{ext}")).map(|f| (f, Some(coding))))
        .unwrap_or((plain, None));
    let etag = format!("\"{}\"", hex::encode(file.metadata.sha256_hash()));
    let mut resp = if if_none_match.is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*")) {
        StatusCode::NOT_MODIFIED.into_response()
    } else if head {
        let mut resp = StatusCode::OK.into_response();
        resp.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(file.data.len()));
        resp
    } else {
        // A release binary's files are borrowed from the binary: served without a copy.
        let bytes = match file.data {
            std::borrow::Cow::Borrowed(data) => bytes::Bytes::from_static(data),
            std::borrow::Cow::Owned(data) => bytes::Bytes::from(data),
        };
        (StatusCode::OK, bytes).into_response()
    };
    let h = resp.headers_mut();
    let media = mime_guess::from_path(path).first_or_octet_stream();
    if let Ok(media) = HeaderValue::from_str(media.as_ref()) {
        h.insert(header::CONTENT_TYPE, media);
    }
    if let Some(coding) = coding {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static(coding));
    }
    if let Ok(etag) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, etag);
    }
    Some(resp)
}

/// Whether an `Accept-Encoding` value takes `coding` (named, or `*`, with a weight above 0).
fn accepts(accept_encoding: &str, coding: &str) -> bool {
    accept_encoding.split(',').any(|item| {
        let mut parts = item.split(';');
        let name = parts.next().unwrap_or_default().trim();
        let weight = parts.find_map(|p| p.trim().strip_prefix("q=").map(|q| q.trim().parse::<f32>().unwrap_or(0.0))).unwrap_or(1.0);
        (name.eq_ignore_ascii_case(coding) || name == "*") && weight > 0.0
    })
}

/// The length of a cargo-leptos file hash: 16 bytes in URL-safe base64 without padding.
const HASH_LEN: usize = 22;

/// Whether `name` is a part a split build wrote, named by its content's hash:
/// `split_<name>.<hash>.wasm`, `__wasm_split.<hash>.js` or `__wasm_split_manifest.<hash>.json`
/// (each perhaps precompressed, `.br` or `.gz`).
fn is_split_part(name: &str) -> bool {
    let mut parts = name.split('.');
    let (Some(stem), Some(hash), Some(ext)) = (parts.next(), parts.next(), parts.next()) else { return false };
    let compressed = match parts.next() {
        None => true,
        Some(c) => (c == "br" || c == "gz") && parts.next().is_none(),
    };
    let known = match ext {
        "wasm" => stem.starts_with("split_") && stem.len() > "split_".len(),
        "js" => stem == "__wasm_split",
        "json" => stem == "__wasm_split_manifest",
        _ => false,
    };
    compressed && known && hash.len() == HASH_LEN && hash.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn built() -> SiteAssets {
        let mut assets = SiteAssets::parse("js: Ab_1\nwasm: Cd-2\ncss: Ef3\n");
        assets.hash_file = Some(PathBuf::from("/srv/hash.txt"));
        assets
    }

    #[test]
    fn a_file_named_by_this_builds_hash_is_kept_a_year_and_any_other_is_revalidated() {
        let assets = built();
        assert_eq!(assets.cache_control("/pkg/exportd.Cd-2.wasm"), "public, max-age=31536000, immutable");
        assert_eq!(assets.cache_control("/pkg/exportd.Cd-2.wasm.br"), "public, max-age=31536000, immutable");
        assert_eq!(assets.cache_control("/pkg/exportd.Ab_1.js"), "public, max-age=31536000, immutable");
        assert_eq!(assets.cache_control("/pkg/exportd.wasm"), "no-cache");
        assert_eq!(assets.cache_control("/pkg/exportd.Zz9.wasm"), "no-cache");
        assert_eq!(SiteAssets::default().cache_control("/pkg/exportd.Cd-2.wasm"), "no-cache");
    }

    #[test]
    fn the_parts_of_a_split_build_named_by_their_hash_are_kept_a_year_and_nothing_else_like_them() {
        let assets = built();
        let year = "public, max-age=31536000, immutable";
        assert_eq!(assets.cache_control("/pkg/split_section_12899844241879822563.MJ7MBncJb5F5rEGOcwfXXA.wasm"), year);
        assert_eq!(assets.cache_control("/pkg/split_section_1.MJ7MBncJb5F5rEGOcwfXXA.wasm.br"), year);
        assert_eq!(assets.cache_control("/pkg/__wasm_split.6VcjLFg9wWM-vLMxBFPQpw.js"), year);
        assert_eq!(assets.cache_control("/pkg/__wasm_split_manifest.mVPW-dwap8tReTgIzy-Lqw.json"), year);
        for other in [
            "/pkg/split_section_1.wasm",
            "/pkg/__wasm_split.js",
            "/pkg/split_section_1.MJ7MBncJb5F5rEGOcwfXXA.js",
            "/pkg/split_.MJ7MBncJb5F5rEGOcwfXXA.wasm",
            "/pkg/__wasm_split.6VcjLFg9wWM-vLMxBFPQp.js",
            "/pkg/__wasm_split.6VcjLFg9wWM-vLMxBFPQp!.js",
            "/pkg/__wasm_split.6VcjLFg9wWM-vLMxBFPQpw.js.zip",
            "/pkg/other.6VcjLFg9wWM-vLMxBFPQpw.js",
        ] {
            assert_eq!(assets.cache_control(other), "no-cache", "{other}");
        }
        assert_eq!(SiteAssets::default().cache_control("/pkg/__wasm_split.6VcjLFg9wWM-vLMxBFPQpw.js"), "no-cache");
    }

    #[test]
    fn the_stylesheet_is_named_by_its_hash_only_when_the_build_hashed() {
        assert_eq!(built().stylesheet("exportd"), "/pkg/exportd.Ef3.css");
        assert_eq!(SiteAssets::default().stylesheet("exportd"), "/pkg/exportd.css");
    }

    #[test]
    fn a_hash_file_is_used_only_when_the_files_it_names_are_in_the_site() {
        let site = tempfile::tempdir().expect("a temp dir");
        let root = site.path().to_string_lossy().into_owned();
        std::fs::create_dir_all(site.path().join("pkg")).expect("pkg");
        std::fs::write(site.path().join(HASH_FILE), "js: Ab_1\nwasm: Cd-2\ncss: Ef3\n").expect("hash file");
        for name in ["exportd.Ab_1.js", "exportd.Cd-2.wasm"] {
            std::fs::write(site.path().join("pkg").join(name), b"x").expect("file");
        }
        assert!(!SiteAssets::find(&root, "exportd").hashed(), "the stylesheet is missing");
        std::fs::write(site.path().join("pkg/exportd.Ef3.css"), b"x").expect("file");
        let found = SiteAssets::find(&root, "exportd");
        assert!(found.hashed());
        assert_eq!(found.stylesheet("exportd"), "/pkg/exportd.Ef3.css");
    }

    #[test]
    fn an_encoding_is_taken_when_named_or_starred_with_a_weight_above_zero() {
        assert!(accepts("gzip, deflate, br", "br"));
        assert!(accepts("gzip;q=0.5, BR;q=1.0", "br"));
        assert!(accepts("*", "gzip"));
        assert!(!accepts("gzip, br;q=0", "br"));
        assert!(!accepts("gzip", "br"));
        assert!(!accepts("", "gzip"));
    }

    #[test]
    fn without_a_site_root_a_binary_that_carries_no_files_reads_target_site() {
        // Test builds carry no files (build.rs embeds them only in a release build by cargo-leptos).
        let assets = SiteAssets::choose(None, "exportd");
        assert_eq!(assets.files, SiteFiles::Folder(PathBuf::from(DEFAULT_SITE_ROOT)));
        let set = SiteAssets::choose(Some("/srv/site"), "exportd");
        assert_eq!(set.files, SiteFiles::Folder(PathBuf::from("/srv/site")));
        assert!(embedded_file("pkg/exportd.wasm", None, None, false).is_none());
    }

    #[test]
    fn a_hash_file_with_a_missing_or_strange_line_is_not_complete() {
        assert!(!SiteAssets::parse("js: a\nwasm: b\n").is_complete());
        assert!(!SiteAssets::parse("js: a\nwasm: b\ncss: ../x\n").is_complete());
        assert!(SiteAssets::parse("js: a\nwasm: b\ncss: c\nmanifest: d\n").is_complete());
    }
}
