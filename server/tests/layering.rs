//! Dependencies point down (SPEC's service layer and the project's standards): the export
//! service, the job store, the worker, the stores and the links know no HTTP type and no adapter,
//! and the worker uses the job store's transitions, never the service's or a controller's helpers.

use std::path::{Path, PathBuf};

fn sources(under: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(under);
    if root.is_file() {
        return vec![root];
    }
    let mut found = Vec::new();
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    assert!(!found.is_empty(), "no sources under {under}");
    found
}

fn offenders(under: &str, forbidden: &[&str]) -> Vec<String> {
    sources(under)
        .into_iter()
        .flat_map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            forbidden.iter().filter(|f| text.contains(**f)).map(|f| format!("{} uses {f}", path.display())).collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn the_service_the_job_store_the_worker_and_the_stores_know_no_http_type_and_no_adapter() {
    let http = ["axum", "crate::server", "crate::controllers", "HeaderMap", "leptos_axum"];
    let mut found = Vec::new();
    for layer in ["exports", "job_store", "worker", "storage.rs", "links.rs", "clock.rs"] {
        found.extend(offenders(layer, &http));
    }
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn the_worker_and_the_janitor_share_the_job_stores_transitions_not_the_services() {
    let found = offenders("worker", &["exports::service", "crate::error::AppError"]);
    assert!(found.is_empty(), "{found:#?}");
}
