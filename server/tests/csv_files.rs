//! The file itself (SPEC §6, §8 case 16): RFC 4180 read back by a strict parser, formula-like
//! text defused, numbers left as numbers, Arabic, quotes and line breaks intact, and a BOM only
//! when asked.

mod support;

use sea_orm::ConnectionTrait;
use serde_json::{json, Value};
use std::time::Duration;
use support::TestApp;

/// Text a spreadsheet would run, and text that only looks close.
const NASTY: &[&str] = &[
    "=1+1",
    "=cmd|' /C calc'!A0",
    "=HYPERLINK(\"http://example.test\",\"click\")",
    "+SUM(A1:A2)",
    "-2+3",
    "@SUM(A1)",
    "\t=1+1",
    "\r=1+1",
    "\n=1+1",
    " =1+1",
    "'=already quoted",
    "＝full width equals",
    "محمد العتيبي, \"الرياض\"",
    "line one\r\nline two",
    "he said \"no\"",
    "",
    "trailing space ",
    "'=already quoted",
];

fn defused(text: &str) -> String {
    // A `'` before a cell that is defused is defused too, so an import reads the cell back.
    let quoted_formula = text.strip_prefix('\'').is_some_and(|rest| defused(rest) != rest);
    if text.starts_with(['=', '+', '-', '@', '\t', '\r', '\n']) || quoted_formula {
        format!("'{text}")
    } else {
        text.to_owned()
    }
}

async fn export_rows(app: &TestApp, client: &reqwest::Client, key: &str, bom: bool) -> (Value, bytes::Bytes) {
    let today = jiff::Zoned::now().with_time_zone(jiff::tz::TimeZone::UTC).date();
    let body = json!({
        "report": "orders",
        "columns": ["order_id", "customer_name", "notes", "total", "placed_at"],
        "time_range": {"from": today.checked_sub(jiff::Span::new().days(3)).unwrap().to_string(), "to": today.to_string()},
        "filters": {"status": ["pending"]},
        "options": {"bom": bom},
    });
    let resp = app.create(client, key, &body).await;
    assert_eq!(resp.status(), 202);
    let id = resp.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    let done = app.wait_terminal(client, &id, Duration::from_secs(30)).await;
    assert_eq!(done["status"], "ready", "{done}");
    let link = client.get(app.url(&format!("/api/exports/{id}/download"))).send().await.unwrap().headers()["location"].to_str().unwrap().to_owned();
    let bytes = client.get(app.url(&link)).send().await.unwrap().bytes().await.unwrap();
    (done, bytes)
}

on_both_backends!(a_strict_parser_reads_back_every_value_defused_where_it_must_be_and_intact_otherwise, |backend| {
    let app = TestApp::start(support::Options { worker: true, orders: 20, ..support::Options::new(backend) }).await;
    // The only pending orders of the last days are these, one per nasty text, with negative totals.
    let now = jiff::Timestamp::now().as_millisecond();
    app.exec(&format!("DELETE FROM orders WHERE status = 'pending' OR placed_at > {}", now - 5 * 86_400_000)).await;
    let customer = app.scalar("SELECT MIN(id) FROM customers WHERE tenant_id = 'ten_acme'").await;
    for (i, text) in NASTY.iter().enumerate() {
        app.exec(&format!("UPDATE customers SET name = 'name {i}' WHERE id = {customer}")).await;
        let stmt = sea_orm::Statement::from_sql_and_values(
            app.db.get_database_backend(),
            match app.backend {
                support::Backend::Postgres => "INSERT INTO orders (tenant_id, customer_id, placed_at, country, status, total_cents, currency, notes) VALUES ('ten_acme', $1, $2, 'SA', 'pending', $3, 'SAR', $4)",
                support::Backend::Sqlite => "INSERT INTO orders (tenant_id, customer_id, placed_at, country, status, total_cents, currency, notes) VALUES ('ten_acme', ?, ?, 'SA', 'pending', ?, 'SAR', ?)",
            },
            [customer.into(), (now - 3_600_000 - i as i64).into(), (-1250 - i as i64).into(), (*text).into()],
        );
        app.db.execute_raw(stmt).await.unwrap();
    }
    app.exec(&format!("UPDATE customers SET name = 'فاطمة \"Fatimah\" O''Brien, =1' WHERE id = {customer}")).await;
    let alice = app.login("alice@acme.test").await;
    let (done, bytes) = export_rows(&app, &alice, "nasty", false).await;
    assert_eq!(done["artifact"]["rows"], NASTY.len());
    assert!(!bytes.starts_with("\u{feff}".as_bytes()), "no BOM unless asked");
    assert!(bytes.ends_with(b"\r\n"));

    let mut reader = csv::ReaderBuilder::new().flexible(false).from_reader(&bytes[..]);
    assert_eq!(reader.headers().unwrap(), vec!["order_id", "customer_name", "notes", "total", "placed_at"]);
    let records: Vec<csv::StringRecord> = reader.records().map(|r| r.expect("strict RFC 4180")).collect();
    assert_eq!(records.len(), NASTY.len());
    for (i, (record, text)) in records.iter().zip(NASTY).enumerate() {
        // Rows come in order id order, which is insertion order here.
        assert_eq!(&record[2], defused(text), "row {i}");
        assert_eq!(&record[1], "فاطمة \"Fatimah\" O'Brien, =1", "row {i}: the name round-trips (it starts with a letter)");
        assert_eq!(&record[3], format!("-{}.{:02}", (1250 + i) / 100, (1250 + i) % 100), "row {i}: a negative total stays a number");
        assert!(record[4].ends_with('Z') && record[4].len() == 20, "row {i}: {}", &record[4]);
    }
    let text = String::from_utf8(bytes.to_vec()).expect("UTF-8");
    assert!(text.contains(",-12.50,"), "numbers are not quoted or defused");
    assert!(text.contains("\"line one\r\nline two\""), "a line break inside a cell is quoted, not split");

    let (_, with_bom) = export_rows(&app, &alice, "nasty-bom", true).await;
    assert!(with_bom.starts_with("\u{feff}order_id,".as_bytes()), "the BOM comes first when asked");
    assert_eq!(&with_bom[3..], &bytes[..], "and changes nothing else");
    app.stop().await;
});

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(bytes), &mut out).expect("one gzip stream");
    out
}

