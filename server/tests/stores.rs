//! What exportd keeps on disk and in its stores (SPEC §5.13): a deployment's store bound in the
//! database so no process writes its files elsewhere, a published file durable before the
//! release that references it, and SQLite's write-ahead log cut back once its readers are done.
//! Real processes, real files, real system calls.

mod support;

use std::process::Stdio;
use std::time::Duration;
use support::procs::{eventually, everything, sha256, Api, Prepared, EXE, TEST_ENV};
use support::Backend;

const LONG: Duration = Duration::from_secs(60);

/// Runs `exportd` with `args` and `env` to its end (at most 30 s); its exit code and stderr.
async fn run(p: &Prepared, env: &[(&str, &str)], dir: Option<&std::path::Path>, args: &[&str]) -> (Option<i32>, String) {
    let mut cmd = p.command();
    cmd.args(args).stdout(Stdio::null()).stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    let child = cmd.spawn().unwrap();
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("exportd {args:?} was still running after 30 s: it started"))
        .unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_process_whose_store_for_a_deployment_is_not_the_bound_one_refuses_to_start_naming_it() {
    let p = Prepared::new(Backend::Sqlite, 100).await;
    let ksa_store = format!("file://{}/ksa-objects", p.dir.path().display());
    let with_ksa = [("EXPORTD_STORE_KSA", ksa_store.as_str())];
    // The first processes bind ksa to its own store (and uae to the default one).
    let (_api, base) = p.api_with(&with_ksa).await;
    let api = Api::new(&base, &p.token);
    let mut w = p.worker("w", &with_ksa, &[]);
    let (_, view) = api.create("bound", &everything("orders")).await;
    let id = view["id"].as_str().unwrap().to_owned();
    let done = api.wait_status(&id, &["ready", "failed"], LONG).await;
    assert_eq!(done["status"], "ready", "{done}");
    let ksa_files = p.dir.path().join("ksa-objects/exports/ten_acme").join(&id);
    assert_eq!(std::fs::read_dir(&ksa_files).unwrap().count(), 1, "ksa's file is in ksa's store");
    assert!(p.objects("exports").is_empty(), "and nowhere else");

    // A process that lacks EXPORTD_STORE_KSA would write ksa's files to the default store.
    for args in [&["worker"][..], &["serve", "--no-worker", "--bind", "127.0.0.1:0"][..]] {
        let (code, stderr) = run(&p, &[], None, args).await;
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("deployment ksa") && stderr.contains("EXPORTD_STORE_KSA"), "{args:?}: {stderr}");
    }
    // A URL is not an identity: the same relative URL from another folder is another store.
    let elsewhere = tempfile::tempdir().unwrap();
    let relative = [("EXPORTD_STORE", "file://objects"), ("EXPORTD_STORE_KSA", "file://ksa-objects")];
    let (code, stderr) = run(&p, &relative, Some(elsewhere.path()), &["worker"]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("deployment"), "{stderr}");
    // A worker of uae alone has no business with ksa's store, and starts.
    let mut uae = p.worker("uae-only", &[], &["--deployments", "uae"]);
    uae.wait_line(&["worker started"], LONG).await;
    uae.signal("TERM");
    assert!(uae.wait_exit(LONG).await.success());

    // A deliberate move goes through the CLI; then the old configuration is the refused one.
    w.signal("TERM");
    assert!(w.wait_exit(LONG).await.success());
    let moved = p.run_ok(&["stores", "rebind", "KSA"]).await;
    assert!(moved.starts_with("ksa: bound to the store with identity sto_"), "{moved}");
    let listed = p.run_ok(&["stores", "list"]).await;
    assert!(listed.lines().all(|l| l.ends_with("\tok")), "{listed}");
    let (code, stderr) = run(&p, &with_ksa, None, &["worker"]).await;
    assert_eq!(code, Some(1), "{stderr}");
    let mut w = p.worker("w2", &[], &[]);
    w.wait_line(&["worker started"], LONG).await;
    w.signal("TERM");
    assert!(w.wait_exit(LONG).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deployment_names_compare_in_any_case() {
    let p = Prepared::new(Backend::Sqlite, 100).await;
    let (_api, base) = p.api().await;
    let api = Api::new(&base, &p.token);
    let mut w = p.worker("upper", &[], &["--deployments", "KSA"]);
    let (_, view) = api.create("upper-case", &everything("orders")).await;
    let id = view["id"].as_str().unwrap().to_owned();
    let done = api.wait_status(&id, &["ready", "failed"], LONG).await;
    assert_eq!(done["status"], "ready", "a worker of KSA serves ksa: {done}");
    w.signal("TERM");
    assert!(w.wait_exit(LONG).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_published_file_and_its_folders_are_fsynced_before_the_release_that_references_it() {
    let p = Prepared::new(Backend::Sqlite, 300).await;
    let (_api, base) = p.api().await;
    let api = Api::new(&base, &p.token);
    let trace = p.dir.path().join("strace.out");
    let mut cmd = tokio::process::Command::new("strace");
    cmd.args(["-f", "-y", "-qq", "-s", "300", "-e", "trace=fsync,fdatasync,write", "-o"]).arg(&trace).args([EXE, "worker"]);
    cmd.env("DATABASE_URL", &p.db_url).env("EXPORTD_STORE", &p.store).kill_on_drop(true);
    for (k, v) in TEST_ENV {
        cmd.env(k, v);
    }
    let mut w = support::procs::Proc::spawn(cmd, "traced");
    let (_, view) = api.create("durable", &everything("orders")).await;
    let id = view["id"].as_str().unwrap().to_owned();
    let done = api.wait_status(&id, &["ready", "failed"], LONG).await;
    assert_eq!(done["status"], "ready", "{done}");
    let sha = done["artifact"]["sha256"].as_str().unwrap();
    // The worker is strace's child: it is the one told to stop; strace ends with it.
    let tracer = w.child.id().unwrap();
    let worker = std::fs::read_to_string(format!("/proc/{tracer}/task/{tracer}/children")).unwrap();
    let worker = worker.split_whitespace().next().expect("the traced worker").to_owned();
    assert!(std::process::Command::new("kill").args(["-TERM", &worker]).status().unwrap().success());
    assert!(w.wait_exit(LONG).await.success());

    let lines: Vec<String> = std::fs::read_to_string(&trace).unwrap().lines().map(str::to_owned).collect();
    let find = |what: &str, pred: &dyn Fn(&str) -> bool| {
        lines.iter().position(|l| pred(l)).unwrap_or_else(|| panic!("no {what} in the trace:\n{}", lines.iter().filter(|l| l.contains("fsync")).cloned().collect::<Vec<_>>().join("\n")))
    };
    let file = format!("/objects/exports/ten_acme/{id}/{sha}.csv>");
    let folder = format!("/objects/exports/ten_acme/{id}>");
    let synced_file = find("fsync of the file", &|l| l.contains("fsync(") && l.contains(&file));
    let synced_folder = find("fsync of its folder", &|l| l.contains("fsync(") && l.contains(&folder));
    let release = find("the release", &|l| l.contains("write(2") && l.contains("before_release") && l.contains(&id));
    assert!(synced_file < release && synced_folder < release, "fsyncs at lines {synced_file} and {synced_folder}, the release at {release}");
    let bytes = std::fs::read(p.dir.path().join("objects/exports/ten_acme").join(&id).join(format!("{sha}.csv"))).unwrap();
    assert_eq!(sha256(&bytes), sha);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlites_write_ahead_log_is_cut_back_to_its_limit_once_the_readers_that_held_it_are_done() {
    use sea_orm::ConnectionTrait;
    let p = Prepared::new(Backend::Sqlite, 20_000).await;
    let (_api, base) = p.api().await;
    let api = Api::new(&base, &p.token);
    let mut w = p.worker("w", &[], &[]);
    let path = p.db_url.trim_start_matches("sqlite://").to_owned();
    let wal = format!("{path}-wal");
    let wal_size = || std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    // A reader holds one snapshot, as a long export's does, while writes go on.
    let reader = rusqlite::Connection::open(&path).unwrap();
    reader.execute_batch("BEGIN").unwrap();
    let _: i64 = reader.query_row("SELECT COUNT(*) FROM orders", [], |r| r.get(0)).unwrap();
    let db = p.connect().await;
    for _ in 0..8 {
        db.execute_unprepared("UPDATE orders SET notes = notes || '.'").await.unwrap();
    }
    let grown = wal_size();
    assert!(grown > 2 * exportd::db::WAL_SIZE_LIMIT, "the log grew while the reader held it: {grown} bytes");
    reader.execute_batch("COMMIT").unwrap();
    drop(reader);
    // The janitor checkpoints; the next writes start the log again from its beginning.
    let mut n = 0;
    eventually("the log is cut back", LONG, || {
        n += 1;
        let (api, key) = (&api, format!("after-the-reader-{n}"));
        async move {
            let (status, _) = api.create(&key, &everything("customers")).await;
            assert_eq!(status, 202);
            wal_size() <= exportd::db::WAL_SIZE_LIMIT
        }
    })
    .await;
    w.signal("TERM");
    assert!(w.wait_exit(LONG).await.success());
}
