//! How an import ends (SPEC §4, §10), on both backends unless a test says why not: every ending
//! — the worker's, the janitor's, a cancel in any state, a revocation, a redrive — leaves a
//! report of what is known (or none, and the view says so, when no row was read); rows the
//! database refuses are recorded once; a bounded lock wait is retried, never counted as a
//! refusal; reports expire and nothing under `imports/` outlives its record; progress counts
//! the rows applied out of the file's.

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use support::holders::Holder;
use support::imports::{codes, finished, import, numbered, report, small_batches, start, two_renewals, upload};
use support::{expect_problem, Backend, Gate, Options, TestApp, Turnstile};

/// `not_applied` rows for these lines.
fn not_applied(lines: std::ops::RangeInclusive<i64>) -> Vec<(i64, String, String)> {
    lines.map(|line| (line, String::new(), "not_applied".to_owned())).collect()
}

/// Polls the import until `done` holds of its view; panics after 60 s.
async fn until(app: &TestApp, client: &reqwest::Client, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let view: Value = client.get(app.url(&format!("/api/imports/{id}"))).send().await.unwrap().json().await.unwrap();
        if done(&view) {
            return view;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: {view}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn revoke(app: &TestApp) -> impl std::future::Future<Output = ()> + '_ {
    app.exec("UPDATE users SET role = 'analyst' WHERE id = 'usr_alice'")
}

fn restore(app: &TestApp) -> impl std::future::Future<Output = ()> + '_ {
    app.exec("UPDATE users SET role = 'admin' WHERE id = 'usr_alice'")
}

on_both_backends!(a_cancel_or_a_revocation_met_after_the_last_batch_ends_the_import_with_its_report, |backend| {
    let app = TestApp::start(Options { worker: true, adjust: small_batches, ..Options::new(backend) }).await;
    let alice = app.login("alice@acme.test").await;
    for (n, how) in ["cancel", "revoke"].into_iter().enumerate() {
        let csv = numbered(4 + n * 10).replace("batch", &format!("{how}-batch"));
        let upl = upload(&app, &alice, &csv).await;
        let mut gate = Gate::close(&app.fault("import_before_release"));
        let view = start(&app, &alice, how, &json!({"dataset": "customers", "upload": upl})).await;
        let id = view["id"].as_str().unwrap();
        gate.reached().await;
        if how == "cancel" {
            assert_eq!(alice.post(app.url(&format!("/api/imports/{id}/cancel"))).send().await.unwrap().status(), 202);
            two_renewals(&app, id).await;
        } else {
            revoke(&app).await;
        }
        gate.open();
        drop(gate);
        let done = finished(&app, &alice, id).await;
        restore(&app).await;
        let expected = if how == "cancel" { "cancelled" } else { "failed" };
        assert_eq!(done["status"], expected, "{done}");
        // Old code: the report just written was left unreferenced, and the import had none.
        let done = until(&app, &alice, id, "the report is recorded", |v| v["report"].is_object()).await;
        assert_eq!(done["report_status"], "written");
        assert_eq!(codes(&report(&app, &alice, id).await), vec![], "every row was applied: nothing to list");
        assert_eq!(done["counts"]["applied"], 4 + n as i64 * 10);
    }
});

on_both_backends!(a_revocation_at_the_start_of_a_resumed_attempt_ends_it_with_a_report_of_the_rows_not_applied, |backend| {
    let app = TestApp::start(Options { worker: true, adjust: small_batches, ..Options::new(backend) }).await;
    let alice = app.login("alice@acme.test").await;
    let upl = upload(&app, &alice, &numbered(6)).await;
    // The second batch fails once before its commit; the next attempt is held at its claim.
    fail::cfg(app.fault("import_batch_before_commit"), "1*off->1*return->off").unwrap();
    let mut gate = Gate::close_at(&app.fault("after_claim"), 2);
    let view = start(&app, &alice, "resumed", &json!({"dataset": "customers", "upload": upl})).await;
    let id = view["id"].as_str().unwrap();
    gate.reached().await;
    revoke(&app).await;
    gate.open();
    let done = finished(&app, &alice, id).await;
    fail::remove(app.fault("import_batch_before_commit"));
    assert_eq!(done["status"], "failed");
    assert_eq!(done["error"]["code"], "permission_revoked", "{done}");
    restore(&app).await;
    let done = until(&app, &alice, id, "the report is recorded", |v| v["report"].is_object()).await;
    assert_eq!(codes(&report(&app, &alice, id).await), not_applied(4..=7), "the first batch applied, the rest listed");
    assert_eq!(done["report_status"], "written");
});

