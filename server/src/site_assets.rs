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

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The file cargo-leptos writes the hashes to.
const HASH_FILE: &str = "hash.txt";

/// The hashes of one build's files, if it hashed them.
#[derive(Debug, Clone, Default)]
pub struct SiteAssets {
    /// Where the hash file was found (beside the binary, or in the site root).
    pub hash_file: Option<PathBuf>,
    js: Option<Arc<str>>,
    wasm: Option<Arc<str>>,
    css: Option<Arc<str>>,
}

impl SiteAssets {
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
                return assets;
            }
            tracing::error!(hash_file = %path.display(), missing = ?missing, "the site's files are not those the hash file names; rebuild the site for this binary");
        }
        SiteAssets::default()
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

    /// The stylesheet's path on the site.
    pub fn stylesheet(&self, output_name: &str) -> String {
        match &self.css {
            Some(hash) if self.hashed() => format!("/pkg/{output_name}.{hash}.css"),
            _ => format!("/pkg/{output_name}.css"),
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
    fn a_hash_file_with_a_missing_or_strange_line_is_not_complete() {
        assert!(!SiteAssets::parse("js: a\nwasm: b\n").is_complete());
        assert!(!SiteAssets::parse("js: a\nwasm: b\ncss: ../x\n").is_complete());
        assert!(SiteAssets::parse("js: a\nwasm: b\ncss: c\nmanifest: d\n").is_complete());
    }
}
