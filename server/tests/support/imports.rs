//! Helpers of the import tests: upload a file, start an import, wait for its end, read its report.

use super::TestApp;
use serde_json::Value;
use std::time::Duration;

pub async fn upload(app: &TestApp, client: &reqwest::Client, csv: &str) -> String {
    let resp = client.post(app.url("/api/uploads")).header("content-type", "text/csv").body(csv.to_owned()).send().await.unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    resp.json::<Value>().await.unwrap()["upload"].as_str().unwrap().to_owned()
}

pub async fn start(app: &TestApp, client: &reqwest::Client, key: &str, body: &Value) -> Value {
    let resp = client.post(app.url("/api/imports")).header("Idempotency-Key", key).json(body).send().await.unwrap();
    assert_eq!(resp.status(), 202, "{:?}", resp.text().await);
    resp.json().await.unwrap()
}

pub async fn finished(app: &TestApp, client: &reqwest::Client, id: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let view: Value = client.get(app.url(&format!("/api/imports/{id}"))).send().await.unwrap().json().await.unwrap();
        if matches!(view["status"].as_str(), Some("ready" | "failed" | "cancelled")) {
            return view;
        }
        assert!(tokio::time::Instant::now() < deadline, "import {id} still {view}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn import(app: &TestApp, client: &reqwest::Client, key: &str, body: Value) -> Value {
    let view = start(app, client, key, &body).await;
    finished(app, client, view["id"].as_str().unwrap()).await
}

/// The report's rows (line, column, code, then the cells), header dropped.
pub async fn report(app: &TestApp, client: &reqwest::Client, id: &str) -> Vec<Vec<String>> {
    let resp = client.get(app.url(&format!("/api/imports/{id}/report"))).send().await.unwrap();
    assert_eq!(resp.status(), 303);
    let link = resp.headers()["location"].to_str().unwrap().to_owned();
    let served = client.get(app.url(&link)).send().await.unwrap();
    assert_eq!(served.status(), 200);
    assert_eq!(served.headers()["content-type"], "text/csv; charset=utf-8", "SPEC §6: a CSV is served as UTF-8");
    let bytes = served.bytes().await.unwrap();
    let mut reader = csv::ReaderBuilder::new().flexible(true).from_reader(&bytes[..]);
    assert_eq!(reader.headers().unwrap().iter().take(4).collect::<Vec<_>>(), ["line", "column", "code", "message"]);
    reader.records().map(|r| r.unwrap().iter().map(str::to_owned).collect()).collect()
}

pub fn codes(rows: &[Vec<String>]) -> Vec<(i64, String, String)> {
    rows.iter().map(|r| (r[0].parse().unwrap(), r[1].clone(), r[2].clone())).collect()
}


/// Batches of two rows.
pub fn small_batches(c: &mut exportd::config::Config) {
    c.import_batch_rows = 2;
}

/// A customers file of `n` new rows, `batch{i}@acme.test`.
pub fn numbered(n: usize) -> String {
    let mut csv = "email,name,phone,country\n".to_owned();
    for i in 0..n {
        csv.push_str(&format!("batch{i}@acme.test,Person {i},+9665{i:08},SA\n"));
    }
    csv
}


/// Waits for two renewals of the job's lease: the first after now has told its worker whatever
/// changed before it (a cancel).
pub async fn two_renewals(app: &TestApp, id: &str) {
    let lease = format!("SELECT lease_expires_at FROM jobs WHERE id = '{id}'");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let (mut seen, mut renewals) = (app.scalar(&lease).await, 0);
    while renewals < 2 {
        assert!(tokio::time::Instant::now() < deadline, "the lease of {id} was not renewed");
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = app.scalar(&lease).await;
        if now != seen {
            (seen, renewals) = (now, renewals + 1);
        }
    }
}

/// Exports `report_name` (every row of the demo's two years), uploads the file and imports it
/// back as a dry run: the export's rows and the dry run's view.
pub async fn exported_and_checked_back(app: &TestApp, client: &reqwest::Client, report_name: &str) -> (i64, Value) {
    let resp = app.create(client, &format!("export-{report_name}"), &super::procs::everything(report_name)).await;
    let id = resp.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    let done = app.wait_terminal(client, &id, Duration::from_secs(30)).await;
    assert_eq!(done["status"], "ready");
    let link = client.get(app.url(&format!("/api/exports/{id}/download"))).send().await.unwrap().headers()["location"].to_str().unwrap().to_owned();
    let csv = client.get(app.url(&link)).send().await.unwrap().text().await.unwrap();
    let upl = upload(app, client, &csv).await;
    let dry = import(app, client, &format!("back-{report_name}"), serde_json::json!({"dataset": report_name, "upload": upl, "mode": "dry_run"})).await;
    assert_eq!(dry["status"], "ready", "{dry}");
    (done["artifact"]["rows"].as_i64().unwrap(), dry)
}
