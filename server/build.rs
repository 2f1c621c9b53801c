//! Puts the page's files inside a release binary that cargo-leptos builds, so the binary alone
//! serves the page (see src/site_assets.rs).
//!
//! cargo-leptos builds the wasm, hashes and (with `--precompress`) compresses the site's files
//! before it builds the server, and runs that build with `LEPTOS_SITE_ROOT` set: in a release
//! build this script points `EXPORTD_EMBEDDED_SITE` at that folder (rust-embed includes every file
//! in it) and hands the hashes cargo-leptos wrote beside the binary over as
//! `EXPORTD_EMBEDDED_HASHES`. Any other build embeds an empty folder and reads the site from disk.
//!
//! A folder's new files (a new build's hashed names) do not make cargo compile the crate again
//! by themselves: the script asks to run again whenever anything under the site changes, and a
//! run of the script compiles the crate again.

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let empty = out.join("no-site");
    std::fs::create_dir_all(&empty).expect("OUT_DIR is writable");
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    let site = if release { built_site(&out) } else { None };
    let (folder, hashes) = match site {
        Some((folder, hashes)) => (folder, hashes),
        None => (empty, String::new()),
    };
    println!("cargo::rustc-env=EXPORTD_EMBEDDED_SITE={}", folder.display());
    println!("cargo::rustc-env=EXPORTD_EMBEDDED_HASHES={hashes}");
}

/// The site cargo-leptos built for this binary, and its hashes as one line (`js: …;wasm: …;css:
/// …`), when this build is cargo-leptos' and the site holds the files its hashes name.
fn built_site(out: &Path) -> Option<(PathBuf, String)> {
    println!("cargo::rerun-if-env-changed=LEPTOS_SITE_ROOT");
    println!("cargo::rerun-if-env-changed=LEPTOS_HASH_FILE_NAME");
    let root = std::env::var_os("LEPTOS_SITE_ROOT")?;
    // cargo-leptos names the site relative to the workspace, one folder above this package.
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    let root = manifest.parent()?.join(root);
    println!("cargo::rerun-if-changed={}", root.display());
    // OUT_DIR is <target>/<profile>/build/<package>-<hash>/out; the binary, and the hash file
    // cargo-leptos writes beside it, are in <target>/<profile>.
    let hash_name = std::env::var("LEPTOS_HASH_FILE_NAME").unwrap_or_else(|_| "hash.txt".to_owned());
    let hash_file = out.ancestors().nth(3)?.join(hash_name);
    println!("cargo::rerun-if-changed={}", hash_file.display());
    let hashes = std::fs::read_to_string(&hash_file).ok()?;
    let line: Vec<&str> = hashes.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let wasm_present = line.iter().filter_map(|l| l.strip_prefix("wasm:")).any(|hash| root.join("pkg").join(format!("exportd.{}.wasm", hash.trim())).is_file());
    if !wasm_present {
        println!("cargo::warning=the site at {} is not the one {} names; the binary will read its page from disk", root.display(), hash_file.display());
        return None;
    }
    Some((root, line.join(";")))
}
