//! `TestApp`: the real HTTP app over a socket, with a fresh database per test (a SQLite file,
//! or a new PostgreSQL database made through `TEST_DATABASE_URL`) and a local object store.
#![allow(dead_code)]

pub mod bundles;
pub mod holders;
pub mod imports;
pub mod procs;
pub mod provider;
pub mod s3;
pub mod spreadsheets;

use exportd::clock::{Clock, SharedClock, SystemClock};
use exportd::config::{Config, WorkerConfig};
use exportd::server::{app_router, AppState};
use exportd::worker::{self, WorkerContext};
use sea_orm::{ConnectionTrait, DatabaseConnection, Statement};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Which database a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The admin connection used to create per-test PostgreSQL databases.
pub fn admin_url() -> String {
    std::env::var("TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// A fresh, empty database of the backend; its URL and a guard that drops it.
pub async fn fresh_database(backend: Backend, dir: &std::path::Path) -> (String, Option<PgDrop>) {
    match backend {
        Backend::Sqlite => (format!("sqlite://{}/exportd.db", dir.display()), None),
        Backend::Postgres => {
            let admin = admin_url();
            let name = format!("exportd_test_{}", uuid::Uuid::new_v4().simple());
            let conn = sea_orm::Database::connect(admin.as_str()).await.expect("PostgreSQL at TEST_DATABASE_URL must be reachable");
            conn.execute_unprepared(&format!("CREATE DATABASE {name}")).await.expect("create test database");
            conn.close().await.ok();
            let mut url = url::Url::parse(&admin).expect("TEST_DATABASE_URL is a URL");
            url.set_path(&format!("/{name}"));
            (url.to_string(), Some(PgDrop { admin, name }))
        }
    }
}

/// Drops a per-test PostgreSQL database when the test ends.
pub struct PgDrop {
    admin: String,
    name: String,
}

impl Drop for PgDrop {
    fn drop(&mut self) {
        let admin = self.admin.clone();
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
            rt.block_on(async move {
                if let Ok(conn) = sea_orm::Database::connect(admin.as_str()).await {
                    let _ = conn.execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await;
                }
            });
        })
        .join();
    }
}

/// A clock the test sets.
pub struct FixedClock(pub Mutex<jiff::Timestamp>);

impl Clock for FixedClock {
    fn now(&self) -> jiff::Timestamp {
        *self.0.lock().unwrap()
    }
}

/// The configuration tests run with: short leases, a local store in the test's folder.
pub fn test_config(database_url: &str, dir: &std::path::Path) -> Config {
    Config {
        lease: Duration::from_secs(5),
        max_active_per_actor: 1000,
        retry_base: Duration::from_millis(100),
        janitor_every: Duration::from_millis(200),
        sweep_every: Duration::from_millis(500),
        orphan_margin: Duration::ZERO,
        ..Config::defaults(database_url, &format!("file://{}/objects", dir.display()))
    }
}

/// How to start a `TestApp`.
pub struct Options {
    pub backend: Backend,
    pub orders: u32,
    pub worker: bool,
    pub clock: Option<SharedClock>,
    pub max_active_per_actor: u64,
    /// Changes to the test configuration (leases, TTLs, attempts).
    pub adjust: fn(&mut Config),
    /// Changes that need the test's own values (a provider's address, say), after `adjust`.
    pub with: Option<Arc<dyn Fn(&mut Config) + Send + Sync>>,
}

impl Options {
    pub fn new(backend: Backend) -> Options {
        Options { backend, orders: 200, worker: false, clock: None, max_active_per_actor: 1000, adjust: |_| {}, with: None }
    }
}

/// The app on a real socket, its database and its store folder.
pub struct TestApp {
    pub addr: String,
    pub db: DatabaseConnection,
    pub dir: tempfile::TempDir,
    pub config: Arc<Config>,
    pub shutdown: CancellationToken,
    pub backend: Backend,
    database_url: String,
    server: tokio::task::JoinHandle<()>,
    worker: Option<tokio::task::JoinHandle<()>>,
    _pg: Option<PgDrop>,
    /// Prefixes the names of this app's worker fault points (see `exportd::worker::faults`).
    pub fault_scope: String,
    /// The wake-up the app's creates send to its in-process worker.
    pub wakeup: exportd::job_store::wakeup::Wakeup,
    /// The metrics the app and its in-process workers share.
    pub metrics: exportd::metrics::Metrics,
}

impl TestApp {
    pub async fn spawn(backend: Backend) -> TestApp {
        TestApp::start(Options::new(backend)).await
    }

    pub async fn with_worker(backend: Backend) -> TestApp {
        TestApp::start(Options { worker: true, ..Options::new(backend) }).await
    }

