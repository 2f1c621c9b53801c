//! Checkpointed exports in one process (SPEC §5.1), held at their part boundaries by fault
//! points: each part shows its own snapshot and no transaction stays open between parts; a store
//! outage resumes at the part it broke; a cancel stops at the next boundary and the parts are
//! swept; an expired bundle's parts are deleted. Also the request's new fields and the part
//! downloads' answers.

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use support::procs::{eventually, everything};
use support::holders::Holder;
use support::{bundles, expect_problem, Backend, Gate, Options, TestApp, Turnstile};

const LONG: Duration = Duration::from_secs(60);

/// 3,000 orders per tenant in parts of 500: six parts.
fn options(backend: Backend) -> Options {
    Options { worker: true, orders: 3_000, adjust: |c| c.part_rows = 500, ..Options::new(backend) }
}

fn checkpointed() -> Value {
    let mut body = everything("orders");
    body["consistency"] = "checkpointed".into();
    body
}

async fn create(app: &TestApp, client: &reqwest::Client, key: &str, body: &Value) -> String {
    let resp = app.create(client, key, body).await;
    assert_eq!(resp.status(), 202);
    resp.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
}

async fn view(app: &TestApp, client: &reqwest::Client, id: &str) -> Value {
    client.get(app.url(&format!("/api/exports/{id}"))).send().await.unwrap().json().await.unwrap()
}

/// Follows `path` (a `…/download`) and returns the file.
async fn download(app: &TestApp, client: &reqwest::Client, path: &str) -> (reqwest::header::HeaderMap, bytes::Bytes) {
    let resp = client.get(app.url(path)).send().await.unwrap();
    assert_eq!(resp.status(), 303, "{path}");
    let link = resp.headers()["location"].to_str().unwrap().to_owned();
    let file = client.get(app.url(&link)).send().await.unwrap();
    assert_eq!(file.status(), 200, "{link}");
    (file.headers().clone(), file.bytes().await.unwrap())
}

/// The demo tenant's order keys, in order.
/// The bundle of the ready export `done` downloads whole and checked (parts of 500 rows), and
/// holds every order of acme once, in key order.
async fn every_row_once_in_key_order(app: &TestApp, client: &reqwest::Client, done: &Value) {
    let id = done["id"].as_str().unwrap_or_else(|| panic!("{done}"));
    let (_, bytes) = download(app, client, &format!("/api/exports/{id}/download")).await;
    let (_, rows) = bundles::check(&bytes, done, 500);
    assert_eq!(bundles::keys(&rows), keys(app).await, "every row once, in key order");
}

async fn keys(app: &TestApp) -> Vec<i64> {
    let backend = app.db.get_database_backend();
    let found = sea_orm::ConnectionTrait::query_all_raw(&app.db, sea_orm::Statement::from_string(backend, "SELECT id FROM orders WHERE tenant_id = 'ten_acme' ORDER BY id")).await.unwrap();
    found.iter().map(|r| r.try_get_by_index::<i64>(0).unwrap()).collect()
}

/// `(seq, generation)` of the job's checkpoints.
async fn checkpoints(app: &TestApp, id: &str) -> Vec<(i64, i64)> {
    let backend = app.db.get_database_backend();
    let sql = format!("SELECT CAST(seq AS BIGINT), CAST(generation AS BIGINT) FROM job_checkpoints WHERE job_id = '{id}' ORDER BY seq");
    let found = sea_orm::ConnectionTrait::query_all_raw(&app.db, sea_orm::Statement::from_string(backend, sql)).await.unwrap();
    found.iter().map(|r| (r.try_get_by_index::<i64>(0).unwrap(), r.try_get_by_index::<i64>(1).unwrap())).collect()
}

/// Transactions of other sessions that are open on the database now and began before
/// `since_ms` (epoch milliseconds, the database's clock): idle inside a transaction, or reading
/// (PostgreSQL's `pg_stat_activity`).
async fn transactions_open_since(app: &TestApp, since_ms: i64) -> Vec<String> {
    let sql = format!(
        "SELECT CONCAT(pid, ' ', state, ' ', xact_start, ' ', LEFT(query, 60)) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() \
         AND xact_start IS NOT NULL AND xact_start < to_timestamp({since_ms} / 1000.0) AND (state LIKE 'idle in transaction%' OR query LIKE 'COPY (%' OR query LIKE 'SELECT o.id FROM%')"
    );
    let found = sea_orm::ConnectionTrait::query_all_raw(&app.db, sea_orm::Statement::from_string(sea_orm::DbBackend::Postgres, sql)).await.unwrap();
    found.iter().map(|r| r.try_get_by_index::<String>(0).unwrap()).collect()
}

