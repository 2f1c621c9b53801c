//! Behind a reverse proxy (SPEC §11): the client is the right-most address no trusted proxy
//! added, so no one can lock another user out; the same-origin rule and `Secure` follow the
//! public origin, whatever `Host` the proxy sends; and a real nginx with TLS in front of real
//! processes, with the configuration the README documents (`docs/proxy/nginx-site.conf`).

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use support::procs::{everything, free_port, sha256, Prepared};
use support::{Backend, Options, TestApp};

/// Logs in `email` with `password` from a client the proxy saw at `client`.
async fn login_from(app: &TestApp, client: &str, email: &str, password: &str) -> reqwest::Response {
    app.anonymous()
        .post(app.url("/api/session"))
        .header("x-forwarded-for", client)
        .json(&json!({"email": email, "password": password}))
        .send()
        .await
        .unwrap()
}

fn behind_a_local_proxy(c: &mut exportd::config::Config) {
    c.trusted_proxies = exportd::config::trusted_proxies("127.0.0.1").unwrap();
}

on_both_backends!(behind_a_proxy_a_lockout_from_one_address_does_not_stop_a_login_from_another, |backend| {
    let app = TestApp::start(Options { adjust: behind_a_local_proxy, ..Options::new(backend) }).await;
    // Someone guessing bob's password from one address is held back...
    let mut refused = false;
    for _ in 0..8 {
        let resp = login_from(&app, "203.0.113.66", "bob@acme.test", "guess").await;
        refused |= resp.status() == 429;
    }
    assert!(refused, "the guesser is held back");
    // ... while bob, from his own address behind the same proxy, signs in.
    let resp = login_from(&app, "198.51.100.7", "bob@acme.test", "export-demo").await;
    assert_eq!(resp.status(), 204, "{:?}", resp.text().await);
    // What a client writes left of the proxy's own hop is the client's to invent: ignored.
    let resp = login_from(&app, "198.51.100.7, 203.0.113.66", "bob@acme.test", "guess").await;
    assert_eq!(resp.status(), 429, "the hop the proxy added decides");
    app.stop().await;
});

on_both_backends!(an_ipv6_guesser_rotating_inside_its_slash_64_is_one_client, |backend| {
    let app = TestApp::start(Options { adjust: behind_a_local_proxy, ..Options::new(backend) }).await;
    let mut statuses = Vec::new();
    for i in 1..=8 {
        statuses.push(login_from(&app, &format!("2001:db8:aa:bb::{i:x}"), "alice@acme.test", "guess").await.status().as_u16());
    }
    assert!(statuses.contains(&429), "one /64 is one client: {statuses:?}");
    let other = login_from(&app, "2001:db8:aa:cc::1", "alice@acme.test", "export-demo").await;
    assert_eq!(other.status(), 204, "another /64 is another client");
    app.stop().await;
});

on_both_backends!(without_trusted_proxies_a_forwarded_address_is_not_believed, |backend| {
    let app = TestApp::spawn(backend).await;
    let mut statuses = Vec::new();
    for i in 0..8 {
        statuses.push(login_from(&app, &format!("203.0.113.{i}"), "vic@acme.test", "guess").await.status().as_u16());
    }
    assert!(statuses.contains(&429), "rotating X-Forwarded-For from an untrusted peer changes nothing: {statuses:?}");
    app.stop().await;
});

fn public_https(c: &mut exportd::config::Config) {
    behind_a_local_proxy(c);
    c.public_origin = exportd::auth::PublicOrigin::parse("https://exports.example.com");
}

on_both_backends!(behind_a_proxy_that_rewrites_host_the_public_origin_decides_and_the_cookie_is_secure_and_host_only, |backend| {
    let app = TestApp::start(Options { adjust: public_https, ..Options::new(backend) }).await;
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let login = |origin: &'static str| {
        http.post(app.url("/api/session")).header("origin", origin).json(&json!({"email": "bob@acme.test", "password": "export-demo"})).send()
    };
    // nginx's default rewrites Host to the upstream's; the browser's Origin is the public one.
    let resp = login("https://exports.example.com").await.unwrap();
    assert_eq!(resp.status(), 204, "{:?}", resp.text().await);
    let cookie = resp.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(cookie.starts_with("__Host-exportd_session="), "{cookie}");
    assert!(cookie.contains("; Secure") && cookie.contains("; Path=/") && !cookie.contains("Domain"), "{cookie}");
    let secret = cookie.split(';').next().unwrap().split_once('=').unwrap().1.to_owned();
    for origin in ["http://exports.example.com", "https://exports.example.com:8443", "https://127.0.0.1"] {
        let resp = login(origin).await.unwrap();
        support::expect_problem(resp, 403, "cross-origin").await;
    }
    let whoami = |cookie: String| http.get(app.url("/api/session")).header("cookie", cookie).send();
    assert_eq!(whoami(format!("__Host-exportd_session={secret}")).await.unwrap().status(), 200);
    // Over TLS only the host-only cookie counts: one planted by a sibling domain does not.
    assert_eq!(whoami(format!("exportd_session={secret}")).await.unwrap().status(), 401);
    app.stop().await;
});

