//! Administration without SQL (contract §13): `exportd tenant add|list`, `user add|deactivate|list`
//! and `token list|revoke`, run as the real binary against a running exportd's database.

mod support;

use std::process::Stdio;
use support::TestApp;
use tokio::io::AsyncWriteExt;

/// Runs `exportd` with `args` (and `stdin`, if any) against the app's database: exit code,
/// stdout and stderr.
async fn exportd(app: &TestApp, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_exportd"))
        .args(args)
        .env("DATABASE_URL", app.database_url())
        .env("EXPORTD_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("exportd starts");
    let mut input = child.stdin.take().expect("its stdin");
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).await.expect("written");
    }
    drop(input);
    let out = child.wait_with_output().await.expect("its output");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

async fn signs_in(app: &TestApp, email: &str, password: &str) -> Option<reqwest::Client> {
    let client = app.anonymous();
    let resp = client.post(app.url("/api/session")).json(&serde_json::json!({"email": email, "password": password})).send().await.expect("answers");
    (resp.status() == 204).then_some(client)
}

fn bearer(token: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("authorization", format!("Bearer {token}").parse().expect("a header"));
    reqwest::Client::builder().default_headers(headers).build().expect("a client")
}

on_both_backends!(an_operator_adds_a_tenant_and_a_user_who_signs_in_and_deactivating_them_ends_their_sessions_and_tokens, |backend| {
    let app = TestApp::spawn(backend).await;
    assert_eq!(exportd(&app, &["tenant", "add", "initech", "--deployment", "ksa", "--source-id", "org-42"], None).await.0, 0);
    let before = exportd(&app, &["tenant", "list"], None).await.1;
    let (code, _, stderr) = exportd(&app, &["tenant", "add", "initech", "--deployment", "uae"], None).await;
    assert!(code == 1 && stderr.contains("exists"), "a slug that exists: {code} {stderr}");
    let (code, _, stderr) = exportd(&app, &["tenant", "add", "hooli", "--deployment", "ksa", "--source-id", "org-42"], None).await;
    assert!(code == 1 && stderr.contains("org-42"), "a source id that exists: {code} {stderr}");
    let listed = exportd(&app, &["tenant", "list"], None).await.1;
    assert_eq!(listed, before, "a refused add changes nothing");
    assert!(listed.lines().any(|l| l == "initech\tten_initech\tksa\torg-42"), "{listed}");
    assert!(listed.lines().any(|l| l == "acme\tten_acme\tksa\tten_acme"), "a tenant's source id is its id by default: {listed}");

    let (code, _, stderr) = exportd(&app, &["user", "add", "Pat@Initech.test", "--tenant", "initech", "--role", "analyst", "--password-stdin"], Some("correct horse battery\n")).await;
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) = exportd(&app, &["user", "add", "pat@initech.test", "--tenant", "initech", "--role", "admin"], None).await;
    assert!(code == 1 && stderr.contains("exists"), "an email that exists: {code} {stderr}");
    assert_eq!(exportd(&app, &["user", "add", "sam@initech.test", "--tenant", "nowhere", "--role", "analyst"], None).await.0, 1);
    assert_eq!(exportd(&app, &["user", "add", "sam@initech.test", "--tenant", "initech", "--role", "owner"], None).await.0, 1);
    assert_eq!(exportd(&app, &["user", "list", "--tenant", "initech"], None).await.1, "pat@initech.test\tinitech\tanalyst\tactive\n");

    let session = signs_in(&app, "pat@initech.test", "correct horse battery").await.expect("the new user signs in with the password read from stdin");
    assert!(signs_in(&app, "pat@initech.test", "correct horse battery\n").await.is_none(), "the line feed is not part of the password");
    let who: serde_json::Value = session.get(app.url("/api/session")).send().await.expect("answers").json().await.expect("json");
    assert_eq!(who["role"], "analyst", "{who}");
    let (code, token, _) = exportd(&app, &["token", "create", "pat@initech.test"], None).await;
    assert_eq!(code, 0);
    let token = token.trim().to_owned();
    assert_eq!(bearer(&token).get(app.url("/api/exports")).send().await.expect("answers").status(), 200);
    let tokens = exportd(&app, &["token", "list", "pat@initech.test"], None).await.1;
    assert!(tokens.lines().count() == 1 && tokens.trim_end().ends_with("\tactive"), "{tokens}");
    assert!(!tokens.contains(&token), "a token's secret is never shown again");

    assert_eq!(exportd(&app, &["user", "deactivate", "pat@initech.test"], None).await.0, 0);
    assert_eq!(session.get(app.url("/api/exports")).send().await.expect("answers").status(), 401, "the session ended at once");
    assert_eq!(bearer(&token).get(app.url("/api/exports")).send().await.expect("answers").status(), 401, "the token ended at once");
    assert!(exportd(&app, &["token", "list", "pat@initech.test"], None).await.1.trim_end().ends_with("\trevoked"));
    assert_eq!(exportd(&app, &["user", "list", "--tenant", "initech"], None).await.1, "pat@initech.test\tinitech\tanalyst\tinactive\n");
    assert!(signs_in(&app, "pat@initech.test", "correct horse battery").await.is_none(), "an inactive user does not sign in");
    assert_eq!(exportd(&app, &["user", "deactivate", "nobody@initech.test"], None).await.0, 1);
});

on_both_backends!(a_revoked_token_ends_at_once_and_a_user_added_without_a_password_cannot_sign_in_with_one, |backend| {
    let app = TestApp::spawn(backend).await;
    let (client, _) = app.token_client("bob@acme.test").await;
    assert_eq!(client.get(app.url("/api/exports")).send().await.expect("answers").status(), 200);
    let tokens = exportd(&app, &["token", "list", "bob@acme.test"], None).await.1;
    let id = tokens.lines().last().and_then(|l| l.split('\t').next()).expect("the token's id").to_owned();
    assert_eq!(exportd(&app, &["token", "revoke", &id], None).await.0, 0);
    assert_eq!(client.get(app.url("/api/exports")).send().await.expect("answers").status(), 401);
    assert_eq!(exportd(&app, &["token", "revoke", &id], None).await.0, 0, "revoking twice changes nothing");
    assert_eq!(exportd(&app, &["token", "revoke", "no-such-token"], None).await.0, 1);

    assert_eq!(exportd(&app, &["user", "add", "oidc-only@acme.test", "--tenant", "acme", "--role", "viewer"], None).await.0, 0);
    for guess in ["", "!", "export-demo"] {
        assert!(signs_in(&app, "oidc-only@acme.test", guess).await.is_none(), "{guess:?}");
    }
});
