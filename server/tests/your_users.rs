//! Your users (contract §13, case 25): sign-in through an OpenID Connect provider, every way it
//! can fail refused in words with nothing created, the provider's access tokens as API
//! credentials only for their audience, and a catalog's `[authority] sql` as the role at every
//! check of "authorised": a role taken away in the source refuses the next download and stops a
//! running export before its release; a source that does not answer is `busy`, never a release.

mod support;

use exportd::catalog::Catalog;
use exportd::config::{Config, OidcConfig};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use support::provider::{Plan, Provider, Signer};
use support::{expect_problem, Backend, Gate, Options, TestApp, Turnstile};

const CLIENT_ID: &str = "exportd-test";
const API_AUDIENCE: &str = "exportd-api";

fn oidc(issuer: &str, audience: Option<&str>) -> OidcConfig {
    OidcConfig {
        issuer: issuer.to_owned(),
        client_id: CLIENT_ID.into(),
        client_secret: Some("test-secret".into()),
        name: "Test IdP".into(),
        tenant_claim: "exportd_tenant".into(),
        role_claim: "exportd_role".into(),
        audience: audience.map(str::to_owned),
        keys_reread: exportd::auth::oidc::JWKS_REREAD,
    }
}

async fn app_with_provider(backend: Backend, provider: &Provider, audience: Option<&str>) -> TestApp {
    let config = oidc(&provider.issuer, audience);
    TestApp::start(Options { with: Some(Arc::new(move |c: &mut Config| c.oidc = Some(config.clone()))), ..Options::new(backend) }).await
}

/// Starts a sign-in in `browser`: exportd's redirect to the provider, and the cookie it set.
async fn start(app: &TestApp, browser: &reqwest::Client) -> (String, String) {
    let resp = browser.get(app.url("/auth/oidc/start")).send().await.unwrap();
    assert_eq!(resp.status(), 303, "start redirects to the provider");
    let cookie = resp.headers()["set-cookie"].to_str().unwrap().to_owned();
    for attribute in ["HttpOnly", "SameSite=Lax", "Path=/auth/oidc", "Max-Age=600"] {
        assert!(cookie.contains(attribute), "the sign-in cookie is {attribute}: {cookie}");
    }
    (resp.headers()["location"].to_str().unwrap().to_owned(), cookie.split(';').next().unwrap().to_owned())
}

/// The callback as the provider would send the browser to it.
async fn callback(app: &TestApp, browser: &reqwest::Client, state: &str) -> reqwest::Response {
    browser.get(app.url(&format!("/auth/oidc/callback?code=the-code&state={state}"))).send().await.unwrap()
}

/// Signs `browser` in through the provider with `plan`; the callback's answer.
async fn sign_in(app: &TestApp, provider: &Provider, browser: &reqwest::Client, plan: Plan) -> reqwest::Response {
    let (authorize, _) = start(app, browser).await;
    let state = provider.expect(&authorize, plan);
    callback(app, browser, &state).await
}

/// Asserts a failed sign-in's page: a 4xx, HTML that says sign-in failed and `why`.
async fn refused(resp: reqwest::Response, status: u16, why: &str) {
    assert_eq!(resp.status().as_u16(), status, "status of a refusal for {why:?}");
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    let page = resp.text().await.unwrap();
    assert!(page.contains("Sign-in failed"), "{page}");
    assert!(page.contains(why), "the page says {why:?}: {page}");
    assert!(page.contains("تعذّر تسجيل الدخول"), "and says it in Arabic");
}

async fn provider_users(app: &TestApp) -> i64 {
    app.scalar("SELECT COUNT(*) FROM users WHERE oidc_subject IS NOT NULL").await
}

