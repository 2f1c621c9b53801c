//! SPEC §8 case 21 with a file of 20,000 customers (a BOM, CRLF and LF mixed, quoted line breaks,
//! Arabic, formula-like text) and every kind of bad row the datasets know, and an orders file
//! with the kinds only orders have: the dry run's report lists exactly the bad rows, with their
//! lines and codes in input order, and writes nothing; `abort` applies nothing; `skip_invalid`
//! applies exactly the valid rows; the dry run and the apply count the same. Files that cannot be
//! read as the dataset's CSV at all fail `invalid_file`. The expected report is worked out here,
//! from how the file is built, not by the code under test.

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use support::TestApp;

/// A file being built, with the line each record starts on and the errors it must report.
struct File {
    text: String,
    line: i64,
    expected: Vec<(i64, String, String)>,
    valid: i64,
    rows: i64,
    valid_keys: Vec<String>,
}

impl File {
    fn new(header: &str) -> File {
        File { text: format!("\u{feff}{header}\r\n"), line: 2, expected: Vec::new(), valid: 0, rows: 0, valid_keys: Vec::new() }
    }

    /// Adds a record (its cells already quoted as needed), ending it with CRLF or LF by turns.
    fn record(&mut self, cells: &str, errors: &[(&str, &str)]) {
        let start = self.line;
        self.rows += 1;
        if errors.is_empty() {
            self.valid += 1;
        }
        for (column, code) in errors {
            self.expected.push((start, (*column).to_owned(), (*code).to_owned()));
        }
        let crlf = self.rows % 3 != 0;
        self.text.push_str(cells);
        self.text.push_str(if crlf { "\r\n" } else { "\n" });
        self.line += 1 + cells.matches('\n').count() as i64;
    }
}

fn customers_file() -> File {
    let mut f = File::new("email,name,phone,country");
    let bad: Vec<(String, Vec<(&str, &str)>)> = vec![
        ("no-at-sign,Name,1,SA".into(), vec![("email", "invalid_email")]),
        ("two words@acme.test,Name,1,SA".into(), vec![("email", "invalid_email")]),
        (",Name,1,SA".into(), vec![("email", "missing_value")]),
        ("\"   \",Name,1,SA".into(), vec![("email", "missing_value")]),
        (format!("{}@acme.test,Name,1,SA", "x".repeat(250)), vec![("email", "too_long")]),
        ("bidi\u{202e}@acme.test,Name,1,SA".into(), vec![("email", "invalid_email")]),
        ("lower@acme.test,Name,1,sa".into(), vec![("country", "invalid_country")]),
        ("unknown@acme.test,Name,1,XX".into(), vec![("country", "invalid_country")]),
        ("three@acme.test,Name,1,SAU".into(), vec![("country", "invalid_country")]),
        ("empty-country@acme.test,Name,1,".into(), vec![("country", "missing_value")]),
        ("bell@acme.test,Ring\u{7},1,SA".into(), vec![("name", "control_character")]),
        ("nul@acme.test,Nul\u{0}l,1,SA".into(), vec![("name", "control_character")]),
        ("esc@acme.test,Name,\u{1b}[31m,SA".into(), vec![("phone", "control_character")]),
        ("del@acme.test,De\u{7f}l,1,SA".into(), vec![("name", "control_character")]),
        ("c-one@acme.test,Next\u{85}Line,1,SA".into(), vec![("name", "control_character")]),
        (format!("long@acme.test,{},1,SA", "ن".repeat(1001)), vec![("name", "too_long")]),
        (format!("longphone@acme.test,Name,{},SA", "9".repeat(1001)), vec![("phone", "too_long")]),
        ("short@acme.test,Name,1".into(), vec![("", "wrong_field_count")]),
        ("long-row@acme.test,Name,1,SA,extra".into(), vec![("", "wrong_field_count")]),
        ("both-bad,Name\u{7},1,xx".into(), vec![("email", "invalid_email"), ("name", "control_character"), ("country", "invalid_country")]),
    ];
    let mut next_bad = bad.into_iter();
    for i in 0..20_000 {
        if i % 500 == 250 {
            if let Some((cells, errors)) = next_bad.next() {
                f.record(&cells, &errors);
                continue;
            }
        }
        match i % 7 {
            // Quoted line breaks and quotes.
            0 => f.record(&format!("c{i}@acme.test,\"two\nlines \"\"{i}\"\"\",+9665{i:08},SA"), &[]),
            // Arabic.
            1 => f.record(&format!("c{i}@acme.test,محمد العتيبي {i},+9665{i:08},AE"), &[]),
            // Formula-like text, as an export defuses it and as a user types it.
            2 => f.record(&format!("c{i}@acme.test,\"'=HYPERLINK(\"\"x\"\") {i}\",'+9665{i:08},SA"), &[]),
            3 => f.record(&format!("C{i}@Acme.TEST ,@mention {i},-{i},KW"), &[]),
            _ => f.record(&format!("c{i}@acme.test,Person {i},+9665{i:08},SA"), &[]),
        }
        f.valid_keys.push(format!("c{i}@acme.test"));
    }
    // Keys the file carries twice: every record with one is invalid.
    f.record("twice@acme.test,First,1,SA", &[("email", "duplicate_key")]);
    f.record(" TWICE@acme.test,Second,1,SA", &[("email", "duplicate_key")]);
    f
}

