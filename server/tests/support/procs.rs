//! Real `exportd` processes for tests: a prepared database and store, processes whose stderr is
//! watched line by line (fault points announce themselves there), and real signals.

use super::{fresh_database, Backend, PgDrop};
use sea_orm::{ConnectionTrait, DatabaseConnection, Statement};
use serde_json::Value;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, Command};

/// The binary under test.
pub const EXE: &str = env!("CARGO_BIN_EXE_exportd");

/// A database with the demo data, a store folder, and an API token of bob.
pub struct Prepared {
    pub dir: tempfile::TempDir,
    pub backend: Backend,
    pub db_url: String,
    pub store: String,
    pub token: String,
    _guard: Option<PgDrop>,
}

/// The timings every test process runs with: short leases, quick retries and janitor sweeps.
pub const TEST_ENV: [(&str, &str); 7] = [
    ("EXPORTD_LOG", "warn,exportd::fault=info,exportd::lifecycle=info"),
    ("EXPORTD_LEASE_SECS", "2"),
    ("EXPORTD_RETRY_BASE_MS", "100"),
    ("EXPORTD_JANITOR_MS", "200"),
    ("EXPORTD_SWEEP_MS", "500"),
    ("EXPORTD_ORPHAN_MARGIN_SECS", "0"),
    ("EXPORTD_MAX_ACTIVE_PER_ACTOR", "1000"),
];

impl Prepared {
    /// A fresh database of `backend` seeded with `orders` orders per tenant.
    pub async fn new(backend: Backend, orders: u32) -> Prepared {
        let dir = tempfile::tempdir().unwrap();
        let (db_url, guard) = fresh_database(backend, dir.path()).await;
        let store = format!("file://{}/objects", dir.path().display());
        let p = Prepared { dir, backend, db_url, store, token: String::new(), _guard: guard };
        p.run_ok(&["seed", "--demo", "--orders", &orders.to_string()]).await;
        let token = p.run_ok(&["token", "create", "bob@acme.test"]).await.trim().to_owned();
        Prepared { token, ..p }
    }

    /// `exportd` with this database, store and the test timings.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(EXE);
        cmd.env("DATABASE_URL", &self.db_url).env("EXPORTD_STORE", &self.store).kill_on_drop(true);
        for (k, v) in TEST_ENV {
            cmd.env(k, v);
        }
        cmd
    }

    /// Runs a command to its end; panics unless it succeeds; returns its stdout.
    pub async fn run_ok(&self, args: &[&str]) -> String {
        let out = self.command().args(args).stderr(Stdio::inherit()).output().await.unwrap();
        assert!(out.status.success(), "exportd {args:?} failed: {:?}", out.status);
        String::from_utf8(out.stdout).unwrap()
    }

    /// Starts `exportd worker` with extra environment (e.g. `FAILPOINTS`).
    pub fn worker(&self, label: &str, env: &[(&str, &str)], args: &[&str]) -> Proc {
        let mut cmd = self.command();
        cmd.arg("worker").args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Proc::spawn(cmd, label)
    }

    /// Starts `exportd serve --no-worker` on a free port; returns it once it answers.
    pub async fn api(&self) -> (Proc, String) {
        self.api_with(&[]).await
    }

    /// [`Prepared::api`] with extra environment (e.g. an S3 store).
    pub async fn api_with(&self, env: &[(&str, &str)]) -> (Proc, String) {
        self.spawn_serve(&["--no-worker"], "api", env).await
    }

    /// `exportd serve` with its own worker (the embedded way) on a free port, with extra
    /// environment; answers once it is healthy, with its base URL.
    pub async fn serve_with(&self, env: &[(&str, &str)]) -> (Proc, String) {
        self.spawn_serve(&[], "serve", env).await
    }

    async fn spawn_serve(&self, flags: &[&str], label: &str, env: &[(&str, &str)]) -> (Proc, String) {
        let port = free_port();
        let mut cmd = self.command();
        cmd.arg("serve").args(flags).args(["--bind", &format!("127.0.0.1:{port}")]);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let proc = Proc::spawn(cmd, label);
        let base = format!("http://127.0.0.1:{port}");
        wait_healthy(&base).await;
        (proc, base)
    }

    /// A connection for the test's own checks.
    pub async fn connect(&self) -> DatabaseConnection {
        exportd::db::connect(&self.db_url).await.unwrap()
    }

    /// Every file under the store folder's `prefix`, relative to the store.
    pub fn objects(&self, prefix: &str) -> Vec<String> {
        let root = self.dir.path().join("objects");
        let mut out = Vec::new();
        let mut stack = vec![root.join(prefix)];
        while let Some(p) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&p) else { continue };
            for e in entries.flatten() {
                if e.path().is_dir() {
                    stack.push(e.path());
                } else {
                    out.push(e.path().strip_prefix(&root).unwrap().display().to_string());
                }
            }
        }
        out.sort();
        out
    }
}

