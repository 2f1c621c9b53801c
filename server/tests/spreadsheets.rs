//! The file in its intended consumer (SPEC §14, §16 case 26): an XLSX export opened by two
//! spreadsheet readers exportd does not write (openpyxl, LibreOffice Calc) shows phones and
//! formula-like text exactly as stored, numbers as numbers, date-times as date-times in the
//! export's zone, Arabic right-to-left; imported back (as exported, and as LibreOffice saved it)
//! every row is `unchanged`; a sheet holds 1,048,575 rows and the rest go on the next.

mod support;

use sea_orm::ConnectionTrait;
use serde_json::{json, Value};
use support::imports::{finished, report, start};
use support::spreadsheets::{libreoffice_csv, libreoffice_resaved, openpyxl};
use support::TestApp;

const XLSX: &str = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet";

/// Text a spreadsheet would run, text that looks like the format's own escape, and text that
/// only looks close; and the empty text, which is an empty cell.
const NOTES: &[&str] = &[
    "=1+1",
    "=cmd|' /C calc'!A0",
    "+SUM(A1:A2)",
    "-2+3",
    "@SUM(A1)",
    "'=already quoted",
    "007",
    "_x0041_ stays as written",
    "محمد العتيبي, \"الرياض\"",
    "line one\nline two",
    "",
    "trailing space ",
];

const PHONE: &str = "+966501234567";

/// The acme orders of the last days: one per note, the newest first by id, with negative
/// totals, a customer with an Arabic name and a phone that starts with `+`. Their instants.
async fn nasty_orders(app: &TestApp) -> Vec<i64> {
    let now = jiff::Timestamp::now().as_millisecond() / 1000 * 1000;
    app.exec(&format!("DELETE FROM orders WHERE status = 'pending' OR placed_at > {}", now - 5 * 86_400_000)).await;
    let customer = app.scalar("SELECT MIN(id) FROM customers WHERE tenant_id = 'ten_acme'").await;
    app.exec(&format!("UPDATE customers SET name = 'محمد العتيبي', phone = '{PHONE}' WHERE id = {customer}")).await;
    let mut placed = Vec::new();
    for (i, text) in NOTES.iter().enumerate() {
        let at = now - 3_600_000 - 61_000 * i as i64;
        let stmt = sea_orm::Statement::from_sql_and_values(
            app.db.get_database_backend(),
            match app.backend {
                support::Backend::Postgres => "INSERT INTO orders (tenant_id, customer_id, placed_at, country, status, total_cents, currency, notes, order_ref) VALUES ('ten_acme', $1, $2, 'SA', 'pending', $3, 'SAR', $4, $5)",
                support::Backend::Sqlite => "INSERT INTO orders (tenant_id, customer_id, placed_at, country, status, total_cents, currency, notes, order_ref) VALUES ('ten_acme', ?, ?, 'SA', 'pending', ?, 'SAR', ?, ?)",
            },
            [customer.into(), at.into(), (-1250 - i as i64).into(), (*text).into(), format!("nasty-{i}").into()],
        );
        app.db.execute_raw(stmt).await.unwrap();
        placed.push(at);
    }
    placed
}

fn nasty_request(language: &str) -> Value {
    // The date in the zone the request names: in the UTC evening Riyadh is a day ahead.
    let today = jiff::Zoned::now().with_time_zone(jiff::tz::TimeZone::get("Asia/Riyadh").unwrap()).date();
    json!({
        "report": "orders",
        "format": "xlsx",
        "columns": ["order_id", "placed_at", "customer_name", "customer_phone", "notes", "total", "currency"],
        "time_range": {"from": today.checked_sub(jiff::Span::new().days(3)).unwrap().to_string(), "to": today.to_string()},
        "timezone": "Asia/Riyadh",
        "filters": {"status": ["pending"]},
        "options": {"language": language},
    })
}

/// An instant as the local date-time of Riyadh, as openpyxl writes it (ISO 8601, no offset).
fn riyadh(ms: i64) -> jiff::civil::DateTime {
    jiff::Timestamp::from_millisecond(ms).unwrap().to_zoned(jiff::tz::TimeZone::get("Asia/Riyadh").unwrap()).datetime()
}

