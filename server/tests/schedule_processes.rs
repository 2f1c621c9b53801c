//! Schedules run by real `exportd` processes on PostgreSQL (contract §15, case 27): every
//! `serve` and `worker` runs a scheduler loop, none leads, and the key
//! `schedule:{id}:{window start}` makes each window once whatever the loops do. A due time is
//! made to arrive during the test by moving the schedule's `active_since` (or `last_due`) back,
//! which is what the loops compare with the database's clock.

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use support::procs::{eventually, metric, metrics_page, rows, scalar, text, Api, Prepared, Proc};
use support::Backend;

const LONG: Duration = Duration::from_secs(60);
const DAY_MS: i64 = 86_400_000;

/// Loops that look every 100 ms and say what they make.
const FAST: (&str, &str) = ("EXPORTD_SCHEDULER_MS", "100");
const LOGS: (&str, &str) = ("EXPORTD_LOG", "warn,exportd::fault=info,exportd::lifecycle=info,exportd::schedules=debug");

/// A daily schedule of yesterday's orders, due at a time of day twelve hours from now (so no
/// due time falls in the test by itself).
fn daily() -> Value {
    let hour = (jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC).hour() + 12) % 24;
    json!({
        "report": "orders", "format": "csv", "timezone": "UTC",
        "cadence": {"every": "day", "at": format!("{hour:02}:00")},
        "window": "previous_day",
    })
}

async fn create_schedule(base: &str, token: &str, body: &Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(format!("{base}/api/schedules"))
        .bearer_auth(token)
        .header("Idempotency-Key", "nightly-orders")
        .json(body)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap_or(Value::Null))
}

/// The schedule's runs: `(key, actor)` of each operation its service identity made, by key.
async fn runs(p: &Prepared, schedule: &str) -> Vec<Vec<String>> {
    let db = p.connect().await;
    rows(&db, &format!("SELECT idempotency_key, actor_id FROM jobs WHERE idempotency_key LIKE 'schedule:{schedule}:%' ORDER BY idempotency_key")).await
}

async fn exec(db: &sea_orm::DatabaseConnection, sql: &str) {
    use sea_orm::ConnectionTrait;
    db.execute_unprepared(sql).await.unwrap();
}

