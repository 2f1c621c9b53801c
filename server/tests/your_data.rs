//! Your data (contract §12, case 23): a schema written for this test, not the demo's, exported
//! through a catalog alone. Seven column types, Arabic text, a join, NULLs, money in currencies
//! of 0, 2 and 3 places, and a tenant whose source id is not its own id; each cell written as the
//! contract says, the rows of that tenant only, in key order, on both backends.

mod support;

use exportd::catalog::Catalog;
use serde_json::{json, Value};
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use support::{Backend, TestApp};

/// The catalog: one report over `clinics` and `visits`, with filters of five types.
const CATALOG: &str = r#"
[[report]]
name = "visits"
title = { en = "Visits", ar = "الزيارات" }
from = "visits v JOIN clinics k ON k.org = v.org AND k.id = v.clinic_id"
tenant = "v.org"
key = "v.id"
time = { sql = "v.checked_in_at" }
roles = ["admin"]
columns = [
  { name = "visit_id", sql = "v.id", type = "integer" },
  { name = "clinic", sql = "k.name", type = "text" },
  { name = "patient", sql = "v.patient", type = "text", pii = true },
  { name = "visited_on", sql = "v.visited_on", type = "date" },
  { name = "checked_in_at", sql = "v.checked_in_at", type = "timestamp" },
  { name = "fee", sql = "v.fee_minor", type = "money", currency = "v.currency" },
  { name = "currency", sql = "v.currency", type = "text" },
  { name = "weight_kg", sql = "v.weight_kg", type = "decimal", scale = 2 },
  { name = "paid", sql = "v.paid", type = "boolean" },
]
filters = [
  { name = "clinic", sql = "k.name", type = "equals", of = "text" },
  { name = "paid", sql = "v.paid", type = "equals", of = "boolean" },
  { name = "min_fee", sql = "v.fee_minor", type = "at_least", of = "money", currency = "v.currency" },
  { name = "currency", sql = "v.currency", type = "one_of", values = ["SAR", "KWD", "JPY"] },
  { name = "since", sql = "v.visited_on", type = "at_least", of = "date" },
]
"#;

static TEST_CATALOG: LazyLock<Arc<Catalog>> = LazyLock::new(|| Arc::new(exportd::catalog::parse("visits.toml", CATALOG).expect("the test's catalog reads")));

/// The schema, on each backend in its own types.
fn schema(backend: Backend) -> [&'static str; 2] {
    match backend {
        Backend::Postgres => [
            "CREATE TABLE clinics (org TEXT NOT NULL, id BIGINT NOT NULL, name TEXT NOT NULL, PRIMARY KEY (org, id))",
            "CREATE TABLE visits (id BIGINT PRIMARY KEY, org TEXT NOT NULL, clinic_id BIGINT NOT NULL, patient TEXT, visited_on DATE, \
             checked_in_at TIMESTAMPTZ NOT NULL, fee_minor BIGINT, currency TEXT, weight_kg NUMERIC(7,3), paid BOOLEAN)",
        ],
        Backend::Sqlite => [
            "CREATE TABLE clinics (org TEXT NOT NULL, id INTEGER NOT NULL, name TEXT NOT NULL, PRIMARY KEY (org, id))",
            "CREATE TABLE visits (id INTEGER PRIMARY KEY, org TEXT NOT NULL, clinic_id INTEGER NOT NULL, patient TEXT, visited_on TEXT, \
             checked_in_at TEXT NOT NULL, fee_minor INTEGER, currency TEXT, weight_kg REAL, paid INTEGER)",
        ],
    }
}

/// The rows, inserted out of key order; `org-b`'s must never appear in `org-a`'s file.
fn rows(backend: Backend) -> Vec<String> {
    let (yes, no) = match backend {
        Backend::Postgres => ("TRUE", "FALSE"),
        Backend::Sqlite => ("1", "0"),
    };
    let instant = |t: &str| match backend {
        Backend::Postgres => format!("'{t}'"),
        // SQLite keeps what it is given: one row in SQLite's own shape, the others RFC 3339.
        Backend::Sqlite => format!("'{}'", if t == "2026-03-02T08:15:00Z" { "2026-03-02 08:15:00" } else { t }),
    };
    vec![
        "INSERT INTO clinics (org, id, name) VALUES ('org-a', 1, 'عيادة النور'), ('org-a', 2, '=Clinic'), ('org-b', 1, 'Other')".to_owned(),
        format!("INSERT INTO visits VALUES (30, 'org-a', 2, '+966501234567', '2026-03-03', {}, -5, 'KWD', 0.5, {no})", instant("2026-03-03T23:59:59Z")),
        format!("INSERT INTO visits VALUES (10, 'org-a', 1, 'محمد العتيبي', '2026-03-01', {}, 12500, 'SAR', 71.256, {yes})", instant("2026-03-01T09:30:00+03:00")),
        format!("INSERT INTO visits VALUES (20, 'org-a', 1, NULL, NULL, {}, 1250, 'JPY', NULL, NULL)", instant("2026-03-02T08:15:00Z")),
        format!("INSERT INTO visits VALUES (40, 'org-a', 2, 'outside', '2026-04-01', {}, 100, 'SAR', 1, {yes})", instant("2026-04-01T00:00:00Z")),
        format!("INSERT INTO visits VALUES (15, 'org-b', 1, 'not yours', '2026-03-01', {}, 100, 'SAR', 1, {yes})", instant("2026-03-01T10:00:00Z")),
    ]
}

