//! One typed configuration, read once at start from the flags and the variables of SPEC §9.

use crate::cli::{GlobalArgs, WorkerArgs};
use std::collections::BTreeMap;
use std::time::Duration;

/// Everything a process of exportd is configured with.
#[derive(Debug, Clone)]
pub struct Config {
    /// `sqlite://…` or `postgres://…`.
    pub database_url: String,
    /// The default object store URL.
    pub store_url: String,
    /// The stores of single deployments (`EXPORTD_STORE_<DEPLOYMENT>`), by deployment in lower
    /// case: a deployment named here is written to and read from only its own store.
    pub deployment_stores: BTreeMap<String, String>,
    /// A fixed link-signing secret (`EXPORTD_SIGNING_KEY`, at least 32 bytes); unset: keys from
    /// the database.
    pub signing_key: Option<String>,
    /// The origin users reach exportd at behind a proxy (`EXPORTD_PUBLIC_ORIGIN`); unset: each
    /// request's own.
    pub public_origin: Option<PublicOrigin>,
    /// The peers whose `X-Forwarded-For` and `X-Forwarded-Proto` are believed
    /// (`EXPORTD_TRUSTED_PROXIES`); empty: the TCP peer is the client.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// How long a claim lasts without a heartbeat.
    pub lease: Duration,
    /// How long a minted download link works.
    pub link_ttl: Duration,
    /// How long a published file is kept.
    pub artifact_ttl: Duration,
    /// How long an operation record (and so its key) is kept.
    pub record_ttl: Duration,
    /// How long a job may wait for a worker.
    pub queue_ttl: Duration,
    /// Rows per part of a checkpointed export, fixed at its first claim (`EXPORTD_PART_ROWS`,
    /// default 1,000,000).
    pub part_rows: u64,
    /// How long a running attempt may go without progress (rows, bytes uploaded, digest read,
    /// copy) before its worker ends it `stalled`; the janitor ends it after this plus a lease
    /// (`EXPORTD_STALL_SECS`, default 300).
    pub stall: Duration,
    /// Claims per job before it fails.
    pub max_attempts: i32,
    /// Unfinished exports per actor before 429.
    pub max_active_per_actor: u64,
    /// The backoff after a first failed attempt; it doubles with each attempt
    /// (`EXPORTD_RETRY_BASE_MS`, default 1000).
    pub retry_base: Duration,
    /// How often the janitor applies its rules (`EXPORTD_JANITOR_MS`, default 5000).
    pub janitor_every: Duration,
    /// How often each scheduler loop looks for due schedules (`EXPORTD_SCHEDULER_MS`, default 1000).
    pub scheduler_every: Duration,
    /// How many missed windows of a schedule run after downtime, the latest, oldest first
    /// (`EXPORTD_SCHEDULE_CATCH_UP`, default 3).
    pub schedule_catch_up: usize,
    /// How notifications of finished operations are delivered (contract §15).
    pub notify: NotifyConfig,
    /// How often the janitor also sweeps the object stores (`EXPORTD_SWEEP_MS`, default 60000).
    pub sweep_every: Duration,
    /// How much older than a lease an object under `exports/` that no finished job points at
    /// must be before the janitor deletes it (`EXPORTD_ORPHAN_MARGIN_SECS`, default 60).
    pub orphan_margin: Duration,
    /// The most PostgreSQL connections one worker process opens (`EXPORTD_DB_CONNECTIONS`,
    /// default 32): its jobs are limited to what fits (see [`crate::db::jobs_within`]), so that
    /// two workers and an API process stay within PostgreSQL's default `max_connections`.
    pub worker_connections: u32,
    /// The largest upload for an import (`EXPORTD_MAX_UPLOAD_BYTES`, default 1 GiB).
    pub max_upload_bytes: u64,
    /// How long an upload no unfinished import names is kept after its last use
    /// (`EXPORTD_UPLOAD_TTL_SECS`, default 86,400).
    pub upload_ttl: Duration,
    /// Rows per batch of an import's apply (`EXPORTD_IMPORT_BATCH_ROWS`, default 1,000).
    pub import_batch_rows: u64,
    /// The folder the built page (`pkg/`) is served from (`LEPTOS_SITE_ROOT`); unset, the files
    /// inside the binary when it carries them, else `target/site` (see `site_assets`).
    pub site_root: Option<String>,
    /// The catalog of reports and datasets (`EXPORTD_CATALOG`, else the built-in one).
    pub catalog: std::sync::Arc<crate::catalog::Catalog>,
    /// `EXPORTD_SOURCE_URL`: the database the catalog's SQL runs on; `None`: the job store's.
    pub source_url: Option<String>,
    /// `EXPORTD_SOURCE_READ_URL`: a read-only role on the source for exports; `None`: the
    /// source's URL.
    pub source_read_url: Option<String>,
    /// Sign-in through the organisation's OpenID Connect provider (contract §13); `None`
    /// without `EXPORTD_OIDC_ISSUER`.
    pub oidc: Option<OidcConfig>,
    /// How long one query of the catalog's `[authority] sql` may take
    /// (`EXPORTD_AUTHORITY_TIMEOUT_MS`, default 2,000).
    pub authority_timeout: Duration,
}

