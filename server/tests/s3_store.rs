//! exportd on an S3-protocol store (moto), with real `exportd` processes.

mod support;

use std::time::Duration;
use support::procs::{everything, Api, Prepared};
use support::s3::Moto;
use support::Backend;

const LONG: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_that_fails_midway_is_aborted_and_leaves_no_multipart_upload_in_the_store() {
    let moto = Moto::start().await;
    moto.bucket("exports").await;
    let p = Prepared::new(Backend::Postgres, 60_000).await;
    let (_api, base) = p.api().await;
    let api = Api::new(&base, &p.token);
    // Past the first 5 MiB part, the upload fails.
    let mut env: Vec<(&str, String)> = moto.env();
    env.push(("EXPORTD_STORE", "s3://exports".into()));
    env.push(("FAILPOINTS", "each_chunk=21*off->return".into()));
    env.push(("EXPORTD_MAX_ATTEMPTS", "1".into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut w = p.worker("w", &env, &[]);
    let (status, view) = api.create("big", &everything("orders")).await;
    assert_eq!(status, 202);
    let id = view["id"].as_str().unwrap().to_owned();
    let done = api.wait_status(&id, &["failed", "ready"], LONG).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "storage_unavailable");
    assert_eq!(moto.open_uploads("exports").await, 0, "the failed upload was aborted");
    assert!(moto.keys("exports", "").await.is_empty(), "{:?}", moto.keys("exports", "").await);
    w.signal("TERM");
    assert!(w.wait_exit(LONG).await.success());
}
