//! The worker under faults injected at its step boundaries, in-process, on SQLite and
//! PostgreSQL: failures racing cancels, revocation just before release, a staged object that
//! changed under the worker, progress writes, and the cases of SPEC §8 that need a paused worker.

mod support;

use serde_json::Value;
use std::time::Duration;
use support::procs::{everything, sha256};
use support::{Gate, Options, TestApp};

async fn app_with_worker(backend: support::Backend, orders: u32) -> TestApp {
    TestApp::start(Options { worker: true, orders, ..Options::new(backend) }).await
}

async fn download(app: &TestApp, client: &reqwest::Client, id: &str) -> (u16, bytes::Bytes) {
    let resp = client.get(app.url(&format!("/api/exports/{id}/download"))).send().await.unwrap();
    if resp.status() != 303 {
        return (resp.status().as_u16(), resp.bytes().await.unwrap());
    }
    let link = resp.headers()["location"].to_str().unwrap().to_owned();
    let file = client.get(app.url(&link)).send().await.unwrap();
    (file.status().as_u16(), file.bytes().await.unwrap())
}

async fn create_id(app: &TestApp, client: &reqwest::Client, key: &str, body: &Value) -> String {
    let resp = app.create(client, key, body).await;
    assert_eq!(resp.status(), 202);
    let view: Value = resp.json().await.unwrap();
    view["id"].as_str().unwrap().to_owned()
}

on_both_backends!(a_cancel_that_lands_while_a_failed_attempt_is_being_recorded_still_ends_cancelled, |backend| {
    let app = app_with_worker(backend, 200).await;
    fail::cfg(app.fault("mid_stream"), "return").unwrap();
    let mut gate = Gate::close(&app.fault("before_end_attempt"));
    let bob = app.login("bob@acme.test").await;
    let id = create_id(&app, &bob, "fails-then-cancelled", &everything("orders")).await;
    gate.reached().await;
    let resp = bob.post(app.url(&format!("/api/exports/{id}/cancel"))).send().await.unwrap();
    assert_eq!(resp.status(), 202, "the attempt is still running: cancel is requested");
    gate.open();
    let done = app.wait_terminal(&bob, &id, Duration::from_secs(20)).await;
    assert_eq!(done["status"], "cancelled", "{done}");
    assert!(done["artifact"].is_null());
    fail::remove(app.fault("mid_stream"));
    app.stop().await;
});

on_both_backends!(a_revocation_just_before_the_release_ends_the_export_failed_and_unpublished, |backend| {
    let app = app_with_worker(backend, 200).await;
    let mut gate = Gate::close(&app.fault("before_release"));
    let bob = app.login("bob@acme.test").await;
    let id = create_id(&app, &bob, "revoked-before-release", &everything("orders")).await;
    gate.reached().await;
    assert_eq!(app.cli(&["user", "set-role", "bob@acme.test", "viewer"]).await, 0);
    gate.open();
    let done = app.wait_terminal(&bob, &id, Duration::from_secs(20)).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "permission_revoked");
    assert!(done["artifact"].is_null() && done["download"].is_null());
    let (status, _) = download(&app, &bob, &id).await;
    assert_eq!(status, 409, "a failed export has nothing to download");
    // It was published just before the revocation won; the janitor removes what was not released.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !app.objects(&format!("exports/ten_acme/{id}")).is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the unreleased file is still there");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    app.stop().await;
});

on_both_backends!(a_staged_object_that_changed_after_it_was_written_is_never_published, |backend| {
    let app = app_with_worker(backend, 300).await;
    let staging = app.dir.path().join("objects/staging");
    let corrupted = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let once = corrupted.clone();
    fail::cfg_callback(app.fault("after_staging"), move || {
        if once.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        // Same size, one byte different: only a digest check can tell.
        let mut stack = vec![staging.clone()];
        while let Some(p) = stack.pop() {
            for e in std::fs::read_dir(&p).unwrap().flatten() {
                if e.path().is_dir() {
                    stack.push(e.path());
                } else {
                    let mut bytes = std::fs::read(e.path()).unwrap();
                    let last = bytes.len() - 3;
                    bytes[last] = if bytes[last] == b'x' { b'y' } else { b'x' };
                    std::fs::write(e.path(), bytes).unwrap();
                }
            }
        }
    })
    .unwrap();
    let bob = app.login("bob@acme.test").await;
    let id = create_id(&app, &bob, "corrupted-staging", &everything("orders")).await;
    let done = app.wait_terminal(&bob, &id, Duration::from_secs(30)).await;
    fail::remove(app.fault("after_staging"));
    assert!(corrupted.load(std::sync::atomic::Ordering::SeqCst), "the staged object was corrupted");
    assert_eq!(done["status"], "ready", "{done}");
    assert_eq!(done["attempt"], 2, "the corrupted attempt was retried: {done}");
    let (status, bytes) = download(&app, &bob, &id).await;
    assert_eq!(status, 200);
    assert_eq!(sha256(&bytes), done["artifact"]["sha256"].as_str().unwrap(), "the published bytes are the ones hashed");
    app.stop().await;
});