/// The organisation's OpenID Connect provider (`EXPORTD_OIDC_*`).
#[derive(Debug, Clone)]
pub struct OidcConfig {
    /// `EXPORTD_OIDC_ISSUER`: https, or http on the loopback with `EXPORTD_OIDC_ALLOW_HTTP=1`.
    pub issuer: String,
    /// `EXPORTD_OIDC_CLIENT_ID`.
    pub client_id: String,
    /// `EXPORTD_OIDC_CLIENT_SECRET`; without one exportd is a public client (PKCE alone).
    pub client_secret: Option<String>,
    /// `EXPORTD_OIDC_NAME`: the button says "Sign in with NAME" (default: the issuer's host).
    pub name: String,
    /// `EXPORTD_OIDC_TENANT_CLAIM` (default `exportd_tenant`): the claim naming the tenant's slug.
    pub tenant_claim: String,
    /// `EXPORTD_OIDC_ROLE_CLAIM` (default `exportd_role`): the claim naming the role.
    pub role_claim: String,
    /// `EXPORTD_OIDC_AUDIENCE`: the audience of access tokens accepted as API credentials; no
    /// default, and never the client id (an ID token is never an API credential).
    pub audience: Option<String>,
    /// How often the provider's keys may be read again for a key id they do not hold: a minute
    /// (contract §13); no variable sets it, a test may.
    pub keys_reread: Duration,
}

/// The most jobs one worker process runs at once: each holds a database connection for its
/// snapshot, beside the worker's few for heartbeats and transitions.
pub const MAX_CONCURRENCY: usize = 64;

/// What a worker serves.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Deployments served, in lower case (names compare case-insensitively); empty = all.
    pub deployments: Vec<String>,
    /// Jobs at once (1–64).
    pub concurrency: usize,
}

/// A variable that is set but not valid.
#[derive(Debug, thiserror::Error)]
#[error("{name} must be {expected}, got {value:?}")]
pub struct BadVariable {
    name: &'static str,
    value: String,
    expected: &'static str,
}

fn number(name: &'static str, default: u64) -> Result<u64, BadVariable> {
    match std::env::var(name) {
        Ok(value) if !value.trim().is_empty() => value.trim().parse().map_err(|_| BadVariable { name, value, expected: "a whole number" }),
        _ => Ok(default),
    }
}

/// The shortest `EXPORTD_SIGNING_KEY` accepted: an HMAC-SHA256 key of fewer bytes is guessable.
pub const SIGNING_KEY_MIN_BYTES: usize = 32;

/// `EXPORTD_TRUSTED_PROXIES`: CIDRs (or single addresses) separated by commas or spaces.
pub fn trusted_proxies(value: &str) -> Result<Vec<ipnet::IpNet>, BadVariable> {
    value
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<ipnet::IpNet>().or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from)).map_err(|_| BadVariable {
                name: "EXPORTD_TRUSTED_PROXIES",
                value: value.to_owned(),
                expected: "a list of CIDRs such as 10.0.0.0/8, 127.0.0.1",
            })
        })
        .collect()
}

