//! Unauthenticated floods (SPEC §11): a burst of logins with distinct emails keeps the process's
//! memory bounded, `/healthz` quick and every lease of the worker beside it; a client that sends
//! half a request's head is cut off.

mod support;

use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::procs::{everything, Api, Prepared};
use support::Backend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LONG: Duration = Duration::from_secs(60);

/// The resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_hundred_logins_at_once_keep_memory_bounded_health_quick_and_the_workers_lease() {
    let p = Prepared::new(Backend::Sqlite, 2_000).await;
    let (server, base) = p.serve_with(&[("FAILPOINTS", "mid_stream=sleep(6000)")]).await;
    let pid = server.child.id().unwrap();
    let api = Api::new(&base, &p.token);
    // An export holds its lease through the flood.
    let (_, view) = api.create("through-the-flood", &everything("orders")).await;
    let id = view["id"].as_str().unwrap().to_owned();
    server.wait_line(&["mid_stream", &id], LONG).await;
    let before = rss_kib(pid);

    let most_rss = Arc::new(AtomicU64::new(before));
    let slowest_health = Arc::new(AtomicU64::new(0));
    let flooding = Arc::new(std::sync::atomic::AtomicBool::new(true));
    // Measured from a thread of its own, with a kept-alive connection, so the test's own burst of
    // 500 requests does not delay the measurement.
    let watch = std::thread::spawn({
        let (most_rss, slowest_health, flooding, base) = (most_rss.clone(), slowest_health.clone(), flooding.clone(), base.clone());
        move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let health = reqwest::Client::new();
                health.get(format!("{base}/healthz")).send().await.unwrap();
                while flooding.load(Ordering::Relaxed) {
                    most_rss.fetch_max(rss_kib(pid), Ordering::Relaxed);
                    let started = std::time::Instant::now();
                    let ok = health.get(format!("{base}/healthz")).send().await.is_ok_and(|r| r.status() == 200);
                    assert!(ok, "/healthz answers");
                    slowest_health.fetch_max(started.elapsed().as_millis() as u64, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        }
    });
    let flood = reqwest::Client::new();
    let barrier = Arc::new(tokio::sync::Barrier::new(500));
    let attempts: Vec<_> = (0..500)
        .map(|i| {
            let (flood, barrier, base) = (flood.clone(), barrier.clone(), base.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let resp = flood.post(format!("{base}/api/session")).json(&json!({"email": format!("flood-{i}@example.test"), "password": "guess"})).send().await.unwrap();
                resp.status().as_u16()
            })
        })
        .collect();
    let mut statuses = std::collections::BTreeMap::new();
    for a in attempts {
        *statuses.entry(a.await.unwrap()).or_insert(0) += 1;
    }
    flooding.store(false, Ordering::Relaxed);
    watch.join().unwrap();
    let grown_mib = most_rss.load(Ordering::Relaxed).saturating_sub(before) / 1024;
    eprintln!("flood: answers {statuses:?}; RSS {} MiB before, grew {grown_mib} MiB; slowest /healthz {} ms", before / 1024, slowest_health.load(Ordering::Relaxed));
    assert!(statuses.keys().all(|s| matches!(s, 401 | 429 | 503)), "only refusals: {statuses:?}");
    assert!(statuses.contains_key(&503), "checks beyond the bound answered busy: {statuses:?}");
    assert!(grown_mib < 128, "the process grew {grown_mib} MiB");
    assert!(slowest_health.load(Ordering::Relaxed) < 100, "/healthz took {} ms", slowest_health.load(Ordering::Relaxed));
    let view = api.wait_status(&id, &["ready", "failed"], LONG).await;
    assert_eq!((view["status"].as_str(), view["attempt"].as_i64()), (Some("ready"), Some(1)), "the worker kept its lease: {view}");
    let mut server = server;
    server.signal("TERM");
    assert!(server.wait_exit(LONG).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_sends_half_a_request_head_is_cut_off() {
    let p = Prepared::new(Backend::Sqlite, 10).await;
    let (_api, base) = p.api().await;
    let addr = base.trim_start_matches("http://");
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let started = tokio::time::Instant::now();
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(Duration::from_secs(25), slow.read(&mut buf)).await;
    let n = read.expect("the server cut the slow client off").unwrap_or(0);
    let answer = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(n == 0 || answer.starts_with("HTTP/1.1 408"), "closed, or told it timed out: {answer:?}");
    assert!(started.elapsed() >= Duration::from_secs(5), "not before the header timeout");
}
