//! SPEC §8 case 20 with real processes: the same apply sent at once to two API instances with one
//! key is one import; a worker SIGKILLed in the middle of a batch (between its upserts and its
//! commit), then another SIGSTOPped past its lease — on PostgreSQL inside its batch's
//! transaction, on SQLite between batches (a process frozen inside SQLite's one write
//! transaction stops every writer until it resumes) — and resumed after two more workers
//! finished the import: every row is applied exactly once, the audit trail shows each batch
//! committed once, the stopped worker's late batch commits nothing, and each attempt resumed
//! after the last committed batch.

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use support::procs::{eventually, rows, scalar, Prepared};
use support::Backend;

const LONG: Duration = Duration::from_secs(90);

fn customers(n: usize) -> String {
    let mut csv = "email,name,phone,country\n".to_owned();
    for i in 0..n {
        csv.push_str(&format!("proc{i}@acme.test,Person {i},+9665{i:08},SA\n"));
    }
    csv
}

on_both_backends!(an_import_survives_a_killed_worker_and_a_frozen_one_and_applies_every_row_exactly_once, |backend| {
    let p = Prepared::new(backend, 100).await;
    let token = p.run_ok(&["token", "create", "alice@acme.test"]).await.trim().to_owned();
    let batch = [("EXPORTD_IMPORT_BATCH_ROWS", "4")];
    let (_api1, base1) = p.api_with(&batch).await;
    let (_api2, base2) = p.api_with(&batch).await;
    let client = reqwest::Client::new();
    let upload: Value = client
        .post(format!("{base1}/api/uploads"))
        .bearer_auth(&token)
        .header("content-type", "text/csv")
        .body(customers(40))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let body = json!({"dataset": "customers", "upload": upload["upload"]});
    let send = |base: String| {
        let (client, token, body) = (client.clone(), token.clone(), body.clone());
        async move {
            let resp = client.post(format!("{base}/api/imports")).bearer_auth(&token).header("Idempotency-Key", "once").json(&body).send().await.unwrap();
            (resp.status().as_u16(), resp.json::<Value>().await.unwrap())
        }
    };
    let ((s1, v1), (s2, v2)) = tokio::join!(send(base1.clone()), send(base2.clone()));
    assert_eq!((s1, s2), (202, 202));
    assert_eq!(v1["id"], v2["id"], "one import for one key on two instances");
    let id = v1["id"].as_str().unwrap().to_owned();
    let db = p.connect().await;
    assert_eq!(scalar(&db, "SELECT COUNT(*) FROM jobs WHERE kind = 'import'").await, 1);

    // Worker a: three batches commit; the fourth waits between its upserts and its commit, and
    // the worker is killed there.
    let mut a = p.worker("a", &[batch[0], ("FAILPOINTS", "import_batch_before_commit=3*off->sleep(30000)")], &[]);
    a.wait_count(&["import_batch_before_commit", &id], 4, LONG).await;
    a.signal("KILL");
    a.wait_exit(LONG).await;
    assert_eq!(scalar(&db, "SELECT COUNT(*) FROM customers WHERE email LIKE 'proc%'").await, 12, "a's unfinished batch committed nothing");

    // Worker b: takes the job once a's lease expires, commits one batch, and is frozen in its
    // second past its lease.
    let point = if backend == Backend::Postgres { "import_batch_before_commit" } else { "import_before_batch" };
    let b = p.worker("b", &[batch[0], ("FAILPOINTS", &format!("{point}=1*off->sleep(6000)"))], &[]);
    b.wait_count(&[point, &id], 2, LONG).await;
    b.signal("STOP");

    // Workers c and d finish it.
    let _c = p.worker("c", &[batch[0]], &[]);
    let _d = p.worker("d", &[batch[0]], &[]);
    eventually("the import is ready", LONG, || {
        let db = db.clone();
        let id = id.clone();
        async move { scalar(&db, &format!("SELECT COUNT(*) FROM jobs WHERE id = '{id}' AND status = 'ready'")).await == 1 }
    })
    .await;
    b.signal("CONT");
    b.wait_line(&["lost", &id], LONG).await;

    assert_eq!(scalar(&db, "SELECT COUNT(*) FROM customers WHERE email LIKE 'proc%'").await, 40, "every row, once");
    let batches = rows(&db, &format!("SELECT CAST(seq AS VARCHAR), CAST(generation AS VARCHAR) FROM job_checkpoints WHERE job_id = '{id}' ORDER BY job_checkpoints.seq")).await;
    assert_eq!(batches.iter().map(|r| r[0].parse::<i32>().unwrap()).collect::<Vec<_>>(), (1..=10).collect::<Vec<_>>(), "ten batches, each once");
    let generations: Vec<i32> = batches.iter().map(|r| r[1].parse().unwrap()).collect();
    assert!(generations.windows(2).all(|w| w[0] <= w[1]) && generations[0] == 1 && generations[3] >= 2, "each attempt went on after the last committed batch: {generations:?}");
    assert_eq!(scalar(&db, &format!("SELECT COUNT(*) FROM job_events WHERE job_id = '{id}' AND detail LIKE 'checkpoint %'")).await, 10, "the audit trail shows each batch once");
    let view: Value = client.get(format!("{base2}/api/imports/{id}")).bearer_auth(&token).send().await.unwrap().json().await.unwrap();
    assert_eq!((view["counts"]["created"].as_i64(), view["counts"]["applied"].as_i64()), (Some(40), Some(40)), "{view}");
});

