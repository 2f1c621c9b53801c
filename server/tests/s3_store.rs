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
    let mut env: Vec<(&str, String)> = moto.env();
    env.push(("EXPORTD_STORE", "s3://exports".into()));
    let (_api, base) = p.api_with(&borrowed(&env)).await;
    let api = Api::new(&base, &p.token);
    // Past the first 5 MiB part, the upload fails.
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
    assert!(moto.keys("exports", "exports/").await.is_empty() && moto.keys("exports", "staging/").await.is_empty(), "{:?}", moto.keys("exports", "").await);
    w.signal("TERM");
    assert!(w.wait_exit(LONG).await.success());
}

/// The environment of exportd processes on moto with `stores` (variable, URL) set.
fn s3_env(moto: &Moto, stores: &[(&str, &str)]) -> Vec<(&'static str, String)> {
    let mut env = moto.env();
    env.push(("EXPORTD_LINK_TTL_SECS", "123".into()));
    for (name, url) in stores {
        env.push((Box::leak(name.to_string().into_boxed_str()), url.to_string()));
    }
    env
}

fn borrowed<'a>(env: &'a [(&'a str, String)]) -> Vec<(&'a str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// Follows a download's 303 to the presigned URL; checks it lasts the link TTL; returns the file.
async fn presigned_download(api: &Api, moto: &Moto, id: &str) -> (reqwest::header::HeaderMap, bytes::Bytes) {
    let resp = api.client.get(format!("{}/api/exports/{id}/download", api.base)).bearer_auth(&api.token).send().await.unwrap();
    assert_eq!(resp.status(), 303);
    let url = resp.headers()["location"].to_str().unwrap().to_owned();
    assert!(url.starts_with(&moto.endpoint), "a presigned URL of the store: {url}");
    assert!(url.contains("X-Amz-Expires=123"), "the link lasts EXPORTD_LINK_TTL_SECS: {url}");
    assert!(url.contains("X-Amz-Signature="), "{url}");
    // The type and disposition are response overrides signed into the URL (the published object
    // has none of its own); AWS S3 answers with them. moto ignores them, so they are checked here.
    let query: std::collections::HashMap<String, String> = url::Url::parse(&url).unwrap().query_pairs().into_owned().collect();
    assert_eq!(query["response-content-type"], "text/csv; charset=utf-8");
    assert_eq!(query["response-content-disposition"], format!("attachment; filename=\"orders-{id}.csv\""));
    // A link is a credential: no cache on the way may keep what it fetched.
    assert_eq!(query.get("response-cache-control").map(String::as_str), Some("private, no-store"), "{url}");
    let file = api.client.get(&url).send().await.unwrap();
    assert_eq!(file.status(), 200);
    (file.headers().clone(), file.bytes().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_on_s3_is_published_once_and_downloaded_through_a_presigned_link() {
    let moto = Moto::start().await;
    moto.bucket("exports").await;
    let p = Prepared::new(Backend::Postgres, 2_000).await;
    let env = s3_env(&moto, &[("EXPORTD_STORE", "s3://exports")]);
    let mut logged = env.clone();
    logged.extend([("EXPORTD_LOG", "info".to_owned()), ("EXPORTD_LOG_FORMAT", "json".to_owned())]);
    let (api_proc, base) = p.api_with(&borrowed(&logged)).await;
    let api = Api::new(&base, &p.token);
    let mut w = p.worker("w", &borrowed(&env), &[]);
    let (status, view) = api.create("on-s3", &everything("orders")).await;
    assert_eq!(status, 202);
    let id = view["id"].as_str().unwrap().to_owned();
    let done = api.wait_status(&id, &["ready", "failed"], LONG).await;
    assert_eq!(done["status"], "ready", "{done}");

    let published = moto.keys("exports", "exports/").await;
    assert_eq!(published.len(), 1, "{published:?}");
    assert!(published[0].ends_with(&format!("{}.csv", done["artifact"]["sha256"].as_str().unwrap())), "{published:?}");
    assert!(moto.keys("exports", "staging/").await.is_empty(), "staging removed");

    let (headers, bytes) = presigned_download(&api, &moto, &id).await;
    assert_eq!(support::procs::sha256(&bytes), done["artifact"]["sha256"].as_str().unwrap());
    assert!(headers.contains_key("etag"), "{headers:?}");
    // The API's log: JSON lines naming each request's id, and never a presigned URL.
    let download = format!("/api/exports/{id}/download");
    api_proc.wait_line(&["\"request_id\":\"", &download, "\"status\":303"], LONG).await;
    assert!(!api_proc.has_line(&["X-Amz-Signature"]), "a presigned URL reached the log");
    w.signal("TERM");
    assert!(w.wait_exit(LONG).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_publisher_of_the_same_file_on_s3_finds_it_there_and_still_releases() {
    let moto = Moto::start().await;
    moto.bucket("exports").await;
    let p = Prepared::new(Backend::Postgres, 2_000).await;
    let env = s3_env(&moto, &[("EXPORTD_STORE", "s3://exports")]);
    let (_api, base) = p.api_with(&borrowed(&env)).await;
    let api = Api::new(&base, &p.token);
    // The first worker publishes and dies before it can release.
    let mut crashing = env.clone();
    crashing.push(("FAILPOINTS", "after_publish=return(crash)".into()));
    let mut first = p.worker("first", &borrowed(&crashing), &[]);
    let (_, view) = api.create("published-twice", &everything("orders")).await;
    let id = view["id"].as_str().unwrap().to_owned();
    assert!(!first.wait_exit(LONG).await.success(), "the first worker crashed after publishing");
    assert_eq!(moto.keys("exports", "exports/").await.len(), 1, "the first attempt published");

    // The second takes the job back when the lease lapses, streams the same bytes to the same
    // content-addressed key, meets the object there (a 412 on moto) and releases.
    let mut second = p.worker("second", &borrowed(&env), &[]);
    let done = api.wait_status(&id, &["ready", "failed"], LONG).await;
    assert_eq!(done["status"], "ready", "{done}");
    assert_eq!(done["attempt"], 2, "{done}");
    assert_eq!(moto.keys("exports", "exports/").await.len(), 1, "no second object");
    assert!(second.has_line(&["file already published"]), "the second publisher met the object there");
    let (_, bytes) = presigned_download(&api, &moto, &id).await;
    assert_eq!(support::procs::sha256(&bytes), done["artifact"]["sha256"].as_str().unwrap());
    second.signal("TERM");
    assert!(second.wait_exit(LONG).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_deployment_writes_and_reads_only_its_own_bucket() {
    let moto = Moto::start().await;
    for bucket in ["shared", "ksa-exports", "uae-exports"] {
        moto.bucket(bucket).await;
    }
    let p = Prepared::new(Backend::Postgres, 2_000).await;
    let env = s3_env(&moto, &[("EXPORTD_STORE", "s3://shared"), ("EXPORTD_STORE_KSA", "s3://ksa-exports"), ("EXPORTD_STORE_UAE", "s3://uae-exports/reports")]);
    let (_api, base) = p.api_with(&borrowed(&env)).await;
    let mut w = p.worker("w", &borrowed(&env), &[]);
    let acme = Api::new(&base, &p.token);
    let globex = Api::new(&base, p.run_ok(&["token", "create", "gina@globex.test"]).await.trim());
    let (_, ksa) = acme.create("ksa", &everything("orders")).await;
    let (_, uae) = globex.create("uae", &everything("orders")).await;
    assert_eq!(ksa["resolved"]["deployment"], "ksa");
    assert_eq!(uae["resolved"]["deployment"], "uae");
    let ksa_id = ksa["id"].as_str().unwrap().to_owned();
    let uae_id = uae["id"].as_str().unwrap().to_owned();
    let ksa_done = acme.wait_status(&ksa_id, &["ready", "failed"], LONG).await;
    let uae_done = globex.wait_status(&uae_id, &["ready", "failed"], LONG).await;
    assert_eq!((ksa_done["status"].as_str(), uae_done["status"].as_str()), (Some("ready"), Some("ready")), "{ksa_done} {uae_done}");

    // Each store holds its identity's marker, and the files of its deployment only.
    let in_ksa = moto.keys("ksa-exports", "").await;
    let in_uae = moto.keys("uae-exports", "").await;
    assert!(in_ksa.contains(&exportd::storage::identity::MARKER.to_owned()), "{in_ksa:?}");
    assert!(in_uae.contains(&format!("reports/{}", exportd::storage::identity::MARKER)), "{in_uae:?}");
    let in_ksa: Vec<String> = in_ksa.into_iter().filter(|k| !k.ends_with(exportd::storage::identity::MARKER)).collect();
    let in_uae: Vec<String> = in_uae.into_iter().filter(|k| !k.ends_with(exportd::storage::identity::MARKER)).collect();
    assert_eq!(in_ksa.len(), 1, "{in_ksa:?}");
    assert!(in_ksa[0].starts_with("exports/ten_acme/"), "{in_ksa:?}");
    assert_eq!(in_uae.len(), 1, "{in_uae:?}");
    assert!(in_uae[0].starts_with("reports/exports/ten_globex/"), "under the store's prefix: {in_uae:?}");
    assert!(moto.keys("shared", "").await.is_empty(), "nothing in the default store");

    let (_, bytes) = presigned_download(&acme, &moto, &ksa_id).await;
    assert_eq!(support::procs::sha256(&bytes), ksa_done["artifact"]["sha256"].as_str().unwrap());
    let (_, bytes) = presigned_download(&globex, &moto, &uae_id).await;
    assert_eq!(support::procs::sha256(&bytes), uae_done["artifact"]["sha256"].as_str().unwrap());
    w.signal("TERM");
    assert!(w.wait_exit(LONG).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_above_the_copy_limit_is_published_by_ranged_part_copies_once_and_only_if_absent() {
    use exportd::storage::{ExportStore, Published};
    use object_store::path::Path;
    let moto = Moto::start().await;
    moto.bucket("exports").await;
    let vars: std::collections::HashMap<String, String> = moto.env().into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    // S3's limit is 5 GiB per copied part; here 5 MiB, the smallest part S3 takes.
    const MIB: u64 = 1024 * 1024;
    let store = ExportStore::open_with("s3://exports/tenant-files", &vars).unwrap().with_ranged_copies_above(5 * MIB, 5 * MIB);
    let bytes: Vec<u8> = (0..(12 * MIB + 12_345)).map(|i| (i * 7 % 251) as u8).collect();
    let staged = Path::from("staging/exp_ranged/1");
    let ticks = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = ticks.clone();
    let on_progress: exportd::storage::OnProgress = std::sync::Arc::new(move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    });
    let mut upload = store.stage(&staged, on_progress.clone());
    upload.write(&bytes).await.unwrap();
    upload.finish().await.unwrap();
    let before = ticks.load(std::sync::atomic::Ordering::Relaxed);

    let key = Path::from("exports/ten_acme/exp_ranged/file.csv");
    assert_eq!(store.publish(&staged, &key, on_progress.clone()).await.unwrap(), Published::Created);
    assert_eq!(ticks.load(std::sync::atomic::Ordering::Relaxed) - before, 3, "three ranged copies (5 + 5 + 2 MiB), each progress");
    let meta = store.objects().head(&key).await.unwrap();
    assert_eq!(meta.size, bytes.len() as u64);
    assert!(meta.e_tag.as_deref().is_some_and(|t| t.trim_matches('"').ends_with("-3")), "a multipart object of three parts: {:?}", meta.e_tag);
    let read = store.objects().get(&key).await.unwrap().bytes().await.unwrap();
    assert!(read == bytes, "the copy is the staged file, byte for byte");
    assert_eq!(moto.open_uploads("exports").await, 0, "the upload was completed");

    // A second publisher meets the object (If-None-Match: * on completion) and drops its copy.
    let other = Path::from("staging/exp_ranged/2");
    let mut upload = store.stage(&other, on_progress.clone());
    upload.write(&bytes.iter().map(|b| b ^ 0xff).collect::<Vec<u8>>()).await.unwrap();
    upload.finish().await.unwrap();
    assert_eq!(store.publish(&other, &key, on_progress.clone()).await.unwrap(), Published::AlreadyThere);
    let read = store.objects().get(&key).await.unwrap().bytes().await.unwrap();
    assert!(read == bytes, "the object already there is kept");
    assert_eq!(moto.open_uploads("exports").await, 0, "the dropped copy's upload was aborted");
    assert!(moto.keys("exports", "tenant-files/exports/").await == vec!["tenant-files/exports/ten_acme/exp_ranged/file.csv".to_owned()], "under the store's prefix");

    // A source that is gone: an error, and no upload left behind.
    let missing = store.publish(&Path::from("staging/exp_ranged/404"), &Path::from("exports/ten_acme/exp_ranged/other.csv"), on_progress).await;
    assert!(missing.is_err());
    assert_eq!(moto.open_uploads("exports").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpointed_export_on_s3_serves_its_bundle_through_exportd_and_each_part_through_a_presigned_link() {
    let moto = Moto::start().await;
    moto.bucket("exports").await;
    let p = Prepared::new(Backend::Postgres, 2_000).await;
    let mut env = s3_env(&moto, &[("EXPORTD_STORE", "s3://exports")]);
    env.push(("EXPORTD_PART_ROWS", "600".into()));
    let (_api, base) = p.api_with(&borrowed(&env)).await;
    let api = Api::new(&base, &p.token);
    let mut w = p.worker("w", &borrowed(&env), &[]);
    let mut body = everything("orders");
    body["consistency"] = "checkpointed".into();
    let (status, view) = api.create("parts-on-s3", &body).await;
    assert_eq!(status, 202);
    let id = view["id"].as_str().unwrap().to_owned();
    let done = api.wait_status(&id, &["ready", "failed"], LONG).await;
    assert_eq!(done["status"], "ready", "{done}");
    let stored = moto.keys("exports", &format!("exports/ten_acme/{id}/")).await;
    assert_eq!(stored.len(), 5, "a manifest and four parts: {stored:?}");
    assert!(moto.keys("exports", "staging/").await.is_empty());

    // The bundle is exportd's to serve, streamed from the parts in the bucket.
    let link = api.link(&format!("/api/exports/{id}/download")).await.unwrap();
    assert!(link.starts_with(&base), "the bundle's link is exportd's, not the store's: {link}");
    let resp = api.client.get(&link).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/zip");
    let content_digest = resp.headers()["content-digest"].to_str().unwrap().to_owned();
    let bundle = resp.bytes().await.unwrap();
    let digest = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, hex::decode(support::procs::sha256(&bundle)).unwrap());
    assert_eq!(content_digest, format!("sha-256=:{digest}:"), "the digest of the bundle's bytes, computed at release");
    let released = w.wait_line(&["export released", &id], LONG).await;
    assert!(released.contains("begun_early=true"), "its digest was begun over the parts in the bucket while the last part was finished: {released}");
    let (unzipped, rows) = support::bundles::check(&bundle, &done, 600);
    assert_eq!(rows.len(), 2_000);
    let ranged = api.client.get(&link).header("range", "bytes=100-").send().await.unwrap();
    assert_eq!(ranged.status(), 206);
    assert!(ranged.bytes().await.unwrap() == bundle.slice(100..));

    // A part is the store's to serve: a presigned GET.
    let part = api.link(&format!("/api/exports/{id}/parts/2/download")).await.unwrap();
    assert!(part.starts_with(&moto.endpoint), "a presigned URL of the store: {part}");
    let query: std::collections::HashMap<String, String> = url::Url::parse(&part).unwrap().query_pairs().into_owned().collect();
    assert_eq!(query["response-content-type"], "text/csv; charset=utf-8");
    assert_eq!(query["response-content-disposition"], format!("attachment; filename=\"orders-{id}-part-00002.csv\""));
    let fetched = api.client.get(&part).send().await.unwrap().bytes().await.unwrap();
    assert!(fetched == unzipped.parts[1].1[..], "the presigned part is the bundle's second entry");
    w.signal("TERM");
    assert!(w.wait_exit(LONG).await.success());
}
