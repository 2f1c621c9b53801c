//! How exportd talks to PostgreSQL over TCP: each message goes out when it is written. With
//! Nagle's algorithm on, the tail of a message longer than a segment (an import batch's insert
//! or lookup) waited for the server's delayed acknowledgement, about 40 ms, twice a batch: most
//! of an import's time (sqlx 0.9.0 had stopped setting TCP_NODELAY; 0.9.1 sets it again).
//! Real processes, real sockets, real system calls.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;
use support::procs::{Prepared, EXE, TEST_ENV};
use support::Backend;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_connection_to_postgresql_sends_its_messages_without_waiting_for_acknowledgements() {
    let p = Prepared::new(Backend::Postgres, 10).await;
    let port = url::Url::parse(&p.db_url).ok().and_then(|u| u.port()).unwrap_or(5432);
    let trace = p.dir.path().join("strace.out");
    // `-yy` names each socket by its addresses, so a connection to the database is told apart
    // from any other socket the process opens.
    let out = tokio::process::Command::new("strace")
        .args(["-f", "-yy", "-qq", "-e", "trace=setsockopt,write,writev,sendto,sendmsg", "-o"])
        .arg(&trace)
        .args([EXE, "token", "create", "bob@acme.test"])
        .env("DATABASE_URL", &p.db_url)
        .env("EXPORTD_STORE", &p.store)
        .envs(TEST_ENV)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out).await.expect("exportd token create ends within 60 s").expect("strace runs");
    assert!(out.status.success(), "exportd token create failed: {}", String::from_utf8_lossy(&out.stderr));

    let text = std::fs::read_to_string(&trace).expect("the trace");
    // Each socket is named `<TCP:[local->peer]>` (`<TCPv6:[…]>`) once connected.
    let to_database = format!(":{port}]>");
    let socket_of = |line: &str| line.split_once(":[").and_then(|(_, rest)| rest.split("->").next()).map(str::to_owned);
    let used: BTreeSet<String> = text.lines().filter(|l| l.contains(&to_database) && !l.contains("setsockopt(")).filter_map(socket_of).collect();
    let nodelay: BTreeSet<String> = text.lines().filter(|l| l.contains(&to_database) && l.contains("setsockopt(") && l.contains("TCP_NODELAY, [1]")).filter_map(socket_of).collect();
    assert!(!used.is_empty(), "no message to the database at port {port} in the trace:\n{text}");
    let waiting: Vec<&String> = used.difference(&nodelay).collect();
    assert!(waiting.is_empty(), "connections that wrote to the database with Nagle's algorithm on: {waiting:?}\n{text}");
}