    pub async fn start(opts: Options) -> TestApp {
        // `EXPORTD_TEST_LOG=warn` (or any filter) shows the app's log, for a failing test.
        if let Ok(filter) = std::env::var("EXPORTD_TEST_LOG") {
            let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let (database_url, pg) = fresh_database(opts.backend, dir.path()).await;
        let mut config = test_config(&database_url, dir.path());
        config.max_active_per_actor = opts.max_active_per_actor;
        (opts.adjust)(&mut config);
        if let Some(with) = &opts.with {
            with(&mut config);
        }
        let db = exportd::db::connect_and_migrate(&database_url).await.expect("migrate");
        exportd::seed::seed_demo(&db, opts.orders, jiff::Timestamp::now().as_millisecond()).await.expect("seed");
        let clock = opts.clock.unwrap_or_else(|| Arc::new(SystemClock));
        TestApp::serve(opts.backend, dir, database_url, pg, Arc::new(config), db, clock, opts.worker).await
    }

    /// Stops this instance and starts a new one on the same database and store, as a restart does.
    pub async fn restart(self) -> TestApp {
        self.shutdown.cancel();
        if let Some(w) = self.worker {
            let _ = w.await;
        }
        let _ = self.server.await;
        self.db.close().await.ok();
        let db = exportd::db::connect_and_migrate(&self.database_url).await.expect("reconnect");
        TestApp::serve(self.backend, self.dir, self.database_url, self._pg, self.config, db, Arc::new(SystemClock), false).await
    }

    #[allow(clippy::too_many_arguments)]
    async fn serve(
        backend: Backend,
        dir: tempfile::TempDir,
        database_url: String,
        pg: Option<PgDrop>,
        config: Arc<Config>,
        db: DatabaseConnection,
        clock: SharedClock,
        worker: bool,
    ) -> TestApp {
        let state = AppState::new(db.clone(), config.clone(), clock).await.expect("state");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = format!("http://{}", listener.local_addr().expect("addr"));
        let shutdown = CancellationToken::new();
        let router = app_router(state.clone());
        let server = tokio::spawn(exportd::server::serve(listener, router, shutdown.clone()));
        let fault_scope = format!("{}/", uuid::Uuid::new_v4().simple());
        let (wakeup, metrics) = (state.wakeup.clone(), state.metrics.clone());
        let mut app = TestApp { addr, db, dir, config, shutdown, backend, database_url, server, worker: None, _pg: pg, fault_scope, wakeup, metrics };
        if worker {
            app.start_worker(WorkerConfig { deployments: vec![], concurrency: 2 }).await;
        }
        app
    }

    /// Starts an in-process worker with its own shutdown signal (the app's).
    pub async fn start_worker(&mut self, worker: WorkerConfig) {
        let ctx = self.worker_context(worker).await;
        self.worker = Some(tokio::spawn(worker::run(ctx)));
    }

    /// A worker's context on this app's database, store, wake-up and fault scope, not running.
    pub async fn worker_context(&self, worker: WorkerConfig) -> WorkerContext {
        let stores = Arc::new(exportd::storage::Stores::new(self.config.clone()));
        let mut ctx = WorkerContext::connect(self.config.clone(), worker, stores, self.shutdown.clone(), self.wakeup.clone(), self.metrics.clone()).await.expect("worker pools");
        ctx.faults = exportd::faults::Faults::scoped(&self.fault_scope);
        ctx
    }

    /// The full name of one of this app's worker fault points.
    pub fn fault(&self, point: &str) -> String {
        format!("{}{point}", self.fault_scope)
    }

    /// Runs the `exportd` binary against this app's database and store; returns its exit code.
    pub async fn cli(&self, args: &[&str]) -> i32 {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_exportd"))
            .args(args)
            .env("DATABASE_URL", &self.database_url)
            .env("EXPORTD_STORE", &self.config.store_url)
            .env("EXPORTD_LOG", "warn")
            .output()
            .await
            .expect("run exportd");
        out.status.code().unwrap_or(-1)
    }

    /// Makes the object store fail every call, as an unreachable store does: its folder is moved
    /// away and a plain file takes its place.
    pub fn store_down(&self) {
        let root = self.dir.path().join("objects");
        let aside = self.dir.path().join("objects.down");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::rename(&root, &aside).unwrap();
        std::fs::write(&root, b"the store is down").unwrap();
    }

    /// Brings the store back, with everything it held.
    pub fn store_up(&self) {
        let root = self.dir.path().join("objects");
        std::fs::remove_file(&root).unwrap();
        std::fs::rename(self.dir.path().join("objects.down"), &root).unwrap();
    }

    /// The id of the only export in the database that matches `condition` (SQL).
    pub async fn export_id_where(&self, condition: &str) -> Option<String> {
        let backend = self.db.get_database_backend();
        let row = self.db.query_one_raw(Statement::from_string(backend, format!("SELECT id FROM jobs WHERE {condition}"))).await.unwrap()?;
        Some(row.try_get_by_index::<String>(0).unwrap())
    }

    pub fn database_url(&self) -> &str {
        &self.database_url
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.addr)
    }

