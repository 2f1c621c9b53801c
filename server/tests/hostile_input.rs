//! No request can break it (SPEC §3, §11): NUL, bytes that are not UTF-8, over-long and
//! wrong-shape values through every path id, cursor, server-function argument, header and login
//! field, on both backends. Each answer is the problem SPEC's table gives for an unknown or
//! invalid value — never a 5xx, never anything but problem+json.

mod support;

use reqwest::header::{HeaderName, HeaderValue};
use serde_json::{json, Value};
use support::{expect_problem, TestApp};

/// Ids that cannot exist: a NUL, bytes that are not UTF-8, wrong shapes, over-long, a path trick.
const BAD_IDS: [&str; 10] = [
    "%00",
    "exp_%00",
    "%FF",
    "exp_%C3%28",
    "exp_zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
    "EXP_01A242DD4DE1737AB303DB50CC1DFDED",
    "exp_01a242dd4de1737ab303db50cc1dfded%00",
    "%E2%80%AEexp",
    "..%2F..%2Fetc%2Fpasswd",
    "exp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
];

fn base64url(text: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
}

/// An answer is problem+json with this status and code.
async fn problem(resp: reqwest::Response, status: u16, code: &str, what: &str) {
    assert!(resp.status().as_u16() < 500, "{what}: {}", resp.status());
    let got = resp.status().as_u16();
    let body = expect_problem(resp, status, code).await;
    let _ = (got, body, what);
}

