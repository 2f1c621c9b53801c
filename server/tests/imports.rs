//! Imports (SPEC §10, §8 cases 20–22) through the API, on both backends: the dry run's report
//! lists exactly the bad rows in input order and writes nothing; `abort` applies nothing;
//! `skip_invalid` applies exactly the valid rows with the dry run's counts; an exported file
//! imports back unchanged; a batch lost before its commit is applied once by the next attempt;
//! a revocation between batches stops the import and its report lists the rows not applied; a
//! cancel, between batches or while the file is checked, ends it with such a report too.

mod support;

use serde_json::{json, Value};
use support::imports::{codes, exported_and_checked_back, finished, import, numbered, report, small_batches, start, two_renewals, upload};
use support::{expect_problem, Gate, Options, TestApp};

const CUSTOMERS: &str = "email,name,phone,country\r\n\
new1@acme.test,New One,+966500000001,SA\r\n\
bad-email,X,1,SA\r\n\
dup@acme.test,A,1,SA\n\
dup@acme.test,B,1,SA\r\n\
ok2@acme.test,\"two\nlines\",1,AE\r\n\
ok3@acme.test,ctl\u{7},1,SA\r\n\
ok4@acme.test,Name,1,XX\r\n\
ok5@acme.test,'=SUM(1),1,SA\r\n\
ok6@acme.test,a,b\r\n";

on_both_backends!(a_dry_run_reports_exactly_the_bad_rows_in_input_order_and_the_apply_does_what_it_predicted, |backend| {
    let app = TestApp::with_worker(backend).await;
    let alice = app.login("alice@acme.test").await;
    let before = app.scalar("SELECT COUNT(*) FROM customers").await;
    let upl = upload(&app, &alice, CUSTOMERS).await;

    let dry = import(&app, &alice, "dry", json!({"dataset": "customers", "upload": upl, "mode": "dry_run", "on_error": "skip_invalid"})).await;
    assert_eq!(dry["status"], "ready", "{dry}");
    assert_eq!(dry["counts"], json!({"rows": 9, "valid": 3, "invalid": 6, "created": 3, "updated": 0, "unchanged": 0, "applied": 0}));
    let expected = vec![
        (3, "email".to_owned(), "invalid_email".to_owned()),
        (4, "email".to_owned(), "duplicate_key".to_owned()),
        (5, "email".to_owned(), "duplicate_key".to_owned()),
        (8, "name".to_owned(), "control_character".to_owned()),
        (9, "country".to_owned(), "invalid_country".to_owned()),
        (11, String::new(), "wrong_field_count".to_owned()),
    ];
    assert_eq!(codes(&report(&app, &alice, dry["id"].as_str().unwrap()).await), expected);
    assert_eq!(dry["first_errors"].as_array().unwrap().len(), 6);
    assert_eq!(app.scalar("SELECT COUNT(*) FROM customers").await, before, "a dry run writes nothing");

    let aborted = import(&app, &alice, "abort", json!({"dataset": "customers", "upload": upl})).await;
    assert_eq!(aborted["status"], "failed");
    assert_eq!(aborted["error"]["code"], "validation_failed");
    assert_eq!(app.scalar("SELECT COUNT(*) FROM customers").await, before, "abort applies nothing");
    let aborted_report = codes(&report(&app, &alice, aborted["id"].as_str().unwrap()).await);
    assert_eq!(aborted_report.iter().filter(|(_, _, c)| c == "not_applied").map(|(l, _, _)| *l).collect::<Vec<_>>(), vec![2, 6, 10], "the valid rows, not applied");

    let applied = import(&app, &alice, "apply", json!({"dataset": "customers", "upload": upl, "on_error": "skip_invalid"})).await;
    assert_eq!(applied["status"], "ready", "{applied}");
    assert_eq!(applied["counts"]["created"], dry["counts"]["created"]);
    assert_eq!(applied["counts"]["invalid"], dry["counts"]["invalid"]);
    assert_eq!(applied["counts"]["applied"], 3);
    assert_eq!(app.scalar("SELECT COUNT(*) FROM customers").await, before + 3);
    assert_eq!(app.scalar("SELECT COUNT(*) FROM customers WHERE email = 'ok5@acme.test' AND name = '=SUM(1)'").await, 1, "the export's defusing is undone");
    assert_eq!(app.scalar("SELECT COUNT(*) FROM customers WHERE email = 'ok2@acme.test' AND name = 'two\nlines'").await, 1);

    let again = import(&app, &alice, "again", json!({"dataset": "customers", "upload": upl, "on_error": "skip_invalid"})).await;
    assert_eq!(again["counts"]["unchanged"], 3, "{again}");
    assert_eq!(again["counts"]["created"], 0);
    assert_eq!(app.scalar("SELECT COUNT(*) FROM customers").await, before + 3);
});

