//! An OpenID Connect provider the test controls, on a real socket: discovery, JWKS, a token
//! endpoint that checks the PKCE verifier, and an end-session endpoint. Each answer of its token
//! endpoint is what the test planned: the claims, the nonce, the key that signs, the audience
//! and the expiry, so a test can send exportd the forged, expired or misaddressed tokens a real
//! provider never would. The happy path through a real provider (`oidc-provider` from npm) is
//! Playwright's (end2end/tests/oidc.spec.ts).

use axum::extract::{Form, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine;
use openidconnect::core::{CoreGenderClaim, CoreJsonWebKeySet, CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm, CoreRsaPrivateSigningKey};
use openidconnect::{Audience, EndUserEmail, IdToken, IdTokenClaims, IssuerUrl, JsonWebKeyId, Nonce, PrivateSigningKey, StandardClaims, SubjectIdentifier};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::sync::{Arc, Mutex};

/// The claims of the test's tokens beyond the standard ones.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Extra {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exportd_tenant: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exportd_role: Option<String>,
}
impl openidconnect::AdditionalClaims for Extra {}

type TestIdToken = IdToken<Extra, CoreGenderClaim, CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm>;

/// Which key signs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signer {
    /// The key the JWKS publishes.
    Published,
    /// A key the JWKS does not publish (with a kid of its own) until [`Provider::rotate`].
    Other,
}

/// What the next token answer holds.
#[derive(Debug, Clone)]
pub struct Plan {
    pub subject: String,
    pub email: Option<String>,
    pub tenant: Option<String>,
    pub role: Option<String>,
    /// `None`: the nonce of the sign-in (set by [`Provider::expect`]).
    pub nonce: Option<String>,
    pub signer: Signer,
    /// `None`: the client id.
    pub audience: Option<String>,
    /// Seconds from now to `exp` (negative: expired).
    pub expires_in: i64,
    /// `None`: this provider's issuer.
    pub issuer: Option<String>,
}

impl Plan {
    /// A good token for `subject` of `tenant` with `role`.
    pub fn good(subject: &str, tenant: &str, role: &str) -> Plan {
        Plan {
            subject: subject.into(),
            email: Some(format!("{subject}@idp.test")),
            tenant: Some(tenant.into()),
            role: Some(role.into()),
            nonce: None,
            signer: Signer::Published,
            audience: None,
            expires_in: 300,
            issuer: None,
        }
    }
}

struct Shared {
    issuer: String,
    client_id: String,
    published: CoreRsaPrivateSigningKey,
    other: CoreRsaPrivateSigningKey,
    plan: Option<Plan>,
    /// The PKCE challenge and nonce of the sign-in the test is finishing.
    challenge: Option<String>,
    nonce: Option<String>,
    /// How many times the token endpoint answered.
    token_calls: usize,
    jwks_reads: usize,
    /// Whether the JWKS publishes the other key too (a rotation under way).
    rotated: bool,
}

/// The provider, serving until dropped.
pub struct Provider {
    pub issuer: String,
    shared: Arc<Mutex<Shared>>,
    server: tokio::task::JoinHandle<()>,
}

fn key(file: &str, kid: &str) -> CoreRsaPrivateSigningKey {
    let pem = std::fs::read_to_string(format!("{}/tests/fixtures/{file}", env!("CARGO_MANIFEST_DIR"))).expect("test key");
    CoreRsaPrivateSigningKey::from_pem(&pem, Some(JsonWebKeyId::new(kid.into()))).expect("test key parses")
}

