//! Who may do what (SPEC §2): sessions, tokens, the same-origin rule, login backoff, roles at
//! create and download, and ids that are not yours; plus list and cancel (SPEC §3–§4).

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use support::{expect_problem, TestApp};

on_both_backends!(for_every_endpoint_another_tenants_or_actors_id_answers_like_an_unknown_id, |backend| {
    let app = TestApp::spawn(backend).await;
    let bob = app.login("bob@acme.test").await;
    let alice = app.login("alice@acme.test").await;
    let gina = app.login("gina@globex.test").await;
    let id = app.create(&bob, "mine", &json!({"report": "orders"})).await.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    for (method, path) in [("GET", ""), ("POST", "/cancel"), ("GET", "/download")] {
        let call = |client: &reqwest::Client, id: &str| {
            let url = app.url(&format!("/api/exports/{id}{path}"));
            if method == "GET" { client.get(url) } else { client.post(url) }
        };
        let unknown = call(&alice, "exp_0000").send().await.unwrap();
        let status = unknown.status();
        let unknown: Value = unknown.json().await.unwrap();
        let malformed: Value = call(&alice, "not-an-id").send().await.unwrap().json().await.unwrap();
        assert_eq!(unknown, malformed);
        for other in [&alice, &gina] {
            let resp = call(other, &id).send().await.unwrap();
            assert_eq!(resp.status(), status, "{method} {path}");
            assert_eq!(resp.json::<Value>().await.unwrap(), unknown, "{method} {path}");
        }
        expect_problem(call(&gina, &id).send().await.unwrap(), 404, "export-not-found").await;
    }
    // The list shows only your own.
    let listed: Value = alice.get(app.url("/api/exports")).send().await.unwrap().json().await.unwrap();
    assert_eq!(listed["items"], json!([]));
    assert_eq!(app.scalar("SELECT COUNT(*) FROM jobs WHERE status = 'queued'").await, 1);
    app.stop().await;
});

on_both_backends!(cookie_requests_from_another_origin_are_refused_and_tokens_are_not_affected, |backend| {
    let app = TestApp::spawn(backend).await;
    let bob = app.login("bob@acme.test").await;
    let evil = bob.post(app.url("/api/exports")).header("Origin", "http://evil.test").header("Idempotency-Key", "x").json(&json!({"report": "orders"})).send().await.unwrap();
    expect_problem(evil, 403, "cross-origin").await;
    let site = bob.post(app.url("/api/exports")).header("Sec-Fetch-Site", "cross-site").header("Idempotency-Key", "x").json(&json!({"report": "orders"})).send().await.unwrap();
    expect_problem(site, 403, "cross-origin").await;
    let login = app.anonymous().post(app.url("/api/session")).header("Origin", "http://evil.test").json(&json!({"email": "bob@acme.test", "password": "export-demo"})).send().await.unwrap();
    expect_problem(login, 403, "cross-origin").await;
    let same = bob.post(app.url("/api/exports")).header("Origin", app.addr.as_str()).header("Idempotency-Key", "x").json(&json!({"report": "orders"})).send().await.unwrap();
    assert_eq!(same.status(), 202);
    let (token, _) = app.token_client("bob@acme.test").await;
    let with_token = token.post(app.url("/api/exports")).header("Origin", "http://evil.test").header("Idempotency-Key", "y").json(&json!({"report": "orders"})).send().await.unwrap();
    assert_eq!(with_token.status(), 202);
    app.stop().await;
});

