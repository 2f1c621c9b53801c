//! Uploads (SPEC §10): streamed into the tenant's deployment store, known by their digest per
//! user, limited in size with nothing kept past the limit, admin only, and removed by the
//! janitor once unused for `EXPORTD_UPLOAD_TTL_SECS`.

mod support;

use exportd::config::WorkerConfig;
use exportd::worker::janitor;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::time::Duration;
use support::{expect_problem, Options, TestApp};

const CSV: &str = "email,name,phone,country\nnew@acme.test,New One,+966500000000,SA\n";

async fn upload(app: &TestApp, client: &reqwest::Client, body: impl Into<reqwest::Body>) -> reqwest::Response {
    client.post(app.url("/api/uploads")).header("content-type", "text/csv; charset=utf-8").body(body).send().await.unwrap()
}

fn small_limit(c: &mut exportd::config::Config) {
    c.max_upload_bytes = 100_000;
    c.upload_ttl = Duration::ZERO;
    c.lease = Duration::from_secs(1);
}

on_both_backends!(the_same_bytes_from_the_same_admin_are_one_upload_and_another_user_gets_another, |backend| {
    let app = TestApp::spawn(backend).await;
    let alice = app.login("alice@acme.test").await;
    let first = upload(&app, &alice, CSV).await;
    assert_eq!(first.status(), 201);
    let first: Value = first.json().await.unwrap();
    assert!(first["upload"].as_str().unwrap().starts_with("upl_"), "{first}");
    assert_eq!(first["sha256"], hex::encode(Sha256::digest(CSV.as_bytes())));
    assert_eq!(first["bytes"], CSV.len());

    let again = upload(&app, &alice, CSV).await;
    assert_eq!(again.status(), 200, "the same bytes again");
    assert_eq!(again.json::<Value>().await.unwrap(), first);

    let gina = app.login("gina@globex.test").await;
    let other: Value = upload(&app, &gina, CSV).await.json().await.unwrap();
    assert_ne!(other["upload"], first["upload"], "never matched across tenants or users");
    assert_eq!(app.scalar("SELECT COUNT(*) FROM uploads").await, 2);
    let stored = app.objects("uploads");
    assert_eq!(stored.len(), 2, "{stored:?}");
    let alices = stored.iter().find(|k| k.contains(first["upload"].as_str().unwrap())).unwrap();
    assert_eq!(std::fs::read_to_string(app.dir.path().join("objects").join(alices)).unwrap(), CSV);
    assert!(app.objects("uploading").is_empty(), "nothing left while bytes arrive: {:?}", app.objects("uploading"));
});

on_both_backends!(only_an_admin_may_upload_only_a_csv_or_a_workbook_and_nothing_is_kept_of_a_refused_one, |backend| {
    let app = TestApp::start(Options { adjust: small_limit, ..Options::new(backend) }).await;
    let bob = app.login("bob@acme.test").await;
    expect_problem(upload(&app, &bob, CSV).await, 403, "import-not-permitted").await;
    expect_problem(upload(&app, &app.anonymous(), CSV).await, 401, "unauthenticated").await;
    let alice = app.login("alice@acme.test").await;
    let json = alice.post(app.url("/api/uploads")).header("content-type", "application/json").body("{}").send().await.unwrap();
    expect_problem(json, 415, "unsupported-media-type").await;

    // Above the limit, declared or not: 413, and nothing of it stays anywhere.
    let big = "a,b\n".repeat(30_000);
    expect_problem(upload(&app, &alice, big.clone()).await, 413, "body-too-large").await;
    let chunks = futures::stream::iter((0..30).map(|_| Ok::<_, std::io::Error>("a,b\n".repeat(1000))));
    expect_problem(upload(&app, &alice, reqwest::Body::wrap_stream(chunks)).await, 413, "body-too-large").await;
    assert_eq!(app.scalar("SELECT COUNT(*) FROM uploads").await, 0);
    assert!(app.objects("").iter().all(|k| !k.starts_with("upload")), "{:?}", app.objects(""));

    // Larger than the API's 64 KiB body limit is fine for an upload.
    let fine = "a,b\n".repeat(20_000);
    assert_eq!(upload(&app, &alice, fine).await.status(), 201);
});

on_both_backends!(an_unused_upload_expires_with_its_file_and_an_orphaned_file_is_swept, |backend| {
    let app = TestApp::start(Options { adjust: small_limit, ..Options::new(backend) }).await;
    let alice = app.login("alice@acme.test").await;
    let view: Value = upload(&app, &alice, CSV).await.json().await.unwrap();
    assert_eq!(app.objects("uploads").len(), 1);
    // A file no row keeps (a crash between publishing and recording), old enough.
    let orphan = app.dir.path().join("objects/uploads/ten_acme/upl_0123456789abcdef0123456789abcdef/ab.csv");
    std::fs::create_dir_all(orphan.parent().unwrap()).unwrap();
    std::fs::write(&orphan, CSV).unwrap();
    let ctx = app.worker_context(WorkerConfig { deployments: vec![], concurrency: 1 }).await;
    // The TTL is zero; the database's clock has to move past the upload's last use.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut expired = 0;
    let mut swept = 0;
    while expired == 0 || swept == 0 {
        assert!(tokio::time::Instant::now() < deadline, "expired {expired}, swept {swept}");
        let pass = janitor::pass(&ctx, true).await.unwrap();
        expired += pass.uploads_expired;
        swept += pass.upload_objects_deleted;
    }
    assert_eq!(expired, 1);
    assert_eq!(app.scalar("SELECT COUNT(*) FROM uploads").await, 0);
    assert!(app.objects("uploads").is_empty(), "{:?}", app.objects("uploads"));
    // The same bytes again are a new upload.
    let again = upload(&app, &alice, CSV).await;
    assert_eq!(again.status(), 201);
    assert_ne!(again.json::<Value>().await.unwrap()["upload"], view["upload"]);
});

on_both_backends!(a_drain_stops_new_uploads_and_lifting_it_lets_them_in_again, |backend| {
    let app = TestApp::spawn(backend).await;
    let alice = app.login("alice@acme.test").await;
    assert_eq!(app.cli(&["drain"]).await, 0);
    // Every instance sees the switch within a second (it reads it at most that often).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let paused = loop {
        let resp = upload(&app, &alice, CSV).await;
        // Old code: 201, a new file stored while creation was paused.
        if resp.status() == 503 || tokio::time::Instant::now() > deadline {
            break resp;
        }
        assert_eq!(resp.status(), 201, "before the switch is seen");
        app.exec("DELETE FROM uploads").await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(paused.headers().contains_key("retry-after"), "{:?}", paused.headers());
    expect_problem(paused, 503, "creation-paused").await;
    assert_eq!(app.cli(&["drain", "--off"]).await, 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let status = upload(&app, &alice, CSV).await.status();
        if status == 201 {
            break;
        }
        assert_eq!(status, 503, "paused until the switch is seen");
        assert!(tokio::time::Instant::now() < deadline, "uploads still paused 10 s after drain --off");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
});