fn millis(rfc3339: &Value) -> i64 {
    rfc3339.as_str().unwrap().parse::<jiff::Timestamp>().unwrap().as_millisecond()
}

on_both_backends!(each_part_shows_its_own_snapshot_and_no_transaction_of_the_export_stays_open_between_parts, |backend| {
    let app = TestApp::start(options(backend)).await;
    let bob = app.login("bob@acme.test").await;
    let mut boundary = Turnstile::close(&app.fault("after_checkpoint"));
    let before = keys(&app).await;
    assert_eq!(before.len(), 3_000);
    let created_at = exportd::db::db_now_ms(&app.db).await.unwrap();
    let id = create(&app, &bob, "moments", &checkpointed()).await;

    // After part 1 (while part 2 may be being read, and part 3 read ahead): rows change in parts
    // already read and parts not read yet, rows are deleted and inserted.
    assert!(boundary.reached_within(LONG).await, "part 1 checkpointed");
    let running = view(&app, &bob, &id).await;
    assert_eq!(running["status"], "running", "{running}");
    assert_eq!(running["progress"]["parts_done"], 1, "{running}");
    assert_eq!(running["progress"]["parts_expected"], 6, "{running}");
    // Part 1's rows, and perhaps some of part 2's, read ahead.
    let shown = running["progress"]["rows_written"].as_i64().unwrap_or_default();
    assert!((500..=1_000).contains(&shown), "{running}");
    let (early, late, gone) = (before[10], before[1_700], before[2_100]);
    app.exec(&format!("UPDATE orders SET notes = 'changed between parts' WHERE id IN ({early}, {late})")).await;
    app.exec(&format!("DELETE FROM orders WHERE id = {gone}")).await;
    app.exec(
        "INSERT INTO orders (tenant_id, customer_id, placed_at, country, status, total_cents, currency, notes) \
         SELECT tenant_id, customer_id, placed_at, country, status, total_cents, currency, 'inserted during the export' FROM orders WHERE tenant_id = 'ten_acme' AND id < 100",
    )
    .await;
    let changed_at = exportd::db::db_now_ms(&app.db).await.unwrap();
    // The worker reads part n + 1 while it checkpoints part n, and once part n + 1's last key is
    // known, begins part n + 2's read: at the boundary after part n, the reads that may be open
    // are those of parts n + 1 and n + 2, both begun after the boundary before the one before.
    // No transaction of the export lives across three boundaries.
    let mut passes = 0;
    let mut boundaries = [created_at, created_at];
    loop {
        let now = exportd::db::db_now_ms(&app.db).await.unwrap();
        if backend == Backend::Postgres {
            let old = transactions_open_since(&app, boundaries[0]).await;
            assert_eq!(old, Vec::<String>::new(), "at the boundary after part {}, a transaction begun before the one after part {} is open", passes + 1, passes.max(1) - 1);
        }
        boundaries = [boundaries[1], now];
        boundary.pass();
        passes += 1;
        if !boundary.reached_within(Duration::from_secs(20)).await {
            break;
        }
    }
    assert_eq!(passes, 6, "one boundary per part");
    let done = app.wait_terminal(&bob, &id, LONG).await;
    assert_eq!(done["status"], "ready", "{done}");

    let (_, bytes) = download(&app, &bob, &format!("/api/exports/{id}/download")).await;
    let (unzipped, rows) = bundles::check(&bytes, &done, 500);
    let expected: Vec<i64> = before.iter().copied().filter(|k| *k != gone).collect();
    assert_eq!(bundles::keys(&rows), expected, "every row once, in key order; the deleted row absent, and the rows inserted above max_key absent");
    let header: Vec<String> = bundles::records(&bundles::csv_text(&unzipped.parts[0].0, &unzipped.parts[0].1)).0;
    let notes = header.iter().position(|h| h == "notes").expect("a notes column");
    let note_of = |key: i64| rows.iter().find(|r| r[0] == key.to_string()).map(|r| r[notes].to_owned()).unwrap();
    assert_ne!(note_of(early), "changed between parts", "a row of part 1 shows part 1's moment");
    assert_eq!(note_of(late), "changed between parts", "a row of part 4 shows part 4's moment");
    assert!(rows.iter().all(|r| &r[notes] != "inserted during the export"));

    let parts = unzipped.manifest["parts"].as_array().unwrap();
    assert!(millis(&parts[0]["read_at"]) <= changed_at, "part 1 was read before the change: {}", parts[0]);
    for part in &parts[3..] {
        assert!(millis(&part["read_at"]) >= changed_at, "parts from 4 on were read after it: {part}");
    }
    assert!(parts.windows(2).all(|w| millis(&w[0]["read_at"]) <= millis(&w[1]["read_at"])), "each part has its own, later moment");
    assert!(parts.iter().all(|p| p["attempt"] == 1 && p["generation"] == 1), "one attempt read them all");
    drop(boundary);
    app.stop().await;
});

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_postgresql_part_3_is_read_while_part_1_is_still_being_checkpointed() {
    let app = TestApp::start(options(Backend::Postgres)).await;
    let bob = app.login("bob@acme.test").await;
    let ahead = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = ahead.clone();
    fail::cfg_callback(app.fault("part_read_ahead"), move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    })
    .unwrap();
    let read_again = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sorted = read_again.clone();
    fail::cfg_callback(app.fault("part_out_of_key_order"), move || {
        sorted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    })
    .unwrap();
    let mut boundary = Gate::close(&app.fault("after_checkpoint"));
    let id = create(&app, &bob, "ahead", &checkpointed()).await;
    boundary.reached().await;
    // Part 2 was read ahead while part 1 streamed. Once part 1 was staged and went to be
    // checkpointed (held now), part 3's read began beside part 2's, on the pool's idle
    // connection. Part 4's cannot begin before part 2 goes to be checkpointed, after part 1.
    let deadline = tokio::time::Instant::now() + LONG;
    while ahead.load(std::sync::atomic::Ordering::SeqCst) < 2 {
        assert!(tokio::time::Instant::now() < deadline, "part 3 was not read while part 1's checkpoint was held");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Two, or three when a part came out of key order and was read again, sorted (once an
    // attempt: with this little data the planner may join in another order), which begins the
    // read after it anew.
    let held = ahead.load(std::sync::atomic::Ordering::SeqCst);
    assert!((2..=3).contains(&held), "parts 2 and 3 read ahead, no more: {held}");
    assert_eq!(checkpoints(&app, &id).await, vec![(1, 1)], "part 1 alone is checkpointed");
    boundary.open();
    let done = app.wait_terminal(&bob, &id, LONG).await;
    assert_eq!(done["status"], "ready", "{done}");
    // Once the checkpoint goes on, a part begins while the part before it streams, or after it
    // when that part has already been staged: how many more begin ahead depends on the timing.
    // A part read again, sorted (at most once an attempt), may begin ahead once more.
    let read_ahead = ahead.load(std::sync::atomic::Ordering::SeqCst);
    let read_again = read_again.load(std::sync::atomic::Ordering::SeqCst);
    assert!(read_again <= 1, "a part is read again sorted at most once an attempt: {read_again}");
    assert!((2..=5 + read_again).contains(&read_ahead), "{read_ahead} parts read ahead of six, {read_again} read again");
    every_row_once_in_key_order(&app, &bob, &done).await;
    fail::remove(app.fault("part_read_ahead"));
    fail::remove(app.fault("part_out_of_key_order"));
    drop(boundary);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_postgresql_one_job_at_a_time_reads_ahead_and_another_job_meanwhile_reads_each_part_in_its_turn() {
    let app = TestApp::start(options(Backend::Postgres)).await;
    let bob = app.login("bob@acme.test").await;
    // The worker runs two jobs on three snapshot connections: one each, and one spare.
    let mut ahead = Gate::close(&app.fault("part_read_ahead"));
    let first = create(&app, &bob, "holds-the-spare", &checkpointed()).await;
    ahead.reached().await;
    // The first export's part 2, read ahead, is held at the gate with the spare. The second
    // export finds a connection idle but not the spare: it reads each part in its turn (never
    // reaching the gate) and finishes while the first is still held. Before the spare was
    // counted, it read ahead on the idle connection too and was held as well.
    let second = create(&app, &bob, "its-own-reads", &checkpointed()).await;
    let done = app.wait_terminal(&bob, &second, LONG).await;
    assert_eq!(done["status"], "ready", "the second export read ahead as well and was held: {done}");
    ahead.open();
    let done = app.wait_terminal(&bob, &first, LONG).await;
    assert_eq!(done["status"], "ready", "{done}");
    every_row_once_in_key_order(&app, &bob, &done).await;
    drop(ahead);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_postgresql_a_part_read_ahead_blocked_on_a_lock_held_from_psql_ends_with_its_cancelled_export() {
    let app = TestApp::start(options(Backend::Postgres)).await;
    let bob = app.login("bob@acme.test").await;
    let mut before = Gate::close(&app.fault("before_part_read_ahead"));
    let id = create(&app, &bob, "blocked-ahead", &checkpointed()).await;
    before.reached().await;
    // Part 1's read goes on and commits; only then is the lock taken, so the statement that
    // waits for it is part 2's, begun ahead once the gate opens.
    let lock = Holder::psql(app.database_url(), "LOCK TABLE orders IN ACCESS EXCLUSIVE MODE;").await;
    before.open();
    let waiting = "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()";
    eventually("part 2's read ahead waits for the lock", LONG, || async { app.scalar(waiting).await > 0 }).await;
    let cancelled = std::time::Instant::now();
    let resp = bob.post(app.url(&format!("/api/exports/{id}/cancel"))).send().await.unwrap();
    assert_eq!(resp.status(), 202);
    let done = app.wait_terminal(&bob, &id, Duration::from_secs(15)).await;
    assert_eq!(done["status"], "cancelled", "{done}");
    assert!(cancelled.elapsed() < Duration::from_secs(15), "the cancel took {:?}", cancelled.elapsed());
    // A stop repeats its cancel until the read ends (a cancel lands only on a running
    // statement), within STOP_WAIT's 5 s.
    let left_waiting = "SELECT application_name || ': ' || left(query, 60) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = app.texts(left_waiting).await;
        if left.is_empty() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the read ahead's statement is still waiting for the lock: {left:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    lock.release().await;
    drop(before);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_postgresql_the_demo_index_alone_can_find_a_parts_last_key() {
    use exportd::worker::snapshot::{KeyRange, PartOrder, Plan};
    use sea_orm::{ConnectionTrait, Statement, TransactionTrait};
    let app = TestApp::start(Options { worker: false, ..options(Backend::Postgres) }).await;
    // As autovacuum leaves a table whose rows have not changed since: every page all-visible.
    app.exec("VACUUM ANALYZE orders").await;
    let (first, last) = (app.scalar("SELECT MIN(id) FROM orders WHERE tenant_id = 'ten_acme'").await, app.scalar("SELECT MAX(id) FROM orders WHERE tenant_id = 'ten_acme'").await);
    // The query a worker asks for a part's end: the 500th of the tenant's keys after the part
    // before's last, in the request's time, up to the export's highest key.
    let catalog = exportd::catalog::Catalog::demo().unwrap();
    let resolved = app::ResolvedContract {
        from: "1970-01-01T00:00:00Z".into(),
        to: "2100-01-01T00:00:00Z".into(),
        timezone: "UTC".into(),
        columns: vec!["order_id".into(), "customer_name".into(), "total".into()],
        deployment: "ksa".into(),
    };
    let plan = Plan::new(catalog.report("orders").unwrap(), &app::ExportRequest::new("orders"), &resolved, "ten_acme", sea_orm::DbBackend::Postgres).unwrap();
    let query = plan.part(KeyRange { after: Some(first + 10), max_key: last, limit: 500 }, PartOrder::Checked).part_end_sql().unwrap();
    // A table this small is read whole by choice: with the scans that read the whole table
    // switched off, the plan shows whether an index alone can serve the query.
    let txn = app.db.begin().await.unwrap();
    txn.execute_unprepared("SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off").await.unwrap();
    let rows = txn.query_all_raw(Statement::from_string(sea_orm::DbBackend::Postgres, format!("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {query}"))).await.unwrap();
    let explained: Vec<String> = rows.iter().map(|r| r.try_get_by_index::<String>(0).unwrap()).collect();
    let explained = explained.join("\n");
    txn.rollback().await.unwrap();
    assert!(explained.contains("Index Only Scan using orders_tenant_key on orders"), "{explained}");
    assert!(explained.contains("Heap Fetches: 0"), "no row read from the table: {explained}");
    app.stop().await;
}

on_both_backends!(a_store_outage_during_part_3_waits_to_retry_and_resumes_at_part_3_not_at_part_1, |backend| {
    let app = TestApp::start(Options { adjust: |c| { c.part_rows = 500; c.max_attempts = 20; }, ..options(backend) }).await;
    let bob = app.login("bob@acme.test").await;
    let mut gate = Gate::close_at(&app.fault("after_checkpoint"), 2);
    let id = create(&app, &bob, "outage", &checkpointed()).await;
    gate.reached().await;
    app.store_down();
    gate.open();
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let v = view(&app, &bob, &id).await;
        if v["status"] == "retry_wait" {
            assert_eq!(v["error"]["code"], "storage_unavailable", "{v}");
            break;
        }
        assert_ne!(v["status"], "ready", "the store was down: {v}");
        assert!(tokio::time::Instant::now() < deadline, "no retry_wait: {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    app.store_up();
    // Through the next claim and to the end, the progress shown never goes back: at least the
    // two checkpointed parts' rows, and never fewer than shown before.
    let mut shown = 1_000;
    let done = loop {
        let v = view(&app, &bob, &id).await;
        let rows = v["progress"]["rows_written"].as_i64().unwrap_or_else(|| panic!("{v}"));
        assert!(rows >= shown, "rows_written went back from {shown} to {rows}: {v}");
        shown = rows;
        if v["status"] == "ready" || v["status"] == "failed" {
            break v;
        }
        assert!(tokio::time::Instant::now() < deadline, "not finished: {v}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(done["status"], "ready", "{done}");
    let cps = checkpoints(&app, &id).await;
    assert_eq!(cps.len(), 6, "{cps:?}");
    assert_eq!(&cps[..2], &[(1, 1), (2, 1)], "parts 1 and 2 were kept");
    let resumed = cps[2].1;
    assert!(resumed > 1 && cps[2..].iter().all(|(_, g)| *g == resumed), "one later attempt did parts 3 to 6: {cps:?}");
    let retried = app
        .scalar(&format!("SELECT COUNT(*) FROM job_events WHERE job_id = '{id}' AND from_status = 'running' AND to_status = 'retry_wait' AND generation = 1"))
        .await;
    assert_eq!(retried, 1, "the outage is in the audit trail");
    every_row_once_in_key_order(&app, &bob, &done).await;
    app.stop().await;
});

on_both_backends!(a_cancel_stops_a_checkpointed_export_at_the_next_part_boundary_and_its_parts_are_swept, |backend| {
    let app = TestApp::start(options(backend)).await;
    let bob = app.login("bob@acme.test").await;
    let mut gate = Gate::close(&app.fault("after_checkpoint"));
    let id = create(&app, &bob, "cancelled", &checkpointed()).await;
    gate.reached().await;
    let resp = bob.post(app.url(&format!("/api/exports/{id}/cancel"))).send().await.unwrap();
    assert_eq!(resp.status(), 202, "running: cancel is asked");
    gate.open();
    let done = app.wait_terminal(&bob, &id, LONG).await;
    assert_eq!(done["status"], "cancelled", "{done}");
    assert_eq!(checkpoints(&app, &id).await, vec![(1, 1)], "no part after the boundary where the cancel was seen");
    let prefix = format!("exports/ten_acme/{id}");
    let deadline = tokio::time::Instant::now() + LONG;
    while !(app.objects(&prefix).is_empty() && app.objects("staging").is_empty()) {
        assert!(tokio::time::Instant::now() < deadline, "parts not swept: {:?} {:?}", app.objects(&prefix), app.objects("staging"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    app.stop().await;
});

on_both_backends!(an_expired_bundle_deletes_its_manifest_and_parts_and_reads_as_expired, |backend| {
    let app = TestApp::start(options(backend)).await;
    let bob = app.login("bob@acme.test").await;
    let id = create(&app, &bob, "expiring", &checkpointed()).await;
    let done = app.wait_terminal(&bob, &id, LONG).await;
    assert_eq!(done["status"], "ready", "{done}");
    let prefix = format!("exports/ten_acme/{id}");
    assert_eq!(app.objects(&prefix).len(), 7, "the manifest and six parts: {:?}", app.objects(&prefix));
    let part_link = bob.get(app.url(&format!("/api/exports/{id}/parts/2/download"))).send().await.unwrap().headers()["location"].to_str().unwrap().to_owned();
    let bundle_link = bob.get(app.url(&format!("/api/exports/{id}/download"))).send().await.unwrap().headers()["location"].to_str().unwrap().to_owned();

    app.exec(&format!("UPDATE jobs SET artifact_expires_at = 1 WHERE id = '{id}'")).await;
    let deadline = tokio::time::Instant::now() + LONG;
    while view(&app, &bob, &id).await["artifact"]["expired"] != true {
        assert!(tokio::time::Instant::now() < deadline, "not expired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(app.objects(&prefix), Vec::<String>::new(), "the manifest and every part are deleted");
    let expired = view(&app, &bob, &id).await;
    assert!(expired["download"].is_null(), "{expired}");
    expect_problem(bob.get(app.url(&format!("/api/exports/{id}/download"))).send().await.unwrap(), 410, "artifact-expired").await;
    expect_problem(bob.get(app.url(&format!("/api/exports/{id}/parts/2/download"))).send().await.unwrap(), 410, "artifact-expired").await;
    expect_problem(bob.get(app.url(&part_link)).send().await.unwrap(), 410, "artifact-expired").await;
    expect_problem(bob.get(app.url(&bundle_link)).send().await.unwrap(), 410, "artifact-expired").await;
    app.stop().await;
});

on_both_backends!(consistency_and_compression_are_validated_and_enter_the_fingerprint_only_when_not_default, |backend| {
    let app = TestApp::start(Options { worker: false, ..Options::new(backend) }).await;
    let bob = app.login("bob@acme.test").await;
    let mut bad = json!({"report": "orders", "consistency": "eventual"});
    let problem = expect_problem(app.create(&bob, "bad-consistency", &bad).await, 422, "invalid-request").await;
    assert_eq!(problem["errors"][0]["pointer"], "/consistency", "{problem}");
    bad = json!({"report": "orders", "options": {"compression": "zip"}});
    let problem = expect_problem(app.create(&bob, "bad-compression", &bad).await, 422, "invalid-request").await;
    assert_eq!(problem["errors"][0]["pointer"], "/options/compression", "{problem}");

    let plain = json!({"report": "orders"});
    let first = app.create(&bob, "k1", &plain).await;
    assert_eq!(first.status(), 202);
    let first: Value = first.json().await.unwrap();
    assert_eq!(first["request"]["consistency"], "snapshot");
    assert_eq!(first["request"]["options"]["compression"], "none");
    let explicit = json!({"report": "orders", "consistency": "snapshot", "options": {"compression": "none", "bom": false}});
    let replay = app.create(&bob, "k1", &explicit).await;
    assert_eq!(replay.status(), 202, "the defaults spelled out are the same intent");
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    for changed in [json!({"report": "orders", "consistency": "checkpointed"}), json!({"report": "orders", "options": {"compression": "gzip"}})] {
        expect_problem(app.create(&bob, "k1", &changed).await, 422, "idempotency-key-reused").await;
    }
    let stored = app.scalar("SELECT COUNT(*) FROM jobs WHERE fingerprint IS NOT NULL").await;
    assert_eq!(stored, 1, "the refused requests stored nothing");

    // The parts of an export that has none, or not yet, or that do not exist.
    let id = first["id"].as_str().unwrap();
    let big = create(&app, &bob, "k2", &json!({"report": "orders", "consistency": "checkpointed", "options": {"compression": "gzip"}})).await;
    expect_problem(bob.get(app.url(&format!("/api/exports/{big}/parts/1/download"))).send().await.unwrap(), 409, "export-not-ready").await;
    for n in ["0", "-1", "abc", "1.5", "+1", "99999999999"] {
        expect_problem(bob.get(app.url(&format!("/api/exports/{big}/parts/{n}/download"))).send().await.unwrap(), 404, "export-not-found").await;
    }
    expect_problem(bob.get(app.url(&format!("/api/exports/{id}/parts/1/download"))).send().await.unwrap(), 404, "export-not-found").await;
    expect_problem(bob.get(app.url("/api/exports/exp_0123456789abcdef0123456789abcdef/parts/1/download")).send().await.unwrap(), 404, "export-not-found").await;
    app.stop().await;
});
