//! The small print of the HTTP contract (SPEC §3, §11): field pointers that are JSON pointers, a
//! replay that carries its link, a sign-out that always signs out, no cache for answers that
//! carry a link, the Bearer scheme in any case, a page that no other site may frame, and 405s
//! that are problems everywhere.

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use support::procs::everything;
use support::{expect_problem, Backend, TestApp};

on_both_backends!(field_errors_point_with_json_pointers_escaping_what_must_be, |backend| {
    let app = TestApp::spawn(backend).await;
    let (bob, _) = app.token_client("bob@acme.test").await;
    let create = |key: &'static str, body: Value| bob.post(app.url("/api/exports")).header("idempotency-key", key).json(&body).send();
    let body = expect_problem(create("p1", json!({"report": "orders", "columns": ["order_id", 5]})).await.unwrap(), 422, "invalid-request").await;
    assert_eq!(body["errors"][0]["pointer"], "/columns/1", "{body}");
    let body = expect_problem(create("p2", json!({"report": "orders", "options": {"bom": "yes"}})).await.unwrap(), 422, "invalid-request").await;
    assert_eq!(body["errors"][0]["pointer"], "/options/bom", "{body}");
    let body = expect_problem(create("p3", json!({"report": "orders", "filters": {"a/b~c": ["x"]}})).await.unwrap(), 422, "invalid-request").await;
    assert_eq!(body["errors"][0]["pointer"], "/filters/a~1b~0c", "{body}");
    app.stop().await;
});

on_both_backends!(a_replay_of_a_ready_export_carries_a_fresh_link_and_no_answer_with_a_link_is_cached, |backend| {
    let app = TestApp::with_worker(backend).await;
    let (bob, _) = app.token_client("bob@acme.test").await;
    let create = || bob.post(app.url("/api/exports")).header("idempotency-key", "ready-then-replayed").json(&everything("orders")).send();
    let first: Value = create().await.unwrap().json().await.unwrap();
    let id = first["id"].as_str().unwrap().to_owned();
    app.wait_terminal(&bob, &id, Duration::from_secs(30)).await;
    let replay = create().await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.headers()["cache-control"], "no-store");
    let replay: Value = replay.json().await.unwrap();
    assert_eq!(replay["status"], "ready");
    assert!(replay["download"]["url"].as_str().is_some_and(|u| u.starts_with("/files/")), "{replay}");
    for path in [format!("/api/exports/{id}"), "/api/exports".to_owned()] {
        let resp = bob.get(app.url(&path)).send().await.unwrap();
        assert_eq!(resp.headers()["cache-control"], "no-store", "{path}");
    }
    let session = app.login("bob@acme.test").await;
    let resp = session.post(app.url("/sfn/export_status")).json(&json!({ "id": id })).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["cache-control"], "no-store");
    app.stop().await;
});

on_both_backends!(signing_out_with_an_expired_session_ends_it_and_removes_the_cookie, |backend| {
    let app = TestApp::spawn(backend).await;
    let bob = app.login("bob@acme.test").await;
    app.exec("UPDATE sessions SET expires_at = 0").await;
    assert_eq!(bob.get(app.url("/api/session")).send().await.unwrap().status(), 401);
    let resp = bob.delete(app.url("/api/session")).send().await.unwrap();
    assert_eq!(resp.status(), 204);
    let cookie = resp.headers()["set-cookie"].to_str().unwrap();
    assert!(cookie.starts_with("exportd_session=;") && cookie.contains("Max-Age=0"), "{cookie}");
    // With no session at all it is already signed out.
    assert_eq!(app.anonymous().delete(app.url("/api/session")).send().await.unwrap().status(), 204);
    app.stop().await;
});

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_scheme_is_matched_in_any_case() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let (_, token) = app.token_client("bob@acme.test").await;
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let resp = reqwest::Client::new().get(app.url("/api/session")).header("authorization", format!("{scheme} {token}")).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{scheme}");
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_may_not_be_framed_by_another_site_and_a_wrong_method_anywhere_is_a_problem() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let page = app.anonymous().get(app.url("/")).send().await.unwrap();
    assert_eq!(page.headers()["content-security-policy"], "frame-ancestors 'none'");
    assert_eq!(page.headers()["x-frame-options"], "DENY");
    let session = app.login("bob@acme.test").await;
    for (method, path) in [("POST", "/"), ("DELETE", "/"), ("GET", "/sfn/create_export"), ("PUT", "/sfn/export_status")] {
        let resp = session.request(method.parse().unwrap(), app.url(path)).send().await.unwrap();
        expect_problem(resp, 405, "method-not-allowed").await;
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_rendered_in_the_language_asked_for_and_never_rewrites_the_language_cookie() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    // No cookie store: each request carries only the headers given here.
    let client = reqwest::Client::new();
    let cases = [
        (None, None, "en", "ltr"),
        (None, Some("ar-SA,ar;q=0.9,en;q=0.8"), "ar", "rtl"),
        (None, Some("en;q=0.2, ar"), "ar", "rtl"),
        (Some("i18n_pref_locale=ar"), Some("en-US"), "ar", "rtl"),
        (Some("exportd_session=x; i18n_pref_locale=en"), Some("ar"), "en", "ltr"),
    ];
    for (cookie, accept, lang, dir) in cases {
        let mut request = client.get(app.url("/"));
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie);
        }
        if let Some(accept) = accept {
            request = request.header("accept-language", accept);
        }
        let page = request.send().await.unwrap();
        assert_eq!(page.status(), 200);
        // The switch writes the cookie for a year; a render that sent it back without Max-Age
        // (old code: `set-cookie: i18n_pref_locale=ar`) made the choice end with the browser's
        // session.
        let rewritten: Vec<_> = page.headers().get_all("set-cookie").iter().filter(|v| v.to_str().unwrap_or("").starts_with("i18n_pref_locale")).collect();
        assert!(rewritten.is_empty(), "{cookie:?} {accept:?}: {rewritten:?}");
        let body = page.text().await.unwrap();
        let html = format!(r#"<html lang="{lang}" dir="{dir}">"#);
        assert!(body.contains(&html), "{cookie:?} {accept:?}: wanted {html} in {}", &body[..body.len().min(300)]);
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_sessions_and_idle_throttle_rows_are_purged_by_the_janitor() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let _bob = app.login("bob@acme.test").await;
    let _alice = app.login("alice@acme.test").await;
    app.exec("UPDATE sessions SET expires_at = 1 WHERE user_id = (SELECT id FROM users WHERE email = 'alice@acme.test')").await;
    for i in 0..3 {
        let resp = app.anonymous().post(app.url("/api/session")).json(&json!({"email": format!("nobody-{i}@acme.test"), "password": "x"})).send().await.unwrap();
        assert_eq!(resp.status(), 401);
    }
    app.exec("UPDATE login_throttle SET updated_at = 1").await;
    let worker = app.worker_context(exportd::config::WorkerConfig { deployments: vec![], concurrency: 1 }).await;
    let pass = exportd::worker::janitor::pass(&worker, false).await.unwrap();
    assert_eq!(pass.logins_purged, 4, "{pass:?}");
    assert_eq!(app.scalar("SELECT COUNT(*) FROM login_throttle").await, 0);
    assert_eq!(app.scalar("SELECT COUNT(*) FROM sessions").await, 1, "bob's live session stays");
    app.stop().await;
}