/// Counts, with a trigger, every UPDATE of an export's row.
async fn count_updates(app: &TestApp) {
    match app.backend {
        support::Backend::Postgres => {
            app.exec("CREATE TABLE update_log (export_id TEXT NOT NULL)").await;
            app.exec("CREATE FUNCTION log_update() RETURNS trigger AS $$ BEGIN INSERT INTO update_log VALUES (NEW.id); RETURN NEW; END $$ LANGUAGE plpgsql").await;
            app.exec("CREATE TRIGGER exports_updates AFTER UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION log_update()").await;
        }
        support::Backend::Sqlite => {
            app.exec("CREATE TABLE update_log (export_id TEXT NOT NULL)").await;
            app.exec("CREATE TRIGGER exports_updates AFTER UPDATE ON jobs BEGIN INSERT INTO update_log VALUES (NEW.id); END").await;
        }
    }
}

on_both_backends!(progress_is_written_about_once_a_second_not_once_per_page, |backend| {
    let app = app_with_worker(backend, 30_000).await;
    count_updates(&app).await;
    let alice = app.login("alice@acme.test").await;
    let id = create_id(&app, &alice, "progress", &everything("orders")).await;
    let done = app.wait_terminal(&alice, &id, Duration::from_secs(120)).await;
    assert_eq!(done["status"], "ready", "{done}");
    assert!(done["artifact"]["rows"].as_i64().unwrap() > 20_000);
    let updates = app.scalar(&format!("SELECT COUNT(*) FROM update_log WHERE export_id = '{id}'")).await;
    let claimed = app.scalar(&format!("SELECT MIN(at) FROM job_events WHERE job_id = '{id}' AND to_status = 'running'")).await;
    let released = app.scalar(&format!("SELECT MAX(at) FROM job_events WHERE job_id = '{id}' AND to_status = 'ready'")).await;
    let seconds = ((released - claimed) as f64 / 1000.0).ceil() as i64;
    // Claim, rows counted, the fence before publishing and the release, plus about one write a second.
    assert!(updates <= 6 + 2 * seconds, "{updates} updates of the export's row in {seconds} s");
    app.stop().await;
});

on_both_backends!(the_role_revoked_through_the_cli_during_generation_fails_the_export_and_publishes_nothing, |backend| {
    let app = app_with_worker(backend, 300).await;
    let alice = app.login("alice@acme.test").await;
    // An earlier export that is ready, and that alice may no longer download once revoked.
    let earlier = create_id(&app, &alice, "earlier", &everything("orders")).await;
    assert_eq!(app.wait_terminal(&alice, &earlier, Duration::from_secs(30)).await["status"], "ready");
    let exported_before = app.objects("exports");

    let mut gate = Gate::close(&app.fault("mid_stream"));
    let id = create_id(&app, &alice, "revoked-mid-stream", &everything("orders")).await;
    gate.reached().await;
    // alice's export has PII columns; an analyst may not read them.
    assert_eq!(app.cli(&["user", "set-role", "alice@acme.test", "analyst"]).await, 0);
    gate.open();
    let done = app.wait_terminal(&alice, &id, Duration::from_secs(30)).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "permission_revoked");
    assert_eq!(done["error"]["retryable"], false);
    assert_eq!(app.objects("exports"), exported_before, "nothing of the revoked export was published");
    let (status, _) = download(&app, &alice, &id).await;
    assert_eq!(status, 409, "a failed export has nothing to download");
    let resp = alice.get(app.url(&format!("/api/exports/{earlier}/download"))).send().await.unwrap();
    support::expect_problem(resp, 403, "permission-revoked").await;
    app.stop().await;
});