on_both_backends!(hostile_ids_cursors_arguments_headers_and_login_fields_get_the_problem_the_table_gives, |backend| {
    let app = TestApp::spawn(backend).await;
    let (bob, token) = app.token_client("bob@acme.test").await;
    let session = app.login("bob@acme.test").await;
    let anonymous = app.anonymous();

    for id in BAD_IDS {
        let what = format!("id {id}");
        problem(bob.get(app.url(&format!("/api/exports/{id}"))).send().await.unwrap(), 404, "export-not-found", &what).await;
        problem(bob.post(app.url(&format!("/api/exports/{id}/cancel"))).send().await.unwrap(), 404, "export-not-found", &what).await;
        problem(bob.get(app.url(&format!("/api/exports/{id}/download"))).send().await.unwrap(), 404, "export-not-found", &what).await;
        problem(bob.get(app.url(&format!("/api/exports/{id}/parts/1/download"))).send().await.unwrap(), 404, "export-not-found", &what).await;
        let link = format!("/files/{id}?d={}&a=usr_x&e=99999999999&k=k1&s={}", "0".repeat(64), "0".repeat(64));
        problem(anonymous.get(app.url(&link)).send().await.unwrap(), 403, "link-invalid", &what).await;
        // Authentication comes first.
        problem(anonymous.get(app.url(&format!("/api/exports/{id}"))).send().await.unwrap(), 401, "unauthenticated", &what).await;
    }
    // A signed link's other fields.
    for query in ["d=%00&a=%FF&e=1&k=%00&s=zz", "d=x&a=y&e=notanumber&k=k1&s=00", "e=1", "d=x&a=y&e=99999999999999999999999&k=k1&s=00"] {
        let link = format!("/files/exp_01a242dd4de1737ab303db50cc1dfded?{query}");
        problem(anonymous.get(app.url(&link)).send().await.unwrap(), 403, "link-invalid", query).await;
    }

    let bad_cursors = [
        base64url(b"0:exp_\0"),
        base64url(b"0:exp_' OR 1=1 --"),
        base64url(b"\xff\xfe:exp_01a242dd4de1737ab303db50cc1dfded"),
        base64url(b"99999999999999999999999:exp_01a242dd4de1737ab303db50cc1dfded"),
        "%FF".to_owned(),
        "%00".to_owned(),
        "!!!!".to_owned(),
        "A".repeat(20_000),
    ];
    for cursor in &bad_cursors {
        problem(bob.get(app.url(&format!("/api/exports?cursor={cursor}"))).send().await.unwrap(), 422, "invalid-request", cursor).await;
    }
    for limit in ["%00", "%FF", "-1", "0", "101", "1e2", "99999999999999999999999"] {
        problem(bob.get(app.url(&format!("/api/exports?limit={limit}"))).send().await.unwrap(), 422, "invalid-request", limit).await;
    }

    // Server functions: authentication before anything of the body is read, then each argument.
    let sfn = |name: &str| app.url(&format!("/sfn/{name}"));
    for name in ["export_status", "cancel_export", "download_link", "list_exports", "create_export", "no_such_function"] {
        let resp = anonymous.post(sfn(name)).header("content-type", "application/json").body("{not json").send().await.unwrap();
        problem(resp, 401, "unauthenticated", name).await;
    }
    for name in ["export_status", "cancel_export", "download_link"] {
        for id in ["\u{0}", "exp_\u{0}", "\u{202e}", "", &"x".repeat(5000)] {
            let resp = session.post(sfn(name)).json(&json!({ "id": id })).send().await.unwrap();
            problem(resp, 404, "export-not-found", &format!("{name} {id:?}")).await;
        }
        for body in ["{\"id\": 5}", "{\"id\": \"\\udcff\"}", "[]", "{", "\u{0}"] {
            let resp = session.post(sfn(name)).header("content-type", "application/json").body(body).send().await.unwrap();
            problem(resp, 400, "malformed-json", &format!("{name} {body:?}")).await;
        }
        let resp = session.get(sfn(name)).send().await.unwrap();
        problem(resp, 405, "method-not-allowed", name).await;
    }
    for cursor in &bad_cursors {
        let resp = session.post(sfn("list_exports")).json(&json!({ "cursor": cursor })).send().await.unwrap();
        problem(resp, 422, "invalid-request", cursor).await;
    }
    for key in ["\u{0}", "", &"k".repeat(300), "\u{e9}"] {
        let resp = session.post(sfn("create_export")).json(&json!({"key": key, "request": {"report": "orders"}})).send().await.unwrap();
        problem(resp, 400, "idempotency-key-invalid", key).await;
    }

    // Headers.
    let create = |key: HeaderValue| bob.post(app.url("/api/exports")).header("idempotency-key", key).json(&json!({"report": "orders"}));
    for key in [HeaderValue::from_bytes(b"\x80\xff").unwrap(), HeaderValue::from_str(&"k".repeat(10_000)).unwrap(), HeaderValue::from_static("\"unterminated")] {
        problem(create(key).send().await.unwrap(), 400, "idempotency-key-invalid", "a bad key").await;
    }
    let raw = reqwest::Client::new();
    for auth in [HeaderValue::from_bytes(b"Bearer \x80\xff").unwrap(), HeaderValue::from_static("Bearer"), HeaderValue::from_str(&format!("Bearer {}", "x".repeat(10_000))).unwrap(), HeaderValue::from_static("Basic Ym9iOng=")] {
        let resp = raw.get(app.url("/api/exports")).header("authorization", auth).send().await.unwrap();
        problem(resp, 401, "unauthenticated", "a bad Authorization").await;
    }
    for cookie in [HeaderValue::from_bytes(b"exportd_session=\x80\xff").unwrap(), HeaderValue::from_static("exportd_session="), HeaderValue::from_str(&format!("exportd_session={}", "c".repeat(10_000))).unwrap()] {
        let resp = raw.get(app.url("/api/exports")).header("cookie", cookie).send().await.unwrap();
        problem(resp, 401, "unauthenticated", "a bad cookie").await;
    }
    for origin in [HeaderValue::from_bytes(b"\x80").unwrap(), HeaderValue::from_static("null"), HeaderValue::from_static("https://evil.example")] {
        let resp = session.post(app.url("/api/exports")).header("origin", origin).header("idempotency-key", "k").json(&json!({"report": "orders"})).send().await.unwrap();
        problem(resp, 403, "cross-origin", "a bad Origin").await;
    }
    // A part number is digits naming a part, or no part at all.
    for n in ["0", "%00", "%FF", "-1", "+1", "%201", "1e2", "99999999999999999999999", "x"] {
        let path = format!("/api/exports/exp_01a242dd4de1737ab303db50cc1dfded/parts/{n}/download");
        problem(bob.get(app.url(&path)).send().await.unwrap(), 404, "export-not-found", n).await;
    }
    // Forwarded headers from a client no proxy vouches for are nobody's word: garbage in them
    // changes nothing.
    let forwarded = [HeaderValue::from_bytes(b"\x80\xff").unwrap(), HeaderValue::from_static("not-an-address, ::zz, 999.1.1.1"), HeaderValue::from_str(&"1.2.3.4, ".repeat(2_000)).unwrap()];
    for value in &forwarded {
        let resp = bob.get(app.url("/api/exports")).header(HeaderName::from_static("x-forwarded-for"), value.clone()).header("x-forwarded-proto", value.clone()).send().await.unwrap();
        assert_eq!(resp.status(), 200, "a garbage X-Forwarded-For on a listing");
    }
    // A wrong password with one of them counts against the TCP peer's pair, the same one as
    // bob's wrong passwords below (the throttle's count at the end is one pair).
    let resp = anonymous.post(app.url("/api/session")).header(HeaderName::from_static("x-forwarded-for"), forwarded[1].clone()).json(&json!({"email": "bob@acme.test", "password": "x"})).send().await.unwrap();
    problem(resp, 401, "invalid-credentials", "a login with a garbage X-Forwarded-For").await;
    let _ = &token;

    // Login fields: an address no one can have is no one's, and costs nothing to refuse.
    for email in ["a\u{0}b@acme.test", "\u{0}", "bob@acme.test\u{0}", &format!("{}@acme.test", "a".repeat(300)), "", "no-at-sign", "\u{202e}@acme.test"] {
        let resp = anonymous.post(app.url("/api/session")).json(&json!({"email": email, "password": "export-demo"})).send().await.unwrap();
        problem(resp, 401, "invalid-credentials", email).await;
    }
    for password in ["\u{0}", &"p".repeat(10_000), "export-demo\u{0}"] {
        let resp = anonymous.post(app.url("/api/session")).json(&json!({"email": "bob@acme.test", "password": password})).send().await.unwrap();
        problem(resp, 401, "invalid-credentials", "a wrong password").await;
    }
    for body in [json!({"email": 5, "password": "x"}), json!({"email": "bob@acme.test"}), json!(["bob@acme.test"])] {
        let resp = anonymous.post(app.url("/api/session")).json(&body).send().await.unwrap();
        problem(resp, 400, "malformed-json", &body.to_string()).await;
    }
    let huge = json!({"email": "bob@acme.test", "password": "p".repeat(70_000)});
    problem(anonymous.post(app.url("/api/session")).json(&huge).send().await.unwrap(), 413, "body-too-large", "a huge login").await;
    // None of it recorded a throttle failure for the malformed addresses.
    let throttled = app.scalar("SELECT COUNT(*) FROM login_throttle").await;
    assert_eq!(throttled, 1, "one pair was counted: bob's, for the wrong passwords");
    let _: Value = bob.get(app.url("/api/exports")).send().await.unwrap().json().await.unwrap();
    app.stop().await;
});
