//! The operator's levers (SPEC §9): `exportd jobs list|show|cancel|redrive` and `exportd drain`,
//! run as the real binary against real `exportd` processes.

mod support;

use std::process::Stdio;
use std::time::Duration;
use support::procs::{eventually, everything, sha256, Api, Prepared};

const LONG: Duration = Duration::from_secs(60);

/// Runs `exportd` with `args` to its end; its exit code, stdout and stderr.
async fn exportd(p: &Prepared, args: &[&str]) -> (i32, String, String) {
    let out = p.command().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).output().await.unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

on_both_backends!(an_operator_lists_shows_cancels_and_redrives_jobs_in_their_own_deployment, |backend| {
    let p = Prepared::new(backend, 100).await;
    let (_api, base) = p.api().await;
    let api = Api::new(&base, &p.token);
    // An export whose only attempt fails.
    let mut failing = p.worker("failing", &[("FAILPOINTS", "mid_stream=return"), ("EXPORTD_MAX_ATTEMPTS", "1")], &[]);
    let (_, view) = api.create("fails-once", &everything("orders")).await;
    let id = view["id"].as_str().unwrap().to_owned();
    let failed = api.wait_status(&id, &["failed"], LONG).await;
    assert_eq!(failed["error"]["code"], "storage_unavailable", "{failed}");
    failing.signal("TERM");
    assert!(failing.wait_exit(LONG).await.success());

    let listed = p.run_ok(&["jobs", "list", "--state", "failed", "--tenant", "acme"]).await;
    assert!(listed.lines().any(|l| l.starts_with(&id) && l.contains("\tfailed\t") && l.contains("storage_unavailable")), "{listed}");
    assert_eq!(p.run_ok(&["jobs", "list", "--state", "failed", "--tenant", "globex"]).await, "");
    let (code, _, stderr) = exportd(&p, &["jobs", "list", "--state", "sleeping"]).await;
    assert_eq!(code, 2, "an unknown state is a usage error: {stderr}");
    let shown = p.run_ok(&["jobs", "show", &id]).await;
    assert!(shown.contains("status: failed") && shown.contains("deployment: ksa"), "{shown}");
    assert!(shown.contains("queued -> running") && shown.contains("running -> failed"), "the audit trail: {shown}");

    let redriven = p.run_ok(&["jobs", "redrive", &id]).await;
    assert_eq!(redriven.trim(), format!("{id}: queued (deployment ksa)"));
    let view = api.view(&id).await;
    assert_eq!((view["status"].as_str(), view["attempt"].as_i64()), (Some("queued"), Some(0)), "{view}");
    assert!(view["error"].is_null(), "{view}");
    let (code, _, stderr) = exportd(&p, &["jobs", "redrive", &id]).await;
    assert_eq!(code, 1, "only a failed export is redriven");
    assert!(stderr.contains("only a failed export can be redriven"), "{stderr}");

    // A worker of another deployment never takes it; one of its own does.
    let mut uae = p.worker("uae", &[], &["--deployments", "uae"]);
    let mut ksa = p.worker("ksa", &[], &["--deployments", "ksa"]);
    let ksa_id = ksa.wait_line(&["worker started"], LONG).await;
    let done = api.wait_status(&id, &["ready", "failed"], LONG).await;
    assert_eq!((done["status"].as_str(), done["attempt"].as_i64()), (Some("ready"), Some(1)), "{done}");
    let db = p.connect().await;
    let claimer = support::procs::text(&db, &format!("SELECT actor FROM job_events WHERE job_id = '{id}' AND detail = 'claimed' ORDER BY id DESC")).await.unwrap();
    assert!(ksa_id.contains(&claimer), "claimed by the ksa worker: {claimer} / {ksa_id}");
    let by_operator = support::procs::scalar(&db, &format!("SELECT COUNT(*) FROM job_events WHERE job_id = '{id}' AND actor = 'operator' AND detail = 'redriven'")).await;
    assert_eq!(by_operator, 1);
    let (status, bytes) = api.download(&id).await;
    assert_eq!(status, 200);
    assert_eq!(sha256(&bytes), done["artifact"]["sha256"].as_str().unwrap());

    // Cancel from the command line; a finished one is refused.
    for w in [&mut uae, &mut ksa] {
        w.signal("TERM");
        assert!(w.wait_exit(LONG).await.success());
    }
    let (_, waiting) = api.create("waits", &everything("orders")).await;
    let waiting = waiting["id"].as_str().unwrap().to_owned();
    assert_eq!(p.run_ok(&["jobs", "cancel", &waiting]).await.trim(), format!("{waiting}: cancelled"));
    assert_eq!(api.view(&waiting).await["status"], "cancelled");
    let (code, _, stderr) = exportd(&p, &["jobs", "cancel", &id]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("is ready and cannot be cancelled"), "{stderr}");
    let (code, _, stderr) = exportd(&p, &["jobs", "show", "exp_unknown"]).await;
    assert_eq!(code, 1, "{stderr}");
});