on_both_backends!(rows_changed_while_exporting_leave_the_file_equal_to_the_snapshot, |backend| {
    // Enough rows (about 4 MB) that the snapshot is still being read while the worker is held.
    let app = app_with_worker(backend, 30_000).await;
    let alice = app.login("alice@acme.test").await;
    let body = everything("orders");
    let before: Vec<(i64, String)> = {
        use sea_orm::{ConnectionTrait, Statement};
        let rows = app
            .db
            .query_all_raw(Statement::from_string(app.db.get_database_backend(), "SELECT id, notes FROM orders WHERE tenant_id = 'ten_acme' ORDER BY id".to_owned()))
            .await
            .unwrap();
        rows.iter().map(|r| (r.try_get_by_index::<i64>(0).unwrap(), r.try_get_by_index::<String>(1).unwrap())).collect()
    };
    let mut gate = Gate::close(&app.fault("mid_stream"));
    let id = create_id(&app, &alice, "snapshot", &body).await;
    gate.reached().await;
    app.exec("UPDATE orders SET notes = 'changed during the export' WHERE tenant_id = 'ten_acme'").await;
    app.exec("INSERT INTO orders (tenant_id, customer_id, placed_at, country, status, total_cents, currency, notes) SELECT tenant_id, customer_id, placed_at, country, status, total_cents, currency, 'inserted during the export' FROM orders WHERE tenant_id = 'ten_acme'").await;
    gate.open();
    let done = app.wait_terminal(&alice, &id, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "ready", "{done}");
    let (status, bytes) = download(&app, &alice, &id).await;
    assert_eq!(status, 200);
    let mut reader = csv::Reader::from_reader(&bytes[..]);
    let header: Vec<String> = reader.headers().unwrap().iter().map(str::to_owned).collect();
    let (id_col, notes_col) = (header.iter().position(|c| c == "order_id").unwrap(), header.iter().position(|c| c == "notes").unwrap());
    let got: Vec<(i64, String)> = reader.records().map(|r| r.unwrap()).map(|r| (r[id_col].parse().unwrap(), r[notes_col].to_owned())).collect();
    let defused: Vec<(i64, String)> = before
        .iter()
        .map(|(id, notes)| (*id, if notes.starts_with(['=', '+', '-', '@', '\t', '\r', '\n']) { format!("'{notes}") } else { notes.clone() }))
        .collect();
    assert_eq!(got.len(), before.len(), "no inserted row");
    assert_eq!(got, defused, "every row as it was when the snapshot began");
    assert_eq!(done["artifact"]["rows"], before.len());
    app.stop().await;
});

on_both_backends!(a_cancel_while_queued_ends_it_at_once_and_no_worker_ever_runs_it, |backend| {
    let mut app = TestApp::spawn(backend).await;
    let bob = app.login("bob@acme.test").await;
    let id = create_id(&app, &bob, "cancel-queued", &everything("orders")).await;
    let resp = bob.post(app.url(&format!("/api/exports/{id}/cancel"))).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let view: Value = resp.json().await.unwrap();
    assert_eq!(view["status"], "cancelled");
    app.start_worker(exportd::config::WorkerConfig { deployments: vec![], concurrency: 2 }).await;
    let again = bob.post(app.url(&format!("/api/exports/{id}/cancel"))).send().await.unwrap();
    assert_eq!(again.status(), 200, "cancelling a cancelled export answers the same");
    tokio::time::sleep(Duration::from_millis(1500)).await; // two claim polls: nothing claimable
    let claims = app.scalar(&format!("SELECT COUNT(*) FROM job_events WHERE job_id = '{id}' AND to_status = 'running'")).await;
    assert_eq!(claims, 0);
    let moved = app.scalar(&format!("SELECT COUNT(*) FROM job_events WHERE job_id = '{id}' AND from_status = 'queued' AND to_status = 'cancelled'")).await;
    assert_eq!(moved, 1);
    app.stop().await;
});

