//! Your data, exported and imported (contract §5.1, §10, §12, case 23): a schema written for this
//! test, with a key of two columns, a reference to another dataset, Arabic text and eight types,
//! exported (in parts too, resumed after a SIGKILL) and imported back through a catalog alone; a
//! file of changes applied twice changes each row once,
//! every cell read by its column's type with its own error, and the dataset's `after_batch` keeps
//! the clinics' counts. On PostgreSQL with the source a database apart, a worker killed inside a
//! batch and another killed after the source committed one: the ledger in the source holds each
//! batch once, each row is applied once, and the same file sent again changes nothing.

mod support;

use exportd::catalog::Catalog;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use support::imports::{codes, import, report, upload};
use support::{Backend, TestApp};

/// The catalog, for `backend`: only `after_batch` reads `:refs` in the backend's own way.
fn catalog_text(backend: Backend) -> String {
    let refs = match backend {
        Backend::Postgres => "json_array_elements_text(:refs::json)",
        Backend::Sqlite => "json_each(:refs)",
    };
    format!(
        r#"
[[report]]
name = "supplies"
title = {{ en = "Supplies", ar = "المستلزمات" }}
from = "supplies s LEFT JOIN clinics k ON k.org = s.org AND k.id = s.clinic_id"
tenant = "s.org"
key = "s.id"
time = {{ sql = "s.counted_at" }}
columns = [
  {{ name = "supply_id", sql = "s.id", type = "integer" }},
  {{ name = "site", sql = "s.site", type = "text" }},
  {{ name = "sku", sql = "s.sku", type = "text" }},
  {{ name = "clinic", sql = "k.name", type = "text" }},
  {{ name = "label", sql = "s.label", type = "text" }},
  {{ name = "qty", sql = "s.qty", type = "integer" }},
  {{ name = "price", sql = "s.price_minor", type = "money", currency = "s.currency" }},
  {{ name = "currency", sql = "s.currency", type = "text" }},
  {{ name = "weight_kg", sql = "s.weight_kg", type = "decimal", scale = 3 }},
  {{ name = "expires_on", sql = "s.expires_on", type = "date" }},
  {{ name = "counted_at", sql = "s.counted_at", type = "timestamp" }},
  {{ name = "active", sql = "s.active", type = "boolean" }},
]

[[dataset]]
name = "clinics"
table = "clinics"
tenant = "org"
key = [{{ name = "clinic", column = "name" }}]
columns = [{{ name = "clinic", column = "name", type = "text", required = true, max_chars = 200 }}]

[[dataset]]
name = "supplies"
title = {{ en = "Supplies", ar = "المستلزمات" }}
table = "supplies"
tenant = "org"
key = [{{ name = "site", column = "site" }}, {{ name = "sku", column = "sku" }}]
columns = [
  {{ name = "site", column = "site", type = "text", required = true, max_chars = 20 }},
  {{ name = "sku", column = "sku", type = "text", required = true, pattern = "[A-Z]{{2}}-\\d{{3}}" }},
  {{ name = "clinic", column = "clinic_id", type = "text", references = {{ dataset = "clinics", key = "clinic", store = "id" }} }},
  {{ name = "label", column = "label", type = "text", max_chars = 100 }},
  {{ name = "qty", column = "qty", type = "integer", required = true }},
  {{ name = "price", column = "price_minor", type = "money", currency = "currency" }},
  {{ name = "currency", column = "currency", type = "text", format = "currency" }},
  {{ name = "weight_kg", column = "weight_kg", type = "decimal", scale = 3 }},
  {{ name = "expires_on", column = "expires_on", type = "date" }},
  {{ name = "counted_at", column = "counted_at", type = "timestamp" }},
  {{ name = "active", column = "active", type = "boolean" }},
]
ignore = ["supply_id"]
after_batch = "UPDATE clinics SET supplies = (SELECT COUNT(*) FROM supplies s WHERE s.org = clinics.org AND s.clinic_id = clinics.id) WHERE org = :tenant AND CAST(id AS TEXT) IN (SELECT value FROM {refs})"
"#
    )
}

