//! The OpenAPI document at `/api/openapi.json` is generated from the handlers; this snapshot test
//! keeps it honest: any change to the API shows up as a diff to review.
//! Regenerate with `EXPORTD_UPDATE_SNAPSHOTS=1 cargo test -p server --test openapi`.

mod support;

use serde_json::{json, Value};
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
            "/api/notifications",
            "/api/openapi.json",
            "/api/schedules",
            "/api/schedules/{id}",
            "/api/schedules/{id}/pause",
            "/api/schedules/{id}/resume",
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_has_its_own_id_and_a_new_import_links_to_its_own_operations() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let doc: Value = app.anonymous().get(app.url("/api/openapi.json")).send().await.unwrap().json().await.unwrap();
    let mut by_id = std::collections::HashMap::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let id = op["operationId"].as_str().unwrap_or_else(|| panic!("{method} {path} has no operationId")).to_owned();
            // Old code: `show`, `cancel`, `create` and `list` named an export's and an import's.
            assert!(by_id.insert(id.clone(), (method.clone(), path.clone())).is_none(), "{id} names two operations");
        }
    }
    let links = &doc["paths"]["/api/imports"]["post"]["responses"]["202"]["links"];
    let targets: Vec<(String, String)> = links
        .as_object()
        .unwrap_or_else(|| panic!("POST /api/imports has no links: {links}"))
        .values()
        .map(|l| by_id[l["operationId"].as_str().unwrap()].clone())
        .collect();
    for (method, path) in [("get", "/api/imports/{id}"), ("post", "/api/imports/{id}/cancel"), ("get", "/api/imports/{id}/report")] {
        assert!(targets.contains(&(method.to_owned(), path.to_owned())), "no link to {method} {path}: {targets:?}");
    }
    // An upload is the bytes of a file: any body is a valid one (old code: a JSON string, so
    // schemathesis sent `{}` as "invalid" and met 201).
    let upload = &doc["paths"]["/api/uploads"]["post"]["requestBody"]["content"]["text/csv"];
    let schema = upload.get("schema").cloned().unwrap_or(json!({}));
    assert!(schema.get("type").is_none(), "the upload's body is declared as bytes, of any shape: {upload}");
    app.stop().await;
}
