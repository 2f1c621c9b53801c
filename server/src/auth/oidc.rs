//! Sign-in through the organisation's OpenID Connect provider (contract §13): discovery and the
//! JWKS, cached; the authorization code flow with PKCE (S256), `state` and `nonce`; the ID
//! token's verification (signature, `iss`, `aud`, `exp`, `nonce`); and the provider's access
//! tokens as API credentials when an audience is configured. Every call to the provider has a
//! bound, and a failure is a [`SignInFailure`] that says in words what went wrong.

use crate::config::OidcConfig;
use openidconnect::core::{CoreClient, CoreIdToken, CoreIdTokenVerifier, CoreJsonWebKeySet, CoreResponseType};
use openidconnect::{
    AuthenticationFlow, AuthorizationCode, ClientId, ClientSecret, CsrfToken, IssuerUrl, JsonWebTokenType, Nonce, PkceCodeChallenge, PkceCodeVerifier,
    ProviderMetadataWithLogout, RedirectUrl, Scope, TokenResponse,
};
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// How long any call to the provider may take.
pub const PROVIDER_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the provider's keys may be read again for a key id they do not hold (the default
/// of [`OidcConfig::keys_reread`]).
pub const JWKS_REREAD: Duration = Duration::from_secs(60);

/// How long discovery is kept before it is read again.
const DISCOVERY_TTL: Duration = Duration::from_secs(3600);

/// Why a sign-in failed, in words a user can read; nothing is created on any of them.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SignInFailure {
    /// The provider could not be reached or answered with something that is not OpenID Connect.
    #[error("the sign-in provider could not be reached; try again in a moment")]
    ProviderDown,
    /// The sign-in was not started in this browser, was used already, or took too long.
    #[error("this sign-in was not started in this browser, was used already, or took too long; start again")]
    StateMismatch,
    /// The provider said no (the user refused, or the provider refused the client).
    #[error("the provider refused the sign-in: {0}")]
    Refused(String),
    /// The ID token did not verify: its signature, issuer, audience, expiry or nonce.
    #[error("the provider's answer could not be verified ({0})")]
    Unverified(String),
    /// The claims name no tenant exportd knows, or another tenant than the user's.
    #[error("your account names no tenant of exportd ({0}); ask your administrator")]
    UnknownTenant(String),
    /// The claims name no role exportd knows.
    #[error("your account has no role in exportd ({0}); ask your administrator")]
    UnknownRole(String),
    /// The user was deactivated in exportd.
    #[error("your account is deactivated in exportd")]
    Deactivated,
    /// exportd's own database did not answer.
    #[error("exportd is busy; try again in a moment")]
    Busy,
}

/// What a started sign-in keeps until its callback.
#[derive(Debug, Clone)]
pub struct Started {
    /// Where to send the browser.
    pub url: String,
    /// `state`.
    pub state: String,
    /// `nonce`.
    pub nonce: String,
    /// The PKCE verifier.
    pub pkce_verifier: String,
}

/// Who the provider says signed in: the verified ID token's subject and claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `sub`.
    pub subject: String,
    /// `email`, when the token has one.
    pub email: Option<String>,
    /// The tenant claim, when present.
    pub tenant: Option<String>,
    /// The role claim, when present.
    pub role: Option<String>,
}

struct Discovered {
    metadata: ProviderMetadataWithLogout,
    jwks: CoreJsonWebKeySet,
    discovered_at: Instant,
    keys_read_at: Instant,
}

/// What is known of the provider: its discovery, and when reading it last failed.
#[derive(Default)]
struct Cache {
    discovered: Option<Discovered>,
    failed_at: Option<Instant>,
}

/// How long a failed discovery is remembered: callers waiting behind it fail at once instead of
/// each waiting out its own timeout.
const FAILURE_MEMORY: Duration = Duration::from_secs(5);

/// The configured provider, with its discovery and keys cached.
pub struct Provider {
    config: OidcConfig,
    http: openidconnect::reqwest::Client,
    cache: Mutex<Cache>,
}

impl Provider {
    /// The provider of `config`; nothing is fetched until first used, so a provider that is down
    /// at start is a failed sign-in later, not a failed start.
    pub fn new(config: OidcConfig) -> Result<Provider, String> {
        let http = openidconnect::reqwest::ClientBuilder::new()
            // Following redirects would let a provider's answer send exportd anywhere.
            .redirect(openidconnect::reqwest::redirect::Policy::none())
            .timeout(PROVIDER_TIMEOUT)
            .connect_timeout(PROVIDER_TIMEOUT)
            .build()
            .map_err(|e| format!("the HTTP client for the provider: {e}"))?;
        Ok(Provider { config, http, cache: Mutex::new(Cache::default()) })
    }

    /// The configuration.
    pub fn config(&self) -> &OidcConfig {
        &self.config
    }

    /// The issuer users are keyed by.
    pub fn issuer(&self) -> &str {
        &self.config.issuer
    }

