//! One export from login to download, through the real HTTP app, on SQLite and PostgreSQL.

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use support::TestApp;

/// A range that covers all the demo data (spread over the last two years).
fn everything() -> Value {
    let today = jiff::Zoned::now().with_time_zone(jiff::tz::TimeZone::UTC).date();
    let from = today.checked_sub(jiff::Span::new().days(800)).unwrap();
    json!({"report": "orders", "time_range": {"from": from.to_string(), "to": today.to_string()}})
}

fn assert_problem(resp_status: u16, content_type: &str, body: &Value, code: &str) {
    assert_eq!(content_type, "application/problem+json");
    assert_eq!(body["status"], resp_status);
    assert_eq!(body["code"], code);
    assert_eq!(body["type"], format!("https://exportd.dev/problems/{code}"));
}

on_both_backends!(an_analyst_exports_orders_and_downloads_a_csv_matching_the_database, |backend| {
    let app = TestApp::with_worker(backend).await;
    let bob = app.login("bob@acme.test").await;
    let resp = app.create(&bob, "intent-1", &everything()).await;
    assert_eq!(resp.status(), 202);
    let location = resp.headers()["location"].to_str().unwrap().to_owned();
    let view: Value = resp.json().await.unwrap();
    assert_eq!(location, format!("/api/exports/{}", view["id"].as_str().unwrap()));
    assert_eq!(view["status"], "queued");
    assert_eq!(view["resolved"]["deployment"], "ksa");
    let columns: Vec<&str> = view["resolved"]["columns"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    assert!(!columns.contains(&"customer_email") && !columns.contains(&"customer_phone"), "analysts get no PII: {columns:?}");

    let id = view["id"].as_str().unwrap().to_owned();
    let done = app.wait_terminal(&bob, &id, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "ready", "{done}");
    assert!(done["download"]["url"].as_str().unwrap().starts_with("/files/"));

    let redirect = bob.get(app.url(&format!("/api/exports/{id}/download"))).send().await.unwrap();
    assert_eq!(redirect.status(), 303);
    let link = redirect.headers()["location"].to_str().unwrap().to_owned();
    let file = bob.get(app.url(&link)).send().await.unwrap();
    assert_eq!(file.status(), 200);
    let h = file.headers().clone();
    assert_eq!(h["content-type"], "text/csv; charset=utf-8");
    assert!(h["content-disposition"].to_str().unwrap().starts_with("attachment; filename="));
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["content-security-policy"], "sandbox");
    assert_eq!(h["cache-control"], "private, no-store");
    let sha = done["artifact"]["sha256"].as_str().unwrap();
    assert_eq!(h["etag"].to_str().unwrap(), format!("\"{sha}\""));
    assert!(h["content-digest"].to_str().unwrap().starts_with("sha-256=:"));
    let bytes = file.bytes().await.unwrap();
    use sha2::Digest;
    assert_eq!(hex::encode(sha2::Sha256::digest(&bytes)), sha);
    assert_eq!(done["artifact"]["bytes"], bytes.len());

    let mut reader = csv::Reader::from_reader(&bytes[..]);
    let header: Vec<String> = reader.headers().unwrap().iter().map(str::to_owned).collect();
    assert_eq!(header, columns);
    let rows: Vec<csv::StringRecord> = reader.records().map(|r| r.unwrap()).collect();
    let from = view["resolved"]["from"].as_str().unwrap().parse::<jiff::Timestamp>().unwrap().as_millisecond();
    let to = view["resolved"]["to"].as_str().unwrap().parse::<jiff::Timestamp>().unwrap().as_millisecond();
    let expected = app
        .scalar(&format!("SELECT COUNT(*) FROM orders WHERE tenant_id = 'ten_acme' AND placed_at >= {from} AND placed_at < {to}"))
        .await;
    assert!(expected > 0);
    assert_eq!(rows.len() as i64, expected);
    assert_eq!(done["artifact"]["rows"], expected);
    let totals = app.scalar(&format!("SELECT CAST(SUM(total_cents) AS BIGINT) FROM orders WHERE tenant_id = 'ten_acme' AND placed_at >= {from} AND placed_at < {to}")).await;
    let total_idx = columns.iter().position(|c| *c == "total").unwrap();
    let csv_cents: i64 = rows.iter().map(|r| (r[total_idx].parse::<f64>().unwrap() * 100.0).round() as i64).sum();
    assert_eq!(csv_cents, totals);
    assert_eq!(app.objects("exports").len(), 1);
    assert!(app.objects("staging").is_empty(), "staging left: {:?}", app.objects("staging"));
    app.stop().await;
});