on_both_backends!(an_exported_file_imported_back_as_a_dry_run_is_unchanged_row_for_row, |backend| {
    let app = TestApp::with_worker(backend).await;
    let alice = app.login("alice@acme.test").await;
    for report_name in ["customers", "orders"] {
        let (rows, dry) = exported_and_checked_back(&app, &alice, report_name).await;
        assert!(rows > 0);
        assert_eq!(dry["counts"], json!({"rows": rows, "valid": rows, "invalid": 0, "created": 0, "updated": 0, "unchanged": rows, "applied": 0}), "{report_name}");
    }
});

on_both_backends!(a_batch_lost_before_its_commit_is_applied_once_by_the_next_attempt_and_a_duplicate_apply_is_one_import, |backend| {
    let app = TestApp::start(Options { worker: true, adjust: small_batches, ..Options::new(backend) }).await;
    let alice = app.login("alice@acme.test").await;
    let upl = upload(&app, &alice, &numbered(7)).await;
    // The third batch fails once between its upserts and its commit.
    fail::cfg(app.fault("import_batch_before_commit"), "2*off->1*return->off").unwrap();
    let body = json!({"dataset": "customers", "upload": upl});
    let sent = support::send_together((0..2).map(|_| alice.post(app.url("/api/imports")).header("Idempotency-Key", "twice").json(&body)).collect()).await;
    assert!(sent.iter().all(|(status, _)| *status == 202), "{sent:?}");
    assert_eq!(app.scalar("SELECT COUNT(*) FROM jobs WHERE kind = 'import'").await, 1, "one import for one key");
    let id = app.export_id_where("kind = 'import'").await.unwrap();
    let done = finished(&app, &alice, &id).await;
    fail::remove(app.fault("import_batch_before_commit"));
    assert_eq!(done["status"], "ready", "{done}");
    assert_eq!(done["attempt"], 2, "the lost batch failed the first attempt");
    assert_eq!(done["counts"]["created"], 7);
    assert_eq!(app.scalar("SELECT COUNT(*) FROM customers WHERE email LIKE 'batch%'").await, 7, "every row exactly once");
    assert_eq!(app.scalar(&format!("SELECT COUNT(*) FROM job_checkpoints WHERE job_id = '{id}'")).await, 4, "four batches, each committed once");
});

on_both_backends!(a_revocation_between_batches_stops_the_import_and_its_report_says_which_rows_were_not_applied, |backend| {
    let app = TestApp::start(Options { worker: true, adjust: small_batches, ..Options::new(backend) }).await;
    let alice = app.login("alice@acme.test").await;
    let upl = upload(&app, &alice, &numbered(6)).await;
    let mut gate = Gate::close_at(&app.fault("import_before_batch"), 2);
    let view = start(&app, &alice, "revoked", &json!({"dataset": "customers", "upload": upl})).await;
    gate.reached().await;
    app.exec("UPDATE users SET role = 'analyst' WHERE id = 'usr_alice'").await;
    gate.open();
    let id = view["id"].as_str().unwrap();
    let done = finished(&app, &alice, id).await;
    assert_eq!(done["status"], "failed");
    assert_eq!(done["error"]["code"], "permission_revoked", "{done}");
    assert!(done["report"].is_object(), "{done}");
    assert_eq!(app.scalar("SELECT COUNT(*) FROM customers WHERE email LIKE 'batch%'").await, 2, "the first batch stays");
    // The report is for admins: read it as one again.
    app.exec("UPDATE users SET role = 'admin' WHERE id = 'usr_alice'").await;
    let rows = codes(&report(&app, &alice, id).await);
    assert_eq!(rows, (4..=7).map(|line| (line, String::new(), "not_applied".to_owned())).collect::<Vec<_>>());
});

