//! schemathesis (PyPI) against the served OpenAPI document (SPEC §3): every operation, from its
//! examples, its schema's edges, random data (NUL bytes included) and stateful sequences that
//! follow the document's links, authenticated with an API token, on PostgreSQL, against real
//! processes. No 5xx; every answer's status is documented, its content type is the documented
//! one, and its body matches the documented schema (problem+json for every error).
//!
//! The one check left out is `positive_data_acceptance` (a request valid by the schema is
//! accepted): the API validates what a schema cannot say — that a timezone exists, that `from`
//! comes before `to`, that a role may read a column — and answers 422 there, as SPEC §3.1 asks.

mod support;

use std::time::Duration;
use support::procs::Prepared;
use support::Backend;

/// The schemathesis command line the setup installs (`scripts/setup.sh --test`).
fn schemathesis() -> std::path::PathBuf {
    match std::env::var_os("EXPORTD_SCHEMATHESIS") {
        Some(path) => path.into(),
        None => std::path::Path::new(&std::env::var("HOME").expect("HOME")).join(".cache/exportd-schemathesis/bin/st"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_server_error_and_no_answer_outside_the_document() {
    let st = schemathesis();
    assert!(st.exists(), "schemathesis is installed by scripts/setup.sh --test at {}", st.display());
    let p = Prepared::new(Backend::Postgres, 100).await;
    let (mut server, base) = p.serve_with(&[]).await;

    // schemathesis keeps its cache (`.schemathesis/`) in its working folder: not the clone's.
    let scratch = tempfile::tempdir().unwrap();
    let run = tokio::process::Command::new(&st)
        .current_dir(scratch.path())
        .args(["run", &format!("{base}/api/openapi.json")])
        .args(["--header", &format!("Authorization: Bearer {}", p.token)])
        .args(["--checks", "all", "--exclude-checks", "positive_data_acceptance"])
        .args(["--phases", "examples,coverage,fuzzing,stateful"])
        .args(["--max-examples", "60", "--seed", "20261204", "--request-timeout", "20", "--no-color"])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(600), run).await.expect("schemathesis finished within ten minutes").unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    eprintln!("{report}");
    assert!(out.status.success(), "schemathesis found failures (above)");
    server.signal("TERM");
    assert!(server.wait_exit(Duration::from_secs(60)).await.success());
}
