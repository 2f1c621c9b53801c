//! Two versions of a report during a rolling deploy (contract §12, case 24): each operation is
//! stored with the schema version of the catalog that accepted it, runs only on a worker whose
//! catalog holds that version, and ends `failed` `catalog_mismatch` when no such worker claims it
//! within the queue TTL. Real processes, on both backends.

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use support::procs::{everything, Api, Prepared};

const LONG: Duration = Duration::from_secs(60);

/// The demo's catalog, and a second version whose `orders.order_ref` is read differently, so a
/// file shows which version wrote it.
fn versions(p: &Prepared) -> (String, String) {
    let demo = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../catalog/demo.toml")).expect("the demo catalog");
    let old = r#"{ name = "order_ref", sql = "o.order_ref", type = "text","#;
    assert!(demo.contains(old), "the demo's order_ref column is where this test expects it");
    let v2 = demo.replace(old, r#"{ name = "order_ref", sql = "'v2:' || o.order_ref", type = "text","#);
    let (one, two) = (p.dir.path().join("v1.toml"), p.dir.path().join("v2.toml"));
    std::fs::write(&one, demo).expect("v1 written");
    std::fs::write(&two, v2).expect("v2 written");
    (one.display().to_string(), two.display().to_string())
}

fn request() -> Value {
    let mut body = everything("orders");
    body["columns"] = json!(["order_id", "order_ref"]);
    body
}

/// The `order_ref` cells of an export's file.
async fn refs(api: &Api, id: &str) -> Vec<String> {
    let (status, bytes) = api.download(id).await;
    assert_eq!(status, 200);
    let text = String::from_utf8(bytes.to_vec()).expect("UTF-8");
    text.lines().skip(1).map(|line| line.split(',').nth(1).unwrap_or_default().to_owned()).collect()
}

on_both_backends!(each_operation_runs_only_on_a_worker_of_its_catalog_version_and_without_one_ends_catalog_mismatch, |backend| {
    let p = Prepared::new(backend, 20).await;
    let (v1, v2) = versions(&p);
    let (_api1, base1) = p.api_with(&[("EXPORTD_CATALOG", &v1)]).await;
    let (_api2, base2) = p.api_with(&[("EXPORTD_CATALOG", &v2)]).await;
    let (old, new) = (Api::new(&base1, &p.token), Api::new(&base2, &p.token));

    // Both accepted before any worker runs; the newer version's first.
    let (status, b) = new.create("by-v2", &request()).await;
    assert_eq!(status, 202, "{b}");
    let (status, a) = old.create("by-v1", &request()).await;
    assert_eq!(status, 202, "{a}");
    let (a, b) = (a["id"].as_str().unwrap().to_owned(), b["id"].as_str().unwrap().to_owned());

    // An old worker takes only the old version's operation, though the other is older.
    let _w1 = p.worker("v1", &[("EXPORTD_CATALOG", &v1)], &[]);
    old.wait_status(&a, &["ready"], LONG).await;
    assert_eq!(old.view(&b).await["status"], "queued", "a worker of another version never claims it");
    let a_refs = refs(&old, &a).await;
    assert!(!a_refs.is_empty() && a_refs.iter().all(|r| !r.starts_with("v2:")), "{a_refs:?}");

    // A new worker takes the new version's.
    let mut w2 = p.worker("v2", &[("EXPORTD_CATALOG", &v2)], &[]);
    new.wait_status(&b, &["ready"], LONG).await;
    let b_refs = refs(&new, &b).await;
    assert!(!b_refs.is_empty() && b_refs.iter().all(|r| r.starts_with("v2:")), "{b_refs:?}");

    // With no worker of the new version left, its next operation is failed by the queue-TTL
    // rule, as a catalog mismatch.
    w2.signal("TERM");
    assert!(w2.wait_exit(LONG).await.success());
    let _janitor = p.worker("v1-short-ttl", &[("EXPORTD_CATALOG", &v1), ("EXPORTD_QUEUE_TTL_SECS", "1")], &[]);
    let (status, c) = new.create("by-v2-again", &request()).await;
    assert_eq!(status, 202, "{c}");
    let c = c["id"].as_str().unwrap().to_owned();
    let failed = new.wait_status(&c, &["failed", "ready"], LONG).await;
    assert_eq!((failed["status"].as_str(), failed["error"]["code"].as_str()), (Some("failed"), Some("catalog_mismatch")), "{failed}");
});
