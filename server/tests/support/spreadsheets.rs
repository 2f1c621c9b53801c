//! Spreadsheet readers exportd does not write, for the workbook tests: openpyxl (from PyPI, in
//! the virtual environment `scripts/setup.sh --test` makes) and LibreOffice Calc headless (from
//! Debian). Both are required: a missing one fails the test that needs it.

use serde_json::Value;
use std::path::{Path, PathBuf};

/// The Python of the virtual environment that holds openpyxl.
fn openpyxl_python() -> PathBuf {
    match std::env::var_os("EXPORTD_OPENPYXL_PYTHON") {
        Some(path) => path.into(),
        None => Path::new(&std::env::var("HOME").expect("HOME")).join(".cache/exportd-openpyxl/bin/python"),
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/read_xlsx.py")
}

/// What openpyxl reads in `workbook` (see tests/support/read_xlsx.py); with `sheets_only`, only
/// the sheets' names and row counts.
pub fn openpyxl(workbook: &[u8], sheets_only: bool) -> Value {
    let python = openpyxl_python();
    assert!(python.exists(), "openpyxl's Python is installed by scripts/setup.sh --test at {}", python.display());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("export.xlsx");
    std::fs::write(&path, workbook).unwrap();
    let mut command = std::process::Command::new(&python);
    command.arg(script()).arg(&path);
    if sheets_only {
        command.arg("--sheets");
    }
    let out = command.output().expect("openpyxl runs");
    assert!(out.status.success(), "openpyxl failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("the reader's JSON")
}

/// LibreOffice's `soffice`, from Debian's libreoffice-calc-nogui.
fn soffice() -> PathBuf {
    let path = PathBuf::from(std::env::var_os("EXPORTD_SOFFICE").unwrap_or_else(|| "/usr/bin/soffice".into()));
    assert!(path.exists(), "LibreOffice is installed by scripts/setup.sh --test at {}", path.display());
    path
}

/// `workbook` converted by LibreOffice Calc headless with the filter `to` (`csv:…` or `xlsx`):
/// the bytes of the file it writes.
pub fn libreoffice(workbook: &[u8], to: &str, extension: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.xlsx");
    std::fs::write(&input, workbook).unwrap();
    let out = dir.path().join("out");
    // A profile of its own, so runs at once do not share (and lock) one.
    let profile = format!("-env:UserInstallation=file://{}", dir.path().join("profile").display());
    let run = std::process::Command::new(soffice())
        .args([profile.as_str(), "--headless", "--norestore", "--convert-to", to, "--outdir"])
        .arg(&out)
        .arg(&input)
        .output()
        .expect("soffice runs");
    let written = out.join(format!("in.{extension}"));
    assert!(written.exists(), "LibreOffice wrote nothing: {} {}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    std::fs::read(written).unwrap()
}

/// LibreOffice's CSV of a workbook's first sheet: UTF-8, comma separated, `"` quoted, each cell
/// as the sheet shows it.
pub fn libreoffice_csv(workbook: &[u8]) -> Vec<Vec<String>> {
    let bytes = libreoffice(workbook, "csv:Text - txt - csv (StarCalc):44,34,76,1", "csv");
    let mut reader = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(&bytes[..]);
    reader.records().map(|r| r.expect("LibreOffice's CSV").iter().map(str::to_owned).collect()).collect()
}

/// `workbook` opened and saved again by LibreOffice Calc, as XLSX.
pub fn libreoffice_resaved(workbook: &[u8]) -> Vec<u8> {
    libreoffice(workbook, "xlsx:Calc MS Excel 2007 XML", "xlsx")
}