impl Config {
    /// Reads the flags and the variables.
    pub fn from_args(global: &GlobalArgs) -> Result<Config, BadVariable> {
        Ok(Config {
            database_url: global.database_url.clone(),
            store_url: global.store.clone(),
            deployment_stores: deployment_stores(std::env::vars()),
            signing_key: match std::env::var("EXPORTD_SIGNING_KEY").ok().filter(|k| !k.is_empty()) {
                Some(key) if key.len() < SIGNING_KEY_MIN_BYTES => {
                    return Err(BadVariable { name: "EXPORTD_SIGNING_KEY", value: "(hidden)".into(), expected: "at least 32 bytes" })
                }
                key => key,
            },
            public_origin: match std::env::var("EXPORTD_PUBLIC_ORIGIN").ok().filter(|v| !v.trim().is_empty()) {
                Some(value) => Some(PublicOrigin::parse(value.trim()).ok_or(BadVariable {
                    name: "EXPORTD_PUBLIC_ORIGIN",
                    value,
                    expected: "an origin such as https://exports.example.com (scheme, host and optional port; no path)",
                })?),
                None => None,
            },
            trusted_proxies: trusted_proxies(&std::env::var("EXPORTD_TRUSTED_PROXIES").unwrap_or_default())?,
            lease: Duration::from_secs(number("EXPORTD_LEASE_SECS", 30)?),
            link_ttl: Duration::from_secs(number("EXPORTD_LINK_TTL_SECS", 300)?),
            artifact_ttl: Duration::from_secs(number("EXPORTD_ARTIFACT_TTL_SECS", 86_400)?),
            record_ttl: Duration::from_secs(number("EXPORTD_RECORD_TTL_SECS", 2_592_000)?),
            queue_ttl: Duration::from_secs(number("EXPORTD_QUEUE_TTL_SECS", 86_400)?),
            stall: Duration::from_secs(number("EXPORTD_STALL_SECS", 300)?.max(1)),
            part_rows: number("EXPORTD_PART_ROWS", 1_000_000)?.max(1),
            max_attempts: i32::try_from(number("EXPORTD_MAX_ATTEMPTS", 5)?).unwrap_or(i32::MAX),
            max_active_per_actor: number("EXPORTD_MAX_ACTIVE_PER_ACTOR", 10)?,
            retry_base: Duration::from_millis(number("EXPORTD_RETRY_BASE_MS", 1000)?.max(1)),
            janitor_every: Duration::from_millis(number("EXPORTD_JANITOR_MS", 5000)?.max(10)),
            scheduler_every: Duration::from_millis(number("EXPORTD_SCHEDULER_MS", 1000)?.max(10)),
            // At least the window just due.
            schedule_catch_up: number("EXPORTD_SCHEDULE_CATCH_UP", 3)?.max(1) as usize,
            notify: NotifyConfig {
                retry: Duration::from_secs(number("EXPORTD_WEBHOOK_RETRY_SECS", 5)?.max(1)),
                allow_private: std::env::var("EXPORTD_WEBHOOK_ALLOW_PRIVATE").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true")),
                smtp_url: std::env::var("EXPORTD_SMTP_URL").ok().filter(|v| !v.trim().is_empty()),
                smtp_from: std::env::var("EXPORTD_SMTP_FROM").ok().filter(|v| !v.trim().is_empty()),
                every: Duration::from_millis(number("EXPORTD_NOTIFY_MS", 1000)?.max(10)),
            },
            sweep_every: Duration::from_millis(number("EXPORTD_SWEEP_MS", 60_000)?),
            orphan_margin: Duration::from_secs(number("EXPORTD_ORPHAN_MARGIN_SECS", 60)?),
            worker_connections: u32::try_from(number("EXPORTD_DB_CONNECTIONS", 32)?).unwrap_or(u32::MAX),
            max_upload_bytes: number("EXPORTD_MAX_UPLOAD_BYTES", 1 << 30)?,
            upload_ttl: Duration::from_secs(number("EXPORTD_UPLOAD_TTL_SECS", 86_400)?),
            import_batch_rows: number("EXPORTD_IMPORT_BATCH_ROWS", 1000)?.max(1),
            site_root: std::env::var("LEPTOS_SITE_ROOT").ok().filter(|v| !v.is_empty()),
            // The catalog named by EXPORTD_CATALOG is read and checked by the command that needs
            // it (`serve`, `worker`), which reports every error; until then, the built-in one.
            catalog: crate::catalog::Catalog::builtin(),
            source_url: std::env::var("EXPORTD_SOURCE_URL").ok().filter(|v| !v.is_empty()),
            source_read_url: std::env::var("EXPORTD_SOURCE_READ_URL").ok().filter(|v| !v.is_empty()),
            oidc: OidcConfig::from_env(|name| std::env::var(name).ok().map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()))?,
            authority_timeout: Duration::from_millis(number("EXPORTD_AUTHORITY_TIMEOUT_MS", crate::auth::authority::DEFAULT_TIMEOUT.as_millis() as u64)?.max(1)),
        })
    }

    /// The configuration of SPEC §9's defaults on `database_url` and `store_url`, as a process
    /// with no variables set would run (tests change what they need).
    pub fn defaults(database_url: &str, store_url: &str) -> Config {
        Config {
            database_url: database_url.to_owned(),
            store_url: store_url.to_owned(),
            deployment_stores: BTreeMap::new(),
            signing_key: None,
            public_origin: None,
            trusted_proxies: Vec::new(),
            lease: Duration::from_secs(30),
            link_ttl: Duration::from_secs(300),
            artifact_ttl: Duration::from_secs(86_400),
            record_ttl: Duration::from_secs(2_592_000),
            queue_ttl: Duration::from_secs(86_400),
            stall: Duration::from_secs(300),
            part_rows: 1_000_000,
            max_attempts: 5,
            max_active_per_actor: 10,
            retry_base: Duration::from_millis(1000),
            janitor_every: Duration::from_millis(5000),
            scheduler_every: Duration::from_millis(1000),
            schedule_catch_up: 3,
            notify: NotifyConfig::default(),
            sweep_every: Duration::from_millis(60_000),
            orphan_margin: Duration::from_secs(60),
            worker_connections: 32,
            max_upload_bytes: 1 << 30,
            upload_ttl: Duration::from_secs(86_400),
            import_batch_rows: 1000,
            site_root: None,
            catalog: crate::catalog::Catalog::builtin(),
            source_url: None,
            source_read_url: None,
            oidc: None,
            authority_timeout: crate::auth::authority::DEFAULT_TIMEOUT,
        }
    }

    /// The source's URL when it is a database apart from the job store: imports then keep the
    /// ledger of their batches in it (contract §12).
    pub fn source_apart(&self) -> Option<&str> {
        self.source_url.as_deref().filter(|url| *url != self.database_url)
    }

    /// The URL exports read: `EXPORTD_SOURCE_READ_URL`, else the source's, else the job store's.
    pub fn export_source_url(&self) -> &str {
        self.source_read_url.as_deref().or(self.source_url.as_deref()).unwrap_or(&self.database_url)
    }

    /// The store URL of one deployment: its own (`EXPORTD_STORE_<DEPLOYMENT>`), else the default.
    pub fn store_url_for(&self, deployment: &str) -> String {
        self.deployment_stores.get(&deployment.to_ascii_lowercase()).cloned().unwrap_or_else(|| self.store_url.clone())
    }
}