    /// A client with no credentials.
    pub fn anonymous(&self) -> reqwest::Client {
        reqwest::Client::builder().cookie_store(true).redirect(reqwest::redirect::Policy::none()).build().unwrap()
    }

    /// A client signed in through the login form as `email`.
    pub async fn login(&self, email: &str) -> reqwest::Client {
        let client = self.anonymous();
        let resp = client
            .post(self.url("/api/session"))
            .json(&serde_json::json!({"email": email, "password": exportd::seed::DEMO_PASSWORD}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 204, "login of {email}");
        client
    }

    /// POST /api/exports with `key` and a JSON body.
    pub async fn create(&self, client: &reqwest::Client, key: &str, body: &Value) -> reqwest::Response {
        client.post(self.url("/api/exports")).header("Idempotency-Key", key).json(body).send().await.unwrap()
    }

    /// Creates `body` as `client`, waits (up to two minutes) for it to be ready, and downloads its
    /// file: the ready view, the file's headers and its bytes.
    pub async fn export_file(&self, client: &reqwest::Client, key: &str, body: &Value) -> (Value, reqwest::header::HeaderMap, bytes::Bytes) {
        let resp = self.create(client, key, body).await;
        assert_eq!(resp.status(), 202, "{:?}", resp.text().await);
        let id = resp.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
        let done = self.wait_terminal(client, &id, Duration::from_secs(120)).await;
        assert_eq!(done["status"], "ready", "{done}");
        let link = client.get(self.url(&format!("/api/exports/{id}/download"))).send().await.unwrap().headers()["location"].to_str().unwrap().to_owned();
        let resp = client.get(self.url(&link)).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        (done, resp.headers().clone(), resp.bytes().await.unwrap())
    }

    /// Polls an export until it is terminal; panics after `limit`.
    pub async fn wait_terminal(&self, client: &reqwest::Client, id: &str, limit: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let view: Value = client.get(self.url(&format!("/api/exports/{id}"))).send().await.unwrap().json().await.unwrap();
            if matches!(view["status"].as_str(), Some("ready" | "failed" | "cancelled")) {
                return view;
            }
            assert!(tokio::time::Instant::now() < deadline, "export {id} still {} after {limit:?}", view["status"]);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A number from one SQL query.
    pub async fn scalar(&self, sql: &str) -> i64 {
        let backend = self.db.get_database_backend();
        let row = self.db.query_one_raw(Statement::from_string(backend, sql.to_owned())).await.unwrap().unwrap();
        row.try_get_by_index::<i64>(0).unwrap()
    }

    /// The text of the first column of each row of one SQL query.
    pub async fn texts(&self, sql: &str) -> Vec<String> {
        let backend = self.db.get_database_backend();
        let rows = self.db.query_all_raw(Statement::from_string(backend, sql.to_owned())).await.unwrap();
        rows.iter().map(|r| r.try_get_by_index::<Option<String>>(0).unwrap().unwrap_or_default()).collect()
    }

    /// Every file under the store's folder, relative to it.
    pub fn objects(&self, prefix: &str) -> Vec<String> {
        let root = self.dir.path().join("objects");
        let mut out = Vec::new();
        let mut stack = vec![root.join(prefix)];
        while let Some(p) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&p) else { continue };
            for e in entries.flatten() {
                let path = e.path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    out.push(path.strip_prefix(&root).unwrap().display().to_string());
                }
            }
        }
        out.sort();
        out
    }

    /// A client that authenticates with a new API token of `email`.
    pub async fn token_client(&self, email: &str) -> (reqwest::Client, String) {
        use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
        let user = exportd::entities::users::Entity::find()
            .filter(exportd::entities::users::Column::Email.eq(email))
            .one(&self.db)
            .await
            .unwrap()
            .unwrap();
        let token = exportd::auth::create_token(&self.db, &user.id, 0).await.unwrap();
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("authorization", format!("Bearer {token}").parse().unwrap());
        let client = reqwest::Client::builder().default_headers(headers).redirect(reqwest::redirect::Policy::none()).build().unwrap();
        (client, token)
    }

    /// Runs one SQL statement.
    pub async fn exec(&self, sql: &str) {
        self.db.execute_unprepared(sql).await.unwrap();
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        if let Some(w) = self.worker {
            let _ = w.await;
        }
        let _ = self.server.await;
    }
}

/// A fault point that holds the workers reaching it, from its `nth` pass on, until they are let
/// through: each hit is announced, and each held worker takes one permit to go on.
#[cfg(feature = "failpoints")]
struct Hold {
    name: String,
    hits: tokio::sync::mpsc::UnboundedReceiver<()>,
    permits: Arc<(Mutex<usize>, std::sync::Condvar)>,
}