on_both_backends!(an_exported_workbook_shows_every_value_as_stored_in_openpyxl_and_in_libreoffice, |backend| {
    let app = TestApp::start(support::Options { worker: true, orders: 20, ..support::Options::new(backend) }).await;
    let placed = nasty_orders(&app).await;
    let alice = app.login("alice@acme.test").await;
    let (done, headers, bytes) = app.export_file(&alice, "xlsx-en", &nasty_request("en")).await;
    assert_eq!(headers["content-type"], XLSX);
    let disposition = headers["content-disposition"].to_str().unwrap();
    assert!(disposition.contains(".xlsx"), "{disposition}");
    assert_eq!(done["artifact"]["rows"], NOTES.len());
    assert_eq!(done["request"]["format"], "xlsx");

    let book = openpyxl(&bytes, false);
    let sheets = book["sheets"].as_array().unwrap();
    assert_eq!(sheets.len(), 1);
    let sheet = &sheets[0];
    assert_eq!(sheet["name"], "orders");
    assert_eq!(sheet["rtl"], false);
    assert_eq!(sheet["freeze"], "A2", "the header row is frozen");
    assert_eq!(sheet["autofilter"], format!("A1:G{}", NOTES.len() + 1));
    let rows = sheet["rows"].as_array().unwrap();
    let header: Vec<&str> = rows[0].as_array().unwrap().iter().map(|c| c["v"].as_str().unwrap()).collect();
    assert_eq!(header, ["Order ID", "Placed at (Asia/Riyadh)", "Customer name", "Customer phone", "Notes", "Total", "Currency"]);
    assert!(rows.iter().flat_map(|r| r.as_array().unwrap()).all(|c| c["t"] != "f"), "no cell is a formula");
    assert_eq!(rows.len(), NOTES.len() + 1);
    // Rows come in id order, which is insertion order here.
    for (i, row) in rows[1..].iter().enumerate() {
        let row = row.as_array().unwrap();
        assert_eq!(row[0]["t"], "n", "row {i}: the id is a number");
        assert_eq!(row[1]["t"], "d", "row {i}: placed_at is a date-time: {}", row[1]);
        assert_eq!(row[1]["v"].as_str().unwrap().parse::<jiff::civil::DateTime>().unwrap(), riyadh(placed[i]), "row {i}: the database's instant, in Riyadh");
        assert_eq!(row[2]["v"], "محمد العتيبي", "row {i}");
        assert_eq!((&row[3]["t"], &row[3]["v"]), (&json!("s"), &json!(PHONE)), "row {i}: the phone is text, exactly as stored");
        let note = match NOTES[i] {
            "" => Value::Null,
            // openpyxl does not undo the format's `_xHHHH_` escape (Excel, LibreOffice and
            // calamine do, below): it shows the escape that keeps the text from being read as one.
            escaped if escaped.starts_with("_x") => json!(escaped.replacen("_x", "_x005F_x", 1)),
            text => json!(text),
        };
        assert_eq!(row[4]["v"], note, "row {i}: the note is as stored, never defused");
        assert_eq!(row[5]["t"], "n", "row {i}: the total is a number");
        assert_eq!(row[5]["v"].as_f64().unwrap(), -(1250.0 + i as f64) / 100.0, "row {i}");
        assert_eq!(row[5]["format"], "#,##0.00", "row {i}: with its currency's places");
    }

    let csv = libreoffice_csv(&bytes);
    assert_eq!(csv[0], header);
    assert_eq!(csv.len(), NOTES.len() + 1);
    for (i, row) in csv[1..].iter().enumerate() {
        assert_eq!(row[1], riyadh(placed[i]).strftime("%Y-%m-%d %H:%M:%S").to_string(), "row {i}: LibreOffice shows the date-time");
        assert_eq!(row[3], PHONE, "row {i}: LibreOffice shows the phone as stored");
        assert_eq!(row[4], NOTES[i], "row {i}: LibreOffice shows the note as stored");
        assert_eq!(row[5], format!("-{}.{:02}", (1250 + i) / 100, (1250 + i) % 100), "row {i}");
    }

    // In Arabic: the titles, a right-to-left sheet, the same rows.
    let (_, _, arabic) = app.export_file(&alice, "xlsx-ar", &nasty_request("ar")).await;
    let book = openpyxl(&arabic, false);
    let sheet = &book["sheets"][0];
    assert_eq!(sheet["rtl"], true, "an Arabic workbook reads right to left");
    let rows = sheet["rows"].as_array().unwrap();
    let titles: Vec<&str> = rows[0].as_array().unwrap().iter().map(|c| c["v"].as_str().unwrap()).collect();
    assert_eq!(titles, ["رقم الطلب", "وقت الطلب (Asia/Riyadh)", "اسم العميل", "هاتف العميل", "ملاحظات", "الإجمالي", "العملة"]);
    let english = openpyxl(&bytes, false);
    assert_eq!(rows[1..], english["sheets"][0]["rows"].as_array().unwrap()[1..], "the language never changes the rows");
    app.stop().await;
});