on_both_backends!(a_cancel_while_running_stops_the_worker_and_publishes_nothing, |backend| {
    let app = app_with_worker(backend, 2_000).await;
    let bob = app.login("bob@acme.test").await;
    let mut gate = Gate::close(&app.fault("mid_stream"));
    let id = create_id(&app, &bob, "cancel-running", &everything("orders")).await;
    gate.reached().await;
    let resp = bob.post(app.url(&format!("/api/exports/{id}/cancel"))).send().await.unwrap();
    assert_eq!(resp.status(), 202);
    assert_eq!(resp.json::<Value>().await.unwrap()["status"], "cancel_requested");
    let twice = bob.post(app.url(&format!("/api/exports/{id}/cancel"))).send().await.unwrap();
    assert_eq!(twice.status(), 202, "asking again while the worker stops answers the same");
    gate.open();
    let done = app.wait_terminal(&bob, &id, Duration::from_secs(20)).await;
    assert_eq!(done["status"], "cancelled", "{done}");
    assert!(done["artifact"].is_null() && done["download"].is_null() && done["error"].is_null(), "{done}");
    assert!(app.objects(&format!("exports/ten_acme/{id}")).is_empty());
    let (status, _) = download(&app, &bob, &id).await;
    assert_eq!(status, 409);
    app.stop().await;
});

on_both_backends!(a_cancel_in_the_middle_of_the_rows_leaves_every_snapshot_connection_usable_for_the_next_exports, |backend| {
    // Found in the browser: a cancel while PostgreSQL was still streaming the COPY handed its
    // connection back to the pool inside the COPY, and every later export on it failed.
    let app = app_with_worker(backend, 30_000).await;
    let bob = app.login("bob@acme.test").await;
    // Each chunk waits as the browser tests' server does, and the cancel comes while the rows
    // are still being read (a second chunk seen).
    fail::cfg(app.fault("each_chunk"), "sleep(200)").unwrap();
    for n in 0..3 {
        let mut gate = Gate::close(&app.fault("mid_stream"));
        let id = create_id(&app, &bob, &format!("cancel-mid-rows-{n}"), &everything("orders")).await;
        gate.reached().await;
        gate.open();
        drop(gate);
        let resp = bob.post(app.url(&format!("/api/exports/{id}/cancel"))).send().await.unwrap();
        assert_eq!(resp.status(), 202);
        let done = app.wait_terminal(&bob, &id, Duration::from_secs(30)).await;
        assert_eq!(done["status"], "cancelled", "{done}");
    }
    fail::remove(app.fault("each_chunk"));
    for n in 0..4 {
        let next = create_id(&app, &bob, &format!("after-cancel-{n}"), &everything("orders")).await;
        let done = app.wait_terminal(&bob, &next, Duration::from_secs(60)).await;
        assert_eq!(done["status"], "ready", "export {n} after the cancel: {done}");
        assert_eq!(done["attempt"], 1, "export {n} after the cancel needed a retry: {done}");
    }
    app.stop().await;
});

on_both_backends!(a_cancel_after_ready_is_refused_and_changes_nothing, |backend| {
    let app = app_with_worker(backend, 200).await;
    let bob = app.login("bob@acme.test").await;
    let id = create_id(&app, &bob, "cancel-ready", &everything("orders")).await;
    let done = app.wait_terminal(&bob, &id, Duration::from_secs(20)).await;
    assert_eq!(done["status"], "ready");
    let resp = bob.post(app.url(&format!("/api/exports/{id}/cancel"))).send().await.unwrap();
    let problem = support::expect_problem(resp, 409, "export-already-finished").await;
    assert_eq!(problem["export"]["status"], "ready");
    let after = app.wait_terminal(&bob, &id, Duration::from_secs(5)).await;
    assert_eq!(after["artifact"], done["artifact"]);
    let (status, bytes) = download(&app, &bob, &id).await;
    assert_eq!(status, 200);
    assert_eq!(sha256(&bytes), done["artifact"]["sha256"].as_str().unwrap());
    app.stop().await;
});

