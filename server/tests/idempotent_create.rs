//! The create contract of SPEC §2–§3, each rule on its own, on SQLite and PostgreSQL.

mod support;

use reqwest::header::HeaderValue;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use support::{expect_problem, send_together, Backend, FixedClock, Options, TestApp};

async fn export_count(app: &TestApp) -> i64 {
    app.scalar("SELECT COUNT(*) FROM jobs").await
}

on_both_backends!(sixty_four_concurrent_posts_with_one_key_make_one_row, |backend| {
    let app = TestApp::spawn(backend).await;
    let bob = app.login("bob@acme.test").await;
    for round in 0..20 {
        let key = format!("race-{round}");
        let requests = (0..64)
            .map(|_| bob.post(app.url("/api/exports")).header("Idempotency-Key", key.as_str()).json(&json!({"report": "orders"})))
            .collect();
        let mut ids = std::collections::HashSet::new();
        for (status, id) in send_together(requests).await {
            assert_eq!(status, 202, "round {round}");
            ids.insert(id.expect("an id"));
        }
        assert_eq!(ids.len(), 1, "round {round}: {ids:?}");
        assert_eq!(app.scalar(&format!("SELECT COUNT(*) FROM jobs WHERE idempotency_key = '{key}'")).await, 1);
    }
    assert_eq!(export_count(&app).await, 20);
    app.stop().await;
});

on_both_backends!(missing_empty_overlong_and_non_ascii_keys_are_refused_and_store_nothing, |backend| {
    let app = TestApp::spawn(backend).await;
    let bob = app.login("bob@acme.test").await;
    let url = app.url("/api/exports");
    let body = json!({"report": "orders"});
    expect_problem(bob.post(&url).json(&body).send().await.unwrap(), 400, "idempotency-key-missing").await;
    let long = "k".repeat(256);
    let bad: Vec<HeaderValue> = vec![
        HeaderValue::from_static(""),
        HeaderValue::from_static("\"\""),
        HeaderValue::from_str(&long).unwrap(),
        HeaderValue::from_bytes("clé".as_bytes()).unwrap(),
        HeaderValue::from_static("\"unterminated"),
        HeaderValue::from_static("has space"),
    ];
    for key in bad {
        let resp = bob.post(&url).header("Idempotency-Key", key.clone()).json(&body).send().await.unwrap();
        expect_problem(resp, 400, "idempotency-key-invalid").await;
    }
    let twice = bob.post(&url).header("Idempotency-Key", "a").header("Idempotency-Key", "b").json(&body).send().await.unwrap();
    expect_problem(twice, 400, "idempotency-key-invalid").await;
    assert_eq!(export_count(&app).await, 0);
    app.stop().await;
});

on_both_backends!(a_quoted_key_and_the_bare_key_are_one_operation_and_the_replay_says_so, |backend| {
    let app = TestApp::spawn(backend).await;
    let bob = app.login("bob@acme.test").await;
    let first = app.create(&bob, "\"abc\"", &json!({"report": "orders"})).await;
    assert_eq!(first.status(), 202);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first: Value = first.json().await.unwrap();
    let second = app.create(&bob, "abc", &json!({"report": "orders"})).await;
    assert_eq!(second.status(), 202);
    assert_eq!(second.headers()["idempotent-replayed"], "true");
    assert_eq!(second.headers()["location"], format!("/api/exports/{}", first["id"].as_str().unwrap()).as_str());
    let second: Value = second.json().await.unwrap();
    assert_eq!(first["id"], second["id"]);
    // Defaults filled in: an explicit default is the same intent.
    let third = app.create(&bob, "abc", &json!({"report": "orders", "format": "csv", "timezone": "UTC", "filters": {}})).await;
    assert_eq!(third.status(), 202);
    assert_eq!(export_count(&app).await, 1);
    app.stop().await;
});