fn catalog(backend: Backend) -> Arc<Catalog> {
    Arc::new(exportd::catalog::parse("supplies.toml", &catalog_text(backend)).expect("the test's catalog reads"))
}

/// The schema, on each backend in its own types.
fn schema(backend: Backend) -> [&'static str; 2] {
    match backend {
        Backend::Postgres => [
            "CREATE TABLE clinics (org TEXT NOT NULL, id BIGINT NOT NULL, name TEXT NOT NULL, supplies INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (org, id), UNIQUE (org, name))",
            "CREATE TABLE supplies (id BIGSERIAL PRIMARY KEY, org TEXT NOT NULL, site TEXT NOT NULL, sku TEXT NOT NULL, clinic_id BIGINT, label TEXT NOT NULL DEFAULT '', \
             qty INTEGER NOT NULL, price_minor BIGINT, currency CHAR(3), weight_kg NUMERIC(9,3), expires_on DATE, counted_at TIMESTAMPTZ, active BOOLEAN, UNIQUE (org, site, sku))",
        ],
        Backend::Sqlite => [
            "CREATE TABLE clinics (org TEXT NOT NULL, id INTEGER NOT NULL, name TEXT NOT NULL, supplies INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (org, id), UNIQUE (org, name))",
            "CREATE TABLE supplies (id INTEGER PRIMARY KEY, org TEXT NOT NULL, site TEXT NOT NULL, sku TEXT NOT NULL, clinic_id INTEGER, label TEXT NOT NULL DEFAULT '', \
             qty INTEGER NOT NULL, price_minor INTEGER, currency TEXT, weight_kg REAL, expires_on TEXT, counted_at TEXT, active INTEGER, UNIQUE (org, site, sku))",
        ],
    }
}

fn seed_rows(backend: Backend) -> Vec<String> {
    let (yes, no) = match backend {
        Backend::Postgres => ("TRUE", "FALSE"),
        Backend::Sqlite => ("1", "0"),
    };
    vec![
        "INSERT INTO clinics (org, id, name) VALUES ('org-a', 1, 'عيادة النور'), ('org-a', 2, 'Clinic B'), ('org-b', 1, 'Other')".to_owned(),
        format!("INSERT INTO supplies (id, org, site, sku, clinic_id, label, qty, price_minor, currency, weight_kg, expires_on, counted_at, active) VALUES \
                 (1, 'org-a', 'RUH', 'AB-001', 1, 'قفازات طبية', 100, 1250, 'SAR', 0.5, '2027-01-31', '2026-03-01T06:30:00Z', {yes}), \
                 (2, 'org-a', 'RUH', 'AB-002', 2, '=SUM(A1)', 5, 1500, 'KWD', NULL, NULL, '2026-03-02T08:15:00Z', {no}), \
                 (3, 'org-a', 'JED', 'AB-001', NULL, '', 0, 300, 'JPY', 12.25, '2026-12-31', '2026-03-03T23:59:59Z', NULL), \
                 (4, 'org-b', 'RUH', 'AB-001', 1, 'not yours', 1, 100, 'SAR', 1, NULL, '2026-03-01T10:00:00Z', {yes})"),
        // Rows inserted with their ids leave a sequence behind them.
        if backend == Backend::Postgres { "SELECT setval('supplies_id_seq', 100)" } else { "SELECT 1" }.to_owned(),
    ]
}

const EXPORTED: [&str; 4] = [
    "supply_id,site,sku,clinic,label,qty,price,currency,weight_kg,expires_on,counted_at,active",
    "1,RUH,AB-001,عيادة النور,قفازات طبية,100,12.50,SAR,0.500,2027-01-31,2026-03-01T06:30:00Z,true",
    "2,RUH,AB-002,Clinic B,'=SUM(A1),5,1.500,KWD,,,2026-03-02T08:15:00Z,false",
    "3,JED,AB-001,,,0,300,JPY,12.250,2026-12-31,2026-03-03T23:59:59Z,",
];