#[cfg(feature = "failpoints")]
impl Hold {
    fn install(name: &str, nth: usize) -> Hold {
        let (tx, hits) = tokio::sync::mpsc::unbounded_channel();
        let permits = Arc::new((Mutex::new(0usize), std::sync::Condvar::new()));
        let held = permits.clone();
        let passes = std::sync::atomic::AtomicUsize::new(0);
        fail::cfg_callback(name, move || {
            if passes.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 < nth {
                return;
            }
            let _ = tx.send(());
            let (lock, cv) = &*held;
            let mut left = lock.lock().unwrap();
            while *left == 0 {
                left = cv.wait(left).unwrap();
            }
            *left -= 1;
        })
        .unwrap();
        Hold { name: name.to_owned(), hits, permits }
    }

    async fn hit_within(&mut self, limit: Duration) -> bool {
        matches!(tokio::time::timeout(limit, self.hits.recv()).await, Ok(Some(())))
    }

    /// Lets `n` more workers through (`usize::MAX / 2`: every one from now on).
    fn permit(&self, n: usize) {
        let (lock, cv) = &*self.permits;
        let mut left = lock.lock().unwrap();
        *left = left.saturating_add(n).min(usize::MAX / 2);
        cv.notify_all();
    }
}

#[cfg(feature = "failpoints")]
impl Drop for Hold {
    fn drop(&mut self) {
        fail::remove(&self.name);
        self.permit(usize::MAX / 2);
    }
}

/// A fault point that holds every worker reaching it until the test opens it.
#[cfg(feature = "failpoints")]
pub struct Gate(Hold);

#[cfg(feature = "failpoints")]
impl Gate {
    /// Closes the fault point `name` (a full name, see [`TestApp::fault`]).
    pub fn close(name: &str) -> Gate {
        Gate::close_at(name, 1)
    }

    /// Closes the fault point `name` from its `nth` pass on (1 = the first): the passes before
    /// it go through.
    pub fn close_at(name: &str, nth: usize) -> Gate {
        Gate(Hold::install(name, nth))
    }

    /// Waits until a worker is held at the gate.
    pub async fn reached(&mut self) {
        assert!(self.0.hit_within(Duration::from_secs(60)).await, "no worker reached {} within 60 s", self.0.name);
    }

    /// Lets the held worker (and every later one) through.
    pub fn open(&self) {
        self.0.permit(usize::MAX / 2);
    }
}

/// A fault point that holds each worker reaching it until the test lets that one through:
/// the test can look at the world at every pass (between every two parts, say).
#[cfg(feature = "failpoints")]
pub struct Turnstile(Hold);

#[cfg(feature = "failpoints")]
impl Turnstile {
    /// Closes the fault point `name` (a full name, see [`TestApp::fault`]).
    pub fn close(name: &str) -> Turnstile {
        Turnstile(Hold::install(name, 1))
    }

    /// Waits until a worker is held at the turnstile; `false` if none comes within `limit`.
    pub async fn reached_within(&mut self, limit: Duration) -> bool {
        self.0.hit_within(limit).await
    }

    /// Lets one held worker through.
    pub fn pass(&self) {
        self.0.permit(1);
    }
}

/// Runs the body once on SQLite and once on PostgreSQL, as two tests.
#[macro_export]
macro_rules! on_both_backends {
    ($name:ident, |$backend:ident| $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            async fn run($backend: $crate::support::Backend) $body

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn on_sqlite() {
                run($crate::support::Backend::Sqlite).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn on_postgres() {
                run($crate::support::Backend::Postgres).await
            }
        }
    };
}

/// Asserts an RFC 9457 problem with `status` and `code`; returns its body.
pub async fn expect_problem(resp: reqwest::Response, status: u16, code: &str) -> Value {
    assert_eq!(resp.status().as_u16(), status, "status for {code}");
    let ct = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    assert_eq!(ct, "application/problem+json", "content type for {code}");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["status"], status);
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["type"], format!("https://exportd.dev/problems/{code}"));
    assert!(body["title"].is_string());
    body
}

/// Sends every request at once, released together by a barrier; returns each answer's status
/// and the `id` of its body, in order.
pub async fn send_together(requests: Vec<reqwest::RequestBuilder>) -> Vec<(u16, Option<String>)> {
    let barrier = Arc::new(tokio::sync::Barrier::new(requests.len()));
    let tasks: Vec<_> = requests
        .into_iter()
        .map(|request| {
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                let resp = request.send().await.unwrap();
                let status = resp.status().as_u16();
                let body: Value = resp.json().await.unwrap_or(Value::Null);
                (status, body["id"].as_str().map(str::to_owned))
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}
