//! The OpenAPI document at `/api/openapi.json` is generated from the handlers; this snapshot test
//! keeps it honest: any change to the API shows up as a diff to review.
//! Regenerate with `EXPORTD_UPDATE_SNAPSHOTS=1 cargo test -p server --test openapi`.

mod support;

use serde_json::Value;
use support::{Backend, TestApp};

const SNAPSHOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/snapshots/openapi.json");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_openapi_document_matches_the_reviewed_snapshot() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let resp = app.anonymous().get(app.url("/api/openapi.json")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let doc: Value = resp.json().await.unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    let mut paths: Vec<&str> = doc["paths"].as_object().unwrap().keys().map(String::as_str).collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            "/api/exports",
            "/api/exports/{id}",
            "/api/exports/{id}/cancel",
            "/api/exports/{id}/download",
            "/api/exports/{id}/parts/{n}/download",
            "/api/imports",
            "/api/imports/{id}",
            "/api/imports/{id}/cancel",
            "/api/imports/{id}/report",
            "/api/openapi.json",
            "/api/session",
            "/api/uploads",
            "/files/{id}",
            "/healthz",
            "/readyz"
        ]
    );
    let pretty = serde_json::to_string_pretty(&doc).unwrap() + "\n";
    if std::env::var_os("EXPORTD_UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(SNAPSHOT, &pretty).unwrap();
    }
    let expected = std::fs::read_to_string(SNAPSHOT).expect("snapshot exists; create it with EXPORTD_UPDATE_SNAPSHOTS=1");
    assert_eq!(pretty, expected, "the API changed: review the diff and update the snapshot");
    app.stop().await;
}