on_both_backends!(a_sign_in_through_the_provider_makes_one_user_of_issuer_and_sub_with_the_same_session_as_a_password, |backend| {
    let provider = Provider::start(CLIENT_ID).await;
    let app = app_with_provider(backend, &provider, None).await;
    let browser = app.anonymous();
    let resp = sign_in(&app, &provider, &browser, Plan::good("u-1", "acme", "analyst")).await;
    assert_eq!(resp.status(), 303);
    assert_eq!(resp.headers()["location"], "/");
    let me: Value = browser.get(app.url("/api/session")).send().await.unwrap().json().await.unwrap();
    assert_eq!(me, json!({"email": "u-1@idp.test", "role": "analyst", "tenant": "acme"}));
    assert_eq!(app.texts("SELECT email FROM users WHERE oidc_subject = 'u-1'").await, vec!["oidc:u-1".to_owned()]);
    assert_eq!(app.create(&browser, "by-provider", &json!({"report": "orders"})).await.status(), 202, "an analyst signed in by the provider exports");

    // Signed in again with another role claim: the same user, updated.
    let again = app.anonymous();
    assert_eq!(sign_in(&app, &provider, &again, Plan::good("u-1", "acme", "admin")).await.status(), 303);
    assert_eq!(provider_users(&app).await, 1);
    let me: Value = again.get(app.url("/api/session")).send().await.unwrap().json().await.unwrap();
    assert_eq!(me["role"], "admin");

    // A role pinned by `exportd user set-role` is kept whatever the claims say.
    assert_eq!(app.cli(&["user", "set-role", "oidc:u-1", "viewer"]).await, 0);
    let third = app.anonymous();
    assert_eq!(sign_in(&app, &provider, &third, Plan::good("u-1", "acme", "admin")).await.status(), 303);
    let me: Value = third.get(app.url("/api/session")).send().await.unwrap().json().await.unwrap();
    assert_eq!(me["role"], "viewer");

    // Deactivated by its CLI name: its sessions end at once, and it cannot sign in again.
    assert_eq!(app.cli(&["user", "deactivate", "oidc:u-1"]).await, 0);
    expect_problem(third.get(app.url("/api/session")).send().await.unwrap(), 401, "unauthenticated").await;
    refused(sign_in(&app, &provider, &app.anonymous(), Plan::good("u-1", "acme", "admin")).await, 403, "deactivated").await;
    app.stop().await;
});

