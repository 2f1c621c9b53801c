//! A chaos run over the whole invariant (SPEC §1): hundreds of intents, each sent twice at once
//! to two API processes, while three worker processes on PostgreSQL are killed, frozen (often
//! inside a claim's or a release's transaction) and woken at random, a deployment's store goes
//! away for a while, and a user is revoked. Afterwards every intent has exactly one operation,
//! every operation has ended, each ready one has exactly one file in its own deployment's store
//! whose bytes are its digest, and no staging is left.

mod support;

use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::procs::{eventually, everything, scalar, sha256, Prepared, Proc};
use support::Backend;
use tokio::time::Instant;

/// Intents sent (each twice).
const INTENTS: usize = 320;
/// Of them, the first ones are alice's, sent before she is revoked.
const ALICES: usize = 30;
/// The pace of new intents, so that the chaos overlaps work for about forty seconds.
const EVERY: Duration = Duration::from_millis(125);

/// A small xorshift generator; the run prints its seed, so a failing run can be replayed.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below.max(1)
    }
}

/// What the chaos did, for the closing figures.
#[derive(Default, Debug)]
struct Figures {
    kills: AtomicUsize,
    freezes_in_transactions: AtomicUsize,
    freezes_elsewhere: AtomicUsize,
    requests: AtomicUsize,
    retried: AtomicUsize,
}

/// The three workers, replaced when killed.
struct Fleet {
    p: Arc<Prepared>,
    env: Vec<(String, String)>,
    workers: Mutex<Vec<Option<Proc>>>,
    started: AtomicUsize,
}

impl Fleet {
    fn spawn(&self) -> Proc {
        let n = self.started.fetch_add(1, Ordering::Relaxed);
        let env: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        self.p.worker(&format!("w{n}"), &env, &[])
    }

    fn take(&self, i: usize) -> Option<Proc> {
        self.workers.lock().unwrap()[i].take()
    }

    fn put(&self, i: usize, w: Proc) {
        self.workers.lock().unwrap()[i] = Some(w);
    }
}