on_both_backends!(the_same_key_with_other_filters_is_refused_and_the_original_is_untouched, |backend| {
    let app = TestApp::spawn(backend).await;
    let bob = app.login("bob@acme.test").await;
    let original: Value = app.create(&bob, "k1", &json!({"report": "orders", "filters": {"status": ["paid"]}})).await.json().await.unwrap();
    let before: Value = bob.get(app.url(&format!("/api/exports/{}", original["id"].as_str().unwrap()))).send().await.unwrap().json().await.unwrap();
    let resp = app.create(&bob, "k1", &json!({"report": "orders", "filters": {"status": ["refunded"]}})).await;
    let problem = expect_problem(resp, 422, "idempotency-key-reused").await;
    assert_eq!(problem["operation_ref"], original["id"]);
    // Even a body that is not a valid request is another intent for a bound key.
    expect_problem(app.create(&bob, "k1", &json!({"report": "nope"})).await, 422, "idempotency-key-reused").await;
    let after: Value = bob.get(app.url(&format!("/api/exports/{}", original["id"].as_str().unwrap()))).send().await.unwrap().json().await.unwrap();
    assert_eq!(before["request"], after["request"]);
    assert_eq!(before["updated_at"], after["updated_at"]);
    assert_eq!(after["request"]["filters"]["status"], json!(["paid"]));
    assert_eq!(export_count(&app).await, 1);
    app.stop().await;
});

on_both_backends!(a_corrected_retry_after_a_validation_error_proceeds_with_the_same_key, |backend| {
    let app = TestApp::spawn(backend).await;
    let bob = app.login("bob@acme.test").await;
    let resp = app.create(&bob, "fix-me", &json!({"report": "orders", "timezone": "Mars/Olympus"})).await;
    let problem = expect_problem(resp, 422, "invalid-request").await;
    assert_eq!(problem["errors"][0]["pointer"], "/timezone");
    assert_eq!(export_count(&app).await, 0);
    let resp = app.create(&bob, "fix-me", &json!({"report": "orders", "timezone": "Asia/Riyadh"})).await;
    assert_eq!(resp.status(), 202);
    assert!(resp.headers().get("idempotent-replayed").is_none());
    assert_eq!(export_count(&app).await, 1);
    app.stop().await;
});

on_both_backends!(one_key_used_by_two_users_makes_two_operations, |backend| {
    let app = TestApp::spawn(backend).await;
    let bob = app.login("bob@acme.test").await;
    let alice = app.login("alice@acme.test").await;
    let a: Value = app.create(&bob, "shared", &json!({"report": "orders"})).await.json().await.unwrap();
    let b: Value = app.create(&alice, "shared", &json!({"report": "orders"})).await.json().await.unwrap();
    assert_ne!(a["id"], b["id"]);
    assert_eq!(export_count(&app).await, 2);
    app.stop().await;
});

on_both_backends!(a_retry_after_a_server_restart_is_still_a_replay, |backend| {
    let app = TestApp::spawn(backend).await;
    let (client, _) = app.token_client("bob@acme.test").await;
    let first: Value = app.create(&client, "survives", &json!({"report": "customers"})).await.json().await.unwrap();
    let app = app.restart().await;
    let resp = app.create(&client, "survives", &json!({"report": "customers"})).await;
    assert_eq!(resp.status(), 202);
    assert_eq!(resp.headers()["idempotent-replayed"], "true");
    let second: Value = resp.json().await.unwrap();
    assert_eq!(first["id"], second["id"]);
    assert_eq!(export_count(&app).await, 1);
    app.stop().await;
});

on_both_backends!(yesterday_in_riyadh_retried_after_local_midnight_is_a_replay_of_the_same_day, |backend| {
    let clock = Arc::new(FixedClock(Mutex::new("2026-03-10T20:30:00Z".parse().unwrap())));
    let app = TestApp::start(Options { clock: Some(clock.clone()), ..Options::new(backend) }).await;
    let bob = app.login("bob@acme.test").await;
    let body = json!({"report": "orders", "time_range": {"preset": "yesterday"}, "timezone": "Asia/Riyadh"});
    let first: Value = app.create(&bob, "riyadh", &body).await.json().await.unwrap();
    assert_eq!(first["resolved"]["from"], "2026-03-08T21:00:00.000Z");
    assert_eq!(first["resolved"]["to"], "2026-03-09T21:00:00.000Z");
    *clock.0.lock().unwrap() = "2026-03-10T21:30:00Z".parse().unwrap();
    let retry = app.create(&bob, "riyadh", &body).await;
    assert_eq!(retry.status(), 202);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    let retry: Value = retry.json().await.unwrap();
    assert_eq!(retry["id"], first["id"]);
    assert_eq!(retry["resolved"], first["resolved"]);
    // A new intent at the same moment is the next local day.
    let fresh: Value = app.create(&bob, "riyadh-2", &body).await.json().await.unwrap();
    assert_eq!(fresh["resolved"]["from"], "2026-03-09T21:00:00.000Z");
    app.stop().await;
});