/// Waits until the schedule's runs number `n`.
async fn until_runs(db: &sea_orm::DatabaseConnection, schedule: &str, n: i64) {
    eventually(&format!("{n} runs"), LONG, || {
        let db = db.clone();
        let sql = format!("SELECT COUNT(*) FROM jobs WHERE idempotency_key LIKE 'schedule:{schedule}:%'");
        async move { scalar(&db, &sql).await >= n }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_scheduler_loops_one_killed_at_the_due_time_make_each_window_once_by_the_service_identity_and_catch_up_after_downtime() {
    let p = Prepared::new(Backend::Postgres, 300).await;
    let alice = p.run_ok(&["token", "create", "alice@acme.test"]).await.trim().to_owned();
    // Loop a: the API's own, which stops at the due time until it is killed.
    let (mut a, base) = p.api_with(&[FAST, LOGS, ("FAILPOINTS", "schedule_before_create=pause")]).await;
    let (status, schedule) = create_schedule(&base, &alice, &daily()).await;
    assert_eq!(status, 201, "{schedule}");
    let id = schedule["id"].as_str().unwrap().to_owned();
    let (again, replayed) = create_schedule(&base, &alice, &daily()).await;
    assert_eq!((again, replayed["id"].as_str()), (200, Some(id.as_str())), "the same key and body answer the same schedule");

    // The due time comes while only loop a runs: it stops there, holding the schedule.
    let db = p.connect().await;
    exec(&db, &format!("UPDATE schedules SET active_since = active_since - {DAY_MS} WHERE id = '{id}'")).await;
    let at_due = format!("schedule:{id}:");
    let line = a.wait_line(&["schedule_before_create", &at_due], LONG).await;
    // Loops b and c start and find the window due but held (their lock waits give up).
    let mut b = p.worker("b", &[FAST, LOGS], &[]);
    let mut c = p.worker("c", &[FAST, LOGS], &[]);
    b.wait_line(&["runs were not made", &id], LONG).await;
    c.wait_line(&["runs were not made", &id], LONG).await;
    assert_eq!(scalar(&db, &format!("SELECT COUNT(*) FROM jobs WHERE idempotency_key LIKE '{at_due}%'")).await, 0, "a holds the window");
    a.signal("KILL");
    a.wait_exit(LONG).await;
    until_runs(&db, &id, 1).await;
    let window: String = line.split(&at_due).nth(1).unwrap().chars().take(20).collect();
    let service = text(&db, &format!("SELECT id FROM users WHERE schedule_id = '{id}'")).await.unwrap();
    let first_due = scalar(&db, &format!("SELECT last_due FROM schedules WHERE id = '{id}'")).await;

    // Every loop is stopped while five more due times pass; then two loops start again.
    b.signal("KILL");
    c.signal("KILL");
    b.wait_exit(LONG).await;
    c.wait_exit(LONG).await;
    exec(&db, &format!("UPDATE schedules SET active_since = active_since - {}, last_due = last_due - {} WHERE id = '{id}'", 6 * DAY_MS, 5 * DAY_MS)).await;
    let _d = p.worker("d", &[FAST, LOGS], &[]);
    let (_e, base) = p.api_with(&[FAST, LOGS]).await;
    until_runs(&db, &id, 3).await;
    eventually("the latest due time recorded", LONG, || {
        let db = db.clone();
        let sql = format!("SELECT COUNT(*) FROM schedules WHERE id = '{id}' AND last_due = {first_due}");
        async move { scalar(&db, &sql).await == 1 }
    })
    .await;
    // The loops see the last two windows due again: both have their run, nothing more is made.
    exec(&db, &format!("UPDATE schedules SET last_due = last_due - {} WHERE id = '{id}'", 2 * DAY_MS)).await;
    eventually("the loops passing over them", LONG, || {
        let db = db.clone();
        let sql = format!("SELECT COUNT(*) FROM schedules WHERE id = '{id}' AND last_due = {first_due}");
        async move { scalar(&db, &sql).await == 1 }
    })
    .await;

    let made = runs(&p, &id).await;
    assert_eq!(made.len(), 3, "the latest three windows (EXPORTD_SCHEDULE_CATCH_UP), each once: {made:?}");
    let starts: Vec<String> = made.iter().map(|r| r[0].trim_start_matches(&at_due).to_owned()).collect();
    assert_eq!(starts[2], window, "the window due while the loops ran is among them, once");
    for pair in starts.windows(2) {
        let (x, y) = (pair[0].parse::<jiff::Timestamp>().unwrap(), pair[1].parse::<jiff::Timestamp>().unwrap());
        assert_eq!(y.duration_since(x), jiff::SignedDuration::from_hours(24), "consecutive days: {starts:?}");
    }
    assert!(made.iter().all(|r| r[1] == service), "each created by the schedule's service identity: {made:?}");
    let audited = scalar(&db, &format!("SELECT COUNT(*) FROM job_events e JOIN jobs j ON j.id = e.job_id WHERE j.idempotency_key LIKE '{at_due}%' AND e.from_status IS NULL AND e.actor LIKE '%{service}%'")).await;
    assert_eq!(audited, 3, "each creation audited as the service identity's");

    // The owner reads the runs; an analyst who does not own the schedule does not.
    let run = rows(&db, &format!("SELECT id FROM jobs WHERE idempotency_key LIKE '{at_due}%' ORDER BY idempotency_key DESC LIMIT 1")).await[0][0].clone();
    assert_eq!(Api::new(&base, &alice).view(&run).await["id"], run.as_str());
    let shown: Value = reqwest::Client::new().get(format!("{base}/api/schedules/{id}")).bearer_auth(&alice).send().await.unwrap().json().await.unwrap();
    assert_eq!(shown["runs"].as_array().map(Vec::len), Some(3), "{shown}");
    assert_eq!(shown["service_identity"], format!("schedule:{id}"));
    let bob = reqwest::Client::new().get(format!("{base}/api/exports/{run}")).bearer_auth(&p.token).send().await.unwrap();
    assert_eq!(bob.status().as_u16(), 404, "not bob's, nor his schedule's");
    let gina = p.run_ok(&["token", "create", "gina@globex.test"]).await.trim().to_owned();
    let other_tenant = reqwest::Client::new().get(format!("{base}/api/exports/{run}")).bearer_auth(&gina).send().await.unwrap();
    assert_eq!(other_tenant.status().as_u16(), 404, "another tenant's admin");
}

/// Waits until `proc` has ended a whole scheduler pass begun after its line `seen`: the first
/// pass to end after it may have begun before, the next one did not.
async fn whole_pass_after(proc: &Proc, seen: usize) {
    proc.next_line(seen, &["scheduler pass ended"], LONG).await.expect("a pass");
    let after_first = proc.line_count();
    proc.next_line(after_first, &["scheduler pass ended"], LONG).await.expect("a whole pass");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_schedule_makes_nothing_at_its_due_time_even_after_resuming_and_a_revoked_owner_pauses_it() {
    let p = Prepared::new(Backend::Postgres, 50).await;
    let alice = p.run_ok(&["token", "create", "alice@acme.test"]).await.trim().to_owned();
    let (api, base) = p.api_with(&[FAST, LOGS]).await;
    let (status, schedule) = create_schedule(&base, &alice, &daily()).await;
    assert_eq!(status, 201, "{schedule}");
    let id = schedule["id"].as_str().unwrap().to_owned();
    let db = p.connect().await;
    let client = reqwest::Client::new();

    // Paused a day ago, so that its due time came while it was paused.
    let paused = client.post(format!("{base}/api/schedules/{id}/pause")).bearer_auth(&alice).send().await.unwrap();
    assert_eq!(paused.status().as_u16(), 200);
    exec(&db, &format!("UPDATE schedules SET active_since = active_since - {DAY_MS}, paused_at = paused_at - {DAY_MS} WHERE id = '{id}'")).await;
    whole_pass_after(&api, api.line_count()).await;
    assert_eq!(scalar(&db, &format!("SELECT COUNT(*) FROM jobs WHERE idempotency_key LIKE 'schedule:{id}:%'")).await, 0, "paused: nothing at its due time");
    let resumed = client.post(format!("{base}/api/schedules/{id}/resume")).bearer_auth(&alice).send().await.unwrap();
    assert_eq!(resumed.status().as_u16(), 200);
    whole_pass_after(&api, api.line_count()).await;
    assert_eq!(scalar(&db, &format!("SELECT COUNT(*) FROM jobs WHERE idempotency_key LIKE 'schedule:{id}:%'")).await, 0, "resumed: the window that fell while paused never runs");

    // Its owner deactivated, the next due time pauses it instead of running.
    p.run_ok(&["user", "deactivate", "alice@acme.test"]).await;
    exec(&db, &format!("UPDATE schedules SET skip_from = NULL, skip_until = NULL WHERE id = '{id}'")).await;
    eventually("the schedule paused for its owner", LONG, || {
        let db = db.clone();
        let sql = format!("SELECT paused_reason FROM schedules WHERE id = '{id}' AND paused");
        async move { text(&db, &sql).await.as_deref() == Some("owner_inactive") }
    })
    .await;
    assert_eq!(scalar(&db, &format!("SELECT COUNT(*) FROM jobs WHERE idempotency_key LIKE 'schedule:{id}:%'")).await, 0, "an inactive owner's schedule makes nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_owner_pauses_the_schedule_and_a_run_needing_an_admin_is_refused_by_the_worker() {
    let p = Prepared::new(Backend::Postgres, 50).await;
    let alice = p.run_ok(&["token", "create", "alice@acme.test"]).await.trim().to_owned();
    // A worker that holds each run at its first step until the owner has been demoted.
    let (_api, base) = p.api_with(&[FAST, LOGS]).await;
    let mut body = daily();
    body["role"] = json!("admin");
    body["columns"] = json!(["order_id", "customer_email"]);
    let (status, schedule) = create_schedule(&base, &alice, &body).await;
    assert_eq!(status, 201, "{schedule}");
    let id = schedule["id"].as_str().unwrap().to_owned();
    let db = p.connect().await;
    exec(&db, &format!("UPDATE schedules SET active_since = active_since - {DAY_MS} WHERE id = '{id}'")).await;
    until_runs(&db, &id, 1).await;
    let page = metrics_page(&base).await;
    assert_eq!(metric(&page, &format!("exportd_schedule_runs_total{{schedule=\"{id}\"}}")), Some(1.0), "the run counted");
    assert_eq!(metric(&page, "exportd_schedule_lag_seconds_count"), Some(1.0));
    assert!(metric(&page, "exportd_schedule_lag_seconds_sum").is_some_and(|lag| lag > 3600.0), "its due time was hours before the run: {page}");
    let run = text(&db, &format!("SELECT id FROM jobs WHERE idempotency_key LIKE 'schedule:{id}:%'")).await.unwrap();
    p.run_ok(&["user", "set-role", "alice@acme.test", "analyst"]).await;
    let worker = p.worker("w", &[LOGS], &[]);
    let api = Api::new(&base, &alice);
    let ended = api.wait_status(&run, &["ready", "failed", "cancelled"], LONG).await;
    assert_eq!(ended["status"], "failed", "the lesser role is an analyst's, who may not export an email: {ended}");
    exec(&db, &format!("UPDATE schedules SET last_due = last_due - {DAY_MS} WHERE id = '{id}'")).await;
    eventually("the schedule paused for its owner", LONG, || {
        let db = db.clone();
        let sql = format!("SELECT paused_reason FROM schedules WHERE id = '{id}' AND paused");
        async move { text(&db, &sql).await.as_deref() == Some("owner_demoted") }
    })
    .await;
    assert_eq!(scalar(&db, &format!("SELECT COUNT(*) FROM jobs WHERE idempotency_key LIKE 'schedule:{id}:%'")).await, 1, "nothing more after the demotion");
    drop(worker);
}