/// The worker's peak resident memory (VmHWM), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_of_invalid_rows_is_checked_and_reported_in_memory_that_does_not_grow_with_it() {
    // SQLite: the memory is the worker's own, whatever the database.
    let p = Prepared::new(Backend::Sqlite, 100).await;
    let token = p.run_ok(&["token", "create", "alice@acme.test"]).await.trim().to_owned();
    let (_api, base) = p.api().await;
    // About 48 MiB of rows, every one invalid (no such country): the validation's report holds
    // them all with their cells, and the final report lists them again.
    let mut csv = String::with_capacity(50 << 20);
    csv.push_str("email,name,phone,country\n");
    let mut rows = 0u64;
    while csv.len() < 48 << 20 {
        csv.push_str(&format!("invalid{rows}@acme.test,Invalid Person {rows},+9665{rows:08},XX\n"));
        rows += 1;
    }
    let client = reqwest::Client::new();
    let upload: Value = client.post(format!("{base}/api/uploads")).bearer_auth(&token).header("content-type", "text/csv").body(csv).send().await.unwrap().json().await.unwrap();
    let mut worker = p.worker("w", &[], &[]);
    let view: Value = client
        .post(format!("{base}/api/imports"))
        .bearer_auth(&token)
        .header("Idempotency-Key", "invalid")
        .json(&json!({"dataset": "customers", "upload": upload["upload"]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = view["id"].as_str().unwrap().to_owned();
    let done = loop {
        let view: Value = client.get(format!("{base}/api/imports/{id}")).bearer_auth(&token).send().await.unwrap().json().await.unwrap();
        if view["status"] == "failed" && view["report"].is_object() {
            break view;
        }
        assert!(!matches!(view["status"].as_str(), Some("ready" | "cancelled")), "{view}");
        assert!(worker.child.try_wait().unwrap().is_none(), "the worker died");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(done["error"]["code"], "validation_failed");
    assert_eq!(done["counts"]["invalid"], rows);
    let peak = peak_rss_kib(worker.child.id().unwrap()) / 1024;
    eprintln!("the worker's peak RSS: {peak} MiB for a 48 MiB file of {rows} invalid rows");
    // Old code read the validation's report whole, twice (to apply and to write the final
    // report), with a map of every entry: hundreds of MiB for this file.
    assert!(peak < 128, "the worker's peak RSS was {peak} MiB for a 48 MiB file of {rows} invalid rows");
    worker.signal("TERM");
    worker.wait_exit(LONG).await;
}