/// Uploads a workbook as `content_type` and runs a dry run of it into `dataset`.
async fn dry_run(app: &TestApp, client: &reqwest::Client, key: &str, dataset: &str, workbook: &[u8], content_type: &str) -> Value {
    let resp = client.post(app.url("/api/uploads")).header("content-type", content_type).body(workbook.to_vec()).send().await.unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    let upload = resp.json::<Value>().await.unwrap()["upload"].as_str().unwrap().to_owned();
    let view = start(app, client, key, &json!({"dataset": dataset, "upload": upload, "mode": "dry_run"})).await;
    finished(app, client, view["id"].as_str().unwrap()).await
}

on_both_backends!(an_exported_workbook_imports_back_unchanged_and_so_does_libreoffices_copy_of_it, |backend| {
    let app = TestApp::start(support::Options { worker: true, orders: 60, ..support::Options::new(backend) }).await;
    nasty_orders(&app).await;
    let alice = app.login("alice@acme.test").await;
    for (dataset, language) in [("orders", "en"), ("customers", "ar"), ("orders", "ar")] {
        let mut body = support::procs::everything(dataset);
        body["format"] = json!("xlsx");
        body["timezone"] = json!("America/New_York");
        body["options"] = json!({"language": language});
        let (done, _, workbook) = app.export_file(&alice, &format!("{dataset}-{language}"), &body).await;
        let rows = done["artifact"]["rows"].as_i64().unwrap();
        assert!(rows >= 5, "{done}");
        for (copy, bytes, content_type) in [("as-exported", workbook.to_vec(), XLSX), ("saved-by-libreoffice", libreoffice_resaved(&workbook), "application/octet-stream")] {
            let view = dry_run(&app, &alice, &format!("{dataset}-{language}-{copy}"), dataset, &bytes, content_type).await;
            assert_eq!(view["status"], "ready", "{dataset} {language} {copy}: {view}");
            let counts = &view["counts"];
            assert_eq!((counts["rows"].as_i64(), counts["unchanged"].as_i64(), counts["invalid"].as_i64()), (Some(rows), Some(rows), Some(0)), "{dataset} {language} {copy}: every row unchanged: {view}");
        }
    }
    app.stop().await;
});

on_both_backends!(a_workbook_refuses_options_that_do_not_apply_to_it, |backend| {
    let app = TestApp::start(support::Options::new(backend)).await;
    let alice = app.login("alice@acme.test").await;
    for (options, pointer) in [(json!({"bom": true}), "/options/bom"), (json!({"compression": "gzip"}), "/options/compression")] {
        let resp = app.create(&alice, &format!("bad-{pointer}"), &json!({"report": "orders", "format": "xlsx", "options": options})).await;
        let problem = support::expect_problem(resp, 422, "invalid-request").await;
        assert!(problem["errors"].as_array().unwrap().iter().any(|e| e["pointer"] == pointer), "{problem}");
    }
    let resp = app.create(&alice, "pdf", &json!({"report": "orders", "format": "pdf"})).await;
    let problem = support::expect_problem(resp, 422, "invalid-request").await;
    assert!(problem["errors"].as_array().unwrap().iter().any(|e| e["pointer"] == "/format"), "{problem}");
    assert_eq!(app.scalar("SELECT COUNT(*) FROM jobs").await, 0, "nothing was created");
    app.stop().await;
});

