//! The schedules API (contract §15) in one process, on SQLite and PostgreSQL: who may manage
//! schedules, what a request must say, the key's replay, revisions, pause, resume and delete,
//! and the service identity that cannot sign in or hold a token. The scheduler's loops are
//! proved with real processes in schedule_processes.rs.

mod support;

use serde_json::{json, Value};
use support::{expect_problem, TestApp};

/// An app that may send notifications: it knows its page's address and an SMTP server.
async fn notifying_app(backend: support::Backend) -> TestApp {
    TestApp::start(support::Options {
        adjust: |c| {
            c.public_origin = exportd::config::PublicOrigin::parse("http://exports.test");
            c.notify.smtp_url = Some("smtp://127.0.0.1:9".into());
            c.notify.smtp_from = Some("exportd <exportd@exports.test>".into());
        },
        ..support::Options::new(backend)
    })
    .await
}

fn nightly() -> Value {
    json!({
        "report": "orders", "timezone": "Asia/Riyadh",
        "cadence": {"every": "day", "at": "06:00"}, "window": "previous_day",
        "notify": {"webhook": "https://hooks.example.com/exportd", "email": ["finance@acme.test"], "language": "ar"},
    })
}

on_both_backends!(only_an_admin_makes_a_schedule_and_a_key_answers_the_same_one_again, |backend| {
    let app = notifying_app(backend).await;
    let bob = app.login("bob@acme.test").await;
    let url = app.url("/api/schedules");
    expect_problem(bob.post(&url).header("Idempotency-Key", "k").json(&nightly()).send().await.unwrap(), 403, "schedule-not-permitted").await;
    let alice = app.login("alice@acme.test").await;
    expect_problem(alice.post(&url).json(&nightly()).send().await.unwrap(), 400, "idempotency-key-missing").await;
    let made = alice.post(&url).header("Idempotency-Key", "nightly").json(&nightly()).send().await.unwrap();
    assert_eq!(made.status(), 201);
    let location = made.headers()["location"].to_str().unwrap().to_owned();
    let view: Value = made.json().await.unwrap();
    let id = view["id"].as_str().unwrap().to_owned();
    assert_eq!(location, format!("/api/schedules/{id}"));
    assert_eq!((view["status"].as_str(), view["revision"].as_i64(), view["owner"].as_str()), (Some("active"), Some(1), Some("alice@acme.test")));
    assert_eq!(view["service_identity"], format!("schedule:{id}"));
    assert!(view["next_due"].as_str().is_some_and(|t| t.ends_with(":00:00Z")), "06:00 in Riyadh: {view}");
    assert_eq!(view["request"]["role"], "analyst", "the default role");

    let again = alice.post(&url).header("Idempotency-Key", "nightly").json(&nightly()).send().await.unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.json::<Value>().await.unwrap()["id"], id.as_str());
    let mut other = nightly();
    other["window"] = json!("previous_week");
    other["cadence"] = json!({"every": "week", "weekday": 1, "at": "06:00"});
    expect_problem(alice.post(&url).header("Idempotency-Key", "nightly").json(&other).send().await.unwrap(), 422, "idempotency-key-reused").await;
    assert_eq!(app.scalar("SELECT COUNT(*) FROM schedules").await, 1);
    assert_eq!(app.scalar(&format!("SELECT COUNT(*) FROM users WHERE schedule_id = '{id}' AND email = 'schedule:{id}'")).await, 1, "one service identity");

    // The service identity cannot sign in (no password verifies "!", and it has no provider
    // identity), nor be given a token, a role, or be deactivated behind its schedule's back.
    assert_eq!(app.scalar(&format!("SELECT COUNT(*) FROM users WHERE schedule_id = '{id}' AND password_hash = '!' AND oidc_subject IS NULL")).await, 1);
    assert_ne!(app.cli(&["token", "create", &format!("schedule:{id}")]).await, 0);
    assert_ne!(app.cli(&["user", "set-role", &format!("schedule:{id}"), "admin"]).await, 0);
    assert_ne!(app.cli(&["user", "deactivate", &format!("schedule:{id}")]).await, 0);
    assert_eq!(app.scalar(&format!("SELECT COUNT(*) FROM api_tokens t JOIN users u ON u.id = t.user_id WHERE u.schedule_id = '{id}'")).await, 0);
    app.stop().await;
});

