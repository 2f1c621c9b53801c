//! Real `exportd` processes under real signals, on PostgreSQL and on SQLite: workers killed
//! (SIGKILL), paused past their lease (SIGSTOP/SIGCONT), stopped (SIGTERM), crashed at each fault
//! point, many jobs at once, and processes migrating one fresh database together.

mod support;

use std::time::Duration;
use support::procs::{eventually, everything, scalar, sha256, text, Api, Prepared, Proc};
use support::Backend;


const LONG: Duration = Duration::from_secs(60);

/// The objects published for one export.
fn published(p: &Prepared, id: &str) -> Vec<String> {
    p.objects(&format!("exports/ten_acme/{id}"))
}

on_both_backends!(a_worker_stopped_on_sigterm_mid_export_hands_its_job_back_without_its_progress, |backend| {
    let p = Prepared::new(backend, 5_000).await;
    let (_api, base) = p.api().await;
    let api = Api::new(&base, &p.token);
    let mut a = p.worker("a", &[("FAILPOINTS", "mid_stream=sleep(3000)")], &[]);
    let (status, view) = api.create("handed-back", &everything("orders")).await;
    assert_eq!(status, 202);
    let id = view["id"].as_str().unwrap().to_owned();
    a.wait_line(&["mid_stream", &id], LONG).await;
    let db = p.connect().await;
    eventually("progress recorded", LONG, || {
        let db = db.clone();
        let id = id.clone();
        async move { scalar(&db, &format!("SELECT rows_written FROM jobs WHERE id = '{id}'")).await > 0 }
    })
    .await;
    a.signal("TERM");
    assert!(a.wait_exit(LONG).await.success());
    let view = api.view(&id).await;
    assert_eq!(view["status"], "queued", "{view}");
    assert_eq!(view["attempt"], 0, "a hand-back does not count as an attempt");
    assert_eq!(view["progress"]["rows_written"], 0, "{view}");
    assert!(view["progress"]["rows_total"].is_null(), "{view}");
    let moved = scalar(&db, &format!("SELECT COUNT(*) FROM job_events WHERE job_id = '{id}' AND from_status = 'running' AND to_status = 'queued' AND generation = 1")).await;
    assert_eq!(moved, 1, "the hand-back is in the audit trail");
});

/// SIGSTOPs worker `a` at `point` of its first attempt, lets three other workers take over past
/// its lease (with the data changed, so their file differs), then SIGCONTs `a`.
async fn paused_past_the_lease(backend: Backend, point: &str) {
    let p = Prepared::new(backend, 300).await;
    let (_api, base) = p.api().await;
    let api = Api::new(&base, &p.token);
    let mut a = p.worker("a", &[("FAILPOINTS", &format!("{point}=sleep(4000)"))], &[]);
    let (status, view) = api.create("paused", &everything("orders")).await;
    assert_eq!(status, 202);
    let id = view["id"].as_str().unwrap().to_owned();
    a.wait_line(&[point, &id], LONG).await;
    a.signal("STOP");
    let db = p.connect().await;
    db.execute_unprepared("UPDATE orders SET notes = 'changed after the first snapshot' WHERE tenant_id = 'ten_acme'").await.unwrap();

    let others: Vec<Proc> = ["b", "c", "d"].iter().map(|l| p.worker(l, &[], &[])).collect();
    let done = api.wait_status(&id, &["ready", "failed"], LONG).await;
    assert_eq!(done["status"], "ready", "{done}");
    assert_eq!(done["attempt"], 2, "{done}");
    let winner = done["artifact"]["sha256"].as_str().unwrap().to_owned();

    a.signal("CONT");
    a.wait_line(&["lost", &id], LONG).await;
    a.signal("TERM");
    assert!(a.wait_exit(LONG).await.success());

    let expected = vec![format!("exports/ten_acme/{id}/{winner}.csv")];
    let pp = &p;
    eventually("only the winner's file is under exports/", LONG, || {
        let expected = expected.clone();
        let id = id.clone();
        async move { published(pp, &id) == expected }
    })
    .await;
    eventually("no staging object is left", LONG, || async { pp.objects("staging").is_empty() }).await;
    let (status, bytes) = api.download(&id).await;
    assert_eq!(status, 200);
    assert_eq!(sha256(&bytes), winner, "what is served is the winner's file");
    assert!(String::from_utf8_lossy(&bytes).contains("changed after the first snapshot"));
    let view = api.view(&id).await;
    assert_eq!(view["artifact"]["sha256"], winner.as_str(), "the old worker changed nothing: {view}");
    let released = scalar(&db, &format!("SELECT COUNT(*) FROM job_events WHERE job_id = '{id}' AND from_status = 'running' AND to_status = 'ready'")).await;
    assert_eq!(released, 1, "one release");
    let generation = scalar(&db, &format!("SELECT CAST(generation AS BIGINT) FROM job_events WHERE job_id = '{id}' AND from_status = 'running' AND to_status = 'ready'")).await;
    assert_eq!(generation, 2);
    for mut w in others {
        w.signal("TERM");
        assert!(w.wait_exit(LONG).await.success());
    }
}

