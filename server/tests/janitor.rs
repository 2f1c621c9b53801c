//! The janitor (SPEC §5.11) and the claim's fairness, driven pass by pass: lapsed leases, the
//! queue TTL, artifact and record retention, and the sweeps of staging and `exports/`.

mod support;

use exportd::config::WorkerConfig;
use exportd::job_store::claims;
use exportd::worker::{janitor, WorkerContext};
use serde_json::Value;
use std::time::{Duration, SystemTime};
use support::procs::everything;
use support::{Options, TestApp};

fn short(c: &mut exportd::config::Config) {
    c.lease = Duration::from_secs(1);
    c.max_attempts = 2;
}

async fn ctx(app: &TestApp) -> WorkerContext {
    app.worker_context(WorkerConfig { deployments: vec![], concurrency: 1 }).await
}

async fn create_id(app: &TestApp, client: &reqwest::Client, key: &str) -> String {
    let resp = app.create(client, key, &everything("orders")).await;
    assert_eq!(resp.status(), 202);
    resp.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
}

async fn view(app: &TestApp, client: &reqwest::Client, id: &str) -> Value {
    client.get(app.url(&format!("/api/exports/{id}"))).send().await.unwrap().json().await.unwrap()
}

/// Passes until `done` holds for the view of `id`.
async fn pass_until(app: &TestApp, ctx: &WorkerContext, client: &reqwest::Client, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        janitor::pass(ctx, true).await.unwrap();
        let v = view(app, client, id).await;
        if done(&v) {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "not reached: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

on_both_backends!(a_lapsed_lease_counts_as_an_attempt_and_ends_failed_worker_lost_once_attempts_are_spent, |backend| {
    let app = TestApp::start(Options { adjust: short, ..Options::new(backend) }).await;
    let bob = app.login("bob@acme.test").await;
    let id = create_id(&app, &bob, "dead-worker").await;
    let janitor = ctx(&app).await;
    let dead = ctx(&app).await;
    // A worker claims the job and dies: nobody renews its lease.
    let claimed = claims::claim(&dead.db, &dead.claimant()).await.unwrap().expect("claimable");
    assert_eq!(claimed.id, id);
    let first = pass_until(&app, &janitor, &bob, &id, |v| v["status"] != "running").await;
    assert_eq!(first["status"], "retry_wait", "{first}");
    assert_eq!(first["error"]["code"], "worker_lost");
    assert_eq!(first["attempt"], 1);
    assert!(first["next_attempt_at"].is_string());
    // Claimed again once due, and lost again: attempts (2) are spent.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let again = loop {
        if let Some(job) = claims::claim(&dead.db, &dead.claimant()).await.unwrap() {
            break job;
        }
        assert!(tokio::time::Instant::now() < deadline, "never claimable again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!((again.generation, again.attempt), (2, 2));
    let last = pass_until(&app, &janitor, &bob, &id, |v| v["status"] != "running").await;
    assert_eq!(last["status"], "failed", "{last}");
    assert_eq!(last["error"]["code"], "worker_lost");
    assert_eq!(last["error"]["retryable"], true);
    let by_janitor = app.scalar(&format!("SELECT COUNT(*) FROM job_events WHERE job_id = '{id}' AND actor LIKE 'janitor:%' AND from_status = 'running'")).await;
    assert_eq!(by_janitor, 2);
    app.stop().await;
});

on_both_backends!(a_lapsed_lease_of_a_cancel_ends_it_cancelled, |backend| {
    let app = TestApp::start(Options { adjust: short, ..Options::new(backend) }).await;
    let bob = app.login("bob@acme.test").await;
    let id = create_id(&app, &bob, "dead-while-cancelling").await;
    let (janitor, dead) = (ctx(&app).await, ctx(&app).await);
    claims::claim(&dead.db, &dead.claimant()).await.unwrap().expect("claimable");
    let resp = bob.post(app.url(&format!("/api/exports/{id}/cancel"))).send().await.unwrap();
    assert_eq!(resp.status(), 202);
    let done = pass_until(&app, &janitor, &bob, &id, |v| v["status"] != "cancel_requested").await;
    assert_eq!(done["status"], "cancelled", "{done}");
    assert!(done["error"].is_null());
    app.stop().await;
});

on_both_backends!(a_job_queued_past_the_queue_ttl_ends_failed_no_worker, |backend| {
    let app = TestApp::start(Options { adjust: |c| c.queue_ttl = Duration::from_secs(1), ..Options::new(backend) }).await;
    let bob = app.login("bob@acme.test").await;
    let id = create_id(&app, &bob, "nobody-serves-it").await;
    let janitor = ctx(&app).await;
    janitor::pass(&janitor, false).await.unwrap();
    assert_eq!(view(&app, &bob, &id).await["status"], "queued", "not before the TTL");
    let done = pass_until(&app, &janitor, &bob, &id, |v| v["status"] != "queued").await;
    assert_eq!(done["status"], "failed");
    assert_eq!(done["error"]["code"], "no_worker");
    app.stop().await;
});

on_both_backends!(an_artifact_past_retention_is_deleted_and_shows_expired_and_its_record_stays, |backend| {
    let app = TestApp::start(Options { worker: true, adjust: |c| c.artifact_ttl = Duration::from_secs(2), ..Options::new(backend) }).await;
    let bob = app.login("bob@acme.test").await;
    let id = create_id(&app, &bob, "expires").await;
    let ready = app.wait_terminal(&bob, &id, Duration::from_secs(20)).await;
    assert_eq!(ready["status"], "ready");
    let link = bob.get(app.url(&format!("/api/exports/{id}/download"))).send().await.unwrap().headers()["location"].to_str().unwrap().to_owned();
    let janitor = ctx(&app).await;
    let expired = pass_until(&app, &janitor, &bob, &id, |v| v["artifact"]["expired"] == true).await;
    assert_eq!(expired["status"], "ready", "expiry is not a failure");
    assert!(expired["download"].is_null());
    assert!(app.objects(&format!("exports/ten_acme/{id}")).is_empty(), "the file is gone");
    let resp = bob.get(app.url(&format!("/api/exports/{id}/download"))).send().await.unwrap();
    support::expect_problem(resp, 410, "artifact-expired").await;
    let resp = bob.get(app.url(&link)).send().await.unwrap();
    support::expect_problem(resp, 410, "artifact-expired").await;
    app.stop().await;
});

on_both_backends!(a_record_past_retention_is_purged_and_its_key_may_be_used_again, |backend| {
    let app = TestApp::start(Options { worker: true, adjust: |c| c.record_ttl = Duration::from_secs(2), ..Options::new(backend) }).await;
    let bob = app.login("bob@acme.test").await;
    let id = create_id(&app, &bob, "purged").await;
    assert_eq!(app.wait_terminal(&bob, &id, Duration::from_secs(20)).await["status"], "ready");
    let janitor = ctx(&app).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        janitor::pass(&janitor, true).await.unwrap();
        if bob.get(app.url(&format!("/api/exports/{id}"))).send().await.unwrap().status() == 404 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never purged");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(app.objects("exports").is_empty(), "its file went with it");
    assert_eq!(app.scalar(&format!("SELECT COUNT(*) FROM job_events WHERE job_id = '{id}'")).await, 0);
    let resp = app.create(&bob, "purged", &everything("orders")).await;
    assert_eq!(resp.status(), 202);
    assert!(resp.headers().get("idempotent-replayed").is_none(), "a new operation, not a replay");
    assert_ne!(resp.json::<Value>().await.unwrap()["id"].as_str().unwrap(), id);
    app.stop().await;
});

/// Writes a file into the store folder, dated an hour ago.
fn plant(app: &TestApp, key: &str) {
    let path = app.dir.path().join("objects").join(key);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, b"planted").unwrap();
    let file = std::fs::File::options().write(true).open(&path).unwrap();
    file.set_modified(SystemTime::now() - Duration::from_secs(3600)).unwrap();
}

on_both_backends!(the_sweeps_remove_what_no_attempt_can_release_and_keep_what_a_live_attempt_may, |backend| {
    let app = TestApp::start(Options { adjust: short, ..Options::new(backend) }).await;
    let bob = app.login("bob@acme.test").await;
    let ready = create_id(&app, &bob, "finished").await;
    let worker = ctx(&app).await;
    let job = claims::claim(&worker.db, &worker.claimant()).await.unwrap().expect("claimable");
    exportd::worker::jobs::export_csv::run(&worker, job).await;
    let done = app.wait_terminal(&bob, &ready, Duration::from_secs(20)).await;
    let artifact = format!("exports/ten_acme/{ready}/{}.csv", done["artifact"]["sha256"].as_str().unwrap());

    // A live attempt: claimed, and its lease renewed by hand as its worker would.
    let live = create_id(&app, &bob, "live").await;
    let janitor = ctx(&app).await;
    let claimed = claims::claim(&janitor.db, &janitor.claimant()).await.unwrap().expect("claimable");
    assert_eq!(claimed.id, live);
    for key in [
        format!("staging/{ready}/1"),
        "staging/exp_unknown/1".to_owned(),
        format!("staging/{live}/0"),
        format!("staging/{live}/1"),
        // A partial file of the live attempt's upload, an hour old by this host's clock (a slow
        // selective export, or a janitor whose clock runs ahead): kept. One of a generation that
        // can no longer release: removed.
        format!("staging/{live}/1#12"),
        format!("staging/{live}/0#3"),
        format!("exports/ten_acme/{ready}/{}.csv", "0".repeat(64)),
        format!("exports/ten_acme/{live}/{}.csv", "1".repeat(64)),
        format!("exports/ten_acme/exp_unknown/{}.csv", "2".repeat(64)),
    ] {
        plant(&app, &key);
    }
    exportd::job_store::transitions::heartbeat(&janitor.db, &live, 1, Duration::from_secs(60), Default::default()).await.unwrap();
    let pass = janitor::pass(&janitor, true).await.unwrap();
    let mut left: Vec<String> = app.objects("").into_iter().filter(|k| k != exportd::storage::identity::MARKER).collect();
    left.sort();
    let mut expected = vec![
        artifact.clone(),
        format!("exports/ten_acme/{live}/{}.csv", "1".repeat(64)),
        format!("staging/{live}/1"),
        format!("staging/{live}/1#12"),
    ];
    expected.sort();
    assert_eq!(left, expected, "{pass:?}");
    assert_eq!((pass.staging_deleted, pass.orphans_deleted), (4, 2), "{pass:?}");
});

on_both_backends!(claims_rotate_between_tenants_so_a_thousand_queued_jobs_do_not_starve_another_tenants_one, |backend| {
    let app = TestApp::spawn(backend).await;
    let bob = app.login("bob@acme.test").await;
    let gina = app.login("gina@globex.test").await;
    for i in 0..1000 {
        create_id(&app, &bob, &format!("acme-{i}")).await;
    }
    let globex = create_id(&app, &gina, "globex-1").await;
    let worker = ctx(&app).await;
    let first = claims::claim(&worker.db, &worker.claimant()).await.unwrap().unwrap();
    let second = claims::claim(&worker.db, &worker.claimant()).await.unwrap().unwrap();
    assert!(first.id == globex || second.id == globex, "globex's job is claimed within two claims");
    let third = claims::claim(&worker.db, &worker.claimant()).await.unwrap().unwrap();
    assert_eq!(third.tenant_id, "ten_acme");
    app.stop().await;
});

on_both_backends!(a_job_in_retry_wait_that_no_worker_claims_ends_failed_no_worker_after_the_queue_ttl, |backend| {
    let app = TestApp::start(Options { adjust: |c| c.queue_ttl = Duration::from_secs(2), ..Options::new(backend) }).await;
    let bob = app.login("bob@acme.test").await;
    let id = create_id(&app, &bob, "retried-but-unserved").await;
    // An attempt failed and its retry came due; no worker of the job's deployment is left.
    let now = exportd::db::now_ms_sql(app.db.get_database_backend());
    app.exec(&format!("UPDATE jobs SET status = 'retry_wait', attempt = 1, generation = 1, next_attempt_at = {now} - 500, error_code = 'storage_unavailable' WHERE id = '{id}'")).await;
    let janitor = ctx(&app).await;
    janitor::pass(&janitor, false).await.unwrap();
    assert_eq!(view(&app, &bob, &id).await["status"], "retry_wait", "not before the TTL");
    let done = pass_until(&app, &janitor, &bob, &id, |v| v["status"] != "retry_wait").await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "no_worker");
    assert!(done["next_attempt_at"].is_null(), "{done}");
    app.stop().await;
});

on_both_backends!(a_create_is_dated_by_the_databases_clock_so_an_api_host_with_a_slow_clock_starts_no_ttl_early, |backend| {
    // An API host whose clock is three days behind the database's.
    let behind = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(72);
    let clock: exportd::clock::SharedClock = std::sync::Arc::new(support::FixedClock(std::sync::Mutex::new(behind)));
    let app = TestApp::start(Options { clock: Some(clock), adjust: |c| c.queue_ttl = Duration::from_secs(86_400), ..Options::new(backend) }).await;
    let bob = app.login("bob@acme.test").await;
    let id = create_id(&app, &bob, "slow-api-clock").await;
    let created: jiff::Timestamp = view(&app, &bob, &id).await["created_at"].as_str().unwrap().parse().unwrap();
    let db_now = jiff::Timestamp::from_millisecond(exportd::db::db_now_ms(&app.db).await.unwrap()).unwrap();
    assert!((db_now - created).get_seconds().abs() < 60, "created at {created}, the database's clock says {db_now}");
    janitor::pass(&ctx(&app).await, false).await.unwrap();
    assert_eq!(view(&app, &bob, &id).await["status"], "queued", "the queue TTL starts at the database's now");
    app.stop().await;
});

/// Every folder under `root` that holds nothing.
fn empty_folders(root: &std::path::Path) -> Vec<String> {
    let mut empty = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let entries: Vec<_> = entries.flatten().collect();
        if entries.is_empty() && dir != root {
            empty.push(dir.strip_prefix(root).unwrap().display().to_string());
        }
        stack.extend(entries.into_iter().map(|e| e.path()).filter(|p| p.is_dir()));
    }
    empty
}

on_both_backends!(finished_and_expired_exports_leave_no_empty_folders_for_the_sweeps_to_walk, |backend| {
    let app = TestApp::start(Options { worker: true, adjust: |c| c.artifact_ttl = Duration::from_secs(1), ..Options::new(backend) }).await;
    let bob = app.login("bob@acme.test").await;
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(create_id(&app, &bob, &format!("folders-{i}")).await);
    }
    for id in &ids {
        assert_eq!(app.wait_terminal(&bob, id, Duration::from_secs(30)).await["status"], "ready");
    }
    let root = app.dir.path().join("objects");
    assert_eq!(empty_folders(&root), Vec::<String>::new(), "finished attempts leave no staging folders");
    let janitor = ctx(&app).await;
    for id in &ids {
        pass_until(&app, &janitor, &bob, id, |v| v["artifact"]["expired"] == true).await;
    }
    assert_eq!(empty_folders(&root), Vec::<String>::new(), "expired artifacts leave no folders");
    assert!(app.objects("exports").is_empty());
    app.stop().await;
});