/// Changes: two rows that write (one update, two creates), one unchanged, and a row for each
/// way a cell can be wrong.
const CHANGES: &str = "site,sku,clinic,label,qty,price,currency,weight_kg,expires_on,counted_at,active\n\
RUH,AB-001,Clinic B,قفازات طبية,90,12.5,SAR,0.5,2027-01-31,2026-03-01T09:30:00+03:00,true\n\
DMM,CD-010,عيادة النور,ضمادات,7,0.125,KWD,1.2,2026-06-30,2026-03-05T10:00:00Z,false\n\
DMM,CD-011,,,3,5,JPY,,,,TRUE\n\
JED,AB-001,,,0,300,JPY,12.25,2026-12-31,2026-03-03T23:59:59Z,\n\
DMM,cd-012,,x,1,,,,,,\n\
DMM,CD-013,Nowhere,x,1,,,,,,\n\
DMM,CD-014,,x,1,1.2345,KWD,,,,\n\
DMM,CD-015,,x,1,5.5,JPY,,,,\n\
DMM,CD-016,,x,one,,,,,,\n\
DMM,CD-017,,x,1,,,,2026-02-30,,\n\
DMM,CD-018,,x,1,,,,,,maybe\n\
DMM,CD-019,,x,1,,,2.5,,yesterday,\n\
DMM,CD-020,,x,1,,,,,,\n\
DMM,CD-020,,y,2,,,,,,\n\
,CD-021,,x,1,,,,,,\n";

/// What the changes leave in org-a's supplies, by key.
const AFTER: [&str; 6] = [
    "DMM|CD-010|1|ضمادات|7|125|KWD|1.200|2026-06-30|true|false",
    "DMM|CD-011||(empty)|3|5|JPY||||true",
    "JED|AB-001||(empty)|0|300|JPY|12.250|2026-12-31|true|",
    "RUH|AB-001|2|قفازات طبية|90|1250|SAR|0.500|2027-01-31|true|true",
    "RUH|AB-002|2|=SUM(A1)|5|1500|KWD|||true|false",
    "",
];

async fn app_with_supplies(backend: Backend) -> TestApp {
    let app = TestApp::start(support::Options {
        worker: true,
        orders: 5,
        adjust: |config| {
            config.catalog = catalog_for(config.database_url.starts_with("postgres"));
            config.import_batch_rows = 2;
        },
        ..support::Options::new(backend)
    })
    .await;
    for statement in schema(backend).into_iter().map(str::to_owned).chain(seed_rows(backend)) {
        app.exec(&statement).await;
    }
    app.exec("UPDATE tenants SET source_id = 'org-a' WHERE id = 'ten_acme'").await;
    app.exec("UPDATE tenants SET source_id = 'org-b' WHERE id = 'ten_globex'").await;
    app
}

fn catalog_for(postgres: bool) -> Arc<Catalog> {
    catalog(if postgres { Backend::Postgres } else { Backend::Sqlite })
}

/// Org-a's supplies, one line each in key order: the key, the clinic's id, the label (or
/// `(empty)`), the quantity, price in minor units, currency, weight to 3 places, expiry day,
/// whether counted, and active.
async fn supplies(app: &TestApp, backend: Backend) -> Vec<String> {
    let weight = if backend == Backend::Postgres { "CAST(weight_kg AS TEXT)" } else { "CASE WHEN weight_kg IS NULL THEN NULL ELSE printf('%.3f', weight_kg) END" };
    let active = if backend == Backend::Postgres { "CASE WHEN active THEN 'true' WHEN NOT active THEN 'false' ELSE '' END" } else { "CASE active WHEN 1 THEN 'true' WHEN 0 THEN 'false' ELSE '' END" };
    let sql = format!(
        "SELECT site || '|' || sku || '|' || COALESCE(CAST(clinic_id AS TEXT), '') || '|' || CASE WHEN label = '' THEN '(empty)' ELSE label END || '|' || CAST(qty AS TEXT) || '|' || \
         COALESCE(CAST(price_minor AS TEXT), '') || '|' || COALESCE(TRIM(currency), '') || '|' || COALESCE({weight}, '') || '|' || COALESCE(CAST(expires_on AS TEXT), '') || '|' || \
         CASE WHEN counted_at IS NULL THEN '' ELSE 'true' END || '|' || {active} FROM supplies WHERE org = 'org-a' ORDER BY site, sku"
    );
    let mut found = app.texts(&sql).await;
    found.push(String::new());
    found
}