/// A number (or text, with `text`) from one SQL query.
pub async fn scalar(db: &DatabaseConnection, sql: &str) -> i64 {
    let row = db.query_one_raw(Statement::from_string(db.get_database_backend(), sql.to_owned())).await.unwrap().unwrap();
    row.try_get_by_index::<i64>(0).unwrap()
}

/// Text from one SQL query.
pub async fn text(db: &DatabaseConnection, sql: &str) -> Option<String> {
    let row = db.query_one_raw(Statement::from_string(db.get_database_backend(), sql.to_owned())).await.unwrap()?;
    row.try_get_by_index::<Option<String>>(0).unwrap()
}

/// Every row of one SQL query, each column as text (NULL as an empty string).
pub async fn rows(db: &DatabaseConnection, sql: &str) -> Vec<Vec<String>> {
    let found = db.query_all_raw(Statement::from_string(db.get_database_backend(), sql.to_owned())).await.unwrap();
    let columns = found.first().map_or(0, |r| r.column_names().len());
    found.iter().map(|r| (0..columns).map(|i| r.try_get_by_index::<Option<String>>(i).unwrap().unwrap_or_default()).collect()).collect()
}

/// A loopback port nobody listens on.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Waits until `base` answers `/healthz`.
pub async fn wait_healthy(base: &str) {
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

/// A running `exportd` process; its stderr is kept line by line.
pub struct Proc {
    pub child: Child,
    pub label: String,
    lines: Arc<Mutex<Vec<String>>>,
    more: Arc<tokio::sync::Notify>,
}

impl Proc {
    /// Spawns `cmd`, echoing its stderr (prefixed with `label`) and keeping every line.
    pub fn spawn(mut cmd: Command, label: &str) -> Proc {
        let mut child = cmd.stderr(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let more = Arc::new(tokio::sync::Notify::new());
        let (kept, notify, tag) = (lines.clone(), more.clone(), label.to_owned());
        tokio::spawn(async move {
            let mut reader = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                eprintln!("[{tag}] {line}");
                kept.lock().unwrap().push(line);
                notify.notify_waiters();
            }
        });
        Proc { child, label: label.to_owned(), lines, more }
    }

    /// Waits until a line of stderr contains every one of `needles`; returns it.
    pub async fn wait_line(&self, needles: &[&str], limit: Duration) -> String {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.more.notified();
            if let Some(line) = self.lines.lock().unwrap().iter().find(|l| needles.iter().all(|n| l.contains(n))) {
                return line.clone();
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!("{}: no line with {needles:?} within {limit:?}", self.label);
            }
        }
    }

    /// Waits until `n` lines of stderr contain every one of `needles` (a fault point met for the
    /// `n`th time, say).
    pub async fn wait_count(&self, needles: &[&str], n: usize, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.more.notified();
            if self.lines.lock().unwrap().iter().filter(|l| needles.iter().all(|x| l.contains(x))).count() >= n {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!("{}: fewer than {n} lines with {needles:?} within {limit:?}", self.label);
            }
        }
    }

    /// How many lines the process has written so far.
    pub fn line_count(&self) -> usize {
        self.lines.lock().unwrap().len()
    }

    /// Waits until a line after the first `skip` contains every one of `needles`; `None` if none
    /// does within `limit`.
    pub async fn next_line(&self, skip: usize, needles: &[&str], limit: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.more.notified();
            if let Some(line) = self.lines.lock().unwrap().iter().skip(skip).find(|l| needles.iter().all(|n| l.contains(n))) {
                return Some(line.clone());
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
        }
    }

    /// Whether some line so far contains every one of `needles`.
    pub fn has_line(&self, needles: &[&str]) -> bool {
        self.lines.lock().unwrap().iter().any(|l| needles.iter().all(|n| l.contains(n)))
    }

    /// Sends a signal: `STOP`, `CONT`, `TERM`, `KILL`.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("process still running");
        let status = std::process::Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().unwrap();
        assert!(status.success(), "kill -{signal} {pid}");
    }

    /// Waits for the process to exit.
    pub async fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        tokio::time::timeout(limit, self.child.wait()).await.unwrap_or_else(|_| panic!("{} did not exit within {limit:?}", self.label)).unwrap()
    }
}

