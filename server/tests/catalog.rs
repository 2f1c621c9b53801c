//! The catalog file from the command line (contract §12): `exportd catalog check` names every
//! error with its file, line and column and exits 1, and `serve` and `worker` refuse to start on
//! a catalog with an error.

mod support;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use support::TestApp;

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


/// A catalog whose TOML is right but whose SQL the source refuses: a column that does not exist,
/// a column whose type does not fit the source's (epoch milliseconds declared a date), a key with
/// no unique index, a table that does not exist, a dataset's stored column that does not exist
/// and a dataset key with no unique index; an authority query over a table that does not exist.
const WRONG_FOR_THE_SOURCE: &str = r#"[[report]]
name = "orders_by_customer"
from = "orders o"
tenant = "o.tenant_id"
key = "o.customer_id"
time = { sql = "o.placed_at", unit = "ms" }
columns = [
  { name = "id", sql = "o.id", type = "integer" },
  { name = "nope", sql = "o.no_such_column", type = "text" },
  { name = "when", sql = "o.placed_at", type = "date" },
]

[[report]]
name = "ghosts"
from = "no_such_table g"
tenant = "g.org"
key = "g.id"
time = { sql = "g.at" }
columns = [{ name = "id", sql = "g.id", type = "integer" }]

[[dataset]]
name = "notes"
table = "orders"
tenant = "tenant_id"
key = [{ name = "notes", column = "notes" }]
columns = [{ name = "notes", column = "notes", type = "text" }, { name = "x", column = "no_such", type = "text" }]

[authority]
sql = "SELECT role FROM no_such_memberships WHERE org = :tenant AND subject = :subject"
"#;

async fn check_against(app: &TestApp, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut command = tokio::process::Command::new(EXE);
    command.args(args).env("DATABASE_URL", app.database_url()).env("EXPORTD_LOG", "warn").env_remove("EXPORTD_SOURCE_URL").env_remove("EXPORTD_CATALOG");
    for (name, value) in env {
        command.env(name, value);
    }
    let out = tokio::time::timeout(Duration::from_secs(60), command.output()).await.expect("within a minute").expect("exportd runs");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

on_both_backends!(catalog_check_runs_each_sql_with_limit_0_on_the_source_and_finds_each_keys_unique_index, |backend| {
    let app = TestApp::spawn(backend).await;
    let (code, stderr) = check_against(&app, &["catalog", "check"], &[]).await;
    assert_eq!(code, 0, "the built-in catalog fits the demo's tables: {stderr}");

    let folder = tempfile::tempdir().expect("a folder");
    let file = folder.path().join("wrong.toml");
    std::fs::write(&file, WRONG_FOR_THE_SOURCE).expect("written");
    let path = file.to_string_lossy().into_owned();
    let (code, stderr) = check_against(&app, &["catalog", "check", &path], &[]).await;
    assert_eq!(code, 1, "{stderr}");
    let expected = [
        (format!("{path}:9:26: "), "column \"nope\" fails on the source"),
        (format!("{path}:5:7: "), "no unique index on orders.customer_id"),
        (format!("{path}:10:26: "), "column \"when\" is "),
        (format!("{path}:15:8: "), "`from` fails on the source"),
        (format!("{path}:26:88: "), "column \"no_such\" fails on the source"),
        (format!("{path}:25:35: "), "no unique index on orders(notes)"),
        (format!("{path}:29:7: "), "`[authority] sql` fails on the source"),
    ];
    for (place, message) in &expected {
        assert!(stderr.lines().any(|l| l.starts_with(place.as_str()) && l.contains(message)), "expected {place}{message} in {stderr}");
    }
    assert!(stderr.contains("7 errors in the catalog"), "{stderr}");
    assert_eq!(check_against(&app, &["catalog", "check", &path, "--offline"], &[]).await.0, 0, "offline, the SQL is not run");

    // `serve` and `worker` run the same check when they start, and refuse to.
    for args in [&["serve", "--bind", "127.0.0.1:0"][..], &["worker"][..]] {
        let (code, stderr) = check_against(&app, args, &[("EXPORTD_CATALOG", &path), ("EXPORTD_STORE", &format!("file://{}/objects", folder.path().display()))]).await;
        assert_eq!(code, 1, "{args:?}: {stderr}");
        assert!(stderr.lines().any(|l| l.starts_with(&format!("{path}:10:26: "))), "{args:?}: {stderr}");
    }

    let (code, stderr) = check_against(&app, &["catalog", "check"], &[("EXPORTD_SOURCE_URL", "postgres://postgres@127.0.0.1:1/nowhere")]).await;
    assert!(code == 1 && stderr.contains("source unreachable"), "{code} {stderr}");
});