on_both_backends!(a_worker_paused_past_its_lease_before_its_fence_cannot_publish_when_it_wakes, |backend| {
    paused_past_the_lease(backend, "after_staging").await;
});

on_both_backends!(a_worker_paused_between_its_fence_and_its_copy_cannot_publish_what_the_janitor_took, |backend| {
    paused_past_the_lease(backend, "before_publish").await;
});

on_both_backends!(a_worker_paused_after_publishing_past_its_lease_cannot_release_and_the_janitor_removes_its_file, |backend| {
    paused_past_the_lease(backend, "after_publish").await;
});

on_both_backends!(twenty_jobs_at_once_keep_their_leases_while_each_holds_its_snapshot, |backend| {
    // Enough rows that each job is still reading its snapshot while it sits mid-stream.
    let p = Prepared::new(backend, 10_000).await;
    let (_api, base) = p.api().await;
    let api = Api::new(&base, &p.token);
    let mut w = p.worker("w", &[("FAILPOINTS", "mid_stream=sleep(5000)")], &["--concurrency", "20"]);
    let mut ids = Vec::new();
    for i in 0..20 {
        let (status, view) = api.create(&format!("many-{i}"), &everything("orders")).await;
        assert_eq!(status, 202);
        ids.push(view["id"].as_str().unwrap().to_owned());
    }
    let db = p.connect().await;
    let now = exportd::db::now_ms_sql(db.get_database_backend());
    eventually("all twenty are running", Duration::from_secs(20), || {
        let db = db.clone();
        async move { scalar(&db, "SELECT COUNT(*) FROM jobs WHERE status = 'running'").await == 20 }
    })
    .await;
    // While every job sits mid-stream holding its snapshot, each lease keeps being renewed.
    for _ in 0..16 {
        let expired = scalar(&db, &format!("SELECT COUNT(*) FROM jobs WHERE status = 'running' AND lease_expires_at < {now}")).await;
        if expired > 0 {
            let detail = text(&db, &format!("SELECT id || ' lease ' || CAST(lease_expires_at - {now} AS TEXT) || ' ms, rows ' || CAST(rows_written AS TEXT) || '/' || COALESCE(CAST(rows_total AS TEXT), '?') FROM jobs WHERE status = 'running' AND lease_expires_at < {now}")).await;
            panic!("a lease expired while its worker was alive: {detail:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for id in &ids {
        let done = api.wait_status(id, &["ready", "failed"], LONG).await;
        assert_eq!(done["status"], "ready", "{done}");
        assert_eq!(done["attempt"], 1, "no job lost its lease: {done}");
    }
    w.signal("TERM");
    assert!(w.wait_exit(LONG).await.success());
});

on_both_backends!(processes_starting_together_on_a_fresh_database_all_migrate_it, |backend| {
    // Enough rounds and processes that the race on a fresh SQLite file (every process opening it
    // at once, each switching it into WAL mode) shows up on an idle machine, not only a loaded one.
    for round in 0..12 {
        let dir = tempfile::tempdir().unwrap();
        let (db_url, _guard) = support::fresh_database(backend, dir.path()).await;
        let store = format!("file://{}/objects", dir.path().display());
        let mut children = Vec::new();
        for _ in 0..12 {
            let mut cmd = tokio::process::Command::new(support::procs::EXE);
            cmd.arg("migrate").env("DATABASE_URL", &db_url).env("EXPORTD_STORE", &store).env("EXPORTD_LOG", "error");
            children.push(cmd.stderr(std::process::Stdio::piped()).output());
        }
        for out in futures::future::join_all(children).await {
            let out = out.unwrap();
            assert!(out.status.success(), "round {round}: {}", String::from_utf8_lossy(&out.stderr));
        }
        let db = exportd::db::connect(&db_url).await.unwrap();
        assert!(text(&db, "SELECT id FROM signing_keys").await.is_some(), "round {round}: one signing key");
        assert_eq!(scalar(&db, "SELECT COUNT(*) FROM signing_keys").await, 1, "round {round}");
        db.close().await.ok();
    }
});

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connections_opened_at_once_on_a_fresh_sqlite_file_all_open_and_migrate_it() {
    // The processes above, in one process and released by a barrier, so the race on a fresh
    // file is met in most rounds rather than now and then.
    const AT_ONCE: usize = 16;
    for round in 0..100 {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/exportd.db", dir.path().display());
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(AT_ONCE));
        let opens = (0..AT_ONCE).map(|_| {
            let (url, barrier) = (url.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                exportd::db::connect_and_migrate(&url).await
            })
        });
        for opened in futures::future::join_all(opens).await {
            let db = opened.unwrap().unwrap_or_else(|e| panic!("round {round}: {e}"));
            db.close().await.ok();
        }
        let db = exportd::db::connect(&url).await.unwrap();
        assert_eq!(scalar(&db, "SELECT COUNT(*) FROM signing_keys").await, 1, "round {round}: one signing key");
        db.close().await.ok();
    }
}

