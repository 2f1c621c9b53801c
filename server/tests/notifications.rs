//! Notifications delivered by real `exportd` processes on PostgreSQL (contract §15, case 27's
//! second half): a webhook receiver in the test that answers 500, 500 and then 200 gets three
//! deliveries under one `webhook-id`, each signed with the tenant's secret; a redirect is not
//! followed; a private address is refused unless `EXPORTD_WEBHOOK_ALLOW_PRIVATE` is set; an
//! SMTP server (aiosmtpd) receives the emails in English and in Arabic, with the page's link and
//! nothing of the data.

mod support;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::procs::{eventually, metric, metrics_page, rows, scalar, Api, Prepared};
use support::Backend;

const LONG: Duration = Duration::from_secs(60);
const ORIGIN: &str = "https://exports.example.test";

/// What the receiver was sent: the path, the three headers and the body of each request.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    id: String,
    timestamp: String,
    signature: String,
    body: String,
}

/// A webhook receiver: `/hook` answers 500 to its first two requests and 200 after; `/moved`
/// answers a redirect to `/landed`, which answers 200.
#[derive(Clone, Default)]
struct Receiver {
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    async fn start() -> (Receiver, String) {
        let receiver = Receiver::default();
        async fn take(State(r): State<Receiver>, uri: axum::http::Uri, headers: HeaderMap, body: String) -> axum::response::Response {
            let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
            let path = uri.path().to_owned();
            let n = {
                let mut got = r.got.lock().unwrap();
                got.push(Received { path: path.clone(), id: header("webhook-id"), timestamp: header("webhook-timestamp"), signature: header("webhook-signature"), body });
                got.iter().filter(|g| g.path == path).count()
            };
            match path.as_str() {
                "/hook" if n <= 2 => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
                "/moved" => (StatusCode::FOUND, [("location", "/landed")]).into_response(),
                _ => StatusCode::OK.into_response(),
            }
        }
        let app = axum::Router::new().fallback(take).with_state(receiver.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (receiver, format!("127.0.0.1:{port}"))
    }

    fn at(&self, path: &str) -> Vec<Received> {
        self.got.lock().unwrap().iter().filter(|g| g.path == path).cloned().collect()
    }
}

/// Whether `signature` (space-separated `v1,…`) holds one that `secret` made for this request.
fn verifies(secret: &str, r: &Received) -> bool {
    let key = base64::engine::general_purpose::STANDARD.decode(secret.strip_prefix("whsec_").unwrap()).unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{}.{}.{}", r.id, r.timestamp, r.body).as_bytes());
    let expected = format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes()));
    r.signature.split(' ').any(|s| s == expected)
}

/// `GET /api/notifications?operation=ID` as `api`'s user.
async fn deliveries(api: &Api, operation: &str) -> (u16, Value) {
    let resp = api.client.get(format!("{}/api/notifications?operation={operation}", api.base)).bearer_auth(&api.token).send().await.unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap_or(Value::Null))
}