on_both_backends!(drain_pauses_creation_on_every_instance_while_reads_cancels_downloads_and_replays_go_on, |backend| {
    let p = Prepared::new(backend, 300).await;
    let (_first, first_base) = p.api().await;
    let (_second, second_base) = p.api().await;
    let first = Api::new(&first_base, &p.token);
    let second = Api::new(&second_base, &p.token);
    let mut w = p.worker("w", &[("FAILPOINTS", "mid_stream=sleep(3000)")], &[]);
    let (_, done) = first.create("before", &everything("orders")).await;
    let done = done["id"].as_str().unwrap().to_owned();
    first.wait_status(&done, &["ready"], LONG).await;
    let (_, running) = first.create("in-flight", &everything("orders")).await;
    let running = running["id"].as_str().unwrap().to_owned();
    w.wait_line(&["mid_stream", &running], LONG).await;

    assert_eq!(p.run_ok(&["drain"]).await.trim(), "creation paused on every instance");
    let db = p.connect().await;
    for (n, api) in [&first, &second].into_iter().enumerate() {
        // Each instance reads the switch within a second; until then a new key may still create.
        let mut tries = 0;
        eventually("creation is paused", Duration::from_secs(10), || {
            tries += 1;
            let key = format!("while-the-switch-spreads-{n}-{tries}");
            async move { api.create(&key, &everything("orders")).await.0 == 503 }
        })
        .await;
        let key = format!("during-the-drain-{n}");
        let resp = api.client.post(format!("{}/api/exports", api.base)).bearer_auth(&api.token).header("Idempotency-Key", &key).json(&everything("orders")).send().await.unwrap();
        assert_eq!(resp.status(), 503);
        assert_eq!(resp.headers()["retry-after"], "30");
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["code"], "creation-paused", "{body}");
        assert_eq!(support::procs::scalar(&db, &format!("SELECT COUNT(*) FROM jobs WHERE idempotency_key = '{key}'")).await, 0, "nothing stored");
        // A replay of an existing key still answers as before; reads and downloads go on.
        let (status, replay) = api.create("before", &everything("orders")).await;
        assert_eq!((status, replay["id"].as_str()), (202, Some(done.as_str())), "{replay}");
        assert_eq!(api.view(&done).await["status"], "ready");
        assert_eq!(api.download(&done).await.0, 200);
    }
    // The worker finishes what was in flight; a cancel answers.
    assert_eq!(second.wait_status(&running, &["ready"], LONG).await["status"], "ready");

    assert_eq!(p.run_ok(&["drain", "--off"]).await.trim(), "creation resumed");
    for (api, key) in [(&first, "after-1"), (&second, "after-2")] {
        eventually("creation resumes", Duration::from_secs(10), || async { api.create(key, &everything("orders")).await.0 == 202 }).await;
    }
    let (status, cancelled, _) = first.cancel(&first.create("after-3", &everything("orders")).await.1["id"].as_str().unwrap().to_owned()).await;
    assert!(matches!(status, 200 | 202), "{cancelled}");
    w.signal("TERM");
    assert!(w.wait_exit(LONG).await.success());
});

