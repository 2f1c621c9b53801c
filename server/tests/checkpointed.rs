//! Checkpointed exports (SPEC §5.1, §8 case 19) with real `exportd` processes and signals: a
//! worker SIGKILLed after a checkpoint, and one SIGSTOPped past its lease with a part staged. The
//! bundle is read back by the `zip` crate and a strict CSV parser, and compared with the
//! database's rows in key order.

mod support;

use exportd::entities::jobs;
use sea_orm::EntityTrait;
use serde_json::Value;
use std::time::Duration;
use support::bundles;
use support::procs::{eventually, everything, rows, scalar, sha256, text, Api, Prepared, Proc};

const LONG: Duration = Duration::from_secs(120);

/// Orders of the demo tenant in these tests, and the part size: six parts, the last shorter.
const ORDERS: u32 = 50_000;
const PART_ROWS: usize = 9_000;

/// A request for every order, checkpointed.
fn checkpointed() -> Value {
    let mut body = everything("orders");
    body["consistency"] = "checkpointed".into();
    body
}

/// The keys of every order of the demo tenant, in key order.
async fn database_keys(p: &Prepared) -> Vec<i64> {
    let db = p.connect().await;
    rows(&db, "SELECT CAST(o.id AS TEXT) AS k FROM orders o WHERE o.tenant_id = 'ten_acme' ORDER BY o.id").await.iter().map(|r| r[0].parse().unwrap()).collect()
}

/// `(seq, generation)` of each of the job's checkpoints, in order.
async fn checkpoints(p: &Prepared, id: &str) -> Vec<(i64, i64)> {
    let db = p.connect().await;
    rows(&db, &format!("SELECT CAST(seq AS TEXT), CAST(generation AS TEXT) FROM job_checkpoints WHERE job_id = '{id}' ORDER BY seq"))
        .await
        .iter()
        .map(|r| (r[0].parse().unwrap(), r[1].parse().unwrap()))
        .collect()
}

/// The audit rows of the job's checkpoints, `(detail, generation)`, in the order they were made.
async fn checkpoint_events(p: &Prepared, id: &str) -> Vec<(String, i64)> {
    let db = p.connect().await;
    rows(&db, &format!("SELECT detail, CAST(generation AS TEXT) FROM job_events WHERE job_id = '{id}' AND detail LIKE 'checkpoint %' ORDER BY id"))
        .await
        .iter()
        .map(|r| (r[0].clone(), r[1].parse().unwrap()))
        .collect()
}

/// Downloads what `path` (a `…/download`) links to: the answer's headers and bytes.
async fn fetch(api: &Api, path: &str, headers: &[(&str, &str)]) -> (u16, reqwest::header::HeaderMap, bytes::Bytes) {
    let link = api.link(path).await.unwrap_or_else(|e| panic!("{path}: {e:?}"));
    let mut request = api.client.get(&link);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let resp = request.send().await.unwrap();
    (resp.status().as_u16(), resp.headers().clone(), resp.bytes().await.unwrap())
}