on_both_backends!(only_an_admin_imports_and_a_request_is_checked_before_anything_is_made, |backend| {
    let app = TestApp::spawn(backend).await;
    let alice = app.login("alice@acme.test").await;
    let bob = app.login("bob@acme.test").await;
    let upl = upload(&app, &alice, CUSTOMERS).await;
    let body = json!({"dataset": "customers", "upload": upl});
    let refused = bob.post(app.url("/api/imports")).header("Idempotency-Key", "k").json(&body).send().await.unwrap();
    expect_problem(refused, 403, "import-not-permitted").await;
    for (bad, pointer) in [
        (json!({"dataset": "invoices", "upload": upl}), "/dataset"),
        (json!({"dataset": "customers", "upload": upl, "max_errors": 3}), "/max_errors"),
    ] {
        let resp = alice.post(app.url("/api/imports")).header("Idempotency-Key", "bad").json(&bad).send().await.unwrap();
        let problem = expect_problem(resp, 422, "invalid-request").await;
        assert_eq!(problem["errors"][0]["pointer"], pointer, "{problem}");
    }
    let unknown = alice.post(app.url("/api/imports")).header("Idempotency-Key", "unknown").json(&json!({"dataset": "customers", "upload": "upl_0123456789abcdef0123456789abcdef"})).send().await.unwrap();
    expect_problem(unknown, 422, "upload-not-found").await;
    let gina = app.login("gina@globex.test").await;
    let others = gina.post(app.url("/api/imports")).header("Idempotency-Key", "others").json(&body).send().await.unwrap();
    expect_problem(others, 422, "upload-not-found").await;
    let first = start(&app, &alice, "same", &body).await;
    let reused = alice.post(app.url("/api/imports")).header("Idempotency-Key", "same").json(&json!({"dataset": "orders", "upload": upl})).send().await.unwrap();
    expect_problem(reused, 422, "idempotency-key-reused").await;
    let replay = alice.post(app.url("/api/imports")).header("Idempotency-Key", "same").json(&body).send().await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.json::<Value>().await.unwrap()["id"], first["id"]);
    expect_problem(alice.get(app.url("/api/imports/imp_0123456789abcdef0123456789abcdef")).send().await.unwrap(), 404, "import-not-found").await;
    let list: Value = alice.get(app.url("/api/imports")).send().await.unwrap().json().await.unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let cancelled = alice.post(app.url(&format!("/api/imports/{}/cancel", first["id"].as_str().unwrap()))).send().await.unwrap();
    assert_eq!(cancelled.status(), 200);
});

on_both_backends!(a_revoked_import_redriven_goes_on_after_its_committed_batches, |backend| {
    let app = TestApp::start(Options { worker: true, adjust: small_batches, ..Options::new(backend) }).await;
    let alice = app.login("alice@acme.test").await;
    let upl = upload(&app, &alice, &numbered(6)).await;
    let mut gate = Gate::close_at(&app.fault("import_before_batch"), 2);
    let view = start(&app, &alice, "redriven", &json!({"dataset": "customers", "upload": upl})).await;
    gate.reached().await;
    app.exec("UPDATE users SET role = 'analyst' WHERE id = 'usr_alice'").await;
    gate.open();
    let id = view["id"].as_str().unwrap();
    assert_eq!(finished(&app, &alice, id).await["error"]["code"], "permission_revoked");
    app.exec("UPDATE users SET role = 'admin' WHERE id = 'usr_alice'").await;
    assert_eq!(app.cli(&["jobs", "redrive", id]).await, 0);
    let done = finished(&app, &alice, id).await;
    assert_eq!(done["status"], "ready", "{done}");
    assert_eq!(app.scalar("SELECT COUNT(*) FROM customers WHERE email LIKE 'batch%'").await, 6, "every row once");
    assert_eq!(app.scalar(&format!("SELECT COUNT(*) FROM job_checkpoints WHERE job_id = '{id}'")).await, 3, "the first batch was not done again");
    assert_eq!(done["counts"]["created"], 6);
});

on_both_backends!(a_cancel_between_batches_ends_cancelled_with_a_report_of_the_rows_not_applied, |backend| {
    let app = TestApp::start(Options { worker: true, adjust: small_batches, ..Options::new(backend) }).await;
    let alice = app.login("alice@acme.test").await;
    let upl = upload(&app, &alice, &numbered(6)).await;
    let mut gate = Gate::close_at(&app.fault("import_before_batch"), 2);
    let view = start(&app, &alice, "cancelled", &json!({"dataset": "customers", "upload": upl})).await;
    let id = view["id"].as_str().unwrap();
    gate.reached().await;
    let asked = alice.post(app.url(&format!("/api/imports/{id}/cancel"))).send().await.unwrap();
    assert_eq!(asked.status(), 202);
    gate.open();
    let done = finished(&app, &alice, id).await;
    assert_eq!(done["status"], "cancelled", "{done}");
    assert_eq!(app.scalar("SELECT COUNT(*) FROM customers WHERE email LIKE 'batch%'").await, 2);
    let rows = codes(&report(&app, &alice, id).await);
    assert_eq!(rows, (4..=7).map(|line| (line, String::new(), "not_applied".to_owned())).collect::<Vec<_>>());
    let again = alice.post(app.url(&format!("/api/imports/{id}/cancel"))).send().await.unwrap();
    assert_eq!(again.status(), 200, "cancelled already");
});

