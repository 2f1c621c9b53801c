//! The binary as an operator runs it: `serve --no-worker` plus two `worker` processes on one
//! PostgreSQL database, driven over HTTP with an API token.

mod support;

use serde_json::{json, Value};
use std::process::Stdio;
use std::time::Duration;
use support::{fresh_database, send_together, Backend};
use tokio::process::{Child, Command};

const EXE: &str = env!("CARGO_BIN_EXE_exportd");

fn exportd(db: &str, store: &str) -> Command {
    let mut cmd = Command::new(EXE);
    cmd.env("DATABASE_URL", db).env("EXPORTD_STORE", store).env("EXPORTD_LOG", "warn").kill_on_drop(true);
    cmd
}

async fn run_ok(mut cmd: Command) -> String {
    let out = cmd.stderr(Stdio::inherit()).output().await.unwrap();
    assert!(out.status.success(), "{:?} failed", cmd);
    String::from_utf8(out.stdout).unwrap()
}

/// A fresh PostgreSQL database with the demo data, its store folder, and an API token of bob.
struct Prepared {
    dir: tempfile::TempDir,
    db: String,
    store: String,
    token: String,
    _guard: Option<support::PgDrop>,
}

async fn prepared(orders: &str) -> Prepared {
    let dir = tempfile::tempdir().unwrap();
    let (db, guard) = fresh_database(Backend::Postgres, dir.path()).await;
    let store = format!("file://{}/objects", dir.path().display());
    let mut seed = exportd(&db, &store);
    seed.args(["seed", "--demo", "--orders", orders]);
    run_ok(seed).await;
    let mut token = exportd(&db, &store);
    token.args(["token", "create", "bob@acme.test"]);
    let token = run_ok(token).await.trim().to_owned();
    Prepared { dir, db, store, token, _guard: guard }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

async fn wait_healthy(base: &str) {
    let client = reqwest::Client::new();
    for _ in 0..600 {
        if let Ok(r) = client.get(format!("{base}/healthz")).send().await {
            if r.status() == 200 {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("exportd at {base} never answered /healthz");
}

fn terminate(child: &Child) {
    if let Some(pid) = child.id() {
        // SIGTERM: the graceful path the product promises.
        let _ = std::process::Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_process_and_two_worker_processes_on_postgres_publish_exactly_one_object() {
    let Prepared { dir, db, store, token, _guard } = prepared("300").await;
    assert!(token.starts_with("exp_tok_") && !token.contains('\n'));

    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let api = exportd(&db, &store).args(["serve", "--no-worker", "--bind", &format!("127.0.0.1:{port}")]).spawn().unwrap();
    let w1 = exportd(&db, &store).args(["worker", "--concurrency", "2"]).spawn().unwrap();
    let w2 = exportd(&db, &store).args(["worker", "--concurrency", "2"]).spawn().unwrap();
    wait_healthy(&base).await;

    let client = reqwest::Client::new();
    let resp = client
        .post(format!("{base}/api/exports"))
        .bearer_auth(&token)
        .header("Idempotency-Key", "cli-1")
        .json(&json!({"report": "orders", "time_range": {"from": "2000-01-01", "to": "2100-01-01"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    let view: Value = resp.json().await.unwrap();
    let id = view["id"].as_str().unwrap().to_owned();
    let mut done = Value::Null;
    for _ in 0..1200 {
        done = client.get(format!("{base}/api/exports/{id}")).bearer_auth(&token).send().await.unwrap().json().await.unwrap();
        if done["status"] == "ready" || done["status"] == "failed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(done["status"], "ready", "{done}");
    assert_eq!(done["artifact"]["rows"], 300);
    assert_eq!(done["attempt"], 1);

    let mut published = Vec::new();
    let mut stack = vec![dir.path().join("objects/exports")];
    while let Some(p) = stack.pop() {
        for e in std::fs::read_dir(&p).unwrap().flatten() {
            if e.path().is_dir() { stack.push(e.path()) } else { published.push(e.path()) }
        }
    }
    assert_eq!(published.len(), 1, "{published:?}");

    for child in [&api, &w1, &w2] {
        terminate(child);
    }
    for mut child in [api, w1, w2] {
        let status = tokio::time::timeout(Duration::from_secs(20), child.wait()).await.expect("exits on SIGTERM").unwrap();
        assert!(status.success(), "{status:?}");
    }
}

#[tokio::test]
async fn unknown_emails_and_roles_are_runtime_errors_and_bad_flags_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/exportd.db", dir.path().display());
    let store = format!("file://{}/objects", dir.path().display());
    let status = |args: &'static [&'static str]| {
        let mut c = exportd(&db, &store);
        c.args(args).stdout(Stdio::null()).stderr(Stdio::null());
        async move { c.status().await.unwrap().code() }
    };
    assert_eq!(status(&["seed", "--demo", "--orders", "10"]).await, Some(0));
    assert_eq!(status(&["user", "set-role", "nobody@acme.test", "admin"]).await, Some(1));
    assert_eq!(status(&["user", "set-role", "bob@acme.test", "owner"]).await, Some(1));
    assert_eq!(status(&["user", "set-role", "bob@acme.test", "viewer"]).await, Some(0));
    assert_eq!(status(&["token", "create", "nobody@acme.test"]).await, Some(1));
    assert_eq!(status(&["serve", "--no-such-flag"]).await, Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_posts_with_one_key_over_two_server_processes_on_postgres_make_one_row() {
    let Prepared { db, store, token, _guard, .. } = prepared("10").await;
    let mut servers = Vec::new();
    let mut bases = Vec::new();
    for _ in 0..2 {
        let port = free_port();
        let child = exportd(&db, &store)
            .env("EXPORTD_MAX_ACTIVE_PER_ACTOR", "1000")
            .args(["serve", "--no-worker", "--bind", &format!("127.0.0.1:{port}")])
            .spawn()
            .unwrap();
        servers.push(child);
        bases.push(format!("http://127.0.0.1:{port}"));
    }
    for base in &bases {
        wait_healthy(base).await;
    }
    let client = reqwest::Client::new();
    for round in 0..20 {
        let key = format!("two-servers-{round}");
        let requests = (0..64)
            .map(|i| {
                client
                    .post(format!("{}/api/exports", bases[i % 2]))
                    .bearer_auth(&token)
                    .header("Idempotency-Key", key.as_str())
                    .json(&json!({"report": "orders"}))
            })
            .collect();
        let mut ids = std::collections::HashSet::new();
        for (status, id) in send_together(requests).await {
            assert_eq!(status, 202, "round {round}");
            ids.insert(id.unwrap());
        }
        assert_eq!(ids.len(), 1, "round {round}: {ids:?}");
    }
    let check = sea_orm::Database::connect(db.as_str()).await.unwrap();
    use sea_orm::ConnectionTrait;
    let row = check
        .query_one_raw(sea_orm::Statement::from_string(sea_orm::DbBackend::Postgres, "SELECT COUNT(*) AS n FROM jobs"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.try_get::<i64>("", "n").unwrap(), 20);
    check.close().await.ok();
    for s in &servers {
        terminate(s);
    }
    for mut s in servers {
        let _ = tokio::time::timeout(Duration::from_secs(20), s.wait()).await;
    }
}
