//! The page's server functions (`/sfn/…`): the same service and the same problems as the REST
//! API, behind the same-origin rule, on SQLite and PostgreSQL.

mod support;

use serde_json::{json, Value};
use support::{expect_problem, TestApp};

fn call(client: &reqwest::Client, app: &TestApp, name: &str, args: Value) -> reqwest::RequestBuilder {
    client.post(app.url(&format!("/sfn/{name}"))).header("accept", "application/json").json(&args)
}

on_both_backends!(a_create_through_a_server_function_from_another_origin_is_refused_and_creates_nothing, |backend| {
    let app = TestApp::spawn(backend).await;
    let bob = app.login("bob@acme.test").await;
    let args = json!({"key": "k-cross", "request": {"report": "orders"}});
    let resp = call(&bob, &app, "create_export", args.clone()).header("origin", "https://evil.example").send().await.unwrap();
    expect_problem(resp, 403, "cross-origin").await;
    let resp = call(&bob, &app, "create_export", args).header("sec-fetch-site", "cross-site").send().await.unwrap();
    expect_problem(resp, 403, "cross-origin").await;
    assert_eq!(app.scalar("SELECT COUNT(*) FROM jobs").await, 0);
    app.stop().await;
});

on_both_backends!(a_server_function_create_is_idempotent_on_its_key_like_the_rest_api, |backend| {
    let app = TestApp::spawn(backend).await;
    let bob = app.login("bob@acme.test").await;
    let args = json!({"key": "k-1", "request": {"report": "orders"}});
    let first = call(&bob, &app, "create_export", args.clone()).header("origin", app.url("")).send().await.unwrap();
    assert_eq!(first.status(), 200);
    let first: Value = first.json().await.unwrap();
    let again: Value = call(&bob, &app, "create_export", args).send().await.unwrap().json().await.unwrap();
    assert_eq!(first["id"], again["id"]);
    assert_eq!(first["status"], "queued");
    // The REST API sees the same key as the same intent.
    let rest = app.create(&bob, "k-1", &json!({"report": "orders"})).await;
    assert_eq!(rest.headers()["idempotent-replayed"], "true");
    let rest: Value = rest.json().await.unwrap();
    assert_eq!(rest["id"], first["id"]);
    assert_eq!(app.scalar("SELECT COUNT(*) FROM jobs").await, 1);

    let status: Value = call(&bob, &app, "export_status", json!({"id": first["id"]})).send().await.unwrap().json().await.unwrap();
    assert_eq!(status["id"], first["id"]);
    let list: Value = call(&bob, &app, "list_exports", json!({"cursor": null})).send().await.unwrap().json().await.unwrap();
    assert_eq!(list["items"][0]["id"], first["id"]);
    let cancelled: Value = call(&bob, &app, "cancel_export", json!({"id": first["id"]})).send().await.unwrap().json().await.unwrap();
    assert_eq!(cancelled["status"], "cancelled");
    app.stop().await;
});

on_both_backends!(a_server_functions_errors_are_the_typed_problem_with_their_http_status, |backend| {
    let app = TestApp::spawn(backend).await;
    let resp = call(&app.anonymous(), &app, "export_status", json!({"id": "exp_x"})).send().await.unwrap();
    expect_problem(resp, 401, "unauthenticated").await;

    let bob = app.login("bob@acme.test").await;
    let resp = call(&bob, &app, "export_status", json!({"id": "exp_nope"})).send().await.unwrap();
    expect_problem(resp, 404, "export-not-found").await;

    let bad = json!({"key": "k-bad", "request": {"report": "orders", "timezone": "Mars/Olympus", "time_range": {"from": "2026-02-30", "to": "2026-03-01"}}});
    let body = expect_problem(call(&bob, &app, "create_export", bad).send().await.unwrap(), 422, "invalid-request").await;
    let pointers: Vec<&str> = body["errors"].as_array().unwrap().iter().map(|e| e["pointer"].as_str().unwrap()).collect();
    assert!(pointers.contains(&"/timezone"), "{body}");

    let resp = call(&bob, &app, "create_export", json!({"key": "", "request": {"report": "orders"}})).send().await.unwrap();
    expect_problem(resp, 400, "idempotency-key-invalid").await;
    // Arguments that do not decode never reach the body, and are still a problem.
    let resp = call(&bob, &app, "create_export", json!({"key": 7})).send().await.unwrap();
    expect_problem(resp, 400, "malformed-json").await;

    let vic = app.login("vic@acme.test").await;
    let resp = call(&vic, &app, "create_export", json!({"key": "k-v", "request": {"report": "orders"}})).send().await.unwrap();
    expect_problem(resp, 403, "export-not-permitted").await;
    let resp = call(&bob, &app, "download_link", json!({"id": "exp_nope"})).send().await.unwrap();
    expect_problem(resp, 404, "export-not-found").await;
    assert_eq!(app.scalar("SELECT COUNT(*) FROM jobs").await, 0);
    app.stop().await;
});