/// A workbook of two sheets with the customers header, a third with another header, and a bad
/// row on the second sheet.
fn two_sheet_customers() -> Vec<u8> {
    let mut book = rust_xlsxwriter::Workbook::new();
    let headed = |sheet: &mut rust_xlsxwriter::Worksheet, name: &str| {
        sheet.set_name(name).unwrap();
        for (c, h) in ["Email", "Name", "Phone", "Country"].iter().enumerate() {
            sheet.write_string(0, c as u16, *h).unwrap();
        }
    };
    let first = book.add_worksheet();
    headed(first, "people");
    // A styled cell after the last title, empty: it names no column.
    first.write_blank(0, 4, &rust_xlsxwriter::Format::new().set_bold()).unwrap();
    first.write_string(1, 0, "one@acme.test").unwrap();
    first.write_string(1, 1, "One").unwrap();
    first.write_number(1, 2, 966501234567.0).unwrap();
    first.write_string(1, 3, "SA").unwrap();
    let second = book.add_worksheet();
    headed(second, "more people");
    // A blank row, then a good row and a bad one.
    second.write_string(2, 0, "two@acme.test").unwrap();
    second.write_string(2, 3, "AE").unwrap();
    second.write_string(3, 0, "three@acme.test").unwrap();
    second.write_string(3, 3, "Arabia").unwrap();
    let notes = book.add_worksheet();
    notes.set_name("notes").unwrap();
    notes.write_string(0, 0, "This sheet is not data").unwrap();
    notes.write_string(1, 0, "nobody@acme.test").unwrap();
    book.save_to_buffer().unwrap()
}

on_both_backends!(a_workbooks_sheets_with_the_first_header_are_read_in_order_and_its_report_names_sheet_and_row, |backend| {
    let app = TestApp::start(support::Options { worker: true, ..support::Options::new(backend) }).await;
    let alice = app.login("alice@acme.test").await;
    let view = dry_run(&app, &alice, "two-sheets", "customers", &two_sheet_customers(), XLSX).await;
    assert_eq!(view["status"], "failed", "{view}");
    assert_eq!(view["error"]["code"], "validation_failed", "{view}");
    assert_eq!(view["counts"]["rows"], 3, "the notes sheet has another header and is not read: {view}");
    assert_eq!(view["first_errors"][0], json!({"line": 4, "sheet": "more people", "column": "country", "code": "invalid_country", "message": view["first_errors"][0]["message"]}));
    let rows = report(&app, &alice, view["id"].as_str().unwrap()).await;
    let placed: Vec<[&str; 4]> = rows.iter().map(|r| [r[0].as_str(), r[1].as_str(), r[2].as_str(), r[4].as_str()]).collect();
    assert_eq!(
        placed,
        [["2", "", "not_applied", "people"], ["3", "", "not_applied", "more people"], ["4", "country", "invalid_country", "more people"]],
        "each line is its sheet's row (the blank row counted), with the sheet's name after the message"
    );

    // Applied with skip_invalid: a phone typed as a number reads as its digits, without `.0`.
    let resp = alice.post(app.url("/api/uploads")).header("content-type", XLSX).body(two_sheet_customers()).send().await.unwrap();
    let upload = resp.json::<Value>().await.unwrap()["upload"].as_str().unwrap().to_owned();
    let view = start(&app, &alice, "two-sheets-apply", &json!({"dataset": "customers", "upload": upload, "on_error": "skip_invalid"})).await;
    let view = finished(&app, &alice, view["id"].as_str().unwrap()).await;
    assert_eq!(view["status"], "ready", "{view}");
    assert_eq!(view["counts"]["applied"], 2, "{view}");
    assert_eq!(app.texts("SELECT phone FROM customers WHERE email = 'one@acme.test'").await, ["966501234567"]);
    app.stop().await;
});