impl Provider {
    /// Starts the provider on a free port of the loopback, for the client `client_id`.
    pub async fn start(client_id: &str) -> Provider {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let issuer = format!("http://{}", listener.local_addr().expect("addr"));
        let shared = Arc::new(Mutex::new(Shared {
            issuer: issuer.clone(),
            client_id: client_id.into(),
            published: key("oidc-key-a.pem", "key-a"),
            other: key("oidc-key-b.pem", "key-b"),
            plan: None,
            challenge: None,
            nonce: None,
            token_calls: 0,
            jwks_reads: 0,
            rotated: false,
        }));
        let router = Router::new()
            .route("/.well-known/openid-configuration", get(discovery))
            .route("/jwks", get(jwks))
            .route("/token", post(token))
            .with_state(shared.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Provider { issuer, shared, server }
    }

    /// Plans the next token answer, for the sign-in whose authorization URL (exportd's redirect)
    /// is `authorize_url`: its PKCE challenge and nonce are noted. Returns the URL's `state`.
    pub fn expect(&self, authorize_url: &str, plan: Plan) -> String {
        let url = url::Url::parse(authorize_url).expect("authorization URL");
        let param = |name: &str| url.query_pairs().find(|(k, _)| k == name).map(|(_, v)| v.into_owned());
        assert_eq!(param("code_challenge_method").as_deref(), Some("S256"), "PKCE with S256");
        assert_eq!(param("response_type").as_deref(), Some("code"));
        let mut s = self.shared.lock().unwrap();
        s.challenge = param("code_challenge");
        s.nonce = param("nonce");
        s.plan = Some(plan);
        param("state").expect("a state")
    }

    /// How many tokens the token endpoint gave.
    pub fn token_calls(&self) -> usize {
        self.shared.lock().unwrap().token_calls
    }

    /// How many times the JWKS was read.
    pub fn jwks_reads(&self) -> usize {
        self.shared.lock().unwrap().jwks_reads
    }

    /// An access token for `subject` with `audience`, signed by `signer`, expiring in
    /// `expires_in` seconds.
    pub fn access_token(&self, subject: &str, audience: &str, signer: Signer, expires_in: i64) -> String {
        let s = self.shared.lock().unwrap();
        let plan = Plan { audience: Some(audience.into()), signer, expires_in, ..Plan::good(subject, "", "") };
        sign(&s, &plan, None)
    }

    /// An ID token as a sign-in would get it (with a nonce), for `subject` and `audience`.
    pub fn id_token(&self, subject: &str, audience: &str) -> String {
        let s = self.shared.lock().unwrap();
        let plan = Plan { audience: Some(audience.into()), ..Plan::good(subject, "acme", "admin") };
        sign(&s, &plan, Some("a-sign-ins-nonce"))
    }

    /// Publishes the other key beside the first, as a provider rotating its keys does.
    pub fn rotate(&self) {
        self.shared.lock().unwrap().rotated = true;
    }

    /// Stops answering: the provider is down.
    pub fn stop(&self) {
        self.server.abort();
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn sign(s: &Shared, plan: &Plan, nonce: Option<&str>) -> String {
    let now = chrono::Utc::now();
    let mut standard = StandardClaims::new(SubjectIdentifier::new(plan.subject.clone()));
    if let Some(email) = &plan.email {
        standard = standard.set_email(Some(EndUserEmail::new(email.clone())));
    }
    let extra = Extra { exportd_tenant: plan.tenant.clone().filter(|t| !t.is_empty()), exportd_role: plan.role.clone().filter(|r| !r.is_empty()) };
    let audience = plan.audience.clone().unwrap_or_else(|| s.client_id.clone());
    let claims = IdTokenClaims::new(
        IssuerUrl::new(plan.issuer.clone().unwrap_or_else(|| s.issuer.clone())).expect("issuer"),
        vec![Audience::new(audience)],
        now + chrono::Duration::seconds(plan.expires_in),
        now - chrono::Duration::seconds(600.max(-plan.expires_in + 60)),
        standard,
        extra,
    )
    .set_nonce(nonce.map(|n| Nonce::new(n.into())));
    let key = match plan.signer {
        Signer::Published => &s.published,
        Signer::Other => &s.other,
    };
    TestIdToken::new(claims, key, CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha256, None, None).expect("sign").to_string()
}

async fn discovery(State(shared): State<Arc<Mutex<Shared>>>) -> Json<Value> {
    let issuer = shared.lock().unwrap().issuer.clone();
    Json(json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/authorize"),
        "token_endpoint": format!("{issuer}/token"),
        "jwks_uri": format!("{issuer}/jwks"),
        "end_session_endpoint": format!("{issuer}/session/end"),
        "response_types_supported": ["code"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
    }))
}

async fn jwks(State(shared): State<Arc<Mutex<Shared>>>) -> Json<CoreJsonWebKeySet> {
    let mut s = shared.lock().unwrap();
    s.jwks_reads += 1;
    let mut keys = vec![s.published.as_verification_key()];
    if s.rotated {
        keys.push(s.other.as_verification_key());
    }
    Json(CoreJsonWebKeySet::new(keys))
}

async fn token(State(shared): State<Arc<Mutex<Shared>>>, Form(form): Form<Vec<(String, String)>>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let field = |name: &str| form.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let mut s = shared.lock().unwrap();
    let verifier = field("code_verifier").unwrap_or_default();
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    if s.challenge.as_deref() != Some(challenge.as_str()) {
        return (axum::http::StatusCode::BAD_REQUEST, Json(json!({"error": "invalid_grant", "error_description": "PKCE verifier"}))).into_response();
    }
    let Some(plan) = s.plan.take() else {
        return (axum::http::StatusCode::BAD_REQUEST, Json(json!({"error": "invalid_grant"}))).into_response();
    };
    s.token_calls += 1;
    let nonce = plan.nonce.clone().or_else(|| s.nonce.clone());
    let id_token = sign(&s, &plan, nonce.as_deref());
    Json(json!({"access_token": "opaque", "token_type": "Bearer", "expires_in": 300, "id_token": id_token})).into_response()
}