on_both_backends!(a_schedule_that_could_never_run_is_refused_with_the_field_at_fault, |backend| {
    let app = notifying_app(backend).await;
    let alice = app.login("alice@acme.test").await;
    let url = app.url("/api/schedules");
    let cases: Vec<(&str, Value)> = vec![
        ("/timezone", json!({"timezone": "Mars/Olympus"})),
        ("/cadence/at", json!({"cadence": {"every": "day", "at": "25:00"}})),
        ("/cadence/weekday", json!({"cadence": {"every": "week", "at": "06:00"}})),
        ("/cadence/day", json!({"cadence": {"every": "month", "at": "06:00", "day": 31}})),
        ("/cadence/weekday", json!({"cadence": {"every": "day", "at": "06:00", "weekday": 2}})),
        ("/notify/webhook", json!({"notify": {"webhook": "http://hooks.example.com/"}})),
        ("/notify/webhook", json!({"notify": {"webhook": "https://hooks.example.com/\nx"}})),
        ("/notify/email/0", json!({"notify": {"email": ["not an address"]}})),
        ("/columns", json!({"columns": ["no_such_column"]})),
        ("/report", json!({"report": "no_such_report"})),
    ];
    for (i, (pointer, change)) in cases.iter().enumerate() {
        let mut body = nightly();
        for (k, v) in change.as_object().unwrap() {
            body[k] = v.clone();
        }
        let problem = expect_problem(alice.post(&url).header("Idempotency-Key", format!("bad-{i}")).json(&body).send().await.unwrap(), 422, "invalid-request").await;
        let pointers: Vec<&str> = problem["errors"].as_array().unwrap().iter().filter_map(|e| e["pointer"].as_str()).collect();
        assert!(pointers.iter().any(|p| p.starts_with(pointer)), "{pointer}: {problem}");
    }
    // An analyst's schedule cannot export an admin's columns (the owner's role bounds it too).
    let mut pii = nightly();
    pii["columns"] = json!(["customer_email"]);
    let refused = alice.post(&url).header("Idempotency-Key", "pii").json(&pii).send().await.unwrap();
    assert_eq!(refused.status(), 403, "{}", refused.text().await.unwrap());
    assert_eq!(app.scalar("SELECT COUNT(*) FROM schedules").await, 0, "nothing made");
    assert_eq!(app.scalar("SELECT COUNT(*) FROM users WHERE schedule_id IS NOT NULL").await, 0);
    app.stop().await;
});

on_both_backends!(a_schedule_is_revised_paused_resumed_and_deleted_by_an_admin_of_its_tenant_only, |backend| {
    let app = notifying_app(backend).await;
    let alice = app.login("alice@acme.test").await;
    let made: Value = alice.post(app.url("/api/schedules")).header("Idempotency-Key", "n").json(&nightly()).send().await.unwrap().json().await.unwrap();
    let id = made["id"].as_str().unwrap().to_owned();
    let one = app.url(&format!("/api/schedules/{id}"));

    let mut monthly = nightly();
    monthly["cadence"] = json!({"every": "month", "day": "last", "at": "23:30"});
    monthly["window"] = json!("previous_month");
    monthly["role"] = json!("admin");
    let revised: Value = alice.put(&one).json(&monthly).send().await.unwrap().json().await.unwrap();
    assert_eq!((revised["revision"].as_i64(), revised["request"]["window"].as_str()), (Some(2), Some("previous_month")));
    assert_eq!(app.scalar(&format!("SELECT COUNT(*) FROM schedule_revisions WHERE schedule_id = '{id}'")).await, 2, "every revision kept");
    assert_eq!(app.texts(&format!("SELECT role FROM users WHERE schedule_id = '{id}'")).await, ["admin"]);

    let paused: Value = alice.post(format!("{one}/pause")).send().await.unwrap().json().await.unwrap();
    assert_eq!((paused["status"].as_str(), paused.get("next_due")), (Some("paused"), None));
    let resumed: Value = alice.post(format!("{one}/resume")).send().await.unwrap().json().await.unwrap();
    assert_eq!(resumed["status"], "active");

    let gina = app.login("gina@globex.test").await;
    expect_problem(gina.get(&one).send().await.unwrap(), 404, "schedule-not-found").await;
    expect_problem(gina.delete(&one).send().await.unwrap(), 404, "schedule-not-found").await;
    let listed: Value = alice.get(app.url("/api/schedules")).send().await.unwrap().json().await.unwrap();
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(1));
    assert_eq!(alice.delete(&one).send().await.unwrap().status(), 204);
    let listed: Value = alice.get(app.url("/api/schedules")).send().await.unwrap().json().await.unwrap();
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(0), "a deleted schedule is not listed");
    let shown: Value = alice.get(&one).send().await.unwrap().json().await.unwrap();
    assert_eq!(shown["status"], "deleted", "but still shown, with its runs");
    app.stop().await;
});