/// A client of the API with bob's token.
pub struct Api {
    pub base: String,
    pub token: String,
    pub client: reqwest::Client,
}

impl Api {
    pub fn new(base: &str, token: &str) -> Api {
        Api {
            base: base.to_owned(),
            token: token.to_owned(),
            client: reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap(),
        }
    }

    /// `POST /api/exports`; returns the answer's status and body.
    pub async fn create(&self, key: &str, body: &Value) -> (u16, Value) {
        let resp = self
            .client
            .post(format!("{}/api/exports", self.base))
            .bearer_auth(&self.token)
            .header("Idempotency-Key", key)
            .json(body)
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.json().await.unwrap_or(Value::Null))
    }

    /// `GET /api/exports/{id}`.
    pub async fn view(&self, id: &str) -> Value {
        self.client.get(format!("{}/api/exports/{id}", self.base)).bearer_auth(&self.token).send().await.unwrap().json().await.unwrap()
    }

    /// Polls until the export's status is one of `statuses`.
    pub async fn wait_status(&self, id: &str, statuses: &[&str], limit: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let view = self.view(id).await;
            if statuses.iter().any(|s| view["status"] == *s) {
                return view;
            }
            assert!(tokio::time::Instant::now() < deadline, "export {id} is {} after {limit:?}, not one of {statuses:?}: {view}", view["status"]);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `POST /api/exports/{id}/cancel`, with the time it took to answer.
    pub async fn cancel(&self, id: &str) -> (u16, Value, Duration) {
        let started = tokio::time::Instant::now();
        let resp = self
            .client
            .post(format!("{}/api/exports/{id}/cancel", self.base))
            .bearer_auth(&self.token)
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null), started.elapsed())
    }

    /// The same client with another user's token.
    pub fn as_user(&self, token: &str) -> Api {
        Api::new(&self.base, token)
    }

    /// The link a `…/download` path answers with (303), made absolute; or the answer's status
    /// and problem body.
    pub async fn link(&self, path: &str) -> Result<String, (u16, Value)> {
        let resp = self.client.get(format!("{}{path}", self.base)).bearer_auth(&self.token).send().await.unwrap();
        if resp.status() != 303 {
            return Err((resp.status().as_u16(), resp.json().await.unwrap_or(Value::Null)));
        }
        let link = resp.headers()["location"].to_str().unwrap().to_owned();
        Ok(if link.starts_with("http") { link } else { format!("{}{link}", self.base) })
    }

    /// Downloads a ready export's file through the minted link.
    pub async fn download(&self, id: &str) -> (u16, bytes::Bytes) {
        let resp = self.client.get(format!("{}/api/exports/{id}/download", self.base)).bearer_auth(&self.token).send().await.unwrap();
        if resp.status() != 303 {
            return (resp.status().as_u16(), resp.bytes().await.unwrap());
        }
        let link = resp.headers()["location"].to_str().unwrap().to_owned();
        // A presigned S3 URL is absolute; exportd's own links are paths.
        let link = if link.starts_with("http") { link } else { format!("{}{link}", self.base) };
        let file = self.client.get(link).send().await.unwrap();
        (file.status().as_u16(), file.bytes().await.unwrap())
    }
}

/// Waits until `check` holds, polling every 100 ms.
pub async fn eventually<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One sample's value from a Prometheus text page, by its name and labels as written
/// (`name{label="value"}`), or `None` when absent.
pub fn metric(page: &str, series: &str) -> Option<f64> {
    page.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok()).flatten()
    })
}

/// `GET {base}/metrics` as text.
pub async fn metrics_page(base: &str) -> String {
    reqwest::get(format!("{base}/metrics")).await.unwrap().text().await.unwrap()
}

/// A body for every order of the demo data (spread over the last two years).
pub fn everything(report: &str) -> Value {
    let today = jiff::Zoned::now().with_time_zone(jiff::tz::TimeZone::UTC).date();
    let from = today.checked_sub(jiff::Span::new().days(800)).unwrap();
    let to = today.checked_add(jiff::Span::new().days(1)).unwrap();
    serde_json::json!({"report": report, "time_range": {"from": from.to_string(), "to": to.to_string()}})
}

/// Hex SHA-256 of bytes.
pub fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}