/// The bundle of a ready export, checked as a whole, by ranges and by parts.
async fn download_and_check(api: &Api, p: &Prepared, id: &str, view: &Value) {
    let path = format!("/api/exports/{id}/download");
    let (status, headers, bytes) = fetch(api, &path, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "application/zip");
    assert_eq!(headers["content-disposition"], format!("attachment; filename=\"orders-{id}.zip\"").as_str());
    assert_eq!(headers["etag"], format!("\"{}\"", view["artifact"]["sha256"].as_str().unwrap()).as_str(), "the bundle's identity is the manifest's digest");
    let digest = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, hex::decode(sha256(&bytes)).unwrap());
    assert_eq!(headers["content-digest"], format!("sha-256=:{digest}:").as_str(), "the digest of the bundle's bytes, computed at release");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["content-security-policy"], "sandbox");
    assert_eq!(headers["cache-control"], "private, no-store");

    let (_, rows) = bundles::check(&bytes, view, PART_ROWS);
    assert_eq!(bundles::keys(&rows), database_keys(p).await, "the parts, headers removed, are the database's rows in key order, each once");

    let (_, _, again) = fetch(api, &path, &[]).await;
    assert!(again == bytes, "the same export downloads as the same bytes");

    // A range, and a download resumed where it stopped.
    let etag = headers["etag"].to_str().unwrap().to_owned();
    let len = bytes.len();
    let (status, ranged, slice) = fetch(api, &path, &[("range", "bytes=1000-250000")]).await;
    assert_eq!(status, 206);
    assert_eq!(ranged["content-range"], format!("bytes 1000-250000/{len}").as_str());
    assert!(slice == bytes.slice(1000..250_001));
    let half = len / 2;
    let (_, _, head) = fetch(api, &path, &[("range", &format!("bytes=0-{}", half - 1))]).await;
    let (status, _, tail) = fetch(api, &path, &[("range", &format!("bytes={half}-")), ("if-range", &etag)]).await;
    assert_eq!(status, 206);
    assert!([head, tail].concat() == bytes.to_vec(), "a resumed download equals the whole");
    let (status, _, whole) = fetch(api, &path, &[("range", &format!("bytes={half}-")), ("if-range", "\"another\"")]).await;
    assert_eq!(status, 200, "If-Range naming another file gives the whole bundle");
    assert!(whole == bytes);

    // Each part alone, with its own digest; and no part beyond the last.
    let unzipped = bundles::unzip(&bytes);
    for (i, (name, data)) in unzipped.parts.iter().enumerate() {
        let (status, headers, part) = fetch(api, &format!("/api/exports/{id}/parts/{}/download", i + 1), &[]).await;
        assert_eq!(status, 200);
        assert_eq!(headers["content-type"], "text/csv; charset=utf-8");
        assert_eq!(headers["content-disposition"], format!("attachment; filename=\"orders-{id}-{name}\"").as_str());
        assert_eq!(headers["etag"], format!("\"{}\"", sha256(data)).as_str());
        assert!(part == data[..], "part {} alone is the bundle's entry", i + 1);
    }
    let beyond = api.link(&format!("/api/exports/{id}/parts/{}/download", unzipped.parts.len() + 1)).await;
    assert!(matches!(&beyond, Err((404, problem)) if problem["code"] == "export-not-found"), "{beyond:?}");
}

async fn stop_all(workers: Vec<Proc>) {
    for mut w in workers {
        w.signal("TERM");
        assert!(w.wait_exit(LONG).await.success(), "{} exits on SIGTERM", w.label);
    }
}

on_both_backends!(a_checkpointed_export_whose_worker_is_killed_after_part_3_resumes_at_part_4_on_another_and_downloads_exactly_its_rows, |backend| {
    let p = Prepared::new(backend, ORDERS).await;
    let (_api, base) = p.api().await;
    let api = Api::new(&base, &p.token);
    let part_rows = PART_ROWS.to_string();
    let mut a = p.worker("a", &[("EXPORTD_PART_ROWS", &part_rows), ("FAILPOINTS", "after_checkpoint=2*off->sleep(60000)")], &[]);
    let (status, view) = api.create("resumed", &checkpointed()).await;
    assert_eq!(status, 202, "{view}");
    let id = view["id"].as_str().unwrap().to_owned();
    a.wait_count(&["after_checkpoint", &id], 3, LONG).await;
    a.signal("KILL");
    a.wait_exit(LONG).await;
    assert_eq!(checkpoints(&p, &id).await, vec![(1, 1), (2, 1), (3, 1)], "three parts checkpointed before the kill");

    // The others run with another part size: the plan the first attempt fixed still holds.
    let others: Vec<Proc> = ["b", "c", "d"].iter().map(|l| p.worker(l, &[("EXPORTD_PART_ROWS", "1234")], &[])).collect();
    let done = api.wait_status(&id, &["ready", "failed"], LONG).await;
    assert_eq!(done["status"], "ready", "{done}");
    assert_eq!(done["attempt"], 2, "{done}");
    assert_eq!(done["progress"]["parts_done"], 6, "{done}");

    assert_eq!(checkpoints(&p, &id).await, vec![(1, 1), (2, 1), (3, 1), (4, 2), (5, 2), (6, 2)], "the second attempt started at part 4");
    let events = checkpoint_events(&p, &id).await;
    let expected: Vec<(String, i64)> = (1..=6).map(|n| (format!("checkpoint {n}"), if n <= 3 { 1 } else { 2 })).collect();
    assert_eq!(events, expected, "the audit trail: parts 1–3 by the first attempt, 4–6 by the second, each once");
    assert!(others.iter().any(|w| w.has_line(&["resuming after the last checkpointed part", &id, "parts=3"])), "the second attempt resumed after part 3");
    // The release is logged once it is committed, so perhaps after the API has shown it.
    let (others_ref, id_ref) = (&others, id.as_str());
    eventually("the bundle's digest, over parts of both attempts, was begun while the last part was finished", LONG, || async move {
        others_ref.iter().any(|w| w.has_line(&["export released", id_ref, "begun_early=true"]))
    })
    .await;

    download_and_check(&api, &p, &id, &done).await;
    let manifest_parts: Vec<(u64, u64)> = {
        let (_, _, bytes) = fetch(&api, &format!("/api/exports/{id}/download"), &[]).await;
        bundles::unzip(&bytes).manifest["parts"].as_array().unwrap().iter().map(|p| (p["attempt"].as_u64().unwrap(), p["generation"].as_u64().unwrap())).collect()
    };
    assert_eq!(manifest_parts, vec![(1, 1), (1, 1), (1, 1), (2, 2), (2, 2), (2, 2)], "the manifest says which attempt read each part");
    stop_all(others).await;
});