fn orders_file() -> File {
    let mut f = File::new("order_ref,customer_email,placed_at,country,status,total,currency,notes");
    let bad: Vec<(String, Vec<(&str, &str)>)> = vec![
        ("B-1,nobody@acme.test,2026-01-31T09:30:00+03:00,SA,paid,10.00,SAR,x".into(), vec![("customer_email", "unknown_reference")]),
        ("B-2,customer0@acme.example,2026-01-31T09:30:00+03:00,SA,paid,10.005,SAR,x".into(), vec![("total", "too_many_decimals")]),
        ("B-3,customer0@acme.example,2026-01-31T09:30:00+03:00,SA,paid,ten,SAR,x".into(), vec![("total", "invalid_amount")]),
        ("B-4,customer0@acme.example,2026-01-31T09:30:00+03:00,SA,paid,--1,SAR,x".into(), vec![("total", "invalid_amount")]),
        ("B-5,customer0@acme.example,2026-01-31 09:30,SA,paid,1,SAR,x".into(), vec![("placed_at", "invalid_instant")]),
        ("B-6,customer0@acme.example,2026-01-31T09:30:00,SA,paid,1,SAR,x".into(), vec![("placed_at", "invalid_instant")]),
        ("B-7,customer0@acme.example,2026-01-31T09:30:00Z,SA,shipped,1,SAR,x".into(), vec![("status", "invalid_status")]),
        ("B-8,customer0@acme.example,2026-01-31T09:30:00Z,SA,paid,1,sar,x".into(), vec![("currency", "invalid_currency")]),
        (format!("{},customer0@acme.example,2026-01-31T09:30:00Z,SA,paid,1,SAR,x", "R".repeat(65)), vec![("order_ref", "too_long")]),
        (",customer0@acme.example,2026-01-31T09:30:00Z,SA,paid,1,SAR,x".into(), vec![("order_ref", "missing_value")]),
        (format!("B-11,customer0@acme.example,2026-01-31T09:30:00Z,SA,paid,1,SAR,{}", "n".repeat(10_001)), vec![("notes", "too_long")]),
        ("B-12,customer0@acme.example,2026-01-31T09:30:00Z,S1,paid,1,SAR,x".into(), vec![("country", "invalid_country")]),
    ];
    for (i, (cells, errors)) in bad.into_iter().enumerate() {
        f.record(&format!("V-{i},customer1@acme.example,2026-01-31T09:30:00.250+03:00,SA,paid,-12.5,SAR,\"multi\nline\""), &[]);
        f.record(&cells, &errors);
    }
    f.record("DUP,customer1@acme.example,2026-01-31T09:30:00Z,SA,paid,1,SAR,a", &[("order_ref", "duplicate_key")]);
    f.record("DUP,customer1@acme.example,2026-01-31T09:30:00Z,SA,paid,1,SAR,b", &[("order_ref", "duplicate_key")]);
    f
}

async fn upload(app: &TestApp, client: &reqwest::Client, bytes: Vec<u8>) -> String {
    let resp = client.post(app.url("/api/uploads")).header("content-type", "text/csv").body(bytes).send().await.unwrap();
    assert!(resp.status().is_success());
    resp.json::<Value>().await.unwrap()["upload"].as_str().unwrap().to_owned()
}