on_both_backends!(a_catalog_dataset_over_a_schema_that_is_not_the_demos_imports_its_own_export_and_applies_each_change_once, |backend| {
    let app = app_with_supplies(backend).await;
    let alice = app.login("alice@acme.test").await;

    // Exported, and imported back as it is: every row unchanged.
    let resp = app.create(&alice, "export", &json!({"report": "supplies", "time_range": {"from": "2026-03-01", "to": "2026-03-31"}})).await;
    assert_eq!(resp.status(), 202);
    let id = resp.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    assert_eq!(app.wait_terminal(&alice, &id, Duration::from_secs(30)).await["status"], "ready");
    let link = alice.get(app.url(&format!("/api/exports/{id}/download"))).send().await.unwrap().headers()["location"].to_str().unwrap().to_owned();
    let file = String::from_utf8(alice.get(app.url(&link)).send().await.unwrap().bytes().await.unwrap().to_vec()).unwrap();
    assert_eq!(file.trim_end().split("\r\n").collect::<Vec<_>>(), EXPORTED);
    let upl = upload(&app, &alice, &file).await;
    let back = import(&app, &alice, "back", json!({"dataset": "supplies", "upload": upl})).await;
    assert_eq!(back["status"], "ready", "{back}");
    assert_eq!(back["counts"], json!({"rows": 3, "valid": 3, "invalid": 0, "created": 0, "updated": 0, "unchanged": 3, "applied": 3}));

    // A dry run of the changes predicts and writes nothing.
    let before = supplies(&app, backend).await;
    let changes = upload(&app, &alice, CHANGES).await;
    let dry = import(&app, &alice, "dry", json!({"dataset": "supplies", "upload": changes, "mode": "dry_run", "on_error": "skip_invalid"})).await;
    assert_eq!(dry["status"], "ready", "{dry}");
    assert_eq!((dry["counts"]["created"].as_i64(), dry["counts"]["updated"].as_i64(), dry["counts"]["applied"].as_i64()), (Some(2), Some(1), Some(0)), "{dry}");
    assert_eq!(supplies(&app, backend).await, before);

    // Applied: each cell by its type, each error with its own code.
    let applied = import(&app, &alice, "apply", json!({"dataset": "supplies", "upload": changes, "on_error": "skip_invalid"})).await;
    assert_eq!(applied["status"], "ready", "{applied}");
    assert_eq!(applied["counts"], json!({"rows": 15, "valid": 4, "invalid": 11, "created": 2, "updated": 1, "unchanged": 1, "applied": 4}));
    let id = applied["id"].as_str().unwrap();
    let found: Vec<(i64, String, String)> = codes(&report(&app, &alice, id).await);
    let expected: Vec<(i64, &str, &str)> = vec![
        (6, "sku", "invalid_sku"),
        (7, "clinic", "unknown_reference"),
        (8, "price", "too_many_decimals"),
        (9, "price", "too_many_decimals"),
        (10, "qty", "invalid_integer"),
        (11, "expires_on", "invalid_date"),
        (12, "active", "invalid_boolean"),
        (13, "counted_at", "invalid_instant"),
        (14, "site", "duplicate_key"),
        (15, "site", "duplicate_key"),
        (16, "site", "missing_value"),
    ];
    assert_eq!(found, expected.iter().map(|(l, c, k)| (*l, c.to_string(), k.to_string())).collect::<Vec<_>>());
    assert_eq!(supplies(&app, backend).await, AFTER);
    // `after_batch` counted each clinic's supplies, the one a row left and the one it joined.
    assert_eq!(app.texts("SELECT CAST(id AS TEXT) || ':' || CAST(supplies AS TEXT) FROM clinics WHERE org = 'org-a' ORDER BY id").await, vec!["1:1", "2:2"]);

    // The same changes again: nothing is applied twice.
    let again = import(&app, &alice, "again", json!({"dataset": "supplies", "upload": changes, "on_error": "skip_invalid"})).await;
    assert_eq!((again["counts"]["created"].as_i64(), again["counts"]["updated"].as_i64(), again["counts"]["unchanged"].as_i64()), (Some(0), Some(0), Some(4)), "{again}");
    assert_eq!(supplies(&app, backend).await, AFTER);
    assert_eq!(app.scalar("SELECT COUNT(*) FROM supplies WHERE org = 'org-b' AND label = 'not yours' AND qty = 1").await, 1, "another tenant's row is never touched");
    // Its schema version is the dataset's.
    let digest = catalog(backend).dataset("supplies").unwrap().digest();
    assert_eq!(app.scalar(&format!("SELECT COUNT(*) FROM jobs WHERE kind = 'import' AND schema_digest = '{digest}'")).await, 4);
});

