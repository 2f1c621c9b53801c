//! A whole export on PostgreSQL read in two halves at once, each on its own connection in one
//! snapshot (docs/exports.md, "How a snapshot is read fast"): its file is every row once, in key
//! order, with its header and byte order mark once, plain or gzip; a half whose rows come out of
//! key order makes the export be read again, sorted; a cancel while both halves stream ends
//! both, and the next export is read in halves again.

mod support;

use exportd::config::WorkerConfig;
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::procs::everything;
use support::{Backend, Gate, Options, TestApp};

const LONG: Duration = Duration::from_secs(120);

/// Orders per tenant: more than the fewest rows an export is cut in halves for (10,000), and
/// enough that the database reads each half by the key's index.
const ORDERS: u32 = 30_000;

/// The demo's data, analysed, with the database's settings changed by `settings` (for every
/// connection made after) and then a worker started.
async fn app_with(settings: &[(&str, &str)]) -> TestApp {
    let mut app = TestApp::start(Options { orders: ORDERS, ..Options::new(Backend::Postgres) }).await;
    app.exec("ANALYZE").await;
    for (name, value) in settings {
        app.exec(&format!("DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET {name} = %L', current_database(), '{value}'); END $$")).await;
    }
    app.start_worker(WorkerConfig { deployments: vec![], concurrency: 2 }).await;
    app
}

/// Counts the times a fault point is passed.
fn counter(app: &TestApp, point: &str) -> Arc<AtomicUsize> {
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    fail::cfg_callback(app.fault(point), move || {
        counted.fetch_add(1, Ordering::SeqCst);
    })
    .unwrap();
    count
}

async fn create(app: &TestApp, client: &reqwest::Client, key: &str, body: &Value) -> String {
    let resp = app.create(client, key, body).await;
    assert_eq!(resp.status(), 202);
    resp.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
}

/// Exports everything of acme's orders with `options` and returns the finished export and its
/// file.
async fn export(app: &TestApp, client: &reqwest::Client, key: &str, options: Value) -> (Value, Vec<u8>) {
    let mut body = everything("orders");
    body["options"] = options;
    let id = create(app, client, key, &body).await;
    let done = app.wait_terminal(client, &id, LONG).await;
    assert_eq!(done["status"], "ready", "{done}");
    (done, download(app, client, &id).await)
}

async fn download(app: &TestApp, client: &reqwest::Client, id: &str) -> Vec<u8> {
    let resp = client.get(app.url(&format!("/api/exports/{id}/download"))).send().await.unwrap();
    assert_eq!(resp.status(), 303);
    let link = resp.headers()["location"].to_str().unwrap().to_owned();
    client.get(app.url(&link)).send().await.unwrap().bytes().await.unwrap().to_vec()
}

/// acme's order keys, in order.
async fn keys(app: &TestApp) -> Vec<i64> {
    let found = sea_orm::ConnectionTrait::query_all_raw(
        &app.db,
        sea_orm::Statement::from_string(sea_orm::DbBackend::Postgres, "SELECT id FROM orders WHERE tenant_id = 'ten_acme' ORDER BY id"),
    )
    .await
    .unwrap();
    found.iter().map(|row| row.try_get_by_index::<i64>(0).unwrap()).collect()
}