on_both_backends!(a_workbook_that_inflates_past_twenty_times_the_largest_upload_fails_the_file_while_it_is_read, |backend| {
    let app = TestApp::start(support::Options { worker: true, adjust: |c| c.max_upload_bytes = 64 * 1024, ..support::Options::new(backend) }).await;
    let alice = app.login("alice@acme.test").await;
    // A few KiB that inflate to 4 MiB: more than 20 × 64 KiB.
    let mut bomb = std::io::Cursor::new(Vec::new());
    {
        let mut zip = zip::ZipWriter::new(&mut bomb);
        let deflated = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
        zip.start_file("xl/worksheets/sheet1.xml", deflated).unwrap();
        std::io::Write::write_all(&mut zip, &vec![b' '; 4 << 20]).unwrap();
        zip.finish().unwrap();
    }
    let bomb = bomb.into_inner();
    assert!(bomb.len() < 64 * 1024, "{}", bomb.len());
    let view = dry_run(&app, &alice, "bomb", "customers", &bomb, XLSX).await;
    assert_eq!(view["status"], "failed", "{view}");
    assert_eq!(view["error"]["code"], "invalid_file", "{view}");
    assert_eq!(view["first_errors"][0]["code"], "workbook_too_large", "{view}");
    app.stop().await;
});

on_both_backends!(a_checkpointed_workbook_export_is_a_bundle_of_workbooks_each_with_its_header_and_first_sheet, |backend| {
    let app = TestApp::start(support::Options { worker: true, orders: 500, adjust: |c| c.part_rows = 150, ..support::Options::new(backend) }).await;
    let alice = app.login("alice@acme.test").await;
    let mut body = support::procs::everything("orders");
    body["format"] = json!("xlsx");
    body["consistency"] = json!("checkpointed");
    body["columns"] = json!(["order_id", "total"]);
    let (done, headers, bytes) = app.export_file(&alice, "parts", &body).await;
    assert_eq!(headers["content-type"], "application/zip");
    let unzipped = support::bundles::unzip(&bytes);
    let parts = done["artifact"]["parts"].as_array().unwrap();
    assert!(parts.len() >= 3, "{done}");
    assert_eq!(unzipped.parts.len(), parts.len());
    let mut ids = Vec::new();
    for ((name, workbook), part) in unzipped.parts.iter().zip(parts) {
        assert!(name.ends_with(".xlsx"), "{name}");
        let book = openpyxl(workbook, false);
        let sheets = book["sheets"].as_array().unwrap();
        assert_eq!(sheets.len(), 1, "{name}");
        assert_eq!(sheets[0]["name"], "orders", "{name}: each part's sheets are counted from its first");
        let rows = sheets[0]["rows"].as_array().unwrap();
        assert_eq!(rows[0][0]["v"], "Order ID", "{name}: each part has its header");
        assert_eq!(rows.len() as u64 - 1, part["rows"].as_u64().unwrap(), "{name}");
        ids.extend(rows[1..].iter().map(|r| r[0]["v"].as_i64().expect("an order id, a whole number")));
    }
    assert_eq!(ids.len() as u64, done["artifact"]["rows"].as_u64().unwrap());
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "every row once, in key order across the parts");
    app.stop().await;
});

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_workbook_of_more_rows_than_a_sheet_holds_goes_on_to_a_second_sheet() {
    let app = TestApp::start(support::Options { worker: true, orders: 0, ..support::Options::new(support::Backend::Sqlite) }).await;
    // 1,048,576 orders: a sheet's 1,048,575 data rows, and one more.
    let customer = app.scalar("SELECT MIN(id) FROM customers WHERE tenant_id = 'ten_acme'").await;
    let now = jiff::Timestamp::now().as_millisecond();
    app.exec(&format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1048576) \
         INSERT INTO orders (tenant_id, customer_id, placed_at, country, status, total_cents, currency, notes, order_ref) \
         SELECT 'ten_acme', {customer}, {now} - 86400000 - i, 'SA', 'paid', i, 'SAR', 'n', 'big-' || i FROM n"
    ))
    .await;
    let alice = app.login("alice@acme.test").await;
    let mut body = support::procs::everything("orders");
    body["format"] = json!("xlsx");
    body["columns"] = json!(["order_id", "total"]);
    let (done, _, bytes) = app.export_file(&alice, "big", &body).await;
    assert_eq!(done["artifact"]["rows"], 1_048_576);
    let sheets = openpyxl(&bytes, true);
    assert_eq!(sheets["sheets"], json!([{"name": "orders", "rows": 1_048_576, "columns": 2}, {"name": "orders (2)", "rows": 2, "columns": 2}]), "a header and 1,048,575 rows, then a header and the rest");
    app.stop().await;
}