on_both_backends!(a_cancel_racing_the_release_fifty_times_ends_each_export_one_way_or_the_other, |backend| {
    let app = app_with_worker(backend, 100).await;
    let bob = app.login("bob@acme.test").await;
    let (mut cancelled, mut ready) = (Vec::new(), Vec::new());
    for round in 0..50 {
        let mut gate = Gate::close(&app.fault("before_release"));
        let id = create_id(&app, &bob, &format!("race-{round}"), &everything("orders")).await;
        gate.reached().await;
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(2));
        let cancel = {
            let (barrier, bob, url) = (barrier.clone(), bob.clone(), app.url(&format!("/api/exports/{id}/cancel")));
            tokio::spawn(async move {
                barrier.wait().await;
                bob.post(url).send().await.unwrap().status().as_u16()
            })
        };
        barrier.wait().await;
        // Both sides start together; the worker's side starts 0–4.5 ms later in turn, so the
        // rounds cover both orders of the two conditional updates.
        tokio::time::sleep(Duration::from_micros(500 * (round % 10))).await;
        gate.open();
        let status = cancel.await.unwrap();
        let done = app.wait_terminal(&bob, &id, Duration::from_secs(20)).await;
        match done["status"].as_str() {
            Some("cancelled") => {
                assert!(status == 202 || status == 200, "round {round}: cancel answered {status}");
                assert!(done["artifact"].is_null(), "round {round}: {done}");
                cancelled.push(id);
            }
            Some("ready") => {
                assert_eq!(status, 409, "round {round}: the release won, so the cancel is refused");
                assert!(done["artifact"].is_object(), "round {round}: {done}");
                ready.push((id, done["artifact"]["sha256"].as_str().unwrap().to_owned()));
            }
            other => panic!("round {round}: ended {other:?}: {done}"),
        }
    }
    eprintln!("cancel/release race: {} cancelled, {} ready", cancelled.len(), ready.len());
    assert!(!cancelled.is_empty() && !ready.is_empty(), "the rounds covered both outcomes");
    // What a cancelled export published before it lost the race is the janitor's to remove.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let stray: Vec<String> = cancelled.iter().flat_map(|id| app.objects(&format!("exports/ten_acme/{id}"))).collect();
        if stray.is_empty() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "cancelled exports still have files: {stray:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (id, sha) in &ready {
        assert_eq!(app.objects(&format!("exports/ten_acme/{id}")), vec![format!("exports/ten_acme/{id}/{sha}.csv")]);
    }
    app.stop().await;
});