on_both_backends!(the_same_post_twice_with_one_key_is_one_operation_and_one_row, |backend| {
    let app = TestApp::spawn(backend).await;
    let bob = app.login("bob@acme.test").await;
    let first = app.create(&bob, "same-key", &json!({"report": "orders"})).await;
    assert_eq!(first.status(), 202);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first: Value = first.json().await.unwrap();
    let second = app.create(&bob, "same-key", &json!({"report": "orders"})).await;
    assert_eq!(second.status(), 202);
    assert_eq!(second.headers()["idempotent-replayed"], "true");
    let second: Value = second.json().await.unwrap();
    assert_eq!(first["id"], second["id"]);
    assert_eq!(app.scalar("SELECT COUNT(*) FROM jobs").await, 1);
    app.stop().await;
});

on_both_backends!(another_actors_export_answers_like_an_unknown_id, |backend| {
    let app = TestApp::spawn(backend).await;
    let bob = app.login("bob@acme.test").await;
    let alice = app.login("alice@acme.test").await;
    let gina = app.login("gina@globex.test").await;
    let view: Value = app.create(&bob, "k", &json!({"report": "orders"})).await.json().await.unwrap();
    let id = view["id"].as_str().unwrap();
    let unknown = alice.get(app.url("/api/exports/exp_nope")).send().await.unwrap();
    let unknown_status = unknown.status();
    let unknown_body: Value = unknown.json().await.unwrap();
    for other in [&alice, &gina] {
        let resp = other.get(app.url(&format!("/api/exports/{id}"))).send().await.unwrap();
        assert_eq!(resp.status(), unknown_status);
        let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
        let body: Value = resp.json().await.unwrap();
        assert_problem(404, &ct, &body, "export-not-found");
        assert_eq!(body, unknown_body);
    }
    app.stop().await;
});

on_both_backends!(a_viewer_may_not_export_and_a_missing_key_is_refused, |backend| {
    let app = TestApp::spawn(backend).await;
    let vic = app.login("vic@acme.test").await;
    let resp = app.create(&vic, "k", &json!({"report": "orders"})).await;
    let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert_problem(403, &ct, &resp.json().await.unwrap(), "export-not-permitted");

    let bob = app.login("bob@acme.test").await;
    let resp = bob.post(app.url("/api/exports")).json(&json!({"report": "orders"})).send().await.unwrap();
    let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert_problem(400, &ct, &resp.json().await.unwrap(), "idempotency-key-missing");

    let anon = app.anonymous();
    let resp = app.create(&anon, "k", &json!({"report": "orders"})).await;
    let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert_problem(401, &ct, &resp.json().await.unwrap(), "unauthenticated");
    assert_eq!(app.scalar("SELECT COUNT(*) FROM jobs").await, 0);
    app.stop().await;
});

on_both_backends!(the_demo_orders_spread_over_the_last_two_years, |backend| {
    let app = TestApp::spawn(backend).await;
    let now = jiff::Timestamp::now().as_millisecond();
    let day = 24 * 3600 * 1000i64;
    let oldest = app.scalar("SELECT MIN(placed_at) FROM orders").await;
    let newest = app.scalar("SELECT MAX(placed_at) FROM orders").await;
    assert!(now - oldest > 600 * day, "oldest order is only {} days old", (now - oldest) / day);
    assert!(now - oldest <= 730 * day);
    assert!(newest <= now);
    let last_week = app.scalar(&format!("SELECT COUNT(*) FROM orders WHERE placed_at >= {}", now - 7 * day)).await;
    let all = app.scalar("SELECT COUNT(*) FROM orders").await;
    assert!(last_week * 20 < all, "{last_week} of {all} orders in the last week");
    let awkward = app.scalar("SELECT COUNT(*) FROM orders WHERE total_cents < 0").await;
    assert!(awkward > 0, "some refunds have negative totals");
    app.stop().await;
});

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_create_on_postgres_wakes_listening_workers_when_it_commits() {
    use sea_orm::sqlx::postgres::PgListener;
    let app = TestApp::spawn(support::Backend::Postgres).await;
    let mut listener = PgListener::connect(app.database_url()).await.unwrap();
    listener.listen("exportd_jobs").await.unwrap();
    let bob = app.login("bob@acme.test").await;
    let resp = app.create(&bob, "announced", &everything()).await;
    assert_eq!(resp.status(), 202);
    // The bound only ends a broken run; a working trigger delivers at the create's commit.
    let note = tokio::time::timeout(Duration::from_secs(10), listener.recv()).await.expect("a notification").unwrap();
    assert_eq!(note.channel(), "exportd_jobs");
    app.stop().await;
}