/// `n` new supplies of site `TST`, for org-a's clinic of Arabic name.
fn new_supplies(n: usize) -> String {
    let mut csv = "site,sku,clinic,label,qty,price,currency\n".to_owned();
    for i in 0..n {
        csv.push_str(&format!("TST,ZZ-{i:03},عيادة النور,صنف {i},{i},{i}.250,KWD\n"));
    }
    csv
}

/// `POST /api/imports`: an apply of `upload` into supplies, under `key`; its view.
async fn apply(client: &reqwest::Client, base: &str, token: &str, key: &str, upload: &Value) -> Value {
    let resp = client.post(format!("{base}/api/imports")).bearer_auth(token).header("Idempotency-Key", key).json(&json!({"dataset": "supplies", "upload": upload})).send().await.unwrap();
    resp.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_import_into_a_source_apart_applies_each_batch_once_through_a_worker_killed_inside_one_and_another_killed_after_the_sources_commit() {
    use support::procs::{eventually, rows, scalar, Prepared};
    const LONG: Duration = Duration::from_secs(90);
    let p = Prepared::new(Backend::Postgres, 10).await;
    let (source_url, _source_dropped) = support::fresh_database(Backend::Postgres, p.dir.path()).await;
    let source = exportd::db::connect(&source_url).await.unwrap();
    for statement in schema(Backend::Postgres).into_iter().map(str::to_owned).chain(seed_rows(Backend::Postgres)) {
        sea_orm::ConnectionTrait::execute_unprepared(&source, &statement).await.unwrap();
    }
    let db = p.connect().await;
    sea_orm::ConnectionTrait::execute_unprepared(&db, "UPDATE tenants SET source_id = 'org-a' WHERE id = 'ten_acme'").await.unwrap();
    let file = p.dir.path().join("supplies.toml");
    std::fs::write(&file, catalog_text(Backend::Postgres)).unwrap();
    let file = file.display().to_string();
    let env = [("EXPORTD_CATALOG", file.as_str()), ("EXPORTD_SOURCE_URL", source_url.as_str()), ("EXPORTD_IMPORT_BATCH_ROWS", "4")];

    // Without its ledger the source is refused, by the check and by a worker at start.
    let checked = p.command().envs(env).args(["catalog", "check"]).output().await.unwrap();
    assert_eq!(checked.status.code(), Some(1), "{}", String::from_utf8_lossy(&checked.stderr));
    assert!(String::from_utf8_lossy(&checked.stderr).contains("migrate-source"), "{}", String::from_utf8_lossy(&checked.stderr));
    let made = p.command().envs(env).args(["catalog", "migrate-source"]).output().await.unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    assert_eq!(scalar(&source, "SELECT COUNT(*) FROM exportd_import_batches").await, 0);

    let (_api, base) = p.api_with(&env).await;
    let token = p.run_ok(&["token", "create", "alice@acme.test"]).await.trim().to_owned();
    let client = reqwest::Client::new();
    let upload: Value = client.post(format!("{base}/api/uploads")).bearer_auth(&token).header("content-type", "text/csv").body(new_supplies(40)).send().await.unwrap().json().await.unwrap();
    let created = apply(&client, &base, &token, "apart", &upload["upload"]).await;
    let id = created["id"].as_str().expect("an import").to_owned();
    let ours = "SELECT COUNT(*) FROM supplies WHERE org = 'org-a' AND site = 'TST'";

    // Worker a: three batches commit in both databases; the fourth commits in the source and
    // the worker is killed before the job store's checkpoint.
    let mut a = p.worker("a", &[env[0], env[1], env[2], ("FAILPOINTS", "import_source_committed=3*off->sleep(30000)")], &[]);
    a.wait_count(&["import_source_committed", &id], 4, LONG).await;
    a.signal("KILL");
    a.wait_exit(LONG).await;
    assert_eq!(scalar(&source, ours).await, 16, "the fourth batch is in the source");
    assert_eq!(scalar(&source, &format!("SELECT COUNT(*) FROM exportd_import_batches WHERE job_id = '{id}'")).await, 4);
    assert_eq!(scalar(&db, &format!("SELECT COUNT(*) FROM job_checkpoints WHERE job_id = '{id}'")).await, 3, "the job store saw three");

    // Worker b: the fourth batch is in the ledger and is skipped; the fifth commits; the
    // sixth waits between its writes and the source's commit, and b is killed there.
    let mut b = p.worker("b", &[env[0], env[1], env[2], ("FAILPOINTS", "import_batch_before_commit=1*off->sleep(30000)")], &[]);
    b.wait_count(&["import_batch_before_commit", &id], 2, LONG).await;
    b.signal("KILL");
    b.wait_exit(LONG).await;
    assert_eq!(scalar(&source, ours).await, 20, "the sixth batch committed nothing");

    // Worker c finishes it.
    let _c = p.worker("c", &env, &[]);
    eventually("the import is ready", LONG, || {
        let db = db.clone();
        let id = id.clone();
        async move { scalar(&db, &format!("SELECT COUNT(*) FROM jobs WHERE id = '{id}' AND status = 'ready'")).await == 1 }
    })
    .await;
    assert_eq!(scalar(&source, ours).await, 40, "every row, once");
    assert_eq!(scalar(&source, "SELECT COUNT(DISTINCT sku) FROM supplies WHERE org = 'org-a' AND site = 'TST'").await, 40);
    let ledger = rows(&source, &format!("SELECT CAST(first_record AS TEXT), CAST(last_record AS TEXT), counts FROM exportd_import_batches WHERE job_id = '{id}' ORDER BY first_record")).await;
    let mut spans: Vec<(i64, i64)> = ledger.iter().map(|r| (r[0].parse().unwrap(), r[1].parse().unwrap())).collect();
    spans.sort_unstable();
    assert_eq!(spans, (0..10).map(|b| (b * 4 + 1, b * 4 + 4)).collect::<Vec<_>>(), "the ledger holds each batch once");
    let created_in_ledger: i64 = ledger.iter().map(|r| serde_json::from_str::<Value>(&r[2]).unwrap()["created"].as_i64().unwrap()).sum();
    assert_eq!(created_in_ledger, 40);
    assert_eq!(scalar(&db, &format!("SELECT COUNT(*) FROM job_checkpoints WHERE job_id = '{id}'")).await, 10);
    let view: Value = client.get(format!("{base}/api/imports/{id}")).bearer_auth(&token).send().await.unwrap().json().await.unwrap();
    assert_eq!((view["counts"]["created"].as_i64(), view["counts"]["applied"].as_i64()), (Some(40), Some(40)), "the skipped batch's counts came from the ledger: {view}");
    assert_eq!(scalar(&source, "SELECT CAST(supplies AS BIGINT) FROM clinics WHERE org = 'org-a' AND id = 1").await, 41, "after_batch ran in the source");
    assert_eq!(scalar(&db, "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'supplies'").await, 0, "the job store holds none of the source's tables");

    // The same file again, as a new import: every row is there, none is applied twice.
    let again = apply(&client, &base, &token, "apart-again", &upload["upload"]).await;
    let again_id = again["id"].as_str().expect("an import").to_owned();
    eventually("the second import is ready", LONG, || {
        let db = db.clone();
        let id = again_id.clone();
        async move { scalar(&db, &format!("SELECT COUNT(*) FROM jobs WHERE id = '{id}' AND status = 'ready'")).await == 1 }
    })
    .await;
    let view: Value = client.get(format!("{base}/api/imports/{again_id}")).bearer_auth(&token).send().await.unwrap().json().await.unwrap();
    assert_eq!((view["counts"]["created"].as_i64(), view["counts"]["unchanged"].as_i64()), (Some(0), Some(40)), "{view}");
    assert_eq!(scalar(&source, ours).await, 40);
    assert_eq!(scalar(&source, &format!("SELECT COUNT(*) FROM exportd_import_batches WHERE job_id = '{again_id}'")).await, 10, "its own ten batches in the ledger");
}

/// Fifty-seven supplies of org-a, in key order: the statement that inserts them, and the CSV rows the
/// supplies report writes for them.
fn more_supplies(backend: Backend) -> (String, Vec<String>) {
    let (yes, no) = if backend == Backend::Postgres { ("TRUE", "FALSE") } else { ("1", "0") };
    let mut values = Vec::new();
    let mut csv = Vec::new();
    for i in 1..=57i64 {
        let (clinic_id, clinic) = match i % 3 {
            0 => ("NULL", ""),
            1 => ("1", "عيادة النور"),
            _ => ("2", "Clinic B"),
        };
        let active = i % 2 == 0;
        values.push(format!(
            "({}, 'org-a', 'S{}', 'AA-{i:03}', {clinic_id}, 'صنف {i}', {i}, {}, 'SAR', NULL, '2027-01-01', '2026-03-01T10:{:02}:00Z', {})",
            100 + i,
            i % 4,
            i * 125,
            i % 60,
            if active { yes } else { no }
        ));
        csv.push(format!("{},S{},AA-{i:03},{clinic},صنف {i},{i},{}.{:02},SAR,,2027-01-01,2026-03-01T10:{:02}:00Z,{active}", 100 + i, i % 4, i * 125 / 100, i * 125 % 100, i % 60));
    }
    let insert = format!("INSERT INTO supplies (id, org, site, sku, clinic_id, label, qty, price_minor, currency, weight_kg, expires_on, counted_at, active) VALUES {}", values.join(", "));
    (insert, csv)
}

on_both_backends!(a_checkpointed_export_of_a_catalog_report_resumes_after_its_worker_is_killed_and_writes_each_row_once, |backend| {
    use support::procs::{rows, Api, Prepared};
    const LONG: Duration = Duration::from_secs(90);
    let p = Prepared::new(backend, 10).await;
    let db = p.connect().await;
    let (insert, expected) = more_supplies(backend);
    for statement in schema(backend).into_iter().map(str::to_owned).chain(seed_rows(backend)).chain([insert, "UPDATE tenants SET source_id = 'org-a' WHERE id = 'ten_acme'".to_owned()]) {
        sea_orm::ConnectionTrait::execute_unprepared(&db, &statement).await.unwrap();
    }
    let file = p.dir.path().join("supplies.toml");
    std::fs::write(&file, catalog_text(backend)).unwrap();
    let file = file.display().to_string();
    let (_api, base) = p.api_with(&[("EXPORTD_CATALOG", &file)]).await;
    let api = Api::new(&base, &p.token);
    let mut a = p.worker("a", &[("EXPORTD_CATALOG", &file), ("EXPORTD_PART_ROWS", "10"), ("FAILPOINTS", "after_checkpoint=1*off->sleep(60000)")], &[]);
    // Sixty rows in March's first three days: six parts of ten.
    let request = json!({"report": "supplies", "time_range": {"from": "2026-03-01", "to": "2026-03-03"}, "consistency": "checkpointed"});
    let (status, view) = api.create("parts", &request).await;
    assert_eq!(status, 202, "{view}");
    let id = view["id"].as_str().unwrap().to_owned();
    a.wait_count(&["after_checkpoint", &id], 2, LONG).await;
    a.signal("KILL");
    a.wait_exit(LONG).await;
    let checkpoints = |db: sea_orm::DatabaseConnection, id: String| async move {
        rows(&db, &format!("SELECT CAST(seq AS TEXT), CAST(generation AS TEXT) FROM job_checkpoints WHERE job_id = '{id}'")).await.iter().map(|r| (r[0].parse::<i64>().unwrap(), r[1].parse::<i64>().unwrap())).collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(checkpoints(db.clone(), id.clone()).await, [(1, 1), (2, 1)].into(), "two parts before the kill");

    // Another worker, with another part size: the plan the first attempt fixed still holds.
    let _b = p.worker("b", &[("EXPORTD_CATALOG", &file), ("EXPORTD_PART_ROWS", "7")], &[]);
    let done = api.wait_status(&id, &["ready", "failed"], LONG).await;
    assert_eq!((done["status"].as_str(), done["attempt"].as_i64(), done["progress"]["parts_done"].as_i64()), (Some("ready"), Some(2), Some(6)), "{done}");
    assert_eq!(checkpoints(db.clone(), id.clone()).await, [(1, 1), (2, 1), (3, 2), (4, 2), (5, 2), (6, 2)].into(), "the second attempt began at part 3");
    let header = EXPORTED[0];
    let seeded: Vec<&str> = EXPORTED[1..].to_vec();
    let mut read = Vec::new();
    for part in 1..=6 {
        let link = api.link(&format!("/api/exports/{id}/parts/{part}/download")).await.expect("a part's link");
        let text = reqwest::get(link).await.unwrap().text().await.unwrap();
        let mut lines = text.trim_end().split("\r\n");
        assert_eq!(lines.next(), Some(header), "part {part} has the header");
        read.extend(lines.map(str::to_owned));
    }
    let all: Vec<String> = seeded.iter().map(|s| s.to_string()).chain(expected).collect();
    assert_eq!(read, all, "the tenant's rows, each once, in key order");
});

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_longer_than_its_postgresql_column_is_refused_not_cut_short() {
    let app = app_with_supplies(Backend::Postgres).await;
    app.exec("ALTER TABLE supplies ALTER COLUMN label TYPE VARCHAR(12)").await;
    let alice = app.login("alice@acme.test").await;
    let file = "site,sku,label,qty,price,currency\nDMM,CD-100,short,1,1.5,SAR\nDMM,CD-101,much longer than twelve,1,1.5,SAR\nDMM,CD-102,كلمة,1,1.500,KWD\n";
    let upl = upload(&app, &alice, file).await;
    let done = import(&app, &alice, "long", json!({"dataset": "supplies", "upload": upl, "on_error": "skip_invalid"})).await;
    assert_eq!((done["counts"]["created"].as_i64(), done["counts"]["applied"].as_i64()), (Some(2), Some(2)), "{done}");
    let id = done["id"].as_str().unwrap();
    assert_eq!(codes(&report(&app, &alice, id).await), vec![(3, String::new(), "refused".to_owned())]);
    assert_eq!(app.texts("SELECT sku || ':' || label || ':' || currency FROM supplies WHERE site = 'DMM' ORDER BY sku").await, vec!["CD-100:short:SAR", "CD-102:كلمة:KWD"], "a CHAR(3) keeps its three letters");
}