impl OidcConfig {
    /// Reads `EXPORTD_OIDC_*` through `var` (a variable that is unset or blank gives `None`);
    /// `None` without an issuer.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Option<OidcConfig>, BadVariable> {
        let Some(issuer) = var("EXPORTD_OIDC_ISSUER") else { return Ok(None) };
        let bad = |name: &'static str, value: &str, expected: &'static str| BadVariable { name, value: value.to_owned(), expected };
        let url = url::Url::parse(&issuer).map_err(|_| bad("EXPORTD_OIDC_ISSUER", &issuer, "the provider's issuer URL"))?;
        let loopback = match url.host() {
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            Some(url::Host::Domain(name)) => name == "localhost",
            None => false,
        };
        let allow_http = var("EXPORTD_OIDC_ALLOW_HTTP").is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
        match url.scheme() {
            "https" => {}
            "http" if loopback && allow_http => {}
            _ => return Err(bad("EXPORTD_OIDC_ISSUER", &issuer, "an https URL (http only on the loopback, with EXPORTD_OIDC_ALLOW_HTTP=1)")),
        }
        let client_id = var("EXPORTD_OIDC_CLIENT_ID").ok_or_else(|| bad("EXPORTD_OIDC_CLIENT_ID", "", "set when EXPORTD_OIDC_ISSUER is"))?;
        let audience = var("EXPORTD_OIDC_AUDIENCE");
        if audience.as_deref() == Some(client_id.as_str()) {
            return Err(bad("EXPORTD_OIDC_AUDIENCE", &client_id, "an audience other than the client id, so an ID token is never an API credential"));
        }
        Ok(Some(OidcConfig {
            name: var("EXPORTD_OIDC_NAME").unwrap_or_else(|| url.host_str().unwrap_or("your provider").to_owned()),
            issuer,
            client_id,
            client_secret: var("EXPORTD_OIDC_CLIENT_SECRET"),
            tenant_claim: var("EXPORTD_OIDC_TENANT_CLAIM").unwrap_or_else(|| "exportd_tenant".to_owned()),
            role_claim: var("EXPORTD_OIDC_ROLE_CLAIM").unwrap_or_else(|| "exportd_role".to_owned()),
            audience,
            keys_reread: crate::auth::oidc::JWKS_REREAD,
        }))
    }
}

