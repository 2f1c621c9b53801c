//! No process can stop the others (SPEC §4, §8 cases 17 and 18): real processes frozen with
//! SIGSTOP inside their transactions, locks held from `psql` and from a SQLite session, reads
//! blocked on a table lock while their heartbeat goes on, and attempts that hang inside their
//! own worker. Every other process keeps claiming, renewing, sweeping and answering; a hung
//! attempt is ended `stalled` and retried; nothing is ever duplicated.

mod support;

use sea_orm::ConnectionTrait;
use serde_json::Value;
use std::time::Duration;
use support::holders::Holder;
use support::procs::{eventually, everything, free_port, metric, metrics_page, scalar, sha256, Api, Prepared, Proc};
use support::Backend;
use tokio::time::Instant;

const LONG: Duration = Duration::from_secs(90);

/// A small export of one tenant's orders.
fn small() -> Value {
    everything("orders")
}

async fn create(api: &Api, key: &str) -> String {
    let (status, view) = api.create(key, &small()).await;
    assert_eq!(status, 202, "{view}");
    view["id"].as_str().unwrap().to_owned()
}

/// Each export ended `ready` once, under one generation, with exactly one file under
/// `exports/` whose bytes are its digest, served as such.
async fn published_once(p: &Prepared, api: &Api, tenant: &str, id: &str) {
    let db = p.connect().await;
    let releases = scalar(&db, &format!("SELECT COUNT(*) FROM job_events WHERE job_id = '{id}' AND to_status = 'ready'")).await;
    assert_eq!(releases, 1, "{id}: one release");
    let view = api.view(id).await;
    let sha = view["artifact"]["sha256"].as_str().unwrap_or_else(|| panic!("{id} has no artifact: {view}")).to_owned();
    let expected = vec![format!("exports/{tenant}/{id}/{sha}.csv")];
    eventually(&format!("{id}: only its artifact is under exports/"), LONG, || {
        let expected = expected.clone();
        async move { p.objects(&format!("exports/{tenant}/{id}")) == expected }
    })
    .await;
    let (status, bytes) = api.download(id).await;
    assert_eq!(status, 200);
    assert_eq!(sha256(&bytes), sha, "{id}: what is served is its digest");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenant_row_held_from_psql_holds_up_no_claim() {
    let p = Prepared::new(Backend::Postgres, 200).await;
    let (_api, base) = p.api().await;
    let api = Api::new(&base, &p.token);
    let workers: Vec<Proc> = ["a", "b", "c"].iter().map(|l| p.worker(l, &[], &[])).collect();
    // The lock a claim's UPDATE of the tenant takes, held as by a claimer frozen before COMMIT.
    let held = Holder::psql(&p.db_url, "SELECT 1 FROM tenants WHERE slug = 'acme' FOR NO KEY UPDATE;").await;
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(create(&api, &format!("tenant-held-{i}")).await);
    }
    for id in &ids {
        let view = api.wait_status(id, &["ready", "failed"], Duration::from_secs(30)).await;
        assert_eq!(view["status"], "ready", "{view}");
        assert_eq!(view["attempt"], 1, "{view}");
    }
    held.release().await;
    for mut w in workers {
        w.signal("TERM");
        assert!(w.wait_exit(LONG).await.success());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_janitor_skips_lapsed_jobs_held_from_psql_ends_the_others_and_a_cancel_of_a_held_one_answers() {
    let p = Prepared::new(Backend::Postgres, 200).await;
    let (_api, base) = p.api().await;
    let api = Api::new(&base, &p.token);
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(create(&api, &format!("lapsed-{i}")).await);
    }
    // Five attempts whose worker is gone: running, their leases long lapsed.
    let db = p.connect().await;
    let now = exportd::db::now_ms_sql(db.get_database_backend());
    let list = ids.iter().map(|id| format!("'{id}'")).collect::<Vec<_>>().join(",");
    db.execute_unprepared(&format!(
        "UPDATE jobs SET status = 'running', generation = 1, attempt = 1, lease_owner = 'worker:gone', \
         lease_expires_at = {now} - 60000, last_progress_at = {now} - 60000 WHERE id IN ({list})"
    ))
    .await
    .unwrap();
    // The first and the last are held, as by processes frozen inside a transition of theirs.
    let (first, last) = (ids[0].clone(), ids[4].clone());
    let held = Holder::psql(&p.db_url, &format!("SELECT 1 FROM jobs WHERE id IN ('{first}', '{last}') FOR NO KEY UPDATE;")).await;
    // A janitor (its worker serves another deployment, so the ended jobs stay where it put them).
    let mut janitor = p.worker("janitor", &[], &["--deployments", "uae"]);
    for id in &ids[1..4] {
        let view = api.wait_status(id, &["retry_wait"], Duration::from_secs(15)).await;
        assert_eq!(view["error"]["code"], "worker_lost", "{view}");
    }
    assert_eq!(api.view(&first).await["status"], "running", "a held row is skipped, not waited for");
    // A cancel of a held job answers within a few seconds: busy, nothing changed.
    let (status, body, took) = api.cancel(&first).await;
    assert!(took < Duration::from_secs(6), "the cancel answered after {took:?}");
    assert_eq!((status, body["code"].as_str()), (503, Some("busy")), "{body}");
    assert_eq!(api.view(&first).await["status"], "running");
    held.release().await;
    for id in [&first, &last] {
        let view = api.wait_status(id, &["retry_wait"], Duration::from_secs(15)).await;
        assert_eq!(view["error"]["code"], "worker_lost", "{view}");
    }
    let (status, body, _) = api.cancel(&first).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("cancelled")), "{body}");
    janitor.signal("TERM");
    assert!(janitor.wait_exit(LONG).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn processes_frozen_inside_a_claim_and_a_release_stop_no_other_claim_heartbeat_sweep_or_cancel() {
    let p = Prepared::new(Backend::Postgres, 300).await;
    let (_api, base) = p.api().await;
    let api = Api::new(&base, &p.token);
    let gina = api.as_user(p.run_ok(&["token", "create", "gina@globex.test"]).await.trim());

    // One worker frozen inside its claim's transaction (after its UPDATEs, before COMMIT) ...
    // (The fault point's sleep is only the window the SIGSTOP must land in, long enough for a
    // loaded 2-core machine; the freeze itself is the signal.)
    let in_claim = p.worker("in-claim", &[("FAILPOINTS", "claim_before_commit=sleep(8000)")], &["--concurrency", "1"]);
    let claimed_frozen = create(&api, "frozen-in-claim").await;
    in_claim.wait_line(&["claim_before_commit", &claimed_frozen], LONG).await;
    in_claim.signal("STOP");
    // ... and one inside its release's transaction.
    let in_release = p.worker("in-release", &[("FAILPOINTS", "release_before_commit=sleep(8000)")], &["--concurrency", "1"]);
    let released_frozen = create(&api, "frozen-in-release").await;
    in_release.wait_line(&["release_before_commit", &released_frozen], LONG).await;
    in_release.signal("STOP");
    // And one killed mid-export, whose lease the janitor must end meanwhile.
    let mut killed = p.worker("killed", &[("FAILPOINTS", "mid_stream=sleep(30000)")], &["--concurrency", "1"]);
    let orphaned = create(&api, "orphaned").await;
    killed.wait_line(&["mid_stream", &orphaned], LONG).await;
    killed.signal("KILL");
    let _ = killed.wait_exit(LONG).await;

    // Three healthy workers, each attempt of theirs lasting longer than a lease.
    let healthy: Vec<Proc> = ["a", "b", "c"].iter().map(|l| p.worker(l, &[("FAILPOINTS", "mid_stream=sleep(2500)")], &[])).collect();
    let mut others = Vec::new();
    for i in 0..4 {
        others.push(("ten_acme", create(&api, &format!("acme-{i}")).await, &api));
        others.push(("ten_globex", create(&gina, &format!("globex-{i}")).await, &gina));
    }
    // A cancel of the job frozen in its release answers within a few seconds.
    let (status, body, took) = api.cancel(&released_frozen).await;
    assert!(took < Duration::from_secs(6), "the cancel answered after {took:?}");
    assert!(matches!(status, 503 | 202 | 200 | 409), "{status} {body}");
    for (_, id, client) in &others {
        let view = client.wait_status(id, &["ready", "failed", "cancelled"], LONG).await;
        assert_eq!(view["status"], "ready", "{view}");
        assert_eq!(view["attempt"], 1, "no heartbeat of a running attempt was lost: {view}");
    }
    let view = api.wait_status(&orphaned, &["ready"], LONG).await;
    assert_eq!(view["attempt"], 2, "the janitor ended the killed worker's lease: {view}");
    let db = p.connect().await;
    let lost = scalar(&db, "SELECT COUNT(*) FROM job_events WHERE detail = 'worker_lost'").await;
    assert!(lost >= 1, "the janitor ended lapsed leases while the frozen processes held their rows");

    // Both frozen processes wake once the server has ended their transactions
    // (`idle_in_transaction_session_timeout`, 10 s): woken before, a frozen claim still commits
    // (seen when the other exports were done within 8 s of the freeze).
    eventually("the frozen processes' transactions are ended by the server", LONG, || {
        let db = &db;
        async move { scalar(db, "SELECT COUNT(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%' AND datname = current_database()").await == 0 }
    })
    .await;
    // Nothing is duplicated.
    in_claim.signal("CONT");
    in_release.signal("CONT");
    let frozen_claim = api.wait_status(&claimed_frozen, &["ready", "failed", "cancelled"], LONG).await;
    assert_eq!(frozen_claim["status"], "ready", "{frozen_claim}");
    let frozen_release = api.wait_status(&released_frozen, &["ready", "cancelled", "failed"], LONG).await;
    assert!(matches!(frozen_release["status"].as_str(), Some("ready" | "cancelled")), "{frozen_release}");
    for (tenant, id, client) in &others {
        published_once(&p, client, tenant, id).await;
    }
    published_once(&p, &api, "ten_acme", &claimed_frozen).await;
    published_once(&p, &api, "ten_acme", &orphaned).await;
    if frozen_release["status"] == "ready" {
        published_once(&p, &api, "ten_acme", &released_frozen).await;
    } else {
        eventually("the cancelled export's file is swept", LONG, || async { p.objects(&format!("exports/ten_acme/{released_frozen}")).is_empty() }).await;
    }
    let claims = scalar(&db, &format!("SELECT COUNT(*) FROM job_events WHERE job_id = '{claimed_frozen}' AND detail = 'claimed'")).await;
    assert_eq!(claims, 1, "the frozen claim committed nothing: one claim of it, by another worker");
    for mut w in healthy.into_iter().chain([in_claim, in_release]) {
        w.signal("TERM");
        assert!(w.wait_exit(LONG).await.success(), "{}", w.label);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_writer_waiting_on_a_held_sqlite_write_lock_gives_up_within_seconds_and_answers_busy() {
    let p = Prepared::new(Backend::Sqlite, 200).await;
    let (_api, base) = p.api().await;
    let api = Api::new(&base, &p.token);
    let path = p.db_url.trim_start_matches("sqlite://").to_owned();
    let held = Holder::sqlite_write_lock(&path).await;
    let started = Instant::now();
    let (status, body) = api.create("while-held", &small()).await;
    let took = started.elapsed();
    assert_eq!((status, body["code"].as_str()), (503, Some("busy")), "{body}");
    assert!(took < Duration::from_secs(10), "gave up after {took:?}, not within a few seconds");
    held.release().await;
    let (status, body) = api.create("while-held", &small()).await;
    assert_eq!(status, 202, "the same key, retried, creates the operation: {body}");
    let db = p.connect().await;
    assert_eq!(scalar(&db, "SELECT COUNT(*) FROM jobs WHERE idempotency_key = 'while-held'").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_process_frozen_inside_a_sqlite_write_transaction_costs_others_seconds_and_everything_recovers() {
    let p = Prepared::new(Backend::Sqlite, 200).await;
    let (_api, base) = p.api().await;
    let api = Api::new(&base, &p.token);
    // The first claim only: a later claim sleeping inside its write transaction would hold up
    // the download the test makes of the first export (a download writes its audit row) until
    // it answered busy, as it should.
    let mut frozen = p.worker("frozen", &[("FAILPOINTS", "claim_before_commit=1*sleep(6000)")], &[]);
    let first = create(&api, "before-the-freeze").await;
    frozen.wait_line(&["claim_before_commit", &first], LONG).await;
    frozen.signal("STOP");
    // Reads go on; a write waits a few seconds, then answers busy with nothing changed.
    assert_eq!(api.view(&first).await["status"], "queued");
    let started = Instant::now();
    let (status, body) = api.create("during-the-freeze", &small()).await;
    let took = started.elapsed();
    assert_eq!((status, body["code"].as_str()), (503, Some("busy")), "{body}");
    assert!(took < Duration::from_secs(10), "gave up after {took:?}");
    frozen.signal("CONT");
    let (status, body) = api.create("during-the-freeze", &small()).await;
    assert_eq!(status, 202, "{body}");
    let second = body["id"].as_str().unwrap().to_owned();
    for id in [&first, &second] {
        let view = api.wait_status(id, &["ready", "failed"], LONG).await;
        assert_eq!(view["status"], "ready", "{view}");
        published_once(&p, &api, "ten_acme", id).await;
    }
    // One operation per key, one release each. (The frozen claim itself commits when its process
    // wakes — nothing can end a SQLite transaction from outside — with its lease long lapsed, so
    // the janitor may take the job back as lost and claim it anew: fenced, never duplicated.)
    let db = p.connect().await;
    assert_eq!(scalar(&db, "SELECT COUNT(*) FROM jobs").await, 2, "one operation per key");
    frozen.signal("TERM");
    assert!(frozen.wait_exit(LONG).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_blocked_on_a_table_lock_is_ended_stalled_and_retried_and_a_cancel_or_sigterm_reaches_it() {
    let p = Prepared::new(Backend::Postgres, 200).await;
    let (_api, base) = p.api().await;
    let api = Api::new(&base, &p.token);
    let lock = Holder::psql(&p.db_url, "LOCK TABLE orders IN ACCESS EXCLUSIVE MODE;").await;
    let metrics_port = free_port();
    let worker_metrics = format!("http://127.0.0.1:{metrics_port}");
    let stall = [("EXPORTD_STALL_SECS", "3")];
    let mut w = p.worker("w", &stall, &["--metrics-bind", &format!("127.0.0.1:{metrics_port}")]);
    let hung = create(&api, "hung").await;
    api.wait_status(&hung, &["running"], LONG).await;
    // The stall shows while it lasts, on every instance.
    eventually("the stall shows in the metrics", Duration::from_secs(20), || {
        let base = base.clone();
        async move { metric(&metrics_page(&base).await, "exportd_checkpoint_stall_seconds").is_some_and(|s| s >= 2.0) }
    })
    .await;
    let view = api.wait_status(&hung, &["retry_wait"], Duration::from_secs(20)).await;
    assert_eq!(view["error"]["code"], "stalled", "{view}");
    assert_eq!(view["attempt"], 1, "{view}");
    let page = metrics_page(&worker_metrics).await;
    assert!(metric(&page, "exportd_stalled_attempts_total").is_some_and(|n| n >= 1.0), "{page}");

    // Retried, it hangs again; a cancel sent while it hangs ends it cancelled within seconds.
    eventually("retried", LONG, || {
        let (api, hung) = (&api, hung.clone());
        async move {
            let v = api.view(&hung).await;
            v["status"] == "running" && v["attempt"] == 2
        }
    })
    .await;
    let (status, body, _) = api.cancel(&hung).await;
    assert_eq!(status, 202, "{body}");
    let started = Instant::now();
    api.wait_status(&hung, &["cancelled"], Duration::from_secs(10)).await;
    assert!(started.elapsed() < Duration::from_secs(10));

    // SIGTERM reaches an attempt still waiting for its first row: handed back, the process exits.
    let waiting = create(&api, "waiting-for-its-first-row").await;
    api.wait_status(&waiting, &["running"], LONG).await;
    w.signal("TERM");
    assert!(w.wait_exit(Duration::from_secs(15)).await.success());
    let view = api.view(&waiting).await;
    assert_eq!(view["status"], "queued", "handed back: {view}");

    lock.release().await;
    let mut after = p.worker("after", &stall, &[]);
    let view = api.wait_status(&waiting, &["ready", "failed"], LONG).await;
    assert_eq!(view["status"], "ready", "{view}");
    published_once(&p, &api, "ten_acme", &waiting).await;
    assert!(p.objects(&format!("exports/ten_acme/{hung}")).is_empty(), "the cancelled export published nothing");
    let db = p.connect().await;
    let blocked = scalar(&db, "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()").await;
    assert_eq!(blocked, 0, "no statement of the stopped attempts is left waiting");
    after.signal("TERM");
    assert!(after.wait_exit(LONG).await.success());
}

on_both_backends!(an_attempt_that_hangs_inside_its_own_worker_is_ended_stalled_by_the_janitor_and_retried_once, |backend| {
    let p = Prepared::new(backend, 200).await;
    let (_api, base) = p.api().await;
    let api = Api::new(&base, &p.token);
    // The attempt blocks its own task (nothing in it can notice the stall), while the process's
    // heartbeat keeps its lease.
    let stall = ("EXPORTD_STALL_SECS", "2");
    let hangs = p.worker("hangs", &[("FAILPOINTS", "mid_stream=sleep(20000)"), stall], &["--concurrency", "1"]);
    let id = create(&api, "hangs-in-its-worker").await;
    hangs.wait_line(&["mid_stream", &id], LONG).await;
    let view = api.wait_status(&id, &["retry_wait", "ready", "failed"], Duration::from_secs(15)).await;
    assert_eq!(view["status"], "retry_wait", "{view}");
    assert_eq!(view["error"]["code"], "stalled", "{view}");
    let db = p.connect().await;
    let by_janitor = scalar(&db, &format!("SELECT COUNT(*) FROM job_events WHERE job_id = '{id}' AND detail = 'stalled' AND actor LIKE 'janitor:%'")).await;
    assert_eq!(by_janitor, 1, "the janitor ended it");
    let healthy = p.worker("healthy", &[stall], &[]);
    let view = api.wait_status(&id, &["ready", "failed"], LONG).await;
    assert_eq!(view["status"], "ready", "{view}");
    assert_eq!(view["attempt"], 2, "{view}");
    // The hung attempt wakes and finds the job is not its own any more.
    hangs.wait_line(&["lost", &id], LONG).await;
    published_once(&p, &api, "ten_acme", &id).await;
    for mut w in [hangs, healthy] {
        w.signal("TERM");
        assert!(w.wait_exit(LONG).await.success());
    }
});

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_asked_for_sixty_four_jobs_opens_no_more_connections_than_its_bound() {
    let p = Prepared::new(Backend::Postgres, 200).await;
    let (_api, base) = p.api().await;
    let api = Api::new(&base, &p.token);
    let mut w = p.worker("w", &[("FAILPOINTS", "mid_stream=sleep(6000)")], &["--concurrency", "64"]);
    for i in 0..64 {
        create(&api, &format!("many-{i}")).await;
    }
    let db = p.connect().await;
    eventually("jobs run", LONG, || {
        let db = db.clone();
        async move { scalar(&db, "SELECT COUNT(*) FROM jobs WHERE status = 'running'").await > 0 }
    })
    .await;
    // The worker's connections (everything on this database but the API's and the test's own),
    // and its jobs, while its first jobs sit mid-stream.
    let (mut connections, mut running) = (0, 0);
    for _ in 0..30 {
        let n = scalar(&db, "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name <> 'exportd-api'").await;
        connections = connections.max(n);
        running = running.max(scalar(&db, "SELECT COUNT(*) FROM jobs WHERE status = 'running'").await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(connections <= 32, "the worker held {connections} connections");
    assert_eq!(running, exportd::db::jobs_within(32) as i64, "as many jobs as fit, no more");
    w.signal("TERM");
    assert!(w.wait_exit(LONG).await.success());
}
