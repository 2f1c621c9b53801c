//! The Big List of Naughty Strings through every text field, filter value, the timezone and
//! (where it is a valid header value) the key: never a 5xx, every rejection a problem+json 4xx,
//! and whatever is accepted comes back unchanged in `request`.

mod support;

use futures::stream::{self, StreamExt};
use naughty_strings::BLNS;
use reqwest::header::HeaderValue;
use serde_json::{json, Value};
use support::{Options, TestApp};

fn bodies(s: &str) -> Vec<Value> {
    vec![
        json!({"report": s}),
        json!({"report": "orders", "format": s}),
        json!({"report": "orders", "timezone": s}),
        json!({"report": "orders", "columns": [s]}),
        json!({"report": "orders", "filters": {"status": [s]}}),
        json!({"report": "orders", "filters": {"country": [s]}}),
        json!({"report": "customers", "filters": {"country": [s]}}),
        json!({"report": "orders", "filters": {s: ["paid"]}}),
        json!({"report": "orders", "time_range": {"from": s, "to": "2026-01-01"}}),
        json!({"report": "orders", "time_range": {"preset": s}}),
    ]
}

async fn check(resp: reqwest::Response, what: &str) -> Option<Value> {
    let status = resp.status().as_u16();
    assert!(status < 500, "{what}: {status}");
    let ct = resp.headers().get("content-type").map(|v| v.to_str().unwrap_or("").to_owned()).unwrap_or_default();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    if status == 202 {
        return Some(body);
    }
    assert!((400..500).contains(&status), "{what}: {status}");
    assert_eq!(ct, "application/problem+json", "{what}");
    assert_eq!(body["status"], status, "{what}");
    None
}

on_both_backends!(naughty_strings_never_cause_a_server_error_and_accepted_values_come_back_unchanged, |backend| {
    let app = TestApp::start(Options { max_active_per_actor: 100_000, ..Options::new(backend) }).await;
    let (alice, _) = app.token_client("alice@acme.test").await;
    let url = app.url("/api/exports");
    let cases: Vec<(usize, Value)> = BLNS.iter().enumerate().flat_map(|(i, s)| bodies(s).into_iter().map(move |b| (i, b))).collect();
    let results: Vec<()> = stream::iter(cases.into_iter().enumerate())
        .map(|(n, (i, body))| {
            let (client, url) = (alice.clone(), url.clone());
            async move {
                let resp = client.post(url).header("Idempotency-Key", format!("blns-{n}")).json(&body).send().await.unwrap();
                if let Some(view) = check(resp, &format!("string {i} in {body}")).await {
                    let sent: app::ExportRequest = serde_json::from_value(body.clone()).unwrap();
                    let back: app::ExportRequest = serde_json::from_value(view["request"].clone()).unwrap();
                    assert_eq!(sent, back, "string {i}");
                }
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    assert!(!results.is_empty());

    let keys: Vec<(usize, HeaderValue)> = BLNS.iter().enumerate().filter_map(|(i, s)| HeaderValue::from_str(s).ok().map(|v| (i, v))).collect();
    let accepted: Vec<Option<(String, String)>> = stream::iter(keys)
        .map(|(i, key)| {
            let (client, url) = (alice.clone(), url.clone());
            async move {
                let resp = client.post(url).header("Idempotency-Key", key.clone()).json(&json!({"report": "orders"})).send().await.unwrap();
                check(resp, &format!("key {i}")).await.map(|v| (BLNS[i].to_owned(), v["id"].as_str().unwrap().to_owned()))
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    let accepted: Vec<(String, String)> = accepted.into_iter().flatten().collect();
    assert!(accepted.len() > 100, "only {} keys accepted", accepted.len());
    // Keys that decode to the same value (quoted and bare) share an operation; others do not.
    let mut by_id = std::collections::HashMap::new();
    for (raw, id) in &accepted {
        let decoded = if raw.starts_with('"') { raw[1..raw.len() - 1].replace("\\\"", "\"").replace("\\\\", "\\") } else { raw.clone() };
        if let Some(previous) = by_id.insert(id.clone(), decoded.clone()) {
            assert_eq!(previous, decoded);
        }
    }
    app.stop().await;
});