use sea_orm::ConnectionTrait;

on_both_backends!(a_worker_killed_mid_export_is_replaced_and_its_job_finishes_with_one_artifact, |backend| {
    let p = Prepared::new(backend, 5_000).await;
    let (_api, base) = p.api().await;
    let api = Api::new(&base, &p.token);
    let a = p.worker("a", &[("FAILPOINTS", "mid_stream=sleep(60000)")], &[]);
    let (status, view) = api.create("killed", &everything("orders")).await;
    assert_eq!(status, 202);
    let id = view["id"].as_str().unwrap().to_owned();
    a.wait_line(&["mid_stream", &id], LONG).await;
    let db = p.connect().await;
    eventually("progress recorded mid-export", LONG, || {
        let db = db.clone();
        let id = id.clone();
        async move { scalar(&db, &format!("SELECT rows_written FROM jobs WHERE id = '{id}'")).await > 0 }
    })
    .await;
    a.signal("KILL");
    let others: Vec<Proc> = ["b", "c", "d"].iter().map(|l| p.worker(l, &[], &[])).collect();
    let done = api.wait_status(&id, &["ready", "failed"], LONG).await;
    assert_eq!(done["status"], "ready", "{done}");
    assert_eq!(done["attempt"], 2, "the crash counted as an attempt: {done}");
    assert!(done["error"].is_null(), "no error is left once ready: {done}");
    let sha = done["artifact"]["sha256"].as_str().unwrap().to_owned();
    assert_eq!(published(&p, &id), vec![format!("exports/ten_acme/{id}/{sha}.csv")]);
    let (status, bytes) = api.download(&id).await;
    assert_eq!(status, 200);
    assert_eq!(sha256(&bytes), sha);
    let expired = scalar(&db, &format!("SELECT COUNT(*) FROM job_events WHERE job_id = '{id}' AND from_status = 'running' AND to_status = 'retry_wait' AND detail = 'worker_lost' AND generation = 1")).await;
    assert_eq!(expired, 1, "the janitor recorded the lost worker");
    let pp = &p;
    eventually("the killed attempt's staging is cleaned", LONG, || async { pp.objects("staging").is_empty() }).await;
    for mut w in others {
        w.signal("TERM");
        assert!(w.wait_exit(LONG).await.success());
    }
});