async fn import(app: &TestApp, client: &reqwest::Client, key: &str, body: Value) -> Value {
    let resp = client.post(app.url("/api/imports")).header("Idempotency-Key", key).json(&body).send().await.unwrap();
    assert_eq!(resp.status(), 202);
    let id = resp.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let view: Value = client.get(app.url(&format!("/api/imports/{id}"))).send().await.unwrap().json().await.unwrap();
        if matches!(view["status"].as_str(), Some("ready" | "failed" | "cancelled")) {
            return view;
        }
        assert!(tokio::time::Instant::now() < deadline, "{view}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn report(app: &TestApp, client: &reqwest::Client, id: &str) -> Vec<(i64, String, String)> {
    let link = client.get(app.url(&format!("/api/imports/{id}/report"))).send().await.unwrap().headers()["location"].to_str().unwrap().to_owned();
    let bytes = client.get(app.url(&link)).send().await.unwrap().bytes().await.unwrap();
    let mut reader = csv::ReaderBuilder::new().flexible(true).from_reader(&bytes[..]);
    reader.records().map(|r| r.unwrap()).map(|r| (r[0].parse().unwrap(), r[1].to_owned(), r[2].to_owned())).collect()
}

fn only_errors(rows: Vec<(i64, String, String)>) -> Vec<(i64, String, String)> {
    rows.into_iter().filter(|(_, _, code)| code != "not_applied").collect()
}

async fn check(app: &TestApp, alice: &reqwest::Client, dataset: &str, file: &File, table_count: &str) {
    let upl = upload(app, alice, file.text.clone().into_bytes()).await;
    let before = app.scalar(table_count).await;
    let dry = import(app, alice, &format!("{dataset}-dry"), json!({"dataset": dataset, "upload": upl, "mode": "dry_run", "on_error": "skip_invalid"})).await;
    assert_eq!(dry["status"], "ready", "{dry}");
    assert_eq!(only_errors(report(app, alice, dry["id"].as_str().unwrap()).await), file.expected, "{dataset}: the report lists exactly the bad rows");
    let invalid = file.rows - file.valid;
    assert_eq!((dry["counts"]["rows"].as_i64(), dry["counts"]["valid"].as_i64(), dry["counts"]["invalid"].as_i64()), (Some(file.rows), Some(file.valid), Some(invalid)));
    let first: Vec<(i64, String, String)> = dry["first_errors"].as_array().unwrap().iter().map(|e| (e["line"].as_i64().unwrap(), e["column"].as_str().unwrap().to_owned(), e["code"].as_str().unwrap().to_owned())).collect();
    assert_eq!(first, file.expected[..10.min(file.expected.len())]);
    assert_eq!(app.scalar(table_count).await, before, "a dry run writes nothing");

    let aborted = import(app, alice, &format!("{dataset}-abort"), json!({"dataset": dataset, "upload": upl})).await;
    assert_eq!((aborted["status"].as_str(), aborted["error"]["code"].as_str()), (Some("failed"), Some("validation_failed")));
    assert_eq!(app.scalar(table_count).await, before, "abort applies nothing");

    let applied = import(app, alice, &format!("{dataset}-apply"), json!({"dataset": dataset, "upload": upl, "on_error": "skip_invalid"})).await;
    assert_eq!(applied["status"], "ready", "{applied}");
    for count in ["rows", "valid", "invalid", "created", "updated", "unchanged"] {
        assert_eq!(applied["counts"][count], dry["counts"][count], "{dataset}: the dry run predicted {count}");
    }
    assert_eq!(applied["counts"]["applied"].as_i64(), Some(file.valid));
    assert_eq!(app.scalar(table_count).await, before + dry["counts"]["created"].as_i64().unwrap());
    assert_eq!(only_errors(report(app, alice, applied["id"].as_str().unwrap()).await), file.expected);
}

on_both_backends!(a_dry_run_and_the_apply_of_twenty_thousand_customers_with_every_kind_of_bad_row_agree_row_for_row, |backend| {
    let app = TestApp::with_worker(backend).await;
    let alice = app.login("alice@acme.test").await;
    let file = customers_file();
    assert!(file.rows > 20_000 && file.rows - file.valid >= 21, "twenty kinds of bad rows and a duplicated key");
    check(&app, &alice, "customers", &file, "SELECT COUNT(*) FROM customers WHERE tenant_id = 'ten_acme'").await;
    assert_eq!(app.scalar("SELECT COUNT(*) FROM customers WHERE email_key = 'c2@acme.test' AND name = '=HYPERLINK(\"x\") 2' AND phone = '+966500000002'").await, 1, "defused text reads back");
    assert_eq!(app.scalar("SELECT COUNT(*) FROM customers WHERE email_key = 'c3@acme.test' AND email = 'C3@Acme.TEST' AND name = '@mention 3'").await, 1);
    assert_eq!(app.scalar("SELECT COUNT(*) FROM customers WHERE email_key = 'c0@acme.test' AND name = 'two\nlines \"0\"'").await, 1, "a quoted line break stays");
    assert_eq!(app.scalar("SELECT COUNT(*) FROM customers WHERE email_key IN ('twice@acme.test')").await, 0);
});

/// The lifetime total the customers report writes for `email`, exported now.
async fn exported_lifetime_total(app: &TestApp, client: &reqwest::Client, key: &str, email: &str) -> String {
    let mut body = support::procs::everything("customers");
    body["columns"] = json!(["email", "lifetime_total"]);
    let resp = app.create(client, key, &body).await;
    assert_eq!(resp.status(), 202);
    let id = resp.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    assert_eq!(app.wait_terminal(client, &id, std::time::Duration::from_secs(30)).await["status"], "ready");
    let link = client.get(app.url(&format!("/api/exports/{id}/download"))).send().await.unwrap().headers()["location"].to_str().unwrap().to_owned();
    let file = client.get(app.url(&link)).send().await.unwrap().text().await.unwrap();
    let line = file.split("\r\n").find(|l| l.starts_with(&format!("{email},"))).unwrap_or_else(|| panic!("{email} in {file}"));
    line[email.len() + 1..].to_owned()
}

on_both_backends!(an_orders_file_reports_unknown_customers_and_bad_money_and_applies_the_rest_with_lifetime_totals, |backend| {
    let app = TestApp::with_worker(backend).await;
    let alice = app.login("alice@acme.test").await;
    let file = orders_file();
    let email = "customer1@acme.example";
    let before: f64 = exported_lifetime_total(&app, &alice, "before", email).await.parse().unwrap();
    check(&app, &alice, "orders", &file, "SELECT COUNT(*) FROM orders WHERE tenant_id = 'ten_acme'").await;
    let after: f64 = exported_lifetime_total(&app, &alice, "after", email).await.parse().unwrap();
    assert_eq!(((after - before) * 100.0).round(), -12.0 * 1250.0, "the touched customer's lifetime total follows its orders");
    assert_eq!(app.scalar("SELECT COUNT(*) FROM orders WHERE order_ref LIKE 'V-%' AND notes = 'multi\nline' AND total_cents = -1250").await, 12);
});

on_both_backends!(a_file_that_is_not_the_datasets_csv_fails_invalid_file_and_applies_nothing, |backend| {
    let app = TestApp::with_worker(backend).await;
    let alice = app.login("alice@acme.test").await;
    let before = app.scalar("SELECT COUNT(*) FROM customers").await;
    let files: [(&str, Vec<u8>, &str); 5] = [
        ("no-key", b"name,phone\nA,1\n".to_vec(), "missing_key_column"),
        ("unknown", b"email,colour\na@acme.test,red\n".to_vec(), "unknown_column"),
        ("latin1", b"email,name\na@acme.test,Zo\xeb\n".to_vec(), "not_utf8"),
        ("quote", b"email,name\na@acme.test,\"open\nb@acme.test,x\n".to_vec(), "unterminated_quote"),
        ("twice", b"email,email\na@acme.test,b@acme.test\n".to_vec(), "duplicate_column"),
    ];
    for (name, bytes, code) in files {
        let upl = upload(&app, &alice, bytes).await;
        let done = import(&app, &alice, name, json!({"dataset": "customers", "upload": upl, "on_error": "skip_invalid"})).await;
        assert_eq!((done["status"].as_str(), done["error"]["code"].as_str()), (Some("failed"), Some("invalid_file")), "{name}: {done}");
        assert_eq!(done["first_errors"][0]["code"], code, "{name}: {done}");
    }
    assert_eq!(app.scalar("SELECT COUNT(*) FROM customers").await, before);
});

on_both_backends!(a_new_customer_from_a_file_of_its_email_and_country_alone_gets_the_tables_defaults, |backend| {
    let app = TestApp::with_worker(backend).await;
    let alice = app.login("alice@acme.test").await;
    let upl = upload(&app, &alice, b"email,country\nminimal@acme.test,SA\n".to_vec()).await;
    let done = import(&app, &alice, "minimal", json!({"dataset": "customers", "upload": upl})).await;
    assert_eq!(done["counts"]["created"], 1, "{done}");
    let now_ms = jiff::Timestamp::now().as_millisecond();
    let sql = format!("SELECT COUNT(*) FROM customers WHERE email_key = 'minimal@acme.test' AND name = '' AND phone = '' AND created_at BETWEEN {} AND {}", now_ms - 120_000, now_ms + 1000);
    assert_eq!(app.scalar(&sql).await, 1, "the columns no file carries take the table's defaults (migration 16)");
});
