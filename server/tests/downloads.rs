//! Serving a ready file from a local store (RFC 9110 ranges, HEAD), readiness of the stores, and
//! the request id on every answer: the real app on a loopback socket.

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use support::{expect_problem, Backend, TestApp};

/// A ready export of every demo order and its signed link.
async fn ready_file(app: &TestApp, client: &reqwest::Client) -> (String, String) {
    let today = jiff::Zoned::now().with_time_zone(jiff::tz::TimeZone::UTC).date();
    let from = today.checked_sub(jiff::Span::new().days(800)).unwrap();
    let body = json!({"report": "orders", "time_range": {"from": from.to_string(), "to": today.to_string()}});
    let view: Value = app.create(client, "file", &body).await.json().await.unwrap();
    let id = view["id"].as_str().unwrap().to_owned();
    let done = app.wait_terminal(client, &id, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "ready", "{done}");
    (id, app.url(done["download"]["url"].as_str().unwrap()))
}

async fn downloads_recorded(app: &TestApp, id: &str) -> i64 {
    app.scalar(&format!("SELECT COUNT(*) FROM job_events WHERE job_id = '{id}' AND detail LIKE 'downloaded%'")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ranges_answer_as_rfc_9110_says_and_a_resumed_download_equals_the_whole_file() {
    let app = TestApp::with_worker(Backend::Sqlite).await;
    let bob = app.login("bob@acme.test").await;
    let (_, link) = ready_file(&app, &bob).await;
    let http = app.anonymous();

    let whole = http.get(&link).send().await.unwrap();
    assert_eq!(whole.status(), 200);
    assert_eq!(whole.headers()["accept-ranges"], "bytes");
    let etag = whole.headers()["etag"].to_str().unwrap().to_owned();
    let whole_headers = whole.headers().clone();
    let whole = whole.bytes().await.unwrap();
    let len = whole.len();
    assert!(len > 1000, "a file big enough to cut: {len} bytes");
    // RFC 9530: the content's digest on the whole file; a part carries the whole
    // representation's (what a resumed download checks when it has assembled it), never as
    // Content-Digest, which would be the digest of the part's own bytes.
    use base64::Engine;
    let digest = format!("sha-256=:{}:", base64::engine::general_purpose::STANDARD.encode(<sha2::Sha256 as sha2::Digest>::digest(&whole)));
    assert_eq!(whole_headers["content-digest"], digest.as_str());
    assert_eq!(whole_headers["repr-digest"], digest.as_str());

    let first = http.get(&link).header("Range", "bytes=0-99").send().await.unwrap();
    assert_eq!(first.status(), 206);
    assert!(first.headers().get("content-digest").is_none(), "a part carries no Content-Digest of the whole file");
    assert_eq!(first.headers()["repr-digest"], digest.as_str());
    assert_eq!(first.headers()["content-range"], format!("bytes 0-99/{len}").as_str());
    assert_eq!(first.headers()["content-length"], "100");
    assert_eq!(first.bytes().await.unwrap(), whole.slice(0..100));

    let tail = http.get(&link).header("Range", "bytes=-100").send().await.unwrap();
    assert_eq!(tail.status(), 206);
    assert_eq!(tail.headers()["content-range"], format!("bytes {}-{}/{len}", len - 100, len - 1).as_str());
    assert_eq!(tail.bytes().await.unwrap(), whole.slice(len - 100..));

    let several = http.get(&link).header("Range", "bytes=0-9,20-29").send().await.unwrap();
    assert_eq!(several.status(), 200, "several ranges give the whole file");
    assert_eq!(several.bytes().await.unwrap(), whole);

    let past = http.get(&link).header("Range", format!("bytes={len}-")).send().await.unwrap();
    assert_eq!(past.headers()["content-range"], format!("bytes */{len}").as_str());
    expect_problem(past, 416, "range-not-satisfiable").await;

    // A download cut at 1000 bytes, resumed from there against the same file.
    let start = http.get(&link).header("Range", "bytes=0-999").send().await.unwrap().bytes().await.unwrap();
    let rest = http.get(&link).header("Range", "bytes=1000-").header("If-Range", &etag).send().await.unwrap();
    assert_eq!(rest.status(), 206);
    let mut resumed = start.to_vec();
    resumed.extend_from_slice(&rest.bytes().await.unwrap());
    assert_eq!(resumed, whole.to_vec());

    // Resuming against a file that is not this one starts over with the whole file.
    let other = http.get(&link).header("Range", "bytes=1000-").header("If-Range", "\"not-this-file\"").send().await.unwrap();
    assert_eq!(other.status(), 200);
    assert_eq!(other.bytes().await.unwrap(), whole);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn head_answers_like_get_without_the_body_and_records_no_download() {
    let app = TestApp::with_worker(Backend::Sqlite).await;
    let bob = app.login("bob@acme.test").await;
    let (id, link) = ready_file(&app, &bob).await;
    let http = app.anonymous();
    let get = http.get(&link).send().await.unwrap();
    let get_headers = get.headers().clone();
    let len = get.bytes().await.unwrap().len();
    let recorded = downloads_recorded(&app, &id).await;
    assert_eq!(recorded, 1);

    let head = http.head(&link).send().await.unwrap();
    assert_eq!(head.status(), 200);
    for name in ["content-type", "content-disposition", "content-length", "etag", "content-digest", "accept-ranges", "cache-control", "x-content-type-options"] {
        assert_eq!(head.headers().get(name), get_headers.get(name), "{name}");
    }
    assert_eq!(head.headers()["content-length"], len.to_string().as_str());
    assert!(head.bytes().await.unwrap().is_empty());
    assert_eq!(downloads_recorded(&app, &id).await, recorded, "a HEAD is not a download");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readiness_names_the_store_while_it_is_down_and_is_back_when_the_store_is() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let http = app.anonymous();
    assert_eq!(http.get(app.url("/readyz")).send().await.unwrap().status(), 200);
    app.store_down();
    let problem = expect_problem(http.get(app.url("/readyz")).send().await.unwrap(), 503, "not-ready").await;
    assert_eq!(problem["detail"], "the object store \"default\" does not answer");
    assert!(!problem.to_string().contains(app.url("").trim_end_matches('/')), "{problem}");
    app.store_up();
    assert_eq!(http.get(app.url("/readyz")).send().await.unwrap().status(), 200);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_answer_carries_a_request_id_and_keeps_the_one_the_caller_sent() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let http = app.anonymous();
    let made = http.get(app.url("/healthz")).send().await.unwrap();
    let id = made.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "{id}");
    let other = http.get(app.url("/api/exports")).send().await.unwrap();
    assert_ne!(other.headers()["x-request-id"].to_str().unwrap(), id, "one id per request");
    let kept = http.get(app.url("/healthz")).header("X-Request-Id", "trace-42").send().await.unwrap();
    assert_eq!(kept.headers()["x-request-id"], "trace-42");
    app.stop().await;
}