on_both_backends!(a_gzipped_export_is_the_same_csv_compressed_and_its_digest_is_of_the_bytes_served, |backend| {
    let app = TestApp::start(support::Options { worker: true, orders: 2_000, adjust: |c| c.part_rows = 700, ..support::Options::new(backend) }).await;
    // Text that must be defused, quoted or kept, inside the compressed file too.
    app.exec("UPDATE orders SET notes = '=1+1, \"quoted\"\r\nفاطمة' WHERE id IN (SELECT id FROM orders WHERE tenant_id = 'ten_acme' ORDER BY id LIMIT 50)").await;
    let bob = app.login("bob@acme.test").await;
    let mut plain = support::procs::everything("orders");
    plain["options"] = json!({"bom": true});
    let mut gzipped = plain.clone();
    gzipped["options"]["compression"] = "gzip".into();
    let (_, _, csv) = app.export_file(&bob, "plain", &plain).await;
    let (done, headers, gz) = app.export_file(&bob, "gzipped", &gzipped).await;
    let id = done["id"].as_str().unwrap();

    assert_eq!(headers["content-type"], "application/gzip");
    assert!(headers.get("content-encoding").is_none(), "gzip is the file's type, never a transfer encoding");
    assert_eq!(headers["content-disposition"], format!("attachment; filename=\"orders-{id}.csv.gz\"").as_str());
    let sha = support::procs::sha256(&gz);
    assert_eq!(done["artifact"]["sha256"], sha.as_str(), "the artifact's digest is of the compressed bytes served");
    assert_eq!(done["artifact"]["bytes"].as_u64(), Some(gz.len() as u64));
    assert_eq!(headers["etag"], format!("\"{sha}\"").as_str());
    let digest = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, hex::decode(&sha).unwrap());
    assert_eq!(headers["content-digest"], format!("sha-256=:{digest}:").as_str());
    assert!(app.objects(&format!("exports/ten_acme/{id}")).iter().all(|k| k.ends_with(&format!("{sha}.csv.gz"))), "{:?}", app.objects("exports"));

    let text = gunzip(&gz);
    assert!(text == csv.to_vec(), "decompressed, it is exactly the plain export: BOM, header, CRLF, quoting and defusing");
    let mut reader = csv::ReaderBuilder::new().flexible(false).from_reader(&text[3..]);
    let rows: Vec<csv::StringRecord> = reader.records().map(|r| r.expect("strict RFC 4180")).collect();
    assert_eq!(rows.len() as u64, done["artifact"]["rows"].as_u64().unwrap());
    let notes = reader.headers().unwrap().iter().position(|h| h == "notes").unwrap();
    assert_eq!(&rows[0][notes], "'=1+1, \"quoted\"\r\nفاطمة");

    // In parts too: each part a gzip file of its rows, each with the header and the BOM.
    let mut parted = gzipped.clone();
    parted["consistency"] = "checkpointed".into();
    let (done, headers, zip) = app.export_file(&bob, "gzipped-parts", &parted).await;
    assert_eq!(headers["content-type"], "application/zip");
    let (unzipped, rows) = support::bundles::check(&zip, &done, 700);
    assert!(unzipped.parts.iter().all(|(name, data)| name.ends_with(".csv.gz") && support::bundles::csv_text(name, data).starts_with("\u{feff}order_id,".as_bytes())));
    let whole: Vec<csv::StringRecord> = csv::ReaderBuilder::new().from_reader(&csv[3..]).records().map(Result::unwrap).collect();
    assert_eq!(rows, whole, "the parts' rows are the whole export's rows");
    assert_eq!(unzipped.manifest["compression"], "gzip");
    app.stop().await;
});