on_both_backends!(every_failed_sign_in_is_a_page_in_words_that_creates_nothing_and_never_a_5xx, |backend| {
    let provider = Provider::start(CLIENT_ID).await;
    let app = app_with_provider(backend, &provider, None).await;
    let sessions = app.scalar("SELECT COUNT(*) FROM sessions").await;

    // A forged state; a state started in another browser; no cookie at all.
    let browser = app.anonymous();
    let (authorize, _) = start(&app, &browser).await;
    let state = provider.expect(&authorize, Plan::good("u-2", "acme", "admin"));
    refused(callback(&app, &browser, "forged").await, 400, "not started in this browser").await;
    refused(callback(&app, &browser, &state).await, 400, "used already").await;
    let (authorize, _) = start(&app, &browser).await;
    let state = provider.expect(&authorize, Plan::good("u-2", "acme", "admin"));
    refused(callback(&app, &app.anonymous(), &state).await, 400, "not started in this browser").await;

    // A state given twice is no state.
    refused(browser.get(app.url("/auth/oidc/callback?code=c&state=a&state=b")).send().await.unwrap(), 400, "not started in this browser").await;
    assert_eq!(provider.token_calls(), 0, "none of these reached the provider's token endpoint");
    assert_eq!(app.scalar("SELECT COUNT(*) FROM sessions").await, sessions, "nor made a session");

    // A replayed state: the callback of a sign-in that worked, sent again with its cookie.
    let good = app.anonymous();
    let (authorize, cookie) = start(&app, &good).await;
    let state = provider.expect(&authorize, Plan::good("u-ok", "acme", "admin"));
    assert_eq!(callback(&app, &good, &state).await.status(), 303);
    let calls = provider.token_calls();
    let sessions = app.scalar("SELECT COUNT(*) FROM sessions").await;
    let replay = app.anonymous().get(app.url(&format!("/auth/oidc/callback?code=the-code&state={state}"))).header("cookie", &cookie).send().await.unwrap();
    refused(replay, 400, "used already").await;
    assert_eq!(provider.token_calls(), calls, "a replayed state never reaches the provider");
    assert_eq!(app.scalar("SELECT COUNT(*) FROM sessions").await, sessions, "and makes no session");
    app.exec("DELETE FROM sessions").await;
    app.exec("DELETE FROM users WHERE oidc_subject = 'u-ok'").await;

    // Tokens that do not verify, and claims exportd does not know: each reaches the provider,
    // and each leaves no user and no session behind.
    let cases: Vec<(Plan, u16, &str)> = vec![
        (Plan { issuer: Some("http://127.0.0.1:9/another-issuer".into()), ..Plan::good("u-3", "acme", "admin") }, 401, "another issuer"),
        (Plan { nonce: Some("another-sign-in".into()), ..Plan::good("u-3", "acme", "admin") }, 401, "nonce"),
        (Plan { signer: Signer::Other, ..Plan::good("u-3", "acme", "admin") }, 401, "signature"),
        (Plan { audience: Some("another-client".into()), ..Plan::good("u-3", "acme", "admin") }, 401, "another audience"),
        (Plan { expires_in: -120, ..Plan::good("u-3", "acme", "admin") }, 401, "expired"),
        (Plan::good("u-3", "initech", "admin"), 403, "no tenant"),
        (Plan { tenant: None, ..Plan::good("u-3", "acme", "admin") }, 403, "no tenant"),
        (Plan::good("u-3", "acme", "owner"), 403, "no role"),
        (Plan { role: None, ..Plan::good("u-3", "acme", "admin") }, 403, "no role"),
    ];
    for (plan, status, why) in cases {
        let calls = provider.token_calls();
        refused(sign_in(&app, &provider, &app.anonymous(), plan).await, status, why).await;
        assert_eq!(provider.token_calls(), calls + 1, "{why}: the code was exchanged");
        assert_eq!((provider_users(&app).await, app.scalar("SELECT COUNT(*) FROM sessions").await), (0, 0), "{why}: nothing made");
    }
    // A tenant claim that is not the user's recorded tenant.
    assert_eq!(sign_in(&app, &provider, &app.anonymous(), Plan::good("u-4", "acme", "admin")).await.status(), 303);
    let sessions = app.scalar("SELECT COUNT(*) FROM sessions").await;
    refused(sign_in(&app, &provider, &app.anonymous(), Plan::good("u-4", "globex", "admin")).await, 403, "not your tenant").await;
    assert_eq!(app.texts("SELECT tenant_id FROM users WHERE oidc_subject = 'u-4'").await, vec!["ten_acme".to_owned()]);
    assert_eq!(app.scalar("SELECT COUNT(*) FROM sessions").await, sessions, "no session for a refused sign-in");
    app.exec("DELETE FROM sessions").await;
    app.exec("DELETE FROM users WHERE oidc_subject = 'u-4'").await;

    // An unknown key id makes exportd read the provider's keys again, at most once a minute.
    let reads = provider.jwks_reads();
    refused(sign_in(&app, &provider, &app.anonymous(), Plan { signer: Signer::Other, ..Plan::good("u-5", "acme", "admin") }).await, 401, "signature").await;
    assert_eq!(provider.jwks_reads(), reads, "read again at most once a minute (it was read just now)");
    assert_eq!(app.scalar("SELECT COUNT(*) FROM sessions").await, 0);

    // The provider down: at the callback (discovery cached), and at the start of a new process.
    let browser = app.anonymous();
    let (authorize, _) = start(&app, &browser).await;
    let state = provider.expect(&authorize, Plan::good("u-6", "acme", "admin"));
    provider.stop();
    refused(callback(&app, &browser, &state).await, 401, "could not be reached").await;
    let cold = app_with_provider(backend, &provider, None).await;
    refused(cold.anonymous().get(cold.url("/auth/oidc/start")).send().await.unwrap(), 401, "could not be reached").await;
    cold.stop().await;

    assert_eq!(provider_users(&app).await, 0, "no failed sign-in made a user");
    assert_eq!(app.scalar("SELECT COUNT(*) FROM sessions").await, 0, "nor a session");
    app.stop().await;
});