/// The order ids of the acme orders in the database, for checking a file's rows.
async fn acme_order_ids(db: &sea_orm::DatabaseConnection) -> Vec<i64> {
    let rows = db
        .query_all_raw(sea_orm::Statement::from_string(db.get_database_backend(), "SELECT id FROM orders WHERE tenant_id = 'ten_acme' ORDER BY id".to_owned()))
        .await
        .unwrap();
    rows.iter().map(|r| r.try_get_by_index::<i64>(0).unwrap()).collect()
}

on_both_backends!(a_crash_at_any_fault_point_recovers_to_exactly_one_correct_artifact_and_no_staging, |backend| {
    let p = Prepared::new(backend, 3_000).await;
    let (_api, base) = p.api().await;
    let api = Api::new(&base, &p.token);
    let db = p.connect().await;
    let ids = acme_order_ids(&db).await;
    let others: Vec<Proc> = ["b", "c", "d"].iter().map(|l| p.worker(l, &[], &["--deployments", "uae"])).collect();
    for point in ["after_claim", "mid_stream", "after_staging", "before_publish", "after_publish", "before_release", "after_release"] {
        // The crashing worker is the only one serving ksa until it is gone.
        let mut crashing = p.worker(&format!("crash@{point}"), &[("FAILPOINTS", &format!("{point}=return(crash)"))], &["--deployments", "ksa"]);
        let (status, view) = api.create(&format!("crash-{point}"), &everything("orders")).await;
        assert_eq!(status, 202);
        let id = view["id"].as_str().unwrap().to_owned();
        let exit = crashing.wait_exit(LONG).await;
        assert!(!exit.success(), "{point}: the worker crashed ({exit:?})");
        let mut recovering = p.worker(&format!("after@{point}"), &[], &["--deployments", "ksa"]);
        recovering.wait_line(&["worker started"], LONG).await;
        let done = api.wait_status(&id, &["ready", "failed"], LONG).await;
        assert_eq!(done["status"], "ready", "{point}: {done}");
        let sha = done["artifact"]["sha256"].as_str().unwrap().to_owned();
        let pp = &p;
        let expected = vec![format!("exports/ten_acme/{id}/{sha}.csv")];
        eventually(&format!("{point}: one artifact and no staging"), LONG, || {
            let (expected, id) = (expected.clone(), id.clone());
            async move { published(pp, &id) == expected && pp.objects("staging").is_empty() }
        })
        .await;
        let (status, bytes) = api.download(&id).await;
        assert_eq!(status, 200, "{point}");
        assert_eq!(sha256(&bytes), sha, "{point}");
        let mut reader = csv::Reader::from_reader(&bytes[..]);
        let got: Vec<i64> = reader.records().map(|r| r.unwrap()[0].parse().unwrap()).collect();
        assert_eq!(got, ids, "{point}: every order, once");
        recovering.signal("TERM");
        assert!(recovering.wait_exit(LONG).await.success());
    }
    for mut w in others {
        w.signal("TERM");
        assert!(w.wait_exit(LONG).await.success());
    }
});

on_both_backends!(a_worker_of_one_deployment_never_touches_another_and_an_unserved_job_ends_no_worker, |backend| {
    let p = Prepared::new(backend, 200).await;
    let (_api, base) = p.api().await;
    let bob = Api::new(&base, &p.token);
    let gina_token = p.run_ok(&["token", "create", "gina@globex.test"]).await.trim().to_owned();
    let gina = Api::new(&base, &gina_token);
    let ksa: Vec<Proc> = ["ksa-1", "ksa-2", "ksa-3"].iter().map(|l| {
        p.worker(l, &[("EXPORTD_QUEUE_TTL_SECS", "4")], &["--deployments", "ksa"])
    }).collect();
    let (_, uae_view) = gina.create("uae-job", &everything("orders")).await;
    let uae = uae_view["id"].as_str().unwrap().to_owned();
    let (_, ksa_view) = bob.create("ksa-job", &everything("orders")).await;
    let ksa_id = ksa_view["id"].as_str().unwrap().to_owned();
    assert_eq!(bob.wait_status(&ksa_id, &["ready"], LONG).await["status"], "ready");
    let done = gina.wait_status(&uae, &["failed"], LONG).await;
    assert_eq!(done["error"]["code"], "no_worker", "{done}");
    assert_eq!(done["attempt"], 0, "never claimed: {done}");
    let db = p.connect().await;
    let claims = scalar(&db, &format!("SELECT COUNT(*) FROM job_events WHERE job_id = '{uae}' AND to_status = 'running'")).await;
    assert_eq!(claims, 0);
    assert!(p.objects("exports/ten_globex").is_empty() && p.objects("staging").is_empty());
    for mut w in ksa {
        w.signal("TERM");
        assert!(w.wait_exit(LONG).await.success());
    }
});