fn stalls_quickly(c: &mut exportd::config::Config) {
    c.import_batch_rows = 2;
    c.lease = Duration::from_secs(2);
    c.stall = Duration::from_secs(1);
    c.max_attempts = 1;
}

on_both_backends!(an_import_the_janitor_ends_as_stalled_gets_its_report_all_the_same, |backend| {
    let app = TestApp::start(Options { worker: true, adjust: stalls_quickly, ..Options::new(backend) }).await;
    let alice = app.login("alice@acme.test").await;
    let upl = upload(&app, &alice, &numbered(6)).await;
    // Held before its second batch, the attempt makes no progress while its lease is renewed.
    let mut gate = Gate::close_at(&app.fault("import_before_batch"), 2);
    let view = start(&app, &alice, "stalled", &json!({"dataset": "customers", "upload": upl})).await;
    let id = view["id"].as_str().unwrap();
    gate.reached().await;
    let done = finished(&app, &alice, id).await;
    assert_eq!(done["status"], "failed");
    assert_eq!(done["error"]["code"], "stalled", "{done}");
    // Old code: no path wrote a report for an ending the import's own code never saw.
    let done = until(&app, &alice, id, "the janitor's ending gets a report", |v| v["report"].is_object()).await;
    assert_eq!(codes(&report(&app, &alice, id).await), not_applied(4..=7));
    assert_eq!(done["report_status"], "written");
    gate.open();
});

fn slow_retries(c: &mut exportd::config::Config) {
    c.import_batch_rows = 2;
    c.retry_base = Duration::from_secs(600);
}

on_both_backends!(a_cancel_while_queued_or_waiting_to_retry_leaves_a_report_when_rows_were_read_and_says_so_when_none_were, |backend| {
    // The worker serves `ksa` only: globex's imports (`uae`) stay queued.
    let mut app = TestApp::start(Options { adjust: slow_retries, ..Options::new(backend) }).await;
    app.start_worker(exportd::config::WorkerConfig { deployments: vec!["ksa".into()], concurrency: 2 }).await;
    let gina = app.login("gina@globex.test").await;
    let upl = upload(&app, &gina, "email,name,phone,country\nq@globex.test,Q,1,AE\n").await;
    let queued = start(&app, &gina, "queued", &json!({"dataset": "customers", "upload": upl})).await;
    let id = queued["id"].as_str().unwrap();
    let cancelled = gina.post(app.url(&format!("/api/imports/{id}/cancel"))).send().await.unwrap();
    assert_eq!(cancelled.status(), 200);
    let view: Value = cancelled.json().await.unwrap();
    assert_eq!(view["status"], "cancelled");
    assert_eq!(view["report_status"], "none", "no row was read: no report, and the view says so");
    expect_problem(gina.get(app.url(&format!("/api/imports/{id}/report"))).send().await.unwrap(), 409, "export-not-ready").await;

    let alice = app.login("alice@acme.test").await;
    let upl = upload(&app, &alice, &numbered(6)).await;
    fail::cfg(app.fault("import_batch_before_commit"), "1*off->1*return->off").unwrap();
    let view = start(&app, &alice, "waiting", &json!({"dataset": "customers", "upload": upl})).await;
    let id = view["id"].as_str().unwrap();
    until(&app, &alice, id, "waits to retry", |v| v["status"] == "retry_wait").await;
    fail::remove(app.fault("import_batch_before_commit"));
    let cancelled = alice.post(app.url(&format!("/api/imports/{id}/cancel"))).send().await.unwrap();
    assert_eq!(cancelled.status(), 200);
    // Old code: cancelled at once by the API, and no report ever.
    until(&app, &alice, id, "the cancelled import gets its report", |v| v["report"].is_object()).await;
    assert_eq!(codes(&report(&app, &alice, id).await), not_applied(4..=7));
});

