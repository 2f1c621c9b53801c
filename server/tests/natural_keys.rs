//! The natural keys imports upsert by (SPEC §10): a customer's email key, unique per tenant and
//! computed in Rust, and every order's `order_ref`, unique per tenant, exported by the `orders`
//! report; and the one job store both kinds share (a key scoped by kind, metrics by kind).

mod support;

use sea_orm::ConnectionTrait;
use serde_json::{json, Value};
use std::time::Duration;
use support::TestApp;

on_both_backends!(every_order_has_a_ref_unique_in_its_tenant_even_one_inserted_without_one, |backend| {
    let app = TestApp::spawn(backend).await;
    assert_eq!(app.scalar("SELECT COUNT(*) FROM orders WHERE order_ref IS NULL").await, 0, "the seed names every order");
    app.exec(
        "INSERT INTO orders (tenant_id, customer_id, placed_at, country, status, total_cents, currency, notes) \
         SELECT tenant_id, customer_id, placed_at, country, status, total_cents, currency, 'no ref' FROM orders WHERE tenant_id = 'ten_acme' LIMIT 3",
    )
    .await;
    assert_eq!(app.scalar("SELECT COUNT(*) FROM orders WHERE notes = 'no ref' AND order_ref = 'ORD-' || CAST(id AS VARCHAR)").await, 3);
    let taken = app.scalar("SELECT MIN(id) FROM orders WHERE tenant_id = 'ten_acme'").await;
    let duplicate = app
        .db
        .execute_unprepared(&format!(
            "UPDATE orders SET order_ref = (SELECT order_ref FROM orders WHERE id = {taken}) WHERE id = (SELECT MAX(id) FROM orders WHERE tenant_id = 'ten_acme')"
        ))
        .await;
    assert!(duplicate.is_err(), "a ref is unique in its tenant");
    // Another tenant may use the same ref.
    let only_acmes = app.scalar("SELECT MIN(id) FROM orders WHERE notes = 'no ref'").await;
    app.exec(&format!("UPDATE orders SET order_ref = 'ORD-{only_acmes}' WHERE id = (SELECT MAX(id) FROM orders WHERE tenant_id = 'ten_globex')")).await;
    assert_eq!(app.scalar(&format!("SELECT COUNT(*) FROM orders WHERE order_ref = 'ORD-{only_acmes}'")).await, 2);
});

on_both_backends!(a_customers_email_key_is_its_email_trimmed_and_lower_cased_and_unique_in_its_tenant, |backend| {
    let app = TestApp::spawn(backend).await;
    assert_eq!(app.scalar("SELECT COUNT(*) FROM customers WHERE email_key <> email OR email_key = ''").await, 0, "seeded emails are already keys");
    let first = app.scalar("SELECT MIN(id) FROM customers WHERE tenant_id = 'ten_acme'").await;
    let clash = app
        .db
        .execute_unprepared(&format!(
            "INSERT INTO customers (tenant_id, name, email, email_key, phone, country, created_at, lifetime_total_cents) \
             SELECT tenant_id, name, ' ' || UPPER(email), email_key, phone, country, created_at, 0 FROM customers WHERE id = {first}"
        ))
        .await;
    assert!(clash.is_err(), "the same key twice in a tenant");
    assert_eq!(exportd_key(" Ali.Al-Harbi@Example.COM "), "ali.al-harbi@example.com");
});

fn exportd_key(email: &str) -> String {
    migrations::email_key(email)
}

on_both_backends!(the_orders_report_exports_each_orders_ref_as_its_last_column, |backend| {
    let app = TestApp::with_worker(backend).await;
    let alice = app.login("alice@acme.test").await;
    let resp = app.create(&alice, "refs", &support::procs::everything("orders")).await;
    assert_eq!(resp.status(), 202);
    let id = resp.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    let done = app.wait_terminal(&alice, &id, Duration::from_secs(30)).await;
    assert_eq!(done["status"], "ready", "{done}");
    let link = alice.get(app.url(&format!("/api/exports/{id}/download"))).send().await.unwrap().headers()["location"].to_str().unwrap().to_owned();
    let bytes = alice.get(app.url(&link)).send().await.unwrap().bytes().await.unwrap();
    let mut reader = csv::Reader::from_reader(&bytes[..]);
    let header: Vec<String> = reader.headers().unwrap().iter().map(str::to_owned).collect();
    assert_eq!(header.last().map(String::as_str), Some("order_ref"), "{header:?}");
    let refs: Vec<String> = reader.records().map(|r| r.unwrap()[header.len() - 1].to_owned()).collect();
    assert!(!refs.is_empty() && refs.iter().all(|r| r.starts_with("SO-")), "{refs:?}");
});

on_both_backends!(an_import_kind_never_replays_an_export_key_and_the_metrics_count_each_kind_apart, |backend| {
    let app = TestApp::spawn(backend).await;
    let alice = app.login("alice@acme.test").await;
    assert_eq!(app.create(&alice, "shared-key", &json!({"report": "customers", "time_range": {"preset": "yesterday"}})).await.status(), 202);
    // A job of the other kind under the same key is another row: keys are scoped by kind.
    app.exec(
        "INSERT INTO jobs (id, tenant_id, actor_id, kind, idempotency_key, fingerprint, report, request, resolved, deployment, status, generation, attempt, \
         rows_written, artifact_expired, created_at, updated_at, checkpoint_seq) \
         SELECT 'imp_0123456789abcdef0123456789abcdef', tenant_id, actor_id, 'import', idempotency_key, 'fp', 'customers', '{}', '{}', deployment, 'queued', 0, 0, 0, artifact_expired, created_at, updated_at, 0 FROM jobs",
    )
    .await;
    assert_eq!(app.scalar("SELECT COUNT(*) FROM jobs WHERE idempotency_key = 'shared-key'").await, 2);
    let replay = app.create(&alice, "shared-key", &json!({"report": "customers", "time_range": {"preset": "yesterday"}})).await;
    assert_eq!(replay.status(), 202);
    assert!(replay.json::<Value>().await.unwrap()["id"].as_str().unwrap().starts_with("exp_"), "the export's key replays the export");
    let list: Value = alice.get(app.url("/api/exports")).send().await.unwrap().json().await.unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 1, "the export list shows exports only: {list}");
    let metrics = app.anonymous().get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("exportd_exports{state=\"queued\"} 1"), "{metrics}");
    assert!(metrics.contains("exportd_imports{state=\"queued\"} 1"), "{metrics}");
});