    async fn discovered(&self) -> Result<(ProviderMetadataWithLogout, CoreJsonWebKeySet), SignInFailure> {
        let mut cache = self.cache.lock().await;
        if let Some(d) = cache.discovered.as_ref().filter(|d| d.discovered_at.elapsed() < DISCOVERY_TTL) {
            return Ok((d.metadata.clone(), d.jwks.clone()));
        }
        let stale = |cache: &Cache| cache.discovered.as_ref().map(|d| (d.metadata.clone(), d.jwks.clone()));
        if cache.failed_at.is_some_and(|at| at.elapsed() < FAILURE_MEMORY) {
            return stale(&cache).ok_or(SignInFailure::ProviderDown);
        }
        let issuer = IssuerUrl::new(self.config.issuer.clone()).map_err(|_| SignInFailure::ProviderDown)?;
        let found = match tokio::time::timeout(PROVIDER_TIMEOUT, ProviderMetadataWithLogout::discover_async(issuer, &self.http)).await {
            Ok(Ok(metadata)) => Some(metadata),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "OpenID Connect discovery failed");
                None
            }
            Err(_) => {
                tracing::warn!("OpenID Connect discovery gave no answer in time");
                None
            }
        };
        let Some(metadata) = found else {
            cache.failed_at = Some(Instant::now());
            // What was read an hour ago is still the provider's best word while it is down.
            return stale(&cache).ok_or(SignInFailure::ProviderDown);
        };
        let jwks = metadata.jwks().clone();
        let now = Instant::now();
        cache.failed_at = None;
        cache.discovered = Some(Discovered { metadata: metadata.clone(), jwks: jwks.clone(), discovered_at: now, keys_read_at: now });
        Ok((metadata, jwks))
    }

    /// Reads the provider's keys again, at most once a [`OidcConfig::keys_reread`]; `None` when
    /// it is too soon or the read failed (the cached keys stay).
    async fn reread_keys(&self) -> Option<CoreJsonWebKeySet> {
        let mut cache = self.cache.lock().await;
        let d = cache.discovered.as_mut()?;
        if d.keys_read_at.elapsed() < self.config.keys_reread {
            return None;
        }
        d.keys_read_at = Instant::now();
        let read = tokio::time::timeout(PROVIDER_TIMEOUT, CoreJsonWebKeySet::fetch_async(d.metadata.jwks_uri(), &self.http)).await;
        match read {
            Ok(Ok(jwks)) => {
                d.jwks = jwks.clone();
                Some(jwks)
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "reading the provider's keys failed");
                None
            }
            Err(_) => None,
        }
    }

    fn client(&self, metadata: ProviderMetadataWithLogout, jwks: CoreJsonWebKeySet) -> CoreClient<
        openidconnect::EndpointSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointMaybeSet,
        openidconnect::EndpointMaybeSet,
    > {
        let secret = self.config.client_secret.clone().map(ClientSecret::new);
        CoreClient::from_provider_metadata(metadata.set_jwks(jwks), ClientId::new(self.config.client_id.clone()), secret)
    }

    /// Starts a sign-in that comes back to `redirect_uri`.
    pub async fn start(&self, redirect_uri: &str) -> Result<Started, SignInFailure> {
        let (metadata, jwks) = self.discovered().await?;
        let redirect = RedirectUrl::new(redirect_uri.to_owned()).map_err(|_| SignInFailure::ProviderDown)?;
        let client = self.client(metadata, jwks).set_redirect_uri(redirect);
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let (url, state, nonce) = client
            .authorize_url(AuthenticationFlow::<CoreResponseType>::AuthorizationCode, CsrfToken::new_random, Nonce::new_random)
            .add_scope(Scope::new("email".into()))
            .add_scope(Scope::new("profile".into()))
            .set_pkce_challenge(challenge)
            .url();
        Ok(Started { url: url.to_string(), state: state.secret().clone(), nonce: nonce.secret().clone(), pkce_verifier: verifier.secret().clone() })
    }

    /// Finishes a sign-in: exchanges `code` (with the PKCE verifier) and verifies the ID token
    /// against `nonce`. The caller has checked `state`.
    pub async fn finish(&self, redirect_uri: &str, code: &str, nonce: &str, pkce_verifier: &str) -> Result<Identity, SignInFailure> {
        let (metadata, jwks) = self.discovered().await?;
        let redirect = RedirectUrl::new(redirect_uri.to_owned()).map_err(|_| SignInFailure::ProviderDown)?;
        let client = self.client(metadata.clone(), jwks.clone()).set_redirect_uri(redirect);
        let request = client.exchange_code(AuthorizationCode::new(code.to_owned())).map_err(|_| SignInFailure::ProviderDown)?;
        let response = tokio::time::timeout(PROVIDER_TIMEOUT, request.set_pkce_verifier(PkceCodeVerifier::new(pkce_verifier.to_owned())).request_async(&self.http))
            .await
            .map_err(|_| SignInFailure::ProviderDown)?
            .map_err(|e| match e {
                openidconnect::RequestTokenError::ServerResponse(r) => SignInFailure::Refused(r.error().to_string()),
                other => {
                    tracing::warn!(error = %other, "the provider's token endpoint failed");
                    SignInFailure::ProviderDown
                }
            })?;
        let id_token = response.id_token().ok_or_else(|| SignInFailure::Unverified("no ID token".into()))?;
        let nonce = Nonce::new(nonce.to_owned());
        let verify = |jwks: CoreJsonWebKeySet| {
            let client = self.client(metadata.clone(), jwks);
            let verifier = client.id_token_verifier();
            let subject = id_token.claims(&verifier, &nonce).map(|c| c.subject().to_string());
            subject
        };
        let subject = match verify(jwks) {
            Err(openidconnect::ClaimsVerificationError::SignatureVerification(openidconnect::SignatureVerificationError::NoMatchingKey)) => match self.reread_keys().await {
                Some(keys) => verify(keys),
                None => Err(openidconnect::ClaimsVerificationError::SignatureVerification(openidconnect::SignatureVerificationError::NoMatchingKey)),
            },
            other => other,
        }
        .map_err(|e| SignInFailure::Unverified(unverified_reason(&e)))?;
        let claims = payload(&id_token.to_string()).ok_or_else(|| SignInFailure::Unverified("unreadable claims".into()))?;
        Ok(Identity {
            subject,
            email: text_claim(&claims, "email"),
            tenant: text_claim(&claims, &self.config.tenant_claim),
            role: text_claim(&claims, &self.config.role_claim),
        })
    }

    /// The subject of a provider's access token sent as `Authorization: Bearer`, when one is
    /// accepted: an audience is configured, and the token verifies by the provider's keys
    /// with that audience, this issuer, and an `exp` after now. `None` otherwise.
    pub async fn verify_access_token(&self, token: &str) -> Option<String> {
        let audience = self.config.audience.clone()?;
        let token: CoreIdToken = token.parse().ok()?;
        let (_, keys) = self.discovered().await.ok()?;
        let issuer = IssuerUrl::new(self.config.issuer.clone()).ok()?;
        let verify = |jwks: CoreJsonWebKeySet| {
            let verifier = CoreIdTokenVerifier::new_public_client(ClientId::new(audience.clone()), issuer.clone(), jwks)
                .set_allowed_jose_types(["at+jwt", "jwt"].into_iter().filter_map(|t| JsonWebTokenType::new(t.into()).normalize().ok()));
            // An access token has no nonce: one that carries a nonce is an ID token, never an API
            // credential, whatever its audience.
            let no_nonce = |nonce: Option<&Nonce>| if nonce.is_some() { Err("an ID token is not an API credential".to_owned()) } else { Ok(()) };
            token.claims(&verifier, no_nonce).map(|c| c.subject().to_string())
        };
        match verify(keys) {
            Ok(subject) => Some(subject),
            Err(openidconnect::ClaimsVerificationError::SignatureVerification(openidconnect::SignatureVerificationError::NoMatchingKey)) => {
                verify(self.reread_keys().await?).ok()
            }
            Err(e) => {
                tracing::info!(reason = %unverified_reason(&e), "a provider's access token was refused");
                None
            }
        }
    }

    /// The provider's end-session endpoint, when its discovery names one.
    pub async fn end_session_url(&self) -> Option<String> {
        let (metadata, _) = self.discovered().await.ok()?;
        metadata.additional_metadata().end_session_endpoint.as_ref().map(|u| u.url().to_string())
    }
}