/// nginx, started from the project's documented site configuration, with a self-signed
/// certificate, in front of `upstream`; stopped when dropped.
struct Nginx {
    child: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Nginx {
    fn start(upstream: &str) -> Nginx {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display().to_string();
        let port = free_port();
        let made = std::process::Command::new("openssl")
            .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost"])
            .args(["-keyout", &format!("{d}/tls.key"), "-out", &format!("{d}/tls.crt")])
            .stderr(std::process::Stdio::null())
            .status()
            .expect("openssl makes the test certificate");
        assert!(made.success());
        let site = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/proxy/nginx-site.conf")).unwrap();
        let site = site
            .replace("listen 443 ssl;", &format!("listen 127.0.0.1:{port} ssl;"))
            .replace("server_name exports.example.com;", "server_name localhost;")
            .replace("/etc/ssl/exports.example.com.crt", &format!("{d}/tls.crt"))
            .replace("/etc/ssl/exports.example.com.key", &format!("{d}/tls.key"))
            .replace("http://127.0.0.1:3000", upstream);
        let conf = format!(
            "daemon off; worker_processes 1; user root; pid {d}/nginx.pid; error_log {d}/error.log;\n\
             events {{}}\n\
             http {{ access_log off; client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fcgi; \
             uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n{site}\n}}\n"
        );
        std::fs::write(format!("{d}/nginx.conf"), conf).unwrap();
        let child = std::process::Command::new("nginx").args(["-p", &d, "-c", &format!("{d}/nginx.conf")]).spawn().expect("nginx (Debian's) runs");
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Nginx { child, port, _dir: dir };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("nginx never listened: {}", std::fs::read_to_string(format!("{d}/error.log")).unwrap_or_default());
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A browser-like client of `origin` that connects from the loopback address `from`.
fn browser(from: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .local_address(from.parse::<std::net::IpAddr>().ok())
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn through_a_real_nginx_with_tls_a_browser_logs_in_exports_and_downloads_and_no_one_can_lock_it_out() {
    let p = Prepared::new(Backend::Postgres, 300).await;
    let api_port = free_port();
    let proxy = Nginx::start(&format!("http://127.0.0.1:{api_port}"));
    let origin = format!("https://localhost:{}", proxy.port);
    let env = [("EXPORTD_PUBLIC_ORIGIN", origin.as_str()), ("EXPORTD_TRUSTED_PROXIES", "127.0.0.1")];
    let mut cmd = p.command();
    cmd.args(["serve", "--bind", &format!("127.0.0.1:{api_port}")]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut server = support::procs::Proc::spawn(cmd, "serve");
    support::procs::wait_healthy(&format!("http://127.0.0.1:{api_port}")).await;

    let url = |path: &str| format!("{origin}{path}");
    // A guesser at one address is held back ...
    let guesser = browser("127.0.0.2");
    let mut held_back = false;
    for _ in 0..8 {
        let resp = guesser.post(url("/api/session")).header("origin", &origin).json(&json!({"email": "bob@acme.test", "password": "guess"})).send().await.unwrap();
        held_back |= resp.status() == 429;
    }
    assert!(held_back, "the guesser is held back");
    // ... and bob, at another, signs in, exports and downloads through the proxy.
    let bob = browser("127.0.0.3");
    let resp = bob.post(url("/api/session")).header("origin", &origin).json(&json!({"email": "bob@acme.test", "password": "export-demo"})).send().await.unwrap();
    assert_eq!(resp.status(), 204, "{:?}", resp.text().await);
    let cookie = resp.headers()["set-cookie"].to_str().unwrap();
    assert!(cookie.starts_with("__Host-exportd_session=") && cookie.contains("Secure"), "{cookie}");
    let resp = bob.post(url("/api/exports")).header("origin", &origin).header("idempotency-key", "through-nginx").json(&everything("orders")).send().await.unwrap();
    assert_eq!(resp.status(), 202, "{:?}", resp.text().await);
    let id = resp.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let view = loop {
        let view: Value = bob.get(url(&format!("/api/exports/{id}"))).send().await.unwrap().json().await.unwrap();
        if view["status"] == "ready" {
            break view;
        }
        assert!(tokio::time::Instant::now() < deadline, "{view}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let link = bob.get(url(&format!("/api/exports/{id}/download"))).send().await.unwrap();
    assert_eq!(link.status(), 303);
    let file = bob.get(url(link.headers()["location"].to_str().unwrap())).send().await.unwrap();
    assert_eq!(file.status(), 200);
    assert_eq!(sha256(&file.bytes().await.unwrap()), view["artifact"]["sha256"].as_str().unwrap());
    // A page of another site cannot make bob's browser post.
    let forged = bob.post(url("/api/exports")).header("origin", "https://evil.example").header("idempotency-key", "forged").json(&everything("orders")).send().await.unwrap();
    support::expect_problem(forged, 403, "cross-origin").await;
    server.signal("TERM");
    assert!(server.wait_exit(Duration::from_secs(60)).await.success());
}