/// The `EXPORTD_STORE_<DEPLOYMENT>` variables among `vars`, by deployment in lower case.
pub fn deployment_stores(vars: impl IntoIterator<Item = (String, String)>) -> BTreeMap<String, String> {
    vars.into_iter()
        .filter_map(|(name, value)| {
            let deployment = name.strip_prefix("EXPORTD_STORE_")?;
            (!deployment.is_empty() && !value.trim().is_empty()).then(|| (deployment.to_ascii_lowercase(), value.trim().to_owned()))
        })
        .collect()
}

impl WorkerConfig {
    /// From the worker flags.
    pub fn from_args(args: &WorkerArgs) -> WorkerConfig {
        WorkerConfig {
            deployments: args.deployments.iter().map(|d| d.trim().to_ascii_lowercase()).filter(|d| !d.is_empty()).collect(),
            concurrency: usize::from(args.concurrency).clamp(1, MAX_CONCURRENCY),
        }
    }

    /// Whether this worker serves `deployment`.
    pub fn serves(&self, deployment: &str) -> bool {
        self.deployments.is_empty() || self.deployments.iter().any(|d| d.eq_ignore_ascii_case(deployment))
    }
}

/// How notifications are delivered (contract §15).
#[derive(Debug, Clone)]
pub struct NotifyConfig {
    /// The first wait before a webhook is tried again, doubling (`EXPORTD_WEBHOOK_RETRY_SECS`,
    /// default 5); an email waits the same.
    pub retry: Duration,
    /// `EXPORTD_WEBHOOK_ALLOW_PRIVATE=1`: webhooks may go to `http://` and to private, loopback
    /// and other non-global addresses (tests, closed networks).
    pub allow_private: bool,
    /// The SMTP server emails go through (`EXPORTD_SMTP_URL`); unset: emails are not sent and
    /// a request that asks for one is refused.
    pub smtp_url: Option<String>,
    /// The sender of emails (`EXPORTD_SMTP_FROM`).
    pub smtp_from: Option<String>,
    /// How often each delivery loop looks for notifications due (`EXPORTD_NOTIFY_MS`, default 1000).
    pub every: Duration,
}

impl Default for NotifyConfig {
    fn default() -> NotifyConfig {
        NotifyConfig { retry: Duration::from_secs(5), allow_private: false, smtp_url: None, smtp_from: None, every: Duration::from_millis(1000) }
    }
}