/// Sends one request until it is answered with something other than a transient failure;
/// returns the operation id.
async fn send_until_answered(request: reqwest::RequestBuilder, figures: &Figures) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        figures.requests.fetch_add(1, Ordering::Relaxed);
        let attempt = request.try_clone().unwrap().timeout(Duration::from_secs(20)).send().await;
        match attempt {
            Ok(resp) if resp.status() == 202 => {
                let view: Value = resp.json().await.unwrap();
                return view["id"].as_str().unwrap().to_owned();
            }
            Ok(resp) if resp.status().is_server_error() => {}
            Ok(resp) => panic!("unexpected answer {}: {}", resp.status(), resp.text().await.unwrap_or_default()),
            Err(_) => {}
        }
        figures.retried.fetch_add(1, Ordering::Relaxed);
        assert!(Instant::now() < deadline, "an intent was not accepted within two minutes");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hundreds_of_duplicated_intents_through_kills_freezes_an_outage_and_a_revocation_end_as_one_operation_and_one_file_each() {
    let started = Instant::now();
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    eprintln!("chaos seed {seed}");
    let p = Arc::new(Prepared::new(Backend::Postgres, 60).await);
    let ksa_store = p.dir.path().join("ksa-objects");
    let ksa_url = format!("file://{}", ksa_store.display());
    let env = vec![
        ("EXPORTD_STORE_KSA".to_owned(), ksa_url.clone()),
        ("EXPORTD_MAX_ATTEMPTS".to_owned(), "12".to_owned()),
        ("EXPORTD_RETRY_BASE_MS".to_owned(), "200".to_owned()),
    ];
    let borrowed: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (_api1, base1) = p.api_with(&borrowed).await;
    let (_api2, base2) = p.api_with(&borrowed).await;
    let mut worker_env = env.clone();
    // Every claim and release pauses a moment inside its transaction, where a freeze hurts most.
    worker_env.push(("FAILPOINTS".to_owned(), "claim_before_commit=sleep(100);release_before_commit=sleep(100)".to_owned()));
    let fleet = Arc::new(Fleet { p: p.clone(), env: worker_env, workers: Mutex::new(Vec::new()), started: AtomicUsize::new(0) });
    for _ in 0..3 {
        let w = fleet.spawn();
        fleet.workers.lock().unwrap().push(Some(w));
    }
    let tokens = [
        ("alice", p.run_ok(&["token", "create", "alice@acme.test"]).await.trim().to_owned()),
        ("bob", p.token.clone()),
        ("gina", p.run_ok(&["token", "create", "gina@globex.test"]).await.trim().to_owned()),
    ];
    let figures = Arc::new(Figures::default());
    let chaos_on = Arc::new(AtomicBool::new(true));

    // The intents: each sent twice at once, one copy to each API process.
    let client = reqwest::Client::new();
    let in_flight = Arc::new(tokio::sync::Semaphore::new(12));
    let mut sent = Vec::new();
    // The chaos: kills, freezes inside transactions and elsewhere, until told to stop.
    let start_chaos = || tokio::spawn({
        let (fleet, figures, chaos_on) = (fleet.clone(), figures.clone(), chaos_on.clone());
        async move {
            let mut dice = Dice(seed);
            while chaos_on.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(200 + dice.roll(600))).await;
                let i = dice.roll(3) as usize;
                let Some(w) = fleet.take(i) else { continue };
                match dice.roll(10) {
                    0..=2 => {
                        w.signal("KILL");
                        figures.kills.fetch_add(1, Ordering::Relaxed);
                        drop(w);
                        fleet.put(i, fleet.spawn());
                    }
                    3..=6 => {
                        let skip = w.line_count();
                        let point = if dice.roll(2) == 0 { "claim_before_commit" } else { "release_before_commit" };
                        if w.next_line(skip, &[point], Duration::from_secs(3)).await.is_some() {
                            w.signal("STOP");
                            figures.freezes_in_transactions.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(300 + dice.roll(3000))).await;
                            w.signal("CONT");
                        }
                        fleet.put(i, w);
                    }
                    _ => {
                        w.signal("STOP");
                        figures.freezes_elsewhere.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(300 + dice.roll(3000))).await;
                        w.signal("CONT");
                        fleet.put(i, w);
                    }
                }
            }
        }
    });
    let mut chaos = None;
    let mut outage = None;
    // Alice's intents are accepted while every worker is frozen; she is revoked before they wake.
    for i in 0..3 {
        if let Some(w) = fleet.take(i) {
            w.signal("STOP");
            fleet.put(i, w);
        }
    }
    for n in 0..INTENTS {
        // Alice's intents come first, all at once; the others at a pace.
        if n >= ALICES {
            tokio::time::sleep(EVERY).await;
        }
        let who = if n < ALICES { 0 } else { 1 + n % 2 };
        let (user, token) = tokens[who].clone();
        let key = format!("chaos-{n}");
        let body = everything("orders");
        let permit = in_flight.clone().acquire_owned().await.unwrap();
        let (c, figures, bases) = (client.clone(), figures.clone(), [base1.clone(), base2.clone()]);
        sent.push((user, key.clone(), tokio::spawn(async move {
            let requests = bases.map(|base| c.post(format!("{base}/api/exports")).bearer_auth(&token).header("Idempotency-Key", &key).json(&body));
            let [a, b] = requests;
            let (a, b) = tokio::join!(send_until_answered(a, &figures), send_until_answered(b, &figures));
            drop(permit);
            (a, b)
        })));
        // Once alice's intents are all accepted, she is revoked, the workers wake and the chaos
        // starts; a third of the way, ksa's store goes away for a few seconds.
        if n + 1 == ALICES {
            for (_, _, task) in sent.iter_mut() {
                while !task.is_finished() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            p.run_ok(&["user", "set-role", "alice@acme.test", "viewer"]).await;
            for i in 0..3 {
                if let Some(w) = fleet.take(i) {
                    w.signal("CONT");
                    fleet.put(i, w);
                }
            }
            chaos = Some(start_chaos());
        }
        if n == INTENTS / 3 && outage.is_none() {
            let aside = p.dir.path().join("ksa-objects.down");
            std::fs::rename(&ksa_store, &aside).unwrap();
            std::fs::write(&ksa_store, b"the store is down").unwrap();
            let (store, aside) = (ksa_store.clone(), aside.clone());
            outage = Some(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(4)).await;
                std::fs::remove_file(&store).unwrap();
                std::fs::rename(&aside, &store).unwrap();
            }));
        }
    }
    let mut operations = std::collections::HashSet::new();
    for (user, key, task) in sent {
        let (a, b) = task.await.unwrap();
        assert_eq!(a, b, "{user} {key}: both copies of the intent answered with one operation");
        assert!(operations.insert(a), "{user} {key}: an operation of its own");
    }
    outage.expect("the outage happened").await.unwrap();
    chaos_on.store(false, Ordering::Relaxed);
    chaos.expect("the chaos ran").await.unwrap();
    let sending_done = started.elapsed();
    // Every worker awake and alive again.
    for i in 0..3 {
        if let Some(w) = fleet.take(i) {
            w.signal("CONT");
            fleet.put(i, w);
        }
    }
    assert!(ksa_store.is_dir(), "the store came back");

    // Every intent is one operation, and every operation ends.
    let db = p.connect().await;
    assert_eq!(scalar(&db, "SELECT COUNT(*) FROM jobs").await, INTENTS as i64, "one operation per intent");
    eventually("every operation has ended", Duration::from_secs(240), || {
        let db = db.clone();
        async move { scalar(&db, "SELECT COUNT(*) FROM jobs WHERE status NOT IN ('ready', 'failed', 'cancelled')").await == 0 }
    })
    .await;
    let rows = support::procs::rows(&db, "SELECT id, status, tenant_id, artifact_sha256, error_code FROM jobs").await;
    let mut by_status: BTreeMap<String, usize> = BTreeMap::new();
    for row in &rows {
        let (id, status, tenant, sha, code) = (&row[0], &row[1], &row[2], &row[3], &row[4]);
        *by_status.entry(format!("{status} {code}")).or_default() += 1;
        let releases = scalar(&db, &format!("SELECT COUNT(*) FROM job_events WHERE job_id = '{id}' AND to_status = 'ready'")).await;
        assert_eq!(releases, i64::from(status == "ready"), "{id}: {status}, released {releases} times");
        if status == "failed" {
            assert!(code == "permission_revoked" || code == "storage_unavailable", "{id} failed with {code}");
        }
        // Its file, in its own deployment's store only, exactly once, its bytes its digest.
        let (own, other) = if tenant == "ten_acme" { (ksa_store.clone(), p.dir.path().join("objects")) } else { (p.dir.path().join("objects"), ksa_store.clone()) };
        let folder = own.join("exports").join(tenant).join(id);
        let expected: Vec<String> = if status == "ready" { vec![format!("{sha}.csv")] } else { vec![] };
        eventually(&format!("{id}: only its artifact in its store"), Duration::from_secs(60), || {
            let (folder, expected) = (folder.clone(), expected.clone());
            async move {
                let mut found: Vec<String> = std::fs::read_dir(&folder).map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default();
                found.sort();
                found == expected
            }
        })
        .await;
        if status == "ready" {
            let bytes = std::fs::read(folder.join(format!("{sha}.csv"))).unwrap();
            assert_eq!(&sha256(&bytes), sha, "{id}: its bytes are its digest");
        }
        assert!(!other.join("exports").join(tenant).exists(), "{tenant}'s files were written to another deployment's store");
    }
    let alice_unfinished = rows.iter().filter(|r| r[4] == "permission_revoked").count();
    assert_eq!(alice_unfinished, ALICES, "the revocation stopped every export of alice's, none of them published");
    for store in [&ksa_store, &p.dir.path().join("objects")] {
        let staging = store.join("staging");
        eventually("no staging is left after the janitor", Duration::from_secs(60), || {
            let staging = staging.clone();
            async move { !staging.exists() || std::fs::read_dir(&staging).map(|mut d| d.next().is_none()).unwrap_or(true) }
        })
        .await;
    }
    let trail = support::procs::rows(&db, "SELECT detail, CAST(COUNT(*) AS VARCHAR) FROM job_events WHERE detail IN ('storage_unavailable', 'worker_lost', 'stalled', 'handed back') GROUP BY detail").await;
    let trail: BTreeMap<String, String> = trail.into_iter().map(|r| (r[0].clone(), r[1].clone())).collect();
    let fleet_procs: Vec<Proc> = (0..3).filter_map(|i| fleet.take(i)).collect();
    for mut w in fleet_procs {
        w.signal("TERM");
        assert!(w.wait_exit(Duration::from_secs(60)).await.success(), "{}", w.label);
    }
    eprintln!(
        "chaos figures: seed {seed}; {INTENTS} intents, {} requests ({} retried after a 5xx or no answer); {} workers started; \
         {} kills, {} freezes inside a transaction, {} elsewhere; ksa's store down 4 s; alice revoked ({alice_unfinished} of her exports ended permission_revoked); \
         outcomes {by_status:?}; attempts ended by the audit trail {trail:?}; sending took {sending_done:?}, everything {:?}",
        figures.requests.load(Ordering::Relaxed),
        figures.retried.load(Ordering::Relaxed),
        fleet.started.load(Ordering::Relaxed),
        figures.kills.load(Ordering::Relaxed),
        figures.freezes_in_transactions.load(Ordering::Relaxed),
        figures.freezes_elsewhere.load(Ordering::Relaxed),
        started.elapsed()
    );
    assert!(figures.kills.load(Ordering::Relaxed) >= 1 && figures.freezes_in_transactions.load(Ordering::Relaxed) >= 1, "the chaos happened");
}