on_both_backends!(a_token_signed_by_a_key_the_provider_has_just_published_is_verified_after_one_read_of_its_keys, |backend| {
    let provider = Provider::start(CLIENT_ID).await;
    // Keys may be read again at once here (a minute in production), so the rotation is seen now.
    let mut config = oidc(&provider.issuer, None);
    config.keys_reread = Duration::ZERO;
    let app = TestApp::start(Options { with: Some(Arc::new(move |c: &mut Config| c.oidc = Some(config.clone()))), ..Options::new(backend) }).await;
    assert_eq!(sign_in(&app, &provider, &app.anonymous(), Plan::good("u-7", "acme", "analyst")).await.status(), 303);
    provider.rotate();
    let reads = provider.jwks_reads();
    let resp = sign_in(&app, &provider, &app.anonymous(), Plan { signer: Signer::Other, ..Plan::good("u-7", "acme", "analyst") }).await;
    assert_eq!(resp.status(), 303, "the new key is found by reading the keys again");
    assert_eq!(provider.jwks_reads(), reads + 1, "once");
    app.stop().await;
});

on_both_backends!(the_providers_access_tokens_are_api_credentials_only_for_the_configured_audience, |backend| {
    let provider = Provider::start(CLIENT_ID).await;
    let app = app_with_provider(backend, &provider, Some(API_AUDIENCE)).await;
    assert_eq!(sign_in(&app, &provider, &app.anonymous(), Plan::good("u-api", "acme", "analyst")).await.status(), 303);
    let call = |token: String| app.anonymous().get(app.url("/api/exports")).bearer_auth(token).send();
    assert_eq!(call(provider.access_token("u-api", API_AUDIENCE, Signer::Published, 300)).await.unwrap().status(), 200);
    // An ID token is never an API credential: not with the client's audience, nor, carrying its
    // sign-in's nonce, with the API's.
    expect_problem(call(provider.id_token("u-api", CLIENT_ID)).await.unwrap(), 401, "unauthenticated").await;
    expect_problem(call(provider.id_token("u-api", API_AUDIENCE)).await.unwrap(), 401, "unauthenticated").await;
    expect_problem(call(provider.access_token("u-api", CLIENT_ID, Signer::Published, 300)).await.unwrap(), 401, "unauthenticated").await;
    expect_problem(call(provider.access_token("u-api", API_AUDIENCE, Signer::Other, 300)).await.unwrap(), 401, "unauthenticated").await;
    expect_problem(call(provider.access_token("u-api", API_AUDIENCE, Signer::Published, -120)).await.unwrap(), 401, "unauthenticated").await;
    expect_problem(call(provider.access_token("someone-never-signed-in", API_AUDIENCE, Signer::Published, 300)).await.unwrap(), 401, "unauthenticated").await;
    // exportd's own tokens work as before beside them.
    let (token, _) = app.token_client("bob@acme.test").await;
    assert_eq!(token.get(app.url("/api/exports")).send().await.unwrap().status(), 200);
    app.stop().await;

    // Without an audience configured no access token is accepted.
    let closed = app_with_provider(backend, &provider, None).await;
    assert_eq!(sign_in(&closed, &provider, &closed.anonymous(), Plan::good("u-api", "acme", "analyst")).await.status(), 303);
    let token = provider.access_token("u-api", API_AUDIENCE, Signer::Published, 300);
    expect_problem(closed.anonymous().get(closed.url("/api/exports")).bearer_auth(token).send().await.unwrap(), 401, "unauthenticated").await;
    closed.stop().await;
});