#[tokio::test]
async fn a_concurrency_outside_one_to_sixty_four_is_a_usage_error() {
    let p = Prepared::new(Backend::Sqlite, 10).await;
    for bad in ["0", "65", "many"] {
        let status = p.command().args(["worker", "--concurrency", bad]).stderr(std::process::Stdio::null()).status().await.unwrap();
        assert_eq!(status.code(), Some(2), "--concurrency {bad}");
    }
}

on_both_backends!(three_workers_handle_a_cancel_a_revocation_and_a_store_outage_while_running, |backend| {
    let p = Prepared::new(backend, 2_000).await;
    let (_api, base) = p.api().await;
    let bob = Api::new(&base, &p.token);
    let alice_token = p.run_ok(&["token", "create", "alice@acme.test"]).await.trim().to_owned();
    let alice = Api::new(&base, &alice_token);
    let workers: Vec<Proc> = ["w1", "w2", "w3"].iter().map(|l| p.worker(l, &[("FAILPOINTS", "mid_stream=sleep(5000)")], &[])).collect();
    let mid_stream = |id: String| {
        let workers = &workers;
        async move {
            eventually("a worker is mid-stream", LONG, || {
                let id = id.clone();
                async move { workers.iter().any(|w| w.has_line(&["mid_stream", &id])) }
            })
            .await
        }
    };

    // Cancel while running: cancelled, nothing published.
    let (_, v) = bob.create("cancel-me", &everything("orders")).await;
    let cancel = v["id"].as_str().unwrap().to_owned();
    mid_stream(cancel.clone()).await;
    let resp = bob.client.post(format!("{base}/api/exports/{cancel}/cancel")).bearer_auth(&bob.token).send().await.unwrap();
    assert_eq!(resp.status(), 202);
    let done = bob.wait_status(&cancel, &["cancelled", "ready", "failed"], LONG).await;
    assert_eq!(done["status"], "cancelled", "{done}");

    // Revoked through the CLI while running: failed, nothing published, download refused.
    let (_, v) = alice.create("revoke-me", &everything("orders")).await;
    let revoked = v["id"].as_str().unwrap().to_owned();
    mid_stream(revoked.clone()).await;
    p.run_ok(&["user", "set-role", "alice@acme.test", "analyst"]).await;
    let done = alice.wait_status(&revoked, &["cancelled", "ready", "failed"], LONG).await;
    assert_eq!(done["error"]["code"], "permission_revoked", "{done}");
    assert_eq!(alice.download(&revoked).await.0, 409);

    // The store goes down mid-stream: retry_wait, then ready once it is back, with no error left.
    let (_, v) = bob.create("outage", &everything("orders")).await;
    let outage = v["id"].as_str().unwrap().to_owned();
    mid_stream(outage.clone()).await;
    let root = p.dir.path().join("objects");
    std::fs::rename(&root, p.dir.path().join("objects.down")).unwrap();
    std::fs::write(&root, b"down").unwrap();
    let waiting = bob.wait_status(&outage, &["retry_wait", "ready", "failed"], LONG).await;
    assert_eq!(waiting["status"], "retry_wait", "{waiting}");
    assert_eq!(waiting["error"]["code"], "storage_unavailable");
    std::fs::remove_file(&root).unwrap();
    std::fs::rename(p.dir.path().join("objects.down"), &root).unwrap();
    let done = bob.wait_status(&outage, &["ready", "failed"], LONG).await;
    assert_eq!(done["status"], "ready", "{done}");
    assert!(done["error"].is_null(), "{done}");

    assert!(published(&p, &cancel).is_empty() && published(&p, &revoked).is_empty());
    assert_eq!(published(&p, &outage).len(), 1);
    for mut w in workers {
        w.signal("TERM");
        assert!(w.wait_exit(LONG).await.success());
    }
});