on_both_backends!(a_worker_paused_past_its_lease_with_part_3_staged_has_its_late_checkpoint_refused_and_its_part_never_used, |backend| {
    let p = Prepared::new(backend, ORDERS).await;
    let (_api, base) = p.api().await;
    let api = Api::new(&base, &p.token);
    let part_rows = PART_ROWS.to_string();
    let mut a = p.worker("a", &[("EXPORTD_PART_ROWS", &part_rows), ("FAILPOINTS", "after_part_staged=2*off->sleep(3000)")], &[]);
    let (status, view) = api.create("paused", &checkpointed()).await;
    assert_eq!(status, 202, "{view}");
    let id = view["id"].as_str().unwrap().to_owned();
    a.wait_count(&["after_part_staged", &id], 3, LONG).await;
    a.signal("STOP");
    assert_eq!(checkpoints(&p, &id).await, vec![(1, 1), (2, 1)], "part 3 is staged, not checkpointed");
    let db = p.connect().await;
    let stale = jobs::Entity::find_by_id(id.clone()).one(&db).await.unwrap().unwrap();

    let others: Vec<Proc> = ["b", "c", "d"].iter().map(|l| p.worker(l, &[], &[])).collect();
    let done = api.wait_status(&id, &["ready", "failed"], LONG).await;
    assert_eq!(done["status"], "ready", "{done}");
    assert_eq!(checkpoints(&p, &id).await, vec![(1, 1), (2, 1), (3, 2), (4, 2), (5, 2), (6, 2)], "the replacement redid part 3 and went on");

    // The old worker wakes: whatever it does with its part 3, no checkpoint of its is taken.
    a.signal("CONT");
    a.wait_line(&["lost", &id], LONG).await;
    let refused = exportd::job_store::checkpoints::record(&db, &stale, 3, &serde_json::json!({"late": true}), 0, exportd::job_store::Mover::Worker("a")).await.unwrap();
    assert!(refused.is_err(), "a checkpoint under the old generation is refused: {refused:?}");
    assert_eq!(checkpoints(&p, &id).await.len(), 6, "the refused checkpoint recorded nothing");

    // Only the checkpointed parts stay: the old worker's part 3, if it published one, is swept.
    let referenced: Vec<String> = {
        let payloads = rows(&db, &format!("SELECT payload FROM job_checkpoints WHERE job_id = '{id}' ORDER BY seq")).await;
        let mut keys: Vec<String> = payloads.iter().map(|r| serde_json::from_str::<Value>(&r[0]).unwrap()["key"].as_str().unwrap().to_owned()).collect();
        keys.sort();
        keys
    };
    assert!(referenced.iter().all(|k| !k.contains("/00003.1.")), "part 3 is the second generation's: {referenced:?}");
    let pp = &p;
    let parts_prefix = format!("exports/ten_acme/{id}/parts");
    eventually("only checkpointed parts are stored", LONG, || {
        let (referenced, prefix) = (referenced.clone(), parts_prefix.clone());
        async move { pp.objects(&prefix) == referenced }
    })
    .await;
    eventually("no staging object is left", LONG, || async { pp.objects("staging").is_empty() }).await;
    download_and_check(&api, &p, &id, &done).await;
    let generation_of_part_3 = text(&db, &format!("SELECT CAST(generation AS TEXT) FROM job_checkpoints WHERE job_id = '{id}' AND seq = 3")).await;
    assert_eq!(generation_of_part_3.as_deref(), Some("2"));
    assert_eq!(scalar(&db, &format!("SELECT COUNT(*) FROM job_events WHERE job_id = '{id}' AND from_status = 'running' AND to_status = 'ready'")).await, 1, "one release");
    a.signal("TERM");
    a.wait_exit(LONG).await;
    stop_all(others).await;
});