/// What the contract says each row is written as.
const HEADER: &str = "visit_id,clinic,patient,visited_on,checked_in_at,fee,currency,weight_kg,paid";
const ROW_10: &str = "10,عيادة النور,محمد العتيبي,2026-03-01,2026-03-01T06:30:00Z,125.00,SAR,71.26,true";
const ROW_20: &str = "20,عيادة النور,,,2026-03-02T08:15:00Z,1250,JPY,,";
const ROW_30: &str = "30,'=Clinic,'+966501234567,2026-03-03,2026-03-03T23:59:59Z,-0.005,KWD,0.50,false";

async fn app_with_visits(backend: Backend) -> TestApp {
    app_with_visits_under(
        backend,
        |config| {
            config.catalog = TEST_CATALOG.clone();
            config.part_rows = 2;
        },
    )
    .await
}

/// [`app_with_visits`], its configuration set by `adjust`.
async fn app_with_visits_under(backend: Backend, adjust: fn(&mut exportd::config::Config)) -> TestApp {
    let app = TestApp::start(support::Options { worker: true, orders: 5, adjust, ..support::Options::new(backend) }).await;
    for statement in schema(backend).into_iter().map(str::to_owned).chain(rows(backend)) {
        app.exec(&statement).await;
    }
    app.exec("UPDATE tenants SET source_id = 'org-a' WHERE id = 'ten_acme'").await;
    app.exec("UPDATE tenants SET source_id = 'org-b' WHERE id = 'ten_globex'").await;
    app
}

/// Runs an export to `ready` and downloads its file (`download`: its path after the export's).
async fn export_as(app: &TestApp, client: &reqwest::Client, key: &str, body: Value, download: &str) -> String {
    let resp = app.create(client, key, &body).await;
    assert_eq!(resp.status(), 202, "{}", resp.text().await.unwrap_or_default());
    let id = resp.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    let done = app.wait_terminal(client, &id, Duration::from_secs(30)).await;
    assert_eq!(done["status"], "ready", "{done}");
    let link = client.get(app.url(&format!("/api/exports/{id}{download}"))).send().await.unwrap().headers()["location"].to_str().unwrap().to_owned();
    String::from_utf8(client.get(app.url(&link)).send().await.unwrap().bytes().await.unwrap().to_vec()).expect("UTF-8")
}

async fn export(app: &TestApp, client: &reqwest::Client, key: &str, body: Value) -> String {
    export_as(app, client, key, body, "/download").await
}

fn lines(file: &str) -> Vec<&str> {
    file.strip_suffix("\r\n").unwrap_or(file).split("\r\n").collect()
}