fn orders_with(notify: Value) -> Value {
    let mut request = support::procs::everything("orders");
    request["notify"] = notify;
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_fails_twice_gets_three_deliveries_under_one_webhook_id_each_signed_with_the_tenants_secret() {
    let p = Prepared::new(Backend::Postgres, 50).await;
    let secret = p.run_ok(&["webhook-secret", "show", "acme"]).await.trim().to_owned();
    assert!(secret.starts_with("whsec_"), "{secret}");
    assert_eq!(p.run_ok(&["webhook-secret", "show", "acme"]).await.trim(), secret, "show makes a secret once");
    let (receiver, at) = Receiver::start().await;
    let env = [
        ("EXPORTD_PUBLIC_ORIGIN", ORIGIN),
        ("EXPORTD_WEBHOOK_ALLOW_PRIVATE", "1"),
        ("EXPORTD_WEBHOOK_RETRY_SECS", "1"),
        ("EXPORTD_NOTIFY_MS", "100"),
    ];
    let (mut serve, base) = p.serve_with(&env).await;
    let api = Api::new(&base, &p.token);

    let (status, created) = api.create("notify-hook", &orders_with(json!({"webhook": format!("http://{at}/hook")}))).await;
    assert_eq!(status, 202, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let ready = api.wait_status(&id, &["ready"], LONG).await;
    eventually("three deliveries", LONG, || {
        let n = receiver.at("/hook").len();
        async move { n >= 3 }
    })
    .await;
    eventually("the third recorded as delivered", LONG, || {
        let api = Api::new(&base, &p.token);
        let id = id.clone();
        async move { deliveries(&api, &id).await.1["items"][0]["status"] == "delivered" }
    })
    .await;

    let got = receiver.at("/hook");
    assert_eq!(got.len(), 3, "delivered at the third attempt, and not again: {got:?}");
    assert!(got[0].id.starts_with("msg_"), "{}", got[0].id);
    assert!(got.iter().all(|g| g.id == got[0].id), "one webhook-id on every attempt: {got:?}");
    assert!(got.iter().all(|g| g.body == got[0].body), "the same body on every attempt");
    assert!(got.iter().all(|g| verifies(&secret, g)), "every attempt verifies with the tenant's secret: {got:?}");
    let now = jiff::Timestamp::now().as_second();
    assert!(got.iter().all(|g| (g.timestamp.parse::<i64>().unwrap() - now).abs() < 300), "webhook-timestamp is the attempt's, in seconds");
    let tampered = Received { body: got[0].body.replace("ready", "failed"), ..got[0].clone() };
    assert!(!verifies(&secret, &tampered), "a changed body does not verify");

    let event: Value = serde_json::from_str(&got[0].body).unwrap();
    assert_eq!(event["type"], "export.ready");
    assert_eq!(event["data"]["id"], id.as_str());
    assert_eq!(event["data"]["status"], "ready");
    assert_eq!(event["data"]["report"], "orders");
    assert_eq!(event["data"]["status_url"], format!("{ORIGIN}/api/exports/{id}"));
    assert_eq!(event["data"]["page_url"], format!("{ORIGIN}/?operation={id}"));
    assert_eq!(event["data"]["artifact"]["sha256"], ready["artifact"]["sha256"]);
    assert_eq!(event["data"]["artifact"]["rows"], ready["artifact"]["rows"]);
    assert!(!got[0].body.contains("/files/") && !got[0].body.contains("download"), "no file and no link to one: {}", got[0].body);

    let (status, listed) = deliveries(&api, &id).await;
    assert_eq!(status, 200, "{listed}");
    let attempts: Vec<(String, i64)> = listed["items"][0]["attempts"].as_array().unwrap().iter().map(|a| (a["outcome"].as_str().unwrap().to_owned(), a["status_code"].as_i64().unwrap())).collect();
    assert_eq!(attempts, vec![("rejected".into(), 500), ("rejected".into(), 500), ("delivered".into(), 200)]);
    assert_eq!(listed["items"][0]["id"], got[0].id.as_str());
    let page = metrics_page(&base).await;
    assert_eq!(metric(&page, r#"exportd_notification_deliveries_total{channel="webhook",outcome="retried"}"#), Some(2.0), "{page}");
    assert_eq!(metric(&page, r#"exportd_notification_deliveries_total{channel="webhook",outcome="delivered"}"#), Some(1.0));
    // Another tenant's admin does not see them.
    let gina = p.run_ok(&["token", "create", "gina@globex.test"]).await.trim().to_owned();
    assert_eq!(deliveries(&api.as_user(&gina), &id).await.0, 404);

    // A rotation: the old secret signs beside the new for a day, under the same webhook-id.
    let rotated = p.run_ok(&["webhook-secret", "rotate", "acme"]).await.trim().to_owned();
    assert!(rotated.starts_with("whsec_") && rotated != secret);
    let msg = got[0].id.clone();
    let listed = p.run_ok(&["notifications", "list", "--operation", &id]).await;
    assert!(listed.contains(&msg) && listed.contains("delivered"), "{listed}");
    p.run_ok(&["notifications", "redeliver", &msg]).await;
    eventually("the redelivery", LONG, || {
        let n = receiver.at("/hook").len();
        async move { n >= 4 }
    })
    .await;
    let again = receiver.at("/hook")[3].clone();
    assert_eq!(again.id, msg);
    assert_eq!(again.signature.split(' ').count(), 2, "{}", again.signature);
    assert!(verifies(&rotated, &again) && verifies(&secret, &again), "both secrets sign: {}", again.signature);

    // A redirect is an answer, not a delivery: it is not followed, and the notification is retried.
    let (_, moved) = api.create("notify-moved", &orders_with(json!({"webhook": format!("http://{at}/moved")}))).await;
    let moved = moved["id"].as_str().unwrap().to_owned();
    api.wait_status(&moved, &["ready"], LONG).await;
    eventually("two refused redirects", LONG, || {
        let n = receiver.at("/moved").len();
        async move { n >= 2 }
    })
    .await;
    let (_, listed) = deliveries(&api, &moved).await;
    assert_eq!(listed["items"][0]["status"], "pending", "{listed}");
    assert_eq!(listed["items"][0]["attempts"][0]["status_code"], 302);
    assert!(receiver.at("/landed").is_empty(), "the redirect was followed");

    // A schedule's run tells its own webhook.
    let alice = p.run_ok(&["token", "create", "alice@acme.test"]).await.trim().to_owned();
    let hour = (jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC).hour() + 12) % 24;
    let schedule = json!({"report": "orders", "timezone": "UTC", "cadence": {"every": "day", "at": format!("{hour:02}:00")}, "window": "previous_day",
        "notify": {"webhook": format!("http://{at}/scheduled")}});
    let resp = api.client.post(format!("{base}/api/schedules")).bearer_auth(&alice).header("Idempotency-Key", "s1").json(&schedule).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let sid = resp.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    let db = p.connect().await;
    sea_orm::ConnectionTrait::execute_unprepared(&db, &format!("UPDATE schedules SET active_since = active_since - 86400000 WHERE id = '{sid}'")).await.unwrap();
    eventually("the run's notification", LONG, || {
        let n = receiver.at("/scheduled").len();
        async move { n >= 1 }
    })
    .await;
    let run: Value = serde_json::from_str(&receiver.at("/scheduled")[0].body).unwrap();
    let run_id = run["data"]["id"].as_str().unwrap().to_owned();
    assert_eq!(scalar(&db, &format!("SELECT COUNT(*) FROM jobs WHERE id = '{run_id}' AND idempotency_key LIKE 'schedule:{sid}:%'")).await, 1, "{run}");
    assert!(verifies(&rotated, &receiver.at("/scheduled")[0]));
    serve.signal("TERM");
    serve.wait_exit(LONG).await;

    // Without EXPORTD_WEBHOOK_ALLOW_PRIVATE: http:// is refused at creation, and a private
    // address (a literal one or a name that resolves to one) at every attempt, before any
    // connection.
    let env = [("EXPORTD_PUBLIC_ORIGIN", ORIGIN), ("EXPORTD_WEBHOOK_RETRY_SECS", "1"), ("EXPORTD_NOTIFY_MS", "100")];
    let (_serve, base) = p.serve_with(&env).await;
    let api = Api::new(&base, &p.token);
    let (status, refused) = api.create("notify-http", &orders_with(json!({"webhook": format!("http://{at}/hook")}))).await;
    assert_eq!(status, 422, "{refused}");
    assert!(refused.to_string().contains("/notify/webhook"), "{refused}");
    let port = at.split(':').nth(1).unwrap();
    let before = receiver.got.lock().unwrap().len();
    for (key, target) in [("notify-literal", format!("https://127.0.0.1:{port}/private")), ("notify-name", format!("https://localhost:{port}/private"))] {
        let (status, created) = api.create(key, &orders_with(json!({"webhook": target}))).await;
        assert_eq!(status, 202, "{created}");
        let op = created["id"].as_str().unwrap().to_owned();
        eventually("a refused attempt", LONG, || {
            let api = Api::new(&base, &p.token);
            let op = op.clone();
            async move { deliveries(&api, &op).await.1["items"][0]["attempts"][0]["outcome"] == "refused" }
        })
        .await;
    }
    assert_eq!(receiver.got.lock().unwrap().len(), before, "nothing reached the receiver");
    let failed_or_pending = rows(&db, "SELECT status FROM notifications WHERE target LIKE '%/private'").await;
    assert!(failed_or_pending.iter().all(|r| r[0] != "delivered"), "{failed_or_pending:?}");
}

/// aiosmtpd's Python, installed by `scripts/setup.sh --test`.
fn smtp_python() -> std::path::PathBuf {
    match std::env::var_os("EXPORTD_AIOSMTPD_PYTHON") {
        Some(p) => p.into(),
        None => std::path::Path::new(&std::env::var("HOME").unwrap()).join(".cache/exportd-aiosmtpd/bin/python"),
    }
}

/// Each message in `maildir`: its decoded subject and text.
fn read_mail(maildir: &std::path::Path) -> Vec<(String, String)> {
    let script = r#"
import email, email.policy, json, mailbox, sys
out = []
for m in mailbox.Maildir(sys.argv[1], factory=None, create=False):
    msg = email.message_from_bytes(m.as_bytes(), policy=email.policy.default)
    out.append([str(msg["subject"]), msg.get_body(("plain",)).get_content(), str(msg["to"])])
print(json.dumps(out))
"#;
    let out = std::process::Command::new(smtp_python()).args(["-c", script]).arg(maildir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let all: Vec<Vec<String>> = serde_json::from_slice(&out.stdout).unwrap();
    all.into_iter().map(|m| (m[0].clone(), format!("{}\nTo: {}", m[1], m[2]))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_smtp_server_receives_the_email_in_english_and_in_arabic_with_the_pages_link_and_no_data() {
    let python = smtp_python();
    assert!(python.exists(), "aiosmtpd's Python is installed by scripts/setup.sh --test at {}", python.display());
    let p = Prepared::new(Backend::Postgres, 50).await;
    let maildir = p.dir.path().join("maildir");
    for sub in ["cur", "new", "tmp"] {
        std::fs::create_dir_all(maildir.join(sub)).unwrap();
    }
    let port = support::procs::free_port();
    let mut smtp = tokio::process::Command::new(&python)
        .args(["-m", "aiosmtpd", "-n", "-l", &format!("127.0.0.1:{port}"), "-c", "aiosmtpd.handlers.Mailbox"])
        .arg(&maildir)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    eventually("the SMTP server listening", LONG, || async move { tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() }).await;
    let smtp_url = format!("smtp://127.0.0.1:{port}");
    let env = [
        ("EXPORTD_PUBLIC_ORIGIN", ORIGIN),
        ("EXPORTD_SMTP_URL", smtp_url.as_str()),
        ("EXPORTD_SMTP_FROM", "exportd <exportd@example.test>"),
        ("EXPORTD_NOTIFY_MS", "100"),
    ];
    let (_serve, base) = p.serve_with(&env).await;
    let api = Api::new(&base, &p.token);
    let mut ids = Vec::new();
    for (key, language) in [("mail-en", "en"), ("mail-ar", "ar")] {
        let (status, created) = api.create(key, &orders_with(json!({"email": ["owner@example.test"], "language": language}))).await;
        assert_eq!(status, 202, "{created}");
        let id = created["id"].as_str().unwrap().to_owned();
        api.wait_status(&id, &["ready"], LONG).await;
        ids.push(id);
    }
    eventually("two emails", LONG, || {
        let n = std::fs::read_dir(maildir.join("new")).map(|d| d.count()).unwrap_or(0);
        async move { n >= 2 }
    })
    .await;
    let mail = read_mail(&maildir);
    let (_, csv) = api.download(&ids[0]).await;
    // The first row's longest cell: a value of the file, not a word any email has.
    let first_row = String::from_utf8_lossy(&csv).lines().nth(1).unwrap().split(',').max_by_key(|c| c.len()).unwrap().to_owned();
    assert!(first_row.len() >= 6, "{first_row}");
    let en = mail.iter().find(|(_, body)| body.contains(&ids[0])).expect("the English email");
    assert_eq!(en.0, "Your export of orders is ready");
    assert!(en.1.contains(&format!("{ORIGIN}/?operation={}", ids[0])), "{}", en.1);
    assert!(en.1.contains("owner@example.test"));
    let ar = mail.iter().find(|(_, body)| body.contains(&ids[1])).expect("the Arabic email");
    assert_eq!(ar.0, "اكتمل التصدير: orders");
    assert!(ar.1.contains(&format!("{ORIGIN}/?operation={}", ids[1])) && ar.1.contains("افتحه"), "{}", ar.1);
    for (subject, body) in &mail {
        assert!(!body.contains("/files/") && !body.contains(&first_row), "no file link and no data: {subject}\n{body}");
    }
    let (_, listed) = deliveries(&api, &ids[1]).await;
    assert_eq!(listed["items"][0]["channel"], "email");
    assert_eq!(listed["items"][0]["status"], "delivered", "{listed}");
    smtp.kill().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_asks_for_a_notification_is_refused_when_the_server_cannot_link_to_its_page_or_send_email() {
    let p = Prepared::new(Backend::Postgres, 10).await;
    let (_serve, base) = p.serve_with(&[("EXPORTD_WEBHOOK_ALLOW_PRIVATE", "1")]).await;
    let api = Api::new(&base, &p.token);
    let (status, refused) = api.create("no-origin", &orders_with(json!({"webhook": "https://hooks.example.test/x"}))).await;
    assert_eq!(status, 422, "{refused}");
    assert!(refused.to_string().contains("EXPORTD_PUBLIC_ORIGIN"), "{refused}");
    let (status, refused) = api.create("no-smtp", &orders_with(json!({"email": ["a@example.test"]}))).await;
    assert_eq!(status, 422);
    assert!(refused.to_string().contains("EXPORTD_SMTP_URL"), "{refused}");
    let (status, refused) = api.create("nothing", &orders_with(json!({}))).await;
    assert_eq!(status, 422, "{refused}");
    let (status, plain) = api.create("plain", &support::procs::everything("orders")).await;
    assert_eq!(status, 202, "without notify nothing changes: {plain}");
    assert_eq!(deliveries(&api, plain["id"].as_str().unwrap()).await, (200, json!({"items": []})));
    assert_eq!(deliveries(&api, "exp_00000000000000000000000000000000").await.0, 404);
    assert_eq!(deliveries(&api, "").await.0, 422);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_never_answers_is_given_up_on_after_ten_seconds() {
    // It accepts the connection and reads, and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let started = std::time::Instant::now();
    let attempt = exportd::notifications::webhook::send(&format!("http://127.0.0.1:{port}/hook"), "msg_1", 1, "{}", &["whsec_AAAA".to_owned()], true).await;
    let took = started.elapsed();
    assert_eq!(attempt.outcome, "timeout", "{attempt:?}");
    assert!(took >= Duration::from_secs(9) && took < Duration::from_secs(15), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_process_frozen_holding_an_attempt_loses_it_to_another_and_records_nothing_when_it_wakes() {
    let p = Prepared::new(Backend::Postgres, 20).await;
    let secret = p.run_ok(&["webhook-secret", "show", "acme"]).await.trim().to_owned();
    let (receiver, at) = Receiver::start().await;
    let env = [("EXPORTD_PUBLIC_ORIGIN", ORIGIN), ("EXPORTD_WEBHOOK_ALLOW_PRIVATE", "1"), ("EXPORTD_NOTIFY_MS", "100")];
    // a's delivery loop stops after its claim (the lease is 2 s, so the claim lasts 4 s).
    let a_env = [env[0], env[1], env[2], ("FAILPOINTS", "notify_before_send=sleep(6000)"), ("EXPORTD_LOG", "warn,exportd::fault=info,exportd::notifications=info")];
    let (a, base) = p.serve_with(&a_env).await;
    let api = Api::new(&base, &p.token);
    let (status, created) = api.create("frozen-hook", &orders_with(json!({"webhook": format!("http://{at}/ok")}))).await;
    assert_eq!(status, 202, "{created}");
    let line = a.wait_line(&["notify_before_send"], LONG).await;
    a.signal("STOP");
    let id = line.split("export=").nth(1).unwrap().trim().to_owned();
    assert!(id.starts_with("msg_"), "{line}");
    // Another process takes the attempt once a's claim has lapsed, and delivers it.
    let _b = p.worker("b", &env, &[]);
    eventually("b's delivery", LONG, || {
        let n = receiver.at("/ok").len();
        async move { n >= 1 }
    })
    .await;
    let db = p.connect().await;
    eventually("b's attempt recorded", LONG, || {
        let db = db.clone();
        let sql = format!("SELECT COUNT(*) FROM notifications WHERE id = '{id}' AND status = 'delivered'");
        async move { scalar(&db, &sql).await == 1 }
    })
    .await;
    // a wakes, sends what it held (at least once: the same webhook-id), and records nothing.
    a.signal("CONT");
    a.wait_line(&["claim lapsed was not recorded", &id], LONG).await;
    let got = receiver.at("/ok");
    assert!(got.iter().all(|g| g.id == id && verifies(&secret, g)), "{got:?}");
    assert_eq!(rows(&db, &format!("SELECT CAST(attempt AS TEXT), outcome FROM notification_attempts WHERE notification_id = '{id}'")).await, vec![vec!["2".to_owned(), "delivered".to_owned()]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_and_a_schedule_held_from_psql_hold_up_no_other_delivery_and_an_edit_answers_busy() {
    let p = Prepared::new(Backend::Postgres, 20).await;
    let (receiver, at) = Receiver::start().await;
    let env = [("EXPORTD_PUBLIC_ORIGIN", ORIGIN), ("EXPORTD_WEBHOOK_ALLOW_PRIVATE", "1"), ("EXPORTD_WEBHOOK_RETRY_SECS", "1"), ("EXPORTD_NOTIFY_MS", "100")];
    let (_serve, base) = p.serve_with(&env).await;
    let api = Api::new(&base, &p.token);
    // The first notification fails its first attempt and waits for its second; then its row is
    // held, as by a process frozen inside a write to it.
    let (_, first) = api.create("held-first", &orders_with(json!({"webhook": format!("http://{at}/hook")}))).await;
    let first = first["id"].as_str().unwrap().to_owned();
    eventually("the first attempt", LONG, || {
        let n = receiver.at("/hook").len();
        async move { n >= 1 }
    })
    .await;
    let held = support::holders::Holder::psql(&p.db_url, &format!("SELECT 1 FROM notifications WHERE operation_id = '{first}' FOR UPDATE;")).await;
    let (_, second) = api.create("held-second", &orders_with(json!({"webhook": format!("http://{at}/ok")}))).await;
    let second = second["id"].as_str().unwrap().to_owned();
    eventually("the second delivered while the first is held", LONG, || {
        let n = receiver.at("/ok").len();
        async move { n >= 1 }
    })
    .await;
    assert_eq!(deliveries(&api, &second).await.1["items"][0]["status"], "delivered");
    let attempts_while_held = receiver.at("/hook").len();
    held.release().await;
    eventually("the first tried again once released", LONG, || {
        let n = receiver.at("/hook").len();
        async move { n > attempts_while_held }
    })
    .await;

    // An edit of a schedule whose row is held answers busy within the lock's bound, and changes nothing.
    let alice = p.run_ok(&["token", "create", "alice@acme.test"]).await.trim().to_owned();
    let body = json!({"report": "orders", "timezone": "UTC", "cadence": {"every": "day", "at": "06:00"}, "window": "previous_day"});
    let made: Value = api.client.post(format!("{base}/api/schedules")).bearer_auth(&alice).header("Idempotency-Key", "held").json(&body).send().await.unwrap().json().await.unwrap();
    let sid = made["id"].as_str().unwrap().to_owned();
    let held = support::holders::Holder::psql(&p.db_url, &format!("SELECT 1 FROM schedules WHERE id = '{sid}' FOR UPDATE;")).await;
    let mut edit = body.clone();
    edit["cadence"]["at"] = json!("07:00");
    let started = std::time::Instant::now();
    let resp = api.client.put(format!("{base}/api/schedules/{sid}")).bearer_auth(&alice).json(&edit).send().await.unwrap();
    let took = started.elapsed();
    let status = resp.status().as_u16();
    let problem: Value = resp.json().await.unwrap();
    assert_eq!((status, problem["code"].as_str()), (503, Some("busy")), "{problem}");
    assert!(took < Duration::from_secs(6), "answered after {took:?}");
    held.release().await;
    let resp = api.client.put(format!("{base}/api/schedules/{sid}")).bearer_auth(&alice).json(&edit).send().await.unwrap();
    let view: Value = resp.json().await.unwrap();
    assert_eq!((view["revision"].as_i64(), view["request"]["cadence"]["at"].as_str()), (Some(2), Some("07:00")), "{view}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_sqlite_server_delivers_a_signed_webhook_too() {
    let p = Prepared::new(Backend::Sqlite, 20).await;
    let secret = p.run_ok(&["webhook-secret", "show", "acme"]).await.trim().to_owned();
    let (receiver, at) = Receiver::start().await;
    let env = [("EXPORTD_PUBLIC_ORIGIN", ORIGIN), ("EXPORTD_WEBHOOK_ALLOW_PRIVATE", "1"), ("EXPORTD_NOTIFY_MS", "100")];
    let (_serve, base) = p.serve_with(&env).await;
    let api = Api::new(&base, &p.token);
    let (status, created) = api.create("sqlite-hook", &orders_with(json!({"webhook": format!("http://{at}/ok")}))).await;
    assert_eq!(status, 202, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    eventually("the delivery", LONG, || {
        let n = receiver.at("/ok").len();
        async move { n >= 1 }
    })
    .await;
    let got = &receiver.at("/ok")[0];
    assert!(verifies(&secret, got), "{got:?}");
    assert_eq!(serde_json::from_str::<Value>(&got.body).unwrap()["data"]["id"], id.as_str());
    eventually("recorded as delivered", LONG, || {
        let api = Api::new(&base, &p.token);
        let id = id.clone();
        async move { deliveries(&api, &id).await.1["items"][0]["status"] == "delivered" }
    })
    .await;
}