on_both_backends!(a_cancel_while_the_file_is_checked_ends_cancelled_with_a_report_of_every_row_not_applied, |backend| {
    let app = TestApp::start(Options { worker: true, adjust: small_batches, ..Options::new(backend) }).await;
    let alice = app.login("alice@acme.test").await;
    let upl = upload(&app, &alice, &numbered(6)).await;
    let mut gate = Gate::close(&app.fault("import_validating"));
    let view = start(&app, &alice, "cancelled-checking", &json!({"dataset": "customers", "upload": upl})).await;
    let id = view["id"].as_str().unwrap();
    gate.reached().await;
    let asked = alice.post(app.url(&format!("/api/imports/{id}/cancel"))).send().await.unwrap();
    assert_eq!(asked.status(), 202);
    // Two renewals of the lease after the cancel: the first told the worker, which stops at the
    // validation's next step instead of meeting the cancel at its first batch.
    two_renewals(&app, id).await;
    gate.open();
    let done = finished(&app, &alice, id).await;
    assert_eq!(done["status"], "cancelled", "{done}");
    assert_eq!(app.scalar("SELECT COUNT(*) FROM customers WHERE email LIKE 'batch%'").await, 0);
    // Old code: cancelled with no report at all.
    let rows = codes(&report(&app, &alice, id).await);
    assert_eq!(rows, (2..=7).map(|line| (line, String::new(), "not_applied".to_owned())).collect::<Vec<_>>());
});

on_both_backends!(a_row_keeps_the_verdict_its_validation_gave_it_and_rows_the_database_refuses_count_as_invalid, |backend| {
    let app = TestApp::start(Options { worker: true, adjust: small_batches, ..Options::new(backend) }).await;
    let alice = app.login("alice@acme.test").await;
    // No status column: an existing order can be updated, a new one cannot be made.
    let csv = "order_ref,customer_email,placed_at,total\n\
               N-1,customer1@acme.example,2026-01-31T09:30:00Z,1.00\n\
               N-2,late@acme.test,2026-01-31T09:30:00Z,2.00\n\
               N-3,customer1@acme.example,2026-01-31T09:30:00Z,3.00\n\
               N-4,customer1@acme.example,2026-01-31T09:30:00Z,4.00\n\
               N-5,customer1@acme.example,2026-01-31T09:30:00Z,5.00\n";
    let upl = upload(&app, &alice, csv).await;
    let mut gate = Gate::close_at(&app.fault("import_before_batch"), 1);
    let view = start(&app, &alice, "verdict", &json!({"dataset": "orders", "upload": upl, "on_error": "skip_invalid"})).await;
    gate.reached().await;
    // The unknown customer appears after the validation: its row stays invalid.
    app.exec("INSERT INTO customers (tenant_id, name, email, email_key, phone, country, created_at, lifetime_total_cents) VALUES ('ten_acme', 'Late', 'late@acme.test', 'late@acme.test', '1', 'SA', 0, 0)").await;
    gate.open();
    let id = view["id"].as_str().unwrap();
    let done = finished(&app, &alice, id).await;
    assert_eq!(done["status"], "ready", "{done}");
    assert_eq!(done["counts"], json!({"rows": 5, "valid": 0, "invalid": 5, "created": 0, "updated": 0, "unchanged": 0, "applied": 0}), "{done}");
    assert_eq!(app.scalar("SELECT COUNT(*) FROM orders WHERE order_ref LIKE 'N-%'").await, 0);
    let rows = codes(&report(&app, &alice, id).await);
    assert_eq!(
        rows,
        vec![
            (2, String::new(), "refused".to_owned()),
            (3, "customer_email".to_owned(), "unknown_reference".to_owned()),
            (4, String::new(), "refused".to_owned()),
            (5, String::new(), "refused".to_owned()),
            (6, String::new(), "refused".to_owned()),
        ],
        "each refused row once, in input order"
    );
});

on_both_backends!(rows_made_from_a_file_without_country_or_currency_still_export_and_import_back_unchanged, |backend| {
    let app = TestApp::with_worker(backend).await;
    let alice = app.login("alice@acme.test").await;
    let customers = upload(&app, &alice, "email,name\nno-country@acme.test,No Country\n").await;
    let made = import(&app, &alice, "no-country", json!({"dataset": "customers", "upload": customers, "on_error": "skip_invalid"})).await;
    assert_eq!(made["status"], "ready", "{made}");
    let orders = upload(&app, &alice, "order_ref,customer_email,placed_at,status,total\nNC-1,customer1@acme.example,2026-01-31T09:30:00Z,paid,1.00\n").await;
    let made = import(&app, &alice, "no-currency", json!({"dataset": "orders", "upload": orders, "on_error": "skip_invalid"})).await;
    assert_eq!(made["status"], "ready", "{made}");
    // SPEC case 22 for whatever an import made: old code stored "" for the missing columns,
    // which the export wrote and the dry run then refused as no country or currency.
    for report_name in ["customers", "orders"] {
        let (rows, dry) = exported_and_checked_back(&app, &alice, report_name).await;
        assert_eq!(dry["counts"]["unchanged"], rows, "{report_name}: {dry}");
    }
});