on_both_backends!(a_catalog_report_over_a_schema_that_is_not_the_demos_exports_each_type_as_the_contract_says, |backend| {
    let app = app_with_visits(backend).await;
    let alice = app.login("alice@acme.test").await;
    let march = json!({"from": "2026-03-01", "to": "2026-03-31"});
    let file = export(&app, &alice, "all", json!({"report": "visits", "time_range": march})).await;
    assert_eq!(lines(&file), vec![HEADER, ROW_10, ROW_20, ROW_30], "org-a's rows of March, in key order");
    // Checkpointed, in parts of two rows read by key range.
    let parts = json!({"report": "visits", "time_range": march, "consistency": "checkpointed"});
    let first = export_as(&app, &alice, "parts", parts.clone(), "/parts/1/download").await;
    assert_eq!(lines(&first), vec![HEADER, ROW_10, ROW_20]);
    let second = export_as(&app, &alice, "parts", parts, "/parts/2/download").await;
    assert_eq!(lines(&second), vec![HEADER, ROW_30]);

    // Filters of five types; the clinic's name is bound, never spliced.
    let paid = export(&app, &alice, "paid", json!({"report": "visits", "time_range": march, "filters": {"paid": true, "clinic": "عيادة النور"}})).await;
    assert_eq!(lines(&paid), vec![HEADER, ROW_10]);
    let spliced = export(&app, &alice, "spliced", json!({"report": "visits", "time_range": march, "filters": {"clinic": "x' OR '1'='1"}})).await;
    assert_eq!(lines(&spliced), vec![HEADER], "a value that would change the query matches nothing");
    // At least 1 major unit: 125 SAR and 1250 JPY are; -0.005 KWD is not.
    let fee = export(&app, &alice, "fee", json!({"report": "visits", "time_range": march, "filters": {"min_fee": 1}})).await;
    assert_eq!(lines(&fee), vec![HEADER, ROW_10, ROW_20]);
    let since = export(&app, &alice, "since", json!({"report": "visits", "time_range": march, "filters": {"since": "2026-03-02", "currency": ["KWD"]}})).await;
    assert_eq!(lines(&since), vec![HEADER, ROW_30]);
});

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_given_the_catalogs_reports_with_their_titles_and_filters_and_its_datasets() {
    let app = app_with_visits(Backend::Sqlite).await;
    let page = app.anonymous().get(app.url("/")).send().await.unwrap().text().await.unwrap();
    let start = page.find(r#"id="exportd-catalog">"#).expect("the page carries its catalog") + r#"id="exportd-catalog">"#.len();
    let json = &page[start..start + page[start..].find("</script>").expect("the element ends")];
    let catalog: app::PageCatalog = serde_json::from_str(json).expect("the page's catalog reads");
    assert_eq!(catalog.reports.len(), 1, "the catalog's reports, not the demo's: {json}");
    let visits = &catalog.reports[0];
    assert_eq!((visits.titled.title("ar"), visits.titled.title("en")), ("الزيارات", "Visits"));
    let filters: Vec<(&str, &str, Option<&str>)> = visits.filters.iter().map(|f| (f.name.as_str(), f.test.as_str(), f.of.as_deref())).collect();
    assert_eq!(
        filters,
        vec![("clinic", "equals", Some("text")), ("paid", "equals", Some("boolean")), ("min_fee", "at_least", Some("money")), ("currency", "one_of", None), ("since", "at_least", Some("date"))]
    );
    assert_eq!(visits.filters[3].values, vec!["SAR", "KWD", "JPY"]);
    assert!(catalog.datasets.is_empty(), "the test's catalog declares no dataset");
    app.stop().await;
}

on_both_backends!(a_catalog_report_is_validated_and_authorised_by_its_own_declaration, |backend| {
    let app = app_with_visits(backend).await;
    let alice = app.login("alice@acme.test").await;
    let resp = app.create(&alice, "bad", &json!({"report": "visits", "filters": {"paid": "yes", "since": "March", "colour": 1}})).await;
    let problem = support::expect_problem(resp, 422, "invalid-request").await;
    let pointers: Vec<&str> = problem["errors"].as_array().unwrap().iter().map(|e| e["pointer"].as_str().unwrap()).collect();
    for pointer in ["/filters/paid", "/filters/since", "/filters/colour"] {
        assert!(pointers.contains(&pointer), "{pointer} in {problem}");
    }
    let orders = app.create(&alice, "demo", &json!({"report": "orders"})).await;
    support::expect_problem(orders, 422, "invalid-request").await;
    // The report names only admins.
    let bob = app.login("bob@acme.test").await;
    support::expect_problem(app.create(&bob, "analyst", &json!({"report": "visits", "columns": ["visit_id"]})).await, 403, "export-not-permitted").await;
    // The API's description names the catalog's reports, not the demo's.
    let doc: Value = app.anonymous().get(app.url("/api/openapi.json")).send().await.unwrap().json().await.unwrap();
    assert_eq!(doc.pointer("/components/schemas/ExportRequest/properties/report/enum"), Some(&json!(["visits"])));
    // The accepted operation carries its report's schema version.
    let resp = app.create(&alice, "versioned", &json!({"report": "visits", "time_range": {"from": "2026-03-01", "to": "2026-03-01"}})).await;
    assert_eq!(resp.status(), 202);
    let id = resp.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    let digest = TEST_CATALOG.report("visits").unwrap().digest();
    assert_eq!(app.scalar(&format!("SELECT COUNT(*) FROM jobs WHERE id = '{id}' AND schema_digest = '{digest}'")).await, 1);
});

/// The report joined to each visit's tags as well: a visit with two tags is two rows of one key,
/// which the catalog's key promises never happens. A `LEFT JOIN`, which a part's end on
/// PostgreSQL does not read (it counts the first table's keys alone).
static TAGGED: LazyLock<Arc<Catalog>> = LazyLock::new(|| {
    let tagged = CATALOG.replace("AND k.id = v.clinic_id\"", "AND k.id = v.clinic_id LEFT JOIN visit_tags t ON t.visit_id = v.id\"");
    assert_ne!(tagged, CATALOG, "the report's join is where this test expects it");
    Arc::new(exportd::catalog::parse("tagged.toml", &tagged).expect("the test's catalog reads"))
});

on_both_backends!(a_checkpointed_export_whose_join_repeats_a_key_fails_as_invalid_data_instead_of_writing_or_losing_the_row, |backend| {
    let app = app_with_visits_under(backend, |config| {
        config.catalog = TAGGED.clone();
        config.part_rows = 2;
    })
    .await;
    app.exec("CREATE TABLE visit_tags (visit_id BIGINT NOT NULL, tag TEXT NOT NULL)").await;
    let alice = app.login("alice@acme.test").await;
    let march = json!({"from": "2026-03-01", "to": "2026-03-31"});
    // March's visits are 10, 20 and 30, read in parts of two: 10 and 20, then 30. A second tag on
    // 30 repeats the last part's key (the code before wrote it twice, on both backends); on 20 it
    // repeats part 1's last key across its end, where on SQLite the next part (keys above 20)
    // lost it, and on PostgreSQL part 1 read three rows.
    for (repeated, key) in [(30, "in-the-last-part"), (20, "across-a-parts-end")] {
        app.exec("DELETE FROM visit_tags").await;
        app.exec(&format!("INSERT INTO visit_tags VALUES (10, 'a'), (20, 'a'), (30, 'a'), ({repeated}, 'b')")).await;
        let resp = app.create(&alice, key, &json!({"report": "visits", "time_range": march, "consistency": "checkpointed"})).await;
        assert_eq!(resp.status(), 202, "{}", resp.text().await.unwrap_or_default());
        let id = resp.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
        let done = app.wait_terminal(&alice, &id, Duration::from_secs(30)).await;
        assert_eq!(done["status"], "failed", "visit {repeated} twice: {done}");
        assert_eq!(done["error"]["code"], "invalid_data", "{done}");
        assert_eq!(done["error"]["retryable"], false, "{done}");
        let download = alice.get(app.url(&format!("/api/exports/{id}/download"))).send().await.unwrap();
        support::expect_problem(download, 409, "export-not-ready").await;
    }
    // With one tag a visit, the same export is ready, each visit once: the refusal was the repeat's.
    app.exec("DELETE FROM visit_tags WHERE tag = 'b'").await;
    let parts = json!({"report": "visits", "time_range": march, "consistency": "checkpointed"});
    let first = export_as(&app, &alice, "one-tag-each", parts.clone(), "/parts/1/download").await;
    assert_eq!(lines(&first), vec![HEADER, ROW_10, ROW_20]);
    let second = export_as(&app, &alice, "one-tag-each", parts, "/parts/2/download").await;
    assert_eq!(lines(&second), vec![HEADER, ROW_30]);
});

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_postgresql_a_part_whose_rows_the_database_gives_out_of_key_order_is_read_again_sorted() {
    let app = app_with_visits(Backend::Postgres).await;
    // Visit 5, stored after the others: a table this small is read whole, in the order its rows
    // are stored, so part 1 (visits 5 and 10, asked for unsorted) comes as 10, then 5.
    app.exec("INSERT INTO visits VALUES (5, 'org-a', 1, 'early', '2026-03-01', '2026-03-01T08:00:00Z', 100, 'SAR', 1, TRUE)").await;
    let again = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = again.clone();
    fail::cfg_callback(app.fault("part_out_of_key_order"), move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    })
    .unwrap();
    let alice = app.login("alice@acme.test").await;
    let parts = json!({"report": "visits", "time_range": {"from": "2026-03-01", "to": "2026-03-31"}, "consistency": "checkpointed"});
    let first = export_as(&app, &alice, "out-of-order", parts.clone(), "/parts/1/download").await;
    assert_eq!(lines(&first), vec![HEADER, "5,عيادة النور,early,2026-03-01,2026-03-01T08:00:00Z,1.00,SAR,1.00,true", ROW_10], "part 1 in key order");
    let second = export_as(&app, &alice, "out-of-order", parts, "/parts/2/download").await;
    assert_eq!(lines(&second), vec![HEADER, ROW_20, ROW_30]);
    assert_eq!(again.load(std::sync::atomic::Ordering::SeqCst), 1, "part 1 was read again, sorted, and part 2 asked for sorted at once");
    fail::remove(app.fault("part_out_of_key_order"));
    app.stop().await;
}
