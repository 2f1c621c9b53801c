//! The catalog file from the command line (contract §12): `exportd catalog check` names every
//! error with its file, line and column and exits 1, and `serve` and `worker` refuse to start on
//! a catalog with an error.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_exportd");

/// A catalog with three errors: a report without a tenant (line 1), a role that may not export
/// (line 4, column 19) and an unknown column type (line 7, column 48).
const BAD: &str = r#"[[report]]
name = "tickets"
from = "tickets t"
roles = ["admin", "viewer"]
time = { sql = "t.opened_at" }
key = "t.id"
columns = [{ name = "id", sql = "t.id", type = "uuid" }]
"#;

fn exportd(args: &[&str], env: &[(&str, &str)], folder: &std::path::Path) -> Command {
    let mut command = Command::new(EXE);
    command.args(args).current_dir(folder).env_remove("EXPORTD_CATALOG").env("DATABASE_URL", "sqlite://data/exportd.db").env("EXPORTD_STORE", "file://data/objects");
    for (name, value) in env {
        command.env(name, value);
    }
    command
}

/// Runs `command` to its end, or kills it after `bound` and says so.
fn finished_within(mut command: Command, bound: Duration) -> Output {
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("exportd starts");
    let started = Instant::now();
    while child.try_wait().expect("waits").is_none() {
        if started.elapsed() > bound {
            let _ = child.kill();
            panic!("still running after {bound:?}: it started despite the catalog's errors");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("its output")
}

#[test]
fn catalog_check_names_every_error_with_its_file_line_and_column_and_exits_1() {
    let folder = tempfile::tempdir().expect("a folder");
    let file = folder.path().join("bad.toml");
    std::fs::write(&file, BAD).expect("written");
    let path = file.to_string_lossy().into_owned();
    let out = finished_within(exportd(&["catalog", "check", &path, "--offline"], &[], folder.path()), Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for place in [format!("{path}:1:1: "), format!("{path}:4:19: "), format!("{path}:7:48: ")] {
        assert!(stderr.lines().any(|l| l.starts_with(&place)), "no error at {place} in {stderr}");
    }
    assert!(stderr.contains("3 errors in the catalog"), "{stderr}");
}

#[test]
fn catalog_check_of_the_built_in_catalog_finds_no_error() {
    let folder = tempfile::tempdir().expect("a folder");
    let out = finished_within(exportd(&["catalog", "check", "--offline"], &[], folder.path()), Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "2 reports and 2 datasets: no errors");
}

#[test]
fn serve_and_worker_refuse_to_start_on_a_catalog_with_an_error() {
    let folder = tempfile::tempdir().expect("a folder");
    let file = folder.path().join("bad.toml");
    std::fs::write(&file, BAD).expect("written");
    let path = file.to_string_lossy().into_owned();
    for args in [&["serve", "--bind", "127.0.0.1:0"][..], &["worker"][..]] {
        let out = finished_within(exportd(args, &[("EXPORTD_CATALOG", &path)], folder.path()), Duration::from_secs(30));
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.lines().any(|l| l.starts_with(&format!("{path}:7:48: "))), "{args:?}: {stderr}");
        assert!(!folder.path().join("data/exportd.db").exists(), "{args:?} opened the database before checking its catalog");
    }
}