/// The link `GET /api/exports/{id}/download` answers with, and the key id it names.
async fn minted(api: &Api, id: &str) -> (String, String) {
    let resp = api.client.get(format!("{}/api/exports/{id}/download", api.base)).bearer_auth(&api.token).send().await.unwrap();
    assert_eq!(resp.status(), 303);
    let link = resp.headers()["location"].to_str().unwrap().to_owned();
    let kid = link.split('&').find_map(|p| p.strip_prefix("k=")).unwrap().to_owned();
    (link, kid)
}

async fn fetch(base: &str, link: &str) -> u16 {
    reqwest::get(format!("{base}{link}")).await.unwrap().status().as_u16()
}

on_both_backends!(a_key_rotation_reaches_every_instance_without_a_restart_and_a_retired_keys_links_end_with_a_links_lifetime, |backend| {
    let p = Prepared::new(backend, 100).await;
    // Two instances with short links, one (an older configuration) with long ones.
    let (_a, base_a) = p.api_with(&[("EXPORTD_LINK_TTL_SECS", "4")]).await;
    let (_b, base_b) = p.api_with(&[("EXPORTD_LINK_TTL_SECS", "4")]).await;
    let (_c, base_c) = p.api_with(&[("EXPORTD_LINK_TTL_SECS", "600")]).await;
    let (a, b, c) = (Api::new(&base_a, &p.token), Api::new(&base_b, &p.token), Api::new(&base_c, &p.token));
    let mut w = p.worker("w", &[], &[]);
    let (_, view) = a.create("rotated", &everything("orders")).await;
    let id = view["id"].as_str().unwrap().to_owned();
    a.wait_status(&id, &["ready"], LONG).await;
    let (old_short, old_kid) = minted(&a, &id).await;
    let (old_long, _) = minted(&c, &id).await;

    let said = p.run_ok(&["keys", "rotate"]).await;
    assert!(said.starts_with("new links are signed with key k"), "{said}");
    for api in [&a, &b, &c] {
        eventually("new links use the new key", Duration::from_secs(10), || async { minted(api, &id).await.1 != old_kid }).await;
    }
    // A link of the new key minted by one instance checks on another; an old one still works
    // within its lifetime.
    let (new_link, new_kid) = minted(&a, &id).await;
    assert_ne!(new_kid, old_kid);
    assert_eq!(fetch(&base_b, &new_link).await, 200);
    assert_eq!(fetch(&base_c, &old_long).await, 200, "within a link's lifetime (600 s here) of the rotation");
    // Past a link's lifetime after the rotation, a link of the retired key is refused, even one
    // whose own expiry (minted under a 600 s lifetime) is far away.
    eventually("the old key's links are refused", Duration::from_secs(15), || async { fetch(&base_a, &old_long).await == 403 }).await;
    let body: serde_json::Value = reqwest::get(format!("{base_a}{old_long}")).await.unwrap().json().await.unwrap();
    assert_eq!(body["code"], "link-expired", "{body}");
    assert_eq!(fetch(&base_a, &old_short).await, 403);
    assert_eq!(fetch(&base_a, &new_link).await, 200);
    w.signal("TERM");
    assert!(w.wait_exit(LONG).await.success());

    // With a fixed key there is nothing to rotate; a short fixed key is refused at start.
    let mut cmd = p.command();
    let out = cmd.args(["keys", "rotate"]).env("EXPORTD_SIGNING_KEY", "k".repeat(40)).output().await.unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("EXPORTD_SIGNING_KEY is set"));
    let out = p.command().arg("migrate").env("EXPORTD_SIGNING_KEY", "short").output().await.unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 32 bytes"));
});
