//! `/metrics` of real processes (an API and two workers on one PostgreSQL): each counter moves
//! by exactly what happened in its process, and the text parses as Prometheus text format.

mod support;

use std::time::Duration;
use support::procs::{everything, free_port, Api, Prepared};
use support::Backend;

const LONG: Duration = Duration::from_secs(60);

/// Scrapes `base/metrics` and parses it with a Prometheus text-format parser.
async fn scrape(base: &str) -> prometheus_parse::Scrape {
    let resp = reqwest::get(format!("{base}/metrics")).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("text/plain; version=0.0.4"));
    let text = resp.text().await.unwrap();
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap_or_else(|e| panic!("not Prometheus text: {e}\n{text}"))
}

/// The value of the sample `name` whose labels include `labels`; 0 when there is none.
fn value(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<f64> = scrape
        .samples
        .iter()
        .filter(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Untyped(v) => v,
            _ => panic!("{name} is not a single number"),
        })
        .collect();
    assert!(found.len() <= 1, "{name} {labels:?}: {found:?}");
    found.first().copied().unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_counter_moves_by_exactly_what_its_process_did() {
    let p = Prepared::new(Backend::Postgres, 300).await;
    let (_api, base) = p.api().await;
    let api = Api::new(&base, &p.token);
    let (a_port, b_port) = (free_port(), free_port());
    let a_bind = format!("127.0.0.1:{a_port}");
    let mut a = p.worker("a", &[("FAILPOINTS", "after_staging=sleep(4000)")], &["--metrics-bind", &a_bind]);

    // A replay and a key-reuse conflict, on the API.
    let body = everything("orders");
    let (status, view) = api.create("counted", &body).await;
    assert_eq!(status, 202);
    let id = view["id"].as_str().unwrap().to_owned();
    assert_eq!(api.create("counted", &body).await.0, 202);
    assert_eq!(api.create("counted", &everything("customers")).await.0, 422);

    // Worker a stops between staging and its fence; b's janitor takes the job back when a's lease
    // lapses (one lease reclaim), b claims and releases it; a wakes and its fence is refused.
    a.wait_line(&["after_staging", &id], LONG).await;
    a.signal("STOP");
    let b_bind = format!("127.0.0.1:{b_port}");
    let mut b = p.worker("b", &[], &["--metrics-bind", &b_bind]);
    let done = api.wait_status(&id, &["ready", "failed"], LONG).await;
    assert_eq!(done["status"], "ready", "{done}");
    a.signal("CONT");
    a.wait_line(&["lost", &id], LONG).await;

    let on_api = scrape(&base).await;
    let on_a = scrape(&format!("http://{a_bind}")).await;
    let on_b = scrape(&format!("http://{b_bind}")).await;
    assert_eq!(value(&on_api, "exportd_idempotency_replays_total", &[]), 1.0);
    assert_eq!(value(&on_api, "exportd_idempotency_key_reuse_conflicts_total", &[]), 1.0);
    assert_eq!(value(&on_api, "exportd_http_requests_total", &[("route", "/api/exports"), ("status", "422")]), 1.0);
    assert_eq!(value(&on_api, "exportd_http_requests_total", &[("route", "/api/exports"), ("status", "202")]), 2.0);
    assert_eq!(value(&on_api, "exportd_exports", &[("state", "ready")]), 1.0, "states come from the database");
    assert_eq!(value(&on_api, "exportd_exports", &[("state", "queued")]), 0.0);

    assert_eq!(value(&on_a, "exportd_claims_total", &[]), 1.0);
    assert_eq!(value(&on_a, "exportd_fenced_writes_rejected_total", &[]), 1.0);
    assert_eq!(value(&on_a, "exportd_lease_reclaims_total", &[]), 0.0);
    assert_eq!(value(&on_a, "exportd_rows_exported_total", &[]), 0.0);
    assert_eq!(value(&on_a, "exportd_exports", &[("state", "ready")]), 1.0, "every instance tells the same truth");

    assert_eq!(value(&on_b, "exportd_lease_reclaims_total", &[]), 1.0);
    assert_eq!(value(&on_b, "exportd_claims_total", &[]), 1.0);
    assert_eq!(value(&on_b, "exportd_fenced_writes_rejected_total", &[]), 0.0);
    assert_eq!(value(&on_b, "exportd_rows_exported_total", &[]), done["artifact"]["rows"].as_f64().unwrap());
    assert_eq!(value(&on_b, "exportd_bytes_exported_total", &[]), done["artifact"]["bytes"].as_f64().unwrap());
    assert_eq!(value(&on_b, "exportd_export_duration_seconds_count", &[]), 1.0);

    for w in [&mut a, &mut b] {
        w.signal("TERM");
        assert!(w.wait_exit(LONG).await.success());
    }
}