on_both_backends!(a_logged_out_session_and_a_deactivated_user_are_unauthenticated, |backend| {
    let app = TestApp::spawn(backend).await;
    let resp = app.anonymous().post(app.url("/api/session")).json(&json!({"email": "bob@acme.test", "password": "export-demo"})).send().await.unwrap();
    let cookie = resp.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    assert!(cookie.starts_with("exportd_session="));
    let set_cookie = resp.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Lax"));
    let raw = app.anonymous();
    let me = raw.get(app.url("/api/session")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(me.status(), 200);
    assert_eq!(raw.delete(app.url("/api/session")).header("cookie", &cookie).send().await.unwrap().status(), 204);
    expect_problem(raw.get(app.url("/api/session")).header("cookie", &cookie).send().await.unwrap(), 401, "unauthenticated").await;

    let (token, _) = app.token_client("alice@acme.test").await;
    assert_eq!(token.get(app.url("/api/exports")).send().await.unwrap().status(), 200);
    app.exec("UPDATE users SET active = false WHERE email = 'alice@acme.test'").await;
    expect_problem(token.get(app.url("/api/exports")).send().await.unwrap(), 401, "unauthenticated").await;
    app.stop().await;
});

on_both_backends!(wrong_passwords_back_off_per_address_and_email_without_locking_the_account_out_for_others, |backend| {
    let app = TestApp::spawn(backend).await;
    let client = app.anonymous();
    let attempt = |email: &'static str, password: &'static str| {
        client.post(app.url("/api/session")).json(&json!({"email": email, "password": password})).send()
    };
    for _ in 0..5 {
        expect_problem(attempt("bob@acme.test", "wrong").await.unwrap(), 401, "invalid-credentials").await;
    }
    expect_problem(attempt("nobody@acme.test", "wrong").await.unwrap(), 401, "invalid-credentials").await;
    let limited = attempt("bob@acme.test", "export-demo").await.unwrap();
    assert!(limited.headers().get("retry-after").is_some());
    expect_problem(limited, 429, "rate-limited").await;
    // Another email from the same address is unaffected.
    assert_eq!(attempt("alice@acme.test", "export-demo").await.unwrap().status(), 204);
    app.stop().await;
});

on_both_backends!(a_burst_of_parallel_wrong_passwords_gets_no_more_attempts_than_a_sequence, |backend| {
    let app = TestApp::spawn(backend).await;
    let client = app.anonymous();
    let requests = (0..20)
        .map(|_| client.post(app.url("/api/session")).json(&json!({"email": "bob@acme.test", "password": "wrong"})))
        .collect();
    let answers = support::send_together(requests).await;
    let refused = answers.iter().filter(|(s, _)| *s == 401).count();
    let limited = answers.iter().filter(|(s, _)| *s == 429).count();
    // A burst beyond the password checks that run at once may also wait too long (503).
    let busy = answers.iter().filter(|(s, _)| *s == 503).count();
    assert_eq!(refused + limited + busy, 20, "{answers:?}");
    assert_eq!(refused, 5, "only the free attempts reach the password check: {answers:?}");
    app.stop().await;
});

on_both_backends!(a_viewer_sees_their_exports_but_a_revoked_analyst_cannot_download, |backend| {
    let app = TestApp::with_worker(backend).await;
    let bob = app.login("bob@acme.test").await;
    let id = app.create(&bob, "soon-revoked", &json!({"report": "orders"})).await.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    let done = app.wait_terminal(&bob, &id, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "ready");
    let link = bob.get(app.url(&format!("/api/exports/{id}/download"))).send().await.unwrap().headers()["location"].to_str().unwrap().to_owned();

    app.exec("UPDATE users SET role = 'viewer' WHERE email = 'bob@acme.test'").await;
    let view: Value = bob.get(app.url(&format!("/api/exports/{id}"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(view["status"], "ready");
    assert!(view["download"].is_null());
    expect_problem(bob.get(app.url(&format!("/api/exports/{id}/download"))).send().await.unwrap(), 403, "permission-revoked").await;
    // A link minted before the change is refused too: the server re-checks when serving it.
    expect_problem(bob.get(app.url(&link)).send().await.unwrap(), 403, "permission-revoked").await;
    expect_problem(bob.post(app.url("/api/exports")).header("Idempotency-Key", "again").json(&json!({"report": "orders"})).send().await.unwrap(), 403, "export-not-permitted").await;

    app.exec("UPDATE users SET role = 'analyst' WHERE email = 'bob@acme.test'").await;
    assert_eq!(bob.get(app.url(&link)).send().await.unwrap().status(), 200);
    let tampered = link.replace("&s=", "&s=00");
    expect_problem(bob.get(app.url(&tampered)).send().await.unwrap(), 403, "link-invalid").await;
    app.stop().await;
});

on_both_backends!(cancel_answers_by_state_and_a_finished_export_is_409_with_its_view, |backend| {
    let app = TestApp::spawn(backend).await;
    let bob = app.login("bob@acme.test").await;
    let body = json!({"report": "orders"});
    let create = |key: &'static str| app.create(&bob, key, &body);
    let queued = create("q").await.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    let cancel = |id: String| bob.post(app.url(&format!("/api/exports/{id}/cancel"))).send();
    let resp = cancel(queued.clone()).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.json::<Value>().await.unwrap()["status"], "cancelled");
    assert_eq!(cancel(queued.clone()).await.unwrap().status(), 200);

    let running = create("r").await.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    app.exec(&format!("UPDATE jobs SET status = 'running', generation = 1 WHERE id = '{running}'")).await;
    let resp = cancel(running.clone()).await.unwrap();
    assert_eq!(resp.status(), 202);
    assert_eq!(resp.json::<Value>().await.unwrap()["status"], "cancel_requested");
    assert_eq!(cancel(running.clone()).await.unwrap().status(), 202);

    let ready = create("d").await.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    app.exec(&format!("UPDATE jobs SET status = 'ready' WHERE id = '{ready}'")).await;
    let problem = expect_problem(cancel(ready.clone()).await.unwrap(), 409, "export-already-finished").await;
    assert_eq!(problem["export"]["id"], ready.as_str());
    assert_eq!(problem["export"]["status"], "ready");
    app.stop().await;
});

on_both_backends!(the_list_pages_newest_first_with_a_cursor, |backend| {
    let app = TestApp::spawn(backend).await;
    let bob = app.login("bob@acme.test").await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let v: Value = app.create(&bob, &format!("l{i}"), &json!({"report": "orders"})).await.json().await.unwrap();
        ids.push(v["id"].as_str().unwrap().to_owned());
    }
    ids.reverse();
    let mut seen = Vec::new();
    let mut url = app.url("/api/exports?limit=2");
    loop {
        let page: Value = bob.get(&url).send().await.unwrap().json().await.unwrap();
        assert!(page["items"].as_array().unwrap().len() <= 2);
        seen.extend(page["items"].as_array().unwrap().iter().map(|v| v["id"].as_str().unwrap().to_owned()));
        match page["next_cursor"].as_str() {
            Some(c) => url = app.url(&format!("/api/exports?limit=2&cursor={c}")),
            None => break,
        }
    }
    assert_eq!(seen, ids);
    let all: Value = bob.get(app.url("/api/exports")).send().await.unwrap().json().await.unwrap();
    assert_eq!(all["items"].as_array().unwrap().len(), 5);
    assert!(all["next_cursor"].is_null());
    expect_problem(bob.get(app.url("/api/exports?cursor=garbage")).send().await.unwrap(), 422, "invalid-request").await;
    expect_problem(bob.get(app.url("/api/exports?limit=0")).send().await.unwrap(), 422, "invalid-request").await;
    expect_problem(bob.get(app.url("/api/exports?limit=101")).send().await.unwrap(), 422, "invalid-request").await;
    app.stop().await;
});

on_both_backends!(the_database_refuses_an_order_that_points_at_another_tenants_customer, |backend| {
    let app = TestApp::spawn(backend).await;
    let globex_customer = app.scalar("SELECT MIN(id) FROM customers WHERE tenant_id = 'ten_globex'").await;
    let insert = format!(
        "INSERT INTO orders (tenant_id, customer_id, placed_at, country, status, total_cents, currency, notes) \
         VALUES ('ten_acme', {globex_customer}, 0, 'SA', 'paid', 100, 'SAR', 'cross-tenant')"
    );
    use sea_orm::ConnectionTrait;
    assert!(app.db.execute_unprepared(&insert).await.is_err(), "an acme order of a globex customer must not exist");
    app.stop().await;
});