/// What failed in a verification, in words (never the token).
fn unverified_reason(e: &openidconnect::ClaimsVerificationError) -> String {
    use openidconnect::ClaimsVerificationError as E;
    match e {
        E::Expired(_) => "the token has expired".into(),
        E::InvalidAudience(_) => "the token is for another audience".into(),
        E::InvalidIssuer(_) => "the token is from another issuer".into(),
        E::InvalidNonce(_) => "the token's nonce does not match this sign-in".into(),
        E::SignatureVerification(_) => "the token's signature does not verify".into(),
        other => format!("{other}").chars().take(120).collect(),
    }
}

/// The JSON object of a compact JWT's payload (its signature verified by the caller).
fn payload(jwt: &str) -> Option<serde_json::Map<String, serde_json::Value>> {
    use base64::Engine;
    let body = jwt.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(body.trim_end_matches('=')).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// A claim that is a non-empty string.
fn text_claim(claims: &serde_json::Map<String, serde_json::Value>, name: &str) -> Option<String> {
    claims.get(name).and_then(|v| v.as_str()).map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_is_read_from_the_payload_only_when_it_is_text() {
        use base64::Engine;
        let body = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"sub":"u1","exportd_tenant":"acme","exportd_role":7,"email":" "}"#);
        let claims = payload(&format!("h.{body}.s")).unwrap_or_default();
        assert_eq!(text_claim(&claims, "exportd_tenant").as_deref(), Some("acme"));
        assert_eq!(text_claim(&claims, "exportd_role"), None, "a number is no role");
        assert_eq!(text_claim(&claims, "email"), None, "a blank email is none");
        assert!(payload("not-a-jwt").is_none());
    }
}
