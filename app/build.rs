//! Generates the `i18n` module (leptos_i18n) from `locales/en.json` and `locales/ar.json`.

use leptos_i18n_build::{Config, ParseOptions, TranslationsInfos};
use std::error::Error;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=Cargo.toml");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?).join("i18n");
    // Interpolated texts as plain strings too (`t_string!`), for the sentences the page builds.
    let cfg = Config::new("en")?.add_locale("ar")?.parse_options(ParseOptions::new().interpolate_display(true));
    let infos = TranslationsInfos::parse(cfg)?;
    infos.emit_diagnostics();
    infos.rerun_if_locales_changed();
    infos.generate_i18n_module(out)?;
    Ok(())
}