/// An origin: scheme, host and port, compared exactly (RFC 6454).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicOrigin {
    scheme: String,
    host: String,
    port: u16,
}

impl PublicOrigin {
    /// Parses `https://exports.example.com[:port]`: an http or https URL with no path, query or
    /// credentials.
    pub fn parse(value: &str) -> Option<PublicOrigin> {
        let url = url::Url::parse(value).ok()?;
        let bare = matches!(url.path(), "" | "/") && url.query().is_none() && url.fragment().is_none() && url.username().is_empty() && url.password().is_none();
        if !bare || !matches!(url.scheme(), "http" | "https") {
            return None;
        }
        PublicOrigin::of_url(&url)
    }

    fn of_url(url: &url::Url) -> Option<PublicOrigin> {
        Some(PublicOrigin { scheme: url.scheme().to_owned(), host: url.host_str()?.to_ascii_lowercase(), port: url.port_or_known_default()? })
    }

    /// The origin an `Origin` header names; `None` for `null` or anything that is not one.
    pub(crate) fn of_header(value: &str) -> Option<PublicOrigin> {
        url::Url::parse(value).ok().and_then(|u| PublicOrigin::of_url(&u))
    }

    /// Whether users reach exportd over TLS at this origin.
    pub fn is_https(&self) -> bool {
        self.scheme == "https"
    }
}

impl std::fmt::Display for PublicOrigin {
    /// `scheme://host:port`, the port left out when it is the scheme's own.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let default = if self.is_https() { 443 } else { 80 };
        if self.port == default {
            write!(f, "{}://{}", self.scheme, self.host)
        } else {
            write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::OidcConfig;

    fn read(vars: &[(&str, &str)]) -> Result<Option<OidcConfig>, String> {
        let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        OidcConfig::from_env(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())).map_err(|e| e.to_string())
    }

    #[test]
    fn a_provider_is_https_and_plain_http_only_on_the_loopback_when_allowed() {
        assert!(read(&[]).unwrap().is_none(), "no issuer, no provider");
        let ok = read(&[("EXPORTD_OIDC_ISSUER", "https://id.example.com/realms/a"), ("EXPORTD_OIDC_CLIENT_ID", "exportd")]).unwrap().unwrap();
        assert_eq!((ok.name.as_str(), ok.tenant_claim.as_str(), ok.role_claim.as_str()), ("id.example.com", "exportd_tenant", "exportd_role"));
        assert!(read(&[("EXPORTD_OIDC_ISSUER", "http://127.0.0.1:9000"), ("EXPORTD_OIDC_CLIENT_ID", "x")]).is_err(), "http needs the switch");
        assert!(read(&[("EXPORTD_OIDC_ISSUER", "http://id.example.com"), ("EXPORTD_OIDC_CLIENT_ID", "x"), ("EXPORTD_OIDC_ALLOW_HTTP", "1")]).is_err(), "and the loopback");
        assert!(read(&[("EXPORTD_OIDC_ISSUER", "http://127.0.0.1:9000"), ("EXPORTD_OIDC_CLIENT_ID", "x"), ("EXPORTD_OIDC_ALLOW_HTTP", "1")]).unwrap().is_some());
        assert!(read(&[("EXPORTD_OIDC_ISSUER", "https://id.example.com")]).is_err(), "a client id is required");
    }

    #[test]
    fn the_api_audience_may_not_be_the_client_id_so_an_id_token_is_never_an_api_credential() {
        let base = [("EXPORTD_OIDC_ISSUER", "https://id.example.com"), ("EXPORTD_OIDC_CLIENT_ID", "exportd")];
        let same = read(&[base[0], base[1], ("EXPORTD_OIDC_AUDIENCE", "exportd")]);
        assert!(same.unwrap_err().contains("EXPORTD_OIDC_AUDIENCE"));
        let other = read(&[base[0], base[1], ("EXPORTD_OIDC_AUDIENCE", "exportd-api")]).unwrap().unwrap();
        assert_eq!(other.audience.as_deref(), Some("exportd-api"));
    }
}