/// The file's header and its rows' first fields (the order's key), read by a strict parser.
fn header_and_keys(csv: &[u8]) -> (Vec<String>, Vec<i64>) {
    let mut reader = csv::ReaderBuilder::new().has_headers(true).from_reader(csv);
    let header = reader.headers().unwrap().iter().map(str::to_owned).collect();
    let keys = reader.records().map(|record| record.unwrap()[0].parse().unwrap()).collect();
    (header, keys)
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(bytes), &mut out).unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_large_export_read_in_halves_is_every_row_once_in_key_order_plain_with_a_bom_or_gzipped() {
    let app = app_with(&[]).await;
    let halves = counter(&app, "read_in_halves");
    let again = counter(&app, "whole_out_of_key_order");
    let bob = app.login("bob@acme.test").await;
    let expected = keys(&app).await;
    assert_eq!(expected.len(), ORDERS as usize);

    let (done, plain) = export(&app, &bob, "plain", serde_json::json!({})).await;
    assert_eq!(done["progress"]["rows_total"], ORDERS, "{done}");
    assert_eq!(done["progress"]["rows_written"], ORDERS, "{done}");
    let (header, written) = header_and_keys(&plain);
    assert_eq!(header[0], "order_id");
    assert_eq!(written, expected, "every row once, in key order, across the cut");
    assert_eq!(plain.windows(header[0].len()).filter(|w| *w == header[0].as_bytes()).count(), 1, "the header once");
    assert!(plain.ends_with(b"\r\n"));

    let (_, with_bom) = export(&app, &bob, "bom", serde_json::json!({"bom": true})).await;
    assert_eq!(&with_bom[..3], "\u{feff}".as_bytes(), "the byte order mark first");
    assert!(with_bom[3..] == plain[..], "then the same file");

    let (done, gzipped) = export(&app, &bob, "gzip", serde_json::json!({"compression": "gzip"})).await;
    assert_eq!(done["artifact"]["bytes"], gzipped.len(), "{done}");
    assert!(gunzip(&gzipped) == plain, "one gzip stream of the same file");

    assert_eq!(halves.load(Ordering::SeqCst), 3, "each export was read in two halves");
    assert_eq!(again.load(Ordering::SeqCst), 0, "none was read again");
    fail::remove(app.fault("read_in_halves"));
    fail::remove(app.fault("whole_out_of_key_order"));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_export_whose_halves_come_out_of_key_order_is_read_again_sorted_and_written_once() {
    // A hash table a tenth the size of the customers' spills into batches, and a join in
    // batches gives its rows out of the order its index scan read them.
    let app = app_with(&[("work_mem", "64kB"), ("hash_mem_multiplier", "1")]).await;
    let halves = counter(&app, "read_in_halves");
    let again = counter(&app, "whole_out_of_key_order");
    let bob = app.login("bob@acme.test").await;
    let (done, file) = export(&app, &bob, "out-of-order", serde_json::json!({})).await;
    assert_eq!(halves.load(Ordering::SeqCst), 1, "read in halves first");
    assert_eq!(again.load(Ordering::SeqCst), 1, "then once again, sorted");
    let (_, written) = header_and_keys(&file);
    assert_eq!(written, keys(&app).await, "every row once, in key order");
    assert_eq!(done["artifact"]["rows"], ORDERS, "{done}");
    fail::remove(app.fault("read_in_halves"));
    fail::remove(app.fault("whole_out_of_key_order"));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_while_both_halves_stream_ends_both_and_the_next_export_is_read_in_halves_again() {
    let app = app_with(&[]).await;
    let bob = app.login("bob@acme.test").await;
    let mut held = Gate::close(&app.fault("read_in_halves"));
    let id = create(&app, &bob, "cancelled", &everything("orders")).await;
    held.reached().await;
    let cancel = bob.post(app.url(&format!("/api/exports/{id}/cancel"))).send().await.unwrap();
    assert!(cancel.status().is_success(), "{}", cancel.status());
    held.open();
    let done = app.wait_terminal(&bob, &id, LONG).await;
    assert_eq!(done["status"], "cancelled", "{done}");
    drop(held);

    // Neither half's statement is left running, and the spare is back: the next export is read
    // in halves again.
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let running = sea_orm::ConnectionTrait::query_one_raw(
            &app.db,
            sea_orm::Statement::from_string(sea_orm::DbBackend::Postgres, "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'COPY (%' AND state = 'active'"),
        )
        .await
        .unwrap()
        .unwrap()
        .try_get_by_index::<i64>(0)
        .unwrap();
        if running == 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{running} COPY statements still running after the cancel");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let halves = counter(&app, "read_in_halves");
    let (_, file) = export(&app, &bob, "after", serde_json::json!({})).await;
    assert_eq!(halves.load(Ordering::SeqCst), 1, "read in halves");
    assert_eq!(header_and_keys(&file).1, keys(&app).await);
    fail::remove(app.fault("read_in_halves"));
    app.stop().await;
}
