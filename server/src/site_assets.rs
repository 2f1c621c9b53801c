//! The page's static files and how long a browser may keep them.
//!
//! A release build (`cargo leptos build --release`, `hash-files = true` in Cargo.toml) names the
//! wasm, its JavaScript glue and the stylesheet by a hash of their content
//! (`pkg/exportd.<hash>.wasm`) and writes the hashes to `hash.txt` beside the binary. A file so
//! named never changes, so it is served `immutable` for a year: a return visit downloads none of
//! them, and a new release has new names. Without a hash file (a build that did not hash) the
//! plain names are served `no-cache`, so a browser revalidates them each time.

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
    /// `site_root` (where a package may put it beside the files).
    pub fn find(site_root: &str) -> SiteAssets {
        let beside_exe = std::env::current_exe().ok().and_then(|exe| exe.parent().map(|dir| dir.join(HASH_FILE)));
        let candidates = beside_exe.into_iter().chain(std::iter::once(Path::new(site_root).join(HASH_FILE)));
        for path in candidates {
            if let Ok(text) = std::fs::read_to_string(&path) {
                let mut assets = SiteAssets::parse(&text);
                if assets.is_complete() {
                    assets.hash_file = Some(path);
                    return assets;
                }
            }
        }
        SiteAssets::default()
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
        let hashed = self.hashed() && [&self.js, &self.wasm, &self.css].into_iter().flatten().any(|hash| name.split('.').any(|part| part == &**hash));
        if hashed {
            "public, max-age=31536000, immutable"
        } else {
            "no-cache"
        }
    }
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
    fn the_stylesheet_is_named_by_its_hash_only_when_the_build_hashed() {
        assert_eq!(built().stylesheet("exportd"), "/pkg/exportd.Ef3.css");
        assert_eq!(SiteAssets::default().stylesheet("exportd"), "/pkg/exportd.css");
    }

    #[test]
    fn a_hash_file_with_a_missing_or_strange_line_is_not_complete() {
        assert!(!SiteAssets::parse("js: a\nwasm: b\n").is_complete());
        assert!(!SiteAssets::parse("js: a\nwasm: b\ncss: ../x\n").is_complete());
        assert!(SiteAssets::parse("js: a\nwasm: b\ncss: c\nmanifest: d\n").is_complete());
    }
}