on_both_backends!(rows_the_database_refuses_are_recorded_once_not_carried_in_every_checkpoint, |backend| {
    let app = TestApp::start(Options { worker: true, adjust: small_batches, ..Options::new(backend) }).await;
    let alice = app.login("alice@acme.test").await;
    // New orders without a status cannot be made: every row is refused when applied.
    let mut csv = "order_ref,customer_email,placed_at,total\n".to_owned();
    for i in 0..40 {
        csv.push_str(&format!("REF-{i},customer1@acme.example,2026-01-31T09:30:00Z,1.00\n"));
    }
    let upl = upload(&app, &alice, &csv).await;
    let done = import(&app, &alice, "refused", json!({"dataset": "orders", "upload": upl, "on_error": "skip_invalid"})).await;
    assert_eq!(done["status"], "ready", "{done}");
    assert_eq!(done["counts"]["invalid"], 40, "{done}");
    let id = done["id"].as_str().unwrap();
    let checkpoints = app.scalar(&format!("SELECT COUNT(*) FROM job_checkpoints WHERE job_id = '{id}'")).await;
    assert_eq!(checkpoints, 20);
    // Old code: the twentieth checkpoint carried all forty refused rows (about 85 bytes each).
    let largest = app.scalar(&format!("SELECT CAST(MAX(LENGTH(payload)) AS BIGINT) FROM job_checkpoints WHERE job_id = '{id}'")).await;
    assert!(largest < 300, "a checkpoint holds its counts, not the refused rows so far: {largest} bytes");
    let rows = codes(&report(&app, &alice, id).await);
    assert_eq!(rows, (2..=41).map(|line| (line, String::new(), "refused".to_owned())).collect::<Vec<_>>(), "each refused row once, in input order");
});

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_row_lock_held_past_the_lock_timeout_is_waited_out_not_counted_as_a_refused_row() {
    // PostgreSQL only: SQLite has no row locks (its one write lock is waited for at the batch's
    // BEGIN, before any row).
    let app = TestApp::start(Options { worker: true, adjust: small_batches, ..Options::new(Backend::Postgres) }).await;
    let alice = app.login("alice@acme.test").await;
    let holder = Holder::psql(app.database_url(), "SELECT 1 FROM customers WHERE email_key = 'customer1@acme.example' FOR UPDATE;").await;
    let upl = upload(&app, &alice, "email,name\ncustomer1@acme.example,Renamed While Locked\n").await;
    let view = start(&app, &alice, "locked", &json!({"dataset": "customers", "upload": upl})).await;
    let id = view["id"].as_str().unwrap();
    // Three separate waits on the lock, each given up after lock_timeout: the old code waited
    // twice (the batch, then the row alone), counted the row refused and ended the import
    // `apply_failed`.
    // The import's own UPDATE of the customer (a heartbeat waiting on the job's row, which the
    // batch holds, waits on a lock too).
    let waiting = "SELECT COALESCE(MAX((EXTRACT(EPOCH FROM query_start) * 1000000)::bigint), 0) FROM pg_stat_activity \
                   WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'UPDATE customers SET%'";
    let terminal = format!("SELECT COUNT(*) FROM jobs WHERE id = '{id}' AND status IN ('ready', 'failed', 'cancelled')");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut waits = std::collections::BTreeSet::new();
    while waits.len() < 3 && app.scalar(&terminal).await == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the import never waited on the lock");
        let started = app.scalar(waiting).await;
        if started > 0 {
            waits.insert(started);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    holder.release().await;
    let done = finished(&app, &alice, id).await;
    assert_eq!(done["status"], "ready", "a bounded wait is retried: {done}");
    assert_eq!(done["counts"]["updated"], 1);
    assert_eq!(app.scalar("SELECT COUNT(*) FROM customers WHERE name = 'Renamed While Locked'").await, 1);
}

fn short_retention(c: &mut exportd::config::Config) {
    c.import_batch_rows = 2;
    c.lease = Duration::from_secs(2);
}

on_both_backends!(a_failed_imports_report_expires_and_nothing_under_imports_outlives_its_record, |backend| {
    let app = TestApp::start(Options { worker: true, adjust: short_retention, ..Options::new(backend) }).await;
    let alice = app.login("alice@acme.test").await;
    let upl = upload(&app, &alice, "email,name,phone,country\nbad,X,1,SA\nok@acme.test,Y,1,SA\n").await;
    let done = import(&app, &alice, "expiring", json!({"dataset": "customers", "upload": upl})).await;
    assert_eq!(done["error"]["code"], "validation_failed");
    let id = done["id"].as_str().unwrap();
    until(&app, &alice, id, "the report is recorded", |v| v["report"].is_object()).await;
    assert!(app.objects("imports").len() >= 2, "the validation's report and the final one: {:?}", app.objects("imports"));
    app.exec(&format!("UPDATE jobs SET artifact_expires_at = 0 WHERE id = '{id}'")).await;
    // Old code: 303 to the report past its expiry, and no janitor rule for a failed job's file.
    expect_problem(alice.get(app.url(&format!("/api/imports/{id}/report"))).send().await.unwrap(), 410, "artifact-expired").await;
    until(&app, &alice, id, "the janitor expires the report", |v| v["report"]["expired"] == true).await;

    // A report left by an attempt that lost its lease: under imports/, of no job.
    let orphan = app.dir.path().join("objects/imports/ten_acme/imp_0123456789abcdef0123456789abcdef/0123.csv");
    std::fs::create_dir_all(orphan.parent().unwrap()).unwrap();
    std::fs::write(&orphan, "line,column,code,message\r\n").unwrap();
    std::fs::File::options().write(true).open(&orphan).unwrap().set_modified(std::time::SystemTime::now() - Duration::from_secs(3600)).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !app.objects("imports").is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "still under imports/: {:?}", app.objects("imports"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
});

on_both_backends!(a_redrive_refuses_an_import_whose_upload_expired_and_clears_the_report_of_the_last_ending, |backend| {
    let app = TestApp::start(Options { worker: true, adjust: small_batches, ..Options::new(backend) }).await;
    let alice = app.login("alice@acme.test").await;
    let mut ids = Vec::new();
    for key in ["expired-upload", "redriven"] {
        let upl = upload(&app, &alice, &numbered(4).replace("batch", key)).await;
        let mut gate = Gate::close_at(&app.fault("import_before_batch"), 2);
        let view = start(&app, &alice, key, &json!({"dataset": "customers", "upload": upl})).await;
        let id = view["id"].as_str().unwrap().to_owned();
        gate.reached().await;
        revoke(&app).await;
        gate.open();
        drop(gate);
        assert_eq!(finished(&app, &alice, &id).await["error"]["code"], "permission_revoked");
        restore(&app).await;
        until(&app, &alice, &id, "the report is recorded", |v| v["report"].is_object()).await;
        ids.push(id);
    }
    // The first one's upload expires, as the janitor expires one: the row, then the file.
    app.exec(&format!("DELETE FROM uploads WHERE id = (SELECT upload_id FROM jobs WHERE id = '{}')", ids[0])).await;
    // Old code: accepted, then five attempts failed `storage_unavailable`.
    assert_eq!(app.cli(&["jobs", "redrive", &ids[0]]).await, 1, "an import whose file is gone cannot go on");
    assert_eq!(app.scalar(&format!("SELECT COUNT(*) FROM jobs WHERE id = '{}' AND status = 'failed'", ids[0])).await, 1);

    let mut gate = Gate::close(&app.fault("after_claim"));
    assert_eq!(app.cli(&["jobs", "redrive", &ids[1]]).await, 0);
    gate.reached().await;
    // Old code: the failed attempt's report stayed on the running import.
    let running: Value = alice.get(app.url(&format!("/api/imports/{}", ids[1]))).send().await.unwrap().json().await.unwrap();
    assert!(running["report"].is_null(), "{running}");
    assert_ne!(running["report_status"], "written", "{running}");
    gate.open();
    let done = finished(&app, &alice, &ids[1]).await;
    assert_eq!(done["status"], "ready", "{done}");
    assert_eq!(codes(&report(&app, &alice, &ids[1]).await), vec![]);
});

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redrive_that_does_not_happen_forgets_nothing() {
    // PostgreSQL only: the redrive's row is held from psql until its lock_timeout runs out.
    let app = TestApp::start(Options { worker: true, adjust: |c| c.max_attempts = 1, ..Options::new(Backend::Postgres) }).await;
    let alice = app.login("alice@acme.test").await;
    fail::cfg(app.fault("before_publish"), "return").unwrap();
    let resp = app.create(&alice, "fails", &support::procs::everything("orders")).await;
    let id = resp.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    assert_eq!(app.wait_terminal(&alice, &id, Duration::from_secs(30)).await["status"], "failed");
    fail::remove(app.fault("before_publish"));
    app.exec(&format!("INSERT INTO job_checkpoints (job_id, seq, generation, attempt, at, payload) VALUES ('{id}', 1, 1, 1, 0, '{{}}')")).await;
    let holder = Holder::psql(app.database_url(), &format!("SELECT 1 FROM jobs WHERE id = '{id}' FOR NO KEY UPDATE;")).await;
    assert_eq!(app.cli(&["jobs", "redrive", &id]).await, 1, "the held row is not redriven");
    holder.release().await;
    // Old code: the checkpoints were forgotten before the redrive that then did not happen.
    assert_eq!(app.scalar(&format!("SELECT COUNT(*) FROM job_checkpoints WHERE job_id = '{id}'")).await, 1);
    assert_eq!(app.scalar(&format!("SELECT COUNT(*) FROM jobs WHERE id = '{id}' AND status = 'failed'")).await, 1);
}

on_both_backends!(an_import_applies_from_none_of_its_rows_and_a_later_attempt_keeps_the_files_total, |backend| {
    let app = TestApp::start(Options { worker: true, adjust: small_batches, ..Options::new(backend) }).await;
    let alice = app.login("alice@acme.test").await;
    let upl = upload(&app, &alice, &numbered(6)).await;
    fail::cfg(app.fault("import_batch_before_commit"), "1*off->1*return->off").unwrap();
    let mut turnstile = Turnstile::close(&app.fault("import_before_batch"));
    let view = start(&app, &alice, "progress", &json!({"dataset": "customers", "upload": upl})).await;
    let id = view["id"].as_str().unwrap();
    assert!(turnstile.reached_within(Duration::from_secs(60)).await);
    // Old code: the validation's count stayed, "applying 6 of 6" before the first batch.
    until(&app, &alice, id, "applying 0 of 6", |v| v["phase"] == "applying" && v["progress"] == json!({"rows_done": 0, "rows_total": 6})).await;
    turnstile.pass();
    assert!(turnstile.reached_within(Duration::from_secs(60)).await, "the second batch");
    turnstile.pass();
    assert!(turnstile.reached_within(Duration::from_secs(60)).await, "the second batch, on the next attempt");
    // Old code: the next attempt's first heartbeat cleared the total ("2 of ?").
    let resumed: Value = alice.get(app.url(&format!("/api/imports/{id}"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(resumed["attempt"], 2, "{resumed}");
    assert_eq!(resumed["progress"], json!({"rows_done": 2, "rows_total": 6}), "{resumed}");
    turnstile.pass();
    assert!(turnstile.reached_within(Duration::from_secs(60)).await, "the third batch");
    turnstile.pass();
    let done = finished(&app, &alice, id).await;
    fail::remove(app.fault("import_batch_before_commit"));
    assert_eq!(done["status"], "ready", "{done}");
    assert_eq!(done["progress"], json!({"rows_done": 6, "rows_total": 6}));
});