on_both_backends!(presets_and_explicit_dates_resolve_as_the_spec_says_through_the_api, |backend| {
    let clock = Arc::new(FixedClock(Mutex::new("2026-03-10T12:00:00Z".parse().unwrap())));
    let app = TestApp::start(Options { clock: Some(clock), ..Options::new(backend) }).await;
    let bob = app.login("bob@acme.test").await;
    let cases = [
        (json!({"preset": "yesterday"}), "UTC", "2026-03-09T00:00:00.000Z", "2026-03-10T00:00:00.000Z"),
        (json!({"preset": "last_7_days"}), "UTC", "2026-03-03T00:00:00.000Z", "2026-03-10T00:00:00.000Z"),
        (json!({"preset": "this_month"}), "UTC", "2026-03-01T00:00:00.000Z", "2026-04-01T00:00:00.000Z"),
        (json!({"from": "2026-03-28", "to": "2026-03-29"}), "Europe/Berlin", "2026-03-27T23:00:00.000Z", "2026-03-29T22:00:00.000Z"),
        (json!({"from": "2026-09-06", "to": "2026-09-06"}), "America/Santiago", "2026-09-06T04:00:00.000Z", "2026-09-07T03:00:00.000Z"),
    ];
    for (i, (range, tz, from, to)) in cases.into_iter().enumerate() {
        let view: Value = app.create(&bob, &format!("range-{i}"), &json!({"report": "orders", "time_range": range, "timezone": tz})).await.json().await.unwrap();
        assert_eq!(view["resolved"]["from"], from, "case {i}");
        assert_eq!(view["resolved"]["to"], to, "case {i}");
        assert_eq!(view["resolved"]["timezone"], tz);
    }
    app.stop().await;
});

on_both_backends!(every_validation_rule_answers_422_with_a_pointer, |backend| {
    let app = TestApp::spawn(backend).await;
    let bob = app.login("bob@acme.test").await;
    let cases = [
        (json!({"report": "invoices"}), "/report"),
        (json!({"report": "orders", "filters": {"colour": ["red"]}}), "/filters/colour"),
        (json!({"report": "orders", "filters": {"status": ["lost"]}}), "/filters/status/0"),
        (json!({"report": "orders", "filters": {"country": ["XX"]}}), "/filters/country/0"),
        (json!({"report": "orders", "filters": {"min_total": "ten"}}), "/filters/min_total"),
        (json!({"report": "orders", "filters": {"min_total": 10, "max_total": 5}}), "/filters/min_total"),
        (json!({"report": "orders", "columns": ["order_id", "favourite_colour"]}), "/columns/1"),
        (json!({"report": "orders", "timezone": "Nowhere/City"}), "/timezone"),
        (json!({"report": "orders", "time_range": {"from": "2026-02-10", "to": "2026-02-01"}}), "/time_range/from"),
        (json!({"report": "orders", "time_range": {"from": "2026-02-30", "to": "2026-03-01"}}), "/time_range/from"),
        (json!({"report": "orders", "filters": {"country": ["S\u{7}A"]}}), "/filters/country/0"),
        (json!({"report": "orders", "format": "pdf"}), "/format"),
        (json!({"report": "orders", "format": "xlsx", "options": {"bom": true}}), "/options/bom"),
        (json!({"report": "orders", "bucket": "elsewhere"}), "/bucket"),
    ];
    for (i, (body, pointer)) in cases.into_iter().enumerate() {
        let problem = expect_problem(app.create(&bob, &format!("v-{i}"), &body).await, 422, "invalid-request").await;
        let pointers: Vec<&str> = problem["errors"].as_array().unwrap().iter().map(|e| e["pointer"].as_str().unwrap()).collect();
        assert!(pointers.contains(&pointer), "case {i}: {problem}");
    }
    // An analyst asking for a PII column is refused, not narrowed.
    let pii = app.create(&bob, "pii", &json!({"report": "orders", "columns": ["order_id", "customer_email"]})).await;
    expect_problem(pii, 403, "export-not-permitted").await;
    let alice = app.login("alice@acme.test").await;
    let ok: Value = app.create(&alice, "pii", &json!({"report": "orders"})).await.json().await.unwrap();
    assert!(ok["resolved"]["columns"].as_array().unwrap().contains(&json!("customer_email")));
    assert_eq!(export_count(&app).await, 1);
    app.stop().await;
});