/// The demo's catalog with `[authority] sql` over a `memberships` table in the source.
fn with_authority() -> Arc<Catalog> {
    let text = format!("{}\n[authority]\nsql = \"SELECT role FROM memberships WHERE org = :tenant AND subject = :subject\"\n", exportd::catalog::DEMO);
    Arc::new(exportd::catalog::parse("authority.toml", &text).expect("the catalog reads"))
}

async fn app_with_authority(backend: Backend) -> TestApp {
    let app = TestApp::start(Options {
        worker: true,
        adjust: |c| {
            c.catalog = with_authority();
            c.authority_timeout = Duration::from_millis(500);
            // Attempts enough for every retry while a test keeps the source from answering.
            c.max_attempts = 100;
        },
        ..Options::new(backend)
    })
    .await;
    app.exec("CREATE TABLE memberships (org VARCHAR NOT NULL, subject VARCHAR NOT NULL, role VARCHAR NOT NULL)").await;
    app.exec("INSERT INTO memberships VALUES ('ten_acme', 'bob@acme.test', 'analyst')").await;
    // The stored role says nothing once the catalog names the authority.
    app.exec("UPDATE users SET role = 'viewer' WHERE email = 'bob@acme.test'").await;
    app
}

on_both_backends!(a_role_taken_away_in_the_authority_source_refuses_the_next_download_and_stops_a_running_export_before_release, |backend| {
    let app = app_with_authority(backend).await;
    // Without a provider configured, its routes do not exist.
    for path in ["/auth/oidc/start", "/auth/oidc/callback?code=c&state=s", "/auth/oidc/sign-out"] {
        expect_problem(app.anonymous().get(app.url(path)).send().await.unwrap(), 404, "not-found").await;
    }
    let bob = app.login("bob@acme.test").await;
    let me: Value = bob.get(app.url("/api/session")).send().await.unwrap().json().await.unwrap();
    assert_eq!(me["role"], "analyst", "the role is the source's, not the stored one");
    let id = app.create(&bob, "first", &json!({"report": "orders"})).await.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    assert_eq!(app.wait_terminal(&bob, &id, Duration::from_secs(60)).await["status"], "ready");
    let download = format!("/api/exports/{id}/download");
    let link = bob.get(app.url(&download)).send().await.unwrap().headers()["location"].to_str().unwrap().to_owned();

    app.exec("DELETE FROM memberships WHERE subject = 'bob@acme.test'").await;
    expect_problem(bob.get(app.url(&download)).send().await.unwrap(), 403, "permission-revoked").await;
    expect_problem(bob.get(app.url(&link)).send().await.unwrap(), 403, "permission-revoked").await;
    expect_problem(app.create(&bob, "second", &json!({"report": "orders"})).await, 403, "export-not-permitted").await;
    let view: Value = bob.get(app.url(&format!("/api/exports/{id}"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(view["status"], "ready", "an active user still reads its own exports");

    // Running, held just before its release; the role goes; the release is refused.
    app.exec("INSERT INTO memberships VALUES ('ten_acme', 'bob@acme.test', 'analyst')").await;
    let mut gate = Gate::close(&app.fault("before_release"));
    let id = app.create(&bob, "third", &json!({"report": "orders"})).await.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    gate.reached().await;
    app.exec("DELETE FROM memberships WHERE subject = 'bob@acme.test'").await;
    gate.open();
    let done = app.wait_terminal(&bob, &id, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "permission_revoked");
    assert!(done["download"].is_null());

    // Held after its file is staged, before the fence: the source is asked at the fence too, and
    // nothing is published.
    app.exec("INSERT INTO memberships VALUES ('ten_acme', 'bob@acme.test', 'analyst')").await;
    let mut gate = Gate::close(&app.fault("after_staging"));
    let id = app.create(&bob, "fourth", &json!({"report": "orders"})).await.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    gate.reached().await;
    app.exec("DELETE FROM memberships WHERE subject = 'bob@acme.test'").await;
    gate.open();
    let done = app.wait_terminal(&bob, &id, Duration::from_secs(60)).await;
    assert_eq!(done["error"]["code"], "permission_revoked", "{done}");
    assert!(app.objects("exports/").iter().all(|key| !key.contains(&id)), "no file published for it: {:?}", app.objects("exports/"));
    app.stop().await;
});

on_both_backends!(an_authority_source_that_cannot_answer_is_busy_for_requests_and_a_retry_for_workers_never_a_release, |backend| {
    let app = app_with_authority(backend).await;
    let bob = app.login("bob@acme.test").await;
    let mut turnstile = Turnstile::close(&app.fault("before_release"));
    let id = app.create(&bob, "held", &json!({"report": "orders"})).await.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    assert!(turnstile.reached_within(Duration::from_secs(60)).await, "the first attempt reaches its release");
    app.exec("ALTER TABLE memberships RENAME TO memberships_away").await;
    // Reading one's own export needs only an active user (contract §2); what needs the role is busy.
    let view = bob.get(app.url(&format!("/api/exports/{id}"))).send().await.unwrap();
    assert_eq!(view.status(), 200);
    assert_eq!(view.json::<Value>().await.unwrap()["status"], "running");
    let busy = expect_problem(bob.get(app.url("/api/session")).send().await.unwrap(), 503, "busy").await;
    assert!(!busy.to_string().contains("memberships"), "no database text in a response: {busy}");
    expect_problem(app.create(&bob, "while-away", &json!({"report": "orders"})).await, 503, "busy").await;
    assert_eq!(app.scalar("SELECT COUNT(*) FROM jobs").await, 1, "nothing was created");
    // The attempt asks the source just before its release, gets no answer, and ends for a retry
    // (and so does each attempt while the source cannot answer).
    turnstile.pass();
    let ended = format!("SELECT COUNT(*) FROM job_events WHERE job_id = '{id}' AND to_status = 'retry_wait' AND detail = 'authority_unavailable'");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while app.scalar(&ended).await == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the attempt never ended for a retry");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(app.scalar(&format!("SELECT COUNT(*) FROM jobs WHERE id = '{id}' AND artifact_key IS NULL AND status <> 'ready'")).await, 1, "nothing released");
    app.exec("ALTER TABLE memberships_away RENAME TO memberships").await;
    assert!(turnstile.reached_within(Duration::from_secs(60)).await, "a later attempt comes back to its release");
    turnstile.pass();
    assert_eq!(app.wait_terminal(&bob, &id, Duration::from_secs(60)).await["status"], "ready", "the source back, the retry releases it");
    app.stop().await;
});

#[tokio::test]
async fn an_authority_query_held_by_a_lock_from_another_session_answers_busy_within_its_bound() {
    use sea_orm::{ConnectionTrait, TransactionTrait};
    let app = app_with_authority(Backend::Postgres).await;
    let bob = app.login("bob@acme.test").await;
    // Another session holds the table as psql would, inside an open transaction.
    let other = sea_orm::Database::connect(app.database_url()).await.unwrap();
    let holder = other.begin().await.unwrap();
    holder.execute_unprepared("LOCK TABLE memberships IN ACCESS EXCLUSIVE MODE").await.unwrap();
    let asked = tokio::time::Instant::now();
    expect_problem(bob.get(app.url("/api/session")).send().await.unwrap(), 503, "busy").await;
    assert!(asked.elapsed() < Duration::from_secs(10), "answered within the authority's bound, not the lock's");
    holder.rollback().await.unwrap();
    assert_eq!(bob.get(app.url("/api/session")).send().await.unwrap().status(), 200);
    app.stop().await;
}