on_both_backends!(a_store_outage_waits_and_retries_and_a_recovered_export_shows_no_error, |backend| {
    let app = app_with_worker(backend, 200).await;
    let bob = app.login("bob@acme.test").await;
    app.store_down();
    let id = create_id(&app, &bob, "outage", &everything("orders")).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let waiting = loop {
        let view: Value = bob.get(app.url(&format!("/api/exports/{id}"))).send().await.unwrap().json().await.unwrap();
        if view["status"] == "retry_wait" {
            break view;
        }
        assert!(tokio::time::Instant::now() < deadline, "never retry_wait: {view}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(waiting["next_attempt_at"].is_string(), "{waiting}");
    assert_eq!(waiting["error"]["code"], "storage_unavailable");
    assert_eq!(waiting["error"]["retryable"], true);
    assert!(waiting["error"]["support_ref"].as_str().unwrap().starts_with("ref_"));
    let message = waiting["error"]["message"].as_str().unwrap();
    assert!(!message.contains('/') && !message.contains("objects"), "no store detail in the message: {message}");
    app.store_up();
    let done = app.wait_terminal(&bob, &id, Duration::from_secs(30)).await;
    assert_eq!(done["status"], "ready", "{done}");
    assert!(done["error"].is_null(), "no error is left once ready: {done}");
    assert!(done["next_attempt_at"].is_null());
    let attempts = done["attempt"].as_i64().unwrap();
    assert!(attempts >= 2, "{done}");
    // The audit trail: each move with the state it left and the generation it moved under.
    use sea_orm::{ConnectionTrait, Statement};
    let rows = app
        .db
        .query_all_raw(Statement::from_string(
            app.db.get_database_backend(),
            format!("SELECT from_status, to_status, CAST(generation AS BIGINT) FROM job_events WHERE job_id = '{id}' AND (from_status IS NULL OR from_status <> to_status) ORDER BY id"),
        ))
        .await
        .unwrap();
    let trail: Vec<(Option<String>, String, i64)> = rows.iter().map(|r| (r.try_get_by_index(0).unwrap(), r.try_get_by_index(1).unwrap(), r.try_get_by_index(2).unwrap())).collect();
    let mut expected = vec![(None, "queued".to_owned(), 0)];
    for g in 1..attempts {
        let from = if g == 1 { "queued" } else { "retry_wait" };
        expected.push((Some(from.to_owned()), "running".to_owned(), g));
        expected.push((Some("running".to_owned()), "retry_wait".to_owned(), g));
    }
    let from = if attempts == 1 { "queued" } else { "retry_wait" };
    expected.push((Some(from.to_owned()), "running".to_owned(), attempts));
    expected.push((Some("running".to_owned()), "ready".to_owned(), attempts));
    assert_eq!(trail, expected);
    app.stop().await;
});

on_both_backends!(a_store_that_stays_down_fails_the_export_once_its_attempts_are_spent, |backend| {
    let app = TestApp::start(Options { worker: true, adjust: |c| c.max_attempts = 3, ..Options::new(backend) }).await;
    let bob = app.login("bob@acme.test").await;
    app.store_down();
    let id = create_id(&app, &bob, "outage-forever", &everything("orders")).await;
    let done = app.wait_terminal(&bob, &id, Duration::from_secs(30)).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "storage_unavailable");
    assert_eq!(done["error"]["retryable"], true);
    assert_eq!(done["attempt"], 3);
    assert!(done["next_attempt_at"].is_null());
    app.store_up();
    assert!(app.objects("").is_empty(), "nothing written: {:?}", app.objects(""));
    app.stop().await;
});

on_both_backends!(a_duplicate_delivery_of_a_finished_job_changes_nothing, |backend| {
    use sea_orm::EntityTrait;
    let app = app_with_worker(backend, 200).await;
    let bob = app.login("bob@acme.test").await;
    let id = create_id(&app, &bob, "delivered-twice", &everything("orders")).await;
    assert_eq!(app.wait_terminal(&bob, &id, Duration::from_secs(20)).await["status"], "ready");
    let before = exportd::entities::jobs::Entity::find_by_id(id.clone()).one(&app.db).await.unwrap().unwrap();
    let events = app.scalar(&format!("SELECT COUNT(*) FROM job_events WHERE job_id = '{id}'")).await;
    let objects = app.objects("");
    // The same claim delivered again, to a worker of its deployment and to one of another.
    for deployments in [vec![], vec!["ksa".to_owned()], vec!["uae".to_owned()]] {
        let ctx = app.worker_context(exportd::config::WorkerConfig { deployments, concurrency: 1 }).await;
        exportd::worker::jobs::export_csv::run(&ctx, before.clone()).await;
    }
    let after = exportd::entities::jobs::Entity::find_by_id(id.clone()).one(&app.db).await.unwrap().unwrap();
    assert_eq!(after, before);
    assert_eq!(app.scalar(&format!("SELECT COUNT(*) FROM job_events WHERE job_id = '{id}'")).await, events);
    assert_eq!(app.objects(""), objects);
    app.stop().await;
});

/// The demo's catalog, but its `orders.placed_at` column reads an instant past the year 9999,
/// which no RFC 3339 cell can carry.
static BEYOND_THE_CALENDAR: std::sync::LazyLock<std::sync::Arc<exportd::catalog::Catalog>> = std::sync::LazyLock::new(|| {
    let demo = exportd::catalog::DEMO.replace(r#"{ name = "placed_at", sql = "o.placed_at","#, r#"{ name = "placed_at", sql = "o.placed_at * 1000","#);
    assert_ne!(demo, exportd::catalog::DEMO, "the demo's placed_at column is where this test expects it");
    std::sync::Arc::new(exportd::catalog::parse("beyond.toml", &demo).expect("reads"))
});

on_both_backends!(data_that_cannot_be_written_as_the_file_promises_fails_the_export_at_once_without_retries, |backend| {
    // The data the file cannot carry: text that is not UTF-8 (SQLite stores what it is given), or
    // on PostgreSQL, which stores no such text, an instant outside the calendar. (A NULL is an
    // empty cell: written, not refused.)
    let app = TestApp::start(Options {
        worker: true,
        orders: 200,
        adjust: |config| {
            if config.database_url.starts_with("postgres") {
                config.catalog = BEYOND_THE_CALENDAR.clone();
            }
        },
        ..Options::new(backend)
    })
    .await;
    let bob = app.login("bob@acme.test").await;
    let first = "(SELECT MIN(id) FROM orders WHERE tenant_id = 'ten_acme')";
    if backend == support::Backend::Sqlite {
        app.exec(&format!("UPDATE orders SET notes = CAST(X'C328' AS TEXT) WHERE id = {first}")).await;
    }
    let id = create_id(&app, &bob, "unwritable", &everything("orders")).await;
    let done = app.wait_terminal(&bob, &id, Duration::from_secs(30)).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "invalid_data", "{done}");
    assert_eq!(done["error"]["retryable"], false, "{done}");
    assert_eq!(done["attempt"], 1, "the same data fails the same way: not retried: {done}");
    assert!(app.objects("exports").is_empty() && app.objects("staging").is_empty(), "{:?}", app.objects(""));
    app.stop().await;
});