on_both_backends!(framework_rejections_are_problems_too, |backend| {
    let app = TestApp::spawn(backend).await;
    let bob = app.login("bob@acme.test").await;
    let url = app.url("/api/exports");
    let malformed = bob.post(&url).header("Idempotency-Key", "m").header("content-type", "application/json").body("{\"report\":").send().await.unwrap();
    expect_problem(malformed, 400, "malformed-json").await;
    let text = bob.post(&url).header("Idempotency-Key", "t").header("content-type", "text/plain").body("{}").send().await.unwrap();
    expect_problem(text, 415, "unsupported-media-type").await;
    let big = format!("{{\"report\":\"orders\",\"pad\":\"{}\"}}", "x".repeat(70 * 1024));
    let large = bob.post(&url).header("Idempotency-Key", "l").header("content-type", "application/json").body(big).send().await.unwrap();
    expect_problem(large, 413, "body-too-large").await;
    expect_problem(bob.get(app.url("/api/nothing-here")).send().await.unwrap(), 404, "not-found").await;
    expect_problem(bob.delete(&url).send().await.unwrap(), 405, "method-not-allowed").await;
    expect_problem(bob.post(app.url("/healthz")).send().await.unwrap(), 405, "method-not-allowed").await;
    expect_problem(bob.delete(app.url("/files/exp_1")).send().await.unwrap(), 405, "method-not-allowed").await;
    expect_problem(bob.get(app.url("/api/exports/exp_nope/download")).send().await.unwrap(), 404, "export-not-found").await;
    assert_eq!(export_count(&app).await, 0);
    app.stop().await;
});

on_both_backends!(more_unfinished_exports_than_the_limit_are_refused_but_replays_still_answer, |backend| {
    let app = TestApp::start(Options { max_active_per_actor: 2, ..Options::new(backend) }).await;
    let bob = app.login("bob@acme.test").await;
    for key in ["a", "b"] {
        assert_eq!(app.create(&bob, key, &json!({"report": "orders"})).await.status(), 202);
    }
    let resp = app.create(&bob, "c", &json!({"report": "orders"})).await;
    assert!(resp.headers().get("retry-after").is_some());
    expect_problem(resp, 429, "too-many-exports").await;
    assert_eq!(app.create(&bob, "a", &json!({"report": "orders"})).await.status(), 202);
    // Another actor has their own allowance.
    let alice = app.login("alice@acme.test").await;
    assert_eq!(app.create(&alice, "c", &json!({"report": "orders"})).await.status(), 202);
    // Cancelling one frees a place.
    let a: Value = app.create(&bob, "a", &json!({"report": "orders"})).await.json().await.unwrap();
    assert_eq!(bob.post(app.url(&format!("/api/exports/{}/cancel", a["id"].as_str().unwrap()))).send().await.unwrap().status(), 200);
    assert_eq!(app.create(&bob, "c", &json!({"report": "orders"})).await.status(), 202);
    app.stop().await;
});

on_both_backends!(many_concurrent_new_keys_cannot_pass_the_limit, |backend| {
    let app = TestApp::start(Options { max_active_per_actor: 3, ..Options::new(backend) }).await;
    let bob = app.login("bob@acme.test").await;
    let requests = (0..24)
        .map(|i| bob.post(app.url("/api/exports")).header("Idempotency-Key", format!("n-{i}")).json(&json!({"report": "orders"})))
        .collect();
    let mut accepted = 0;
    for (status, _) in send_together(requests).await {
        match status {
            202 => accepted += 1,
            429 => {}
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(accepted, 3);
    assert_eq!(export_count(&app).await, 3);
    app.stop().await;
});

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_and_postgres_both_run_these_tests() {
    // Guards the macro: both backends must be reachable, or the suite is not what it claims.
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let app = TestApp::spawn(backend).await;
        assert_eq!(app.scalar("SELECT COUNT(*) FROM tenants").await, 2);
        app.stop().await;
    }
}
