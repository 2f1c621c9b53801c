//! Webhooks per the Standard Webhooks specification (contract §15): a `POST` of the event's JSON
//! with `webhook-id` (the notification's id, the same on every attempt), `webhook-timestamp`
//! (the attempt's, in seconds) and `webhook-signature` (`v1,` and the base64 HMAC-SHA256 of
//! `id.timestamp.body` under each secret that signs, space separated).
//!
//! Each attempt resolves the target's name once, refuses it if any address it resolves to is not
//! global (the IANA special-purpose registries) unless `EXPORTD_WEBHOOK_ALLOW_PRIVATE` is set,
//! and connects to the address it checked: through no proxy, following no redirect, waiting at
//! most [`TIMEOUT`] in all.

use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// The longest an attempt waits, from the name's resolution to the answer's status.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// `delivered`, `rejected`, `refused`, `timeout` or `error`.
    pub outcome: &'static str,
    /// The answer's HTTP status, when there was one.
    pub status_code: Option<i32>,
    /// What went wrong, for operators.
    pub detail: Option<String>,
}

impl Attempt {
    fn failed(outcome: &'static str, detail: impl Into<String>) -> Attempt {
        Attempt { outcome, status_code: None, detail: Some(detail.into()) }
    }

    /// Whether the receiver took it.
    pub fn delivered(&self) -> bool {
        self.outcome == "delivered"
    }
}

/// Checks a webhook URL as a request names it: `https://` with a host (or `http://` too when
/// private targets are allowed), no credentials. The addresses are checked at each attempt.
pub fn target(url: &str, allow_private: bool) -> Result<url::Url, String> {
    let parsed = url::Url::parse(url).map_err(|_| "an https:// URL".to_owned())?;
    let scheme_ok = parsed.scheme() == "https" || (allow_private && parsed.scheme() == "http");
    if !scheme_ok || parsed.host_str().is_none_or(str::is_empty) {
        return Err("an https:// URL".to_owned());
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("a URL without credentials (the request is signed instead)".to_owned());
    }
    Ok(parsed)
}

/// The `v1,…` signature of one secret (`whsec_` + base64 of its bytes), or `None` for a secret
/// that does not read.
pub fn sign(secret: &str, id: &str, timestamp: i64, body: &str) -> Option<String> {
    let key = base64::engine::general_purpose::STANDARD.decode(secret.strip_prefix("whsec_")?).ok()?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).ok()?;
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body.as_bytes());
    Some(format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())))
}

/// The `webhook-signature` header: one signature per secret, space separated.
pub fn signature_header(secrets: &[String], id: &str, timestamp: i64, body: &str) -> String {
    secrets.iter().filter_map(|s| sign(s, id, timestamp, body)).collect::<Vec<_>>().join(" ")
}

/// Whether an address is global: not in any block the IANA special-purpose registries mark as not
/// globally reachable (private, loopback, link-local, shared, documentation, benchmarking,
/// multicast, reserved, unique-local, …). IPv4 inside IPv6 is judged as IPv4.
pub fn is_global(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_global_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_global_v4(v4),
            None => is_global_v6(v6),
        },
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], len: u32) -> bool {
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

fn is_global_v4(ip: Ipv4Addr) -> bool {
    const NOT_GLOBAL: [([u8; 4], u32); 16] = [
        ([0, 0, 0, 0], 8),        // "this network"
        ([10, 0, 0, 0], 8),       // private
        ([100, 64, 0, 0], 10),    // shared address space
        ([127, 0, 0, 0], 8),      // loopback
        ([169, 254, 0, 0], 16),   // link-local
        ([172, 16, 0, 0], 12),    // private
        ([192, 0, 0, 0], 24),     // IETF protocol assignments
        ([192, 0, 2, 0], 24),     // documentation
        ([192, 88, 99, 0], 24),   // 6to4 relay anycast (deprecated)
        ([192, 168, 0, 0], 16),   // private
        ([198, 18, 0, 0], 15),    // benchmarking
        ([198, 51, 100, 0], 24),  // documentation
        ([203, 0, 113, 0], 24),   // documentation
        ([224, 0, 0, 0], 4),      // multicast
        ([240, 0, 0, 0], 4),      // reserved, and the broadcast address
        ([255, 255, 255, 255], 32),
    ];
    // 192.0.0.9 and 192.0.0.10 (PCP and TURN anycast) are global within 192.0.0.0/24.
    if ip == Ipv4Addr::new(192, 0, 0, 9) || ip == Ipv4Addr::new(192, 0, 0, 10) {
        return true;
    }
    !NOT_GLOBAL.iter().any(|(net, len)| in_v4(ip, *net, *len))
}

fn in_v6(ip: Ipv6Addr, net: [u16; 8], len: u32) -> bool {
    let mask = if len == 0 { 0 } else { u128::MAX << (128 - len) };
    u128::from(ip) & mask == u128::from(Ipv6Addr::from(net)) & mask
}

fn is_global_v6(ip: Ipv6Addr) -> bool {
    const NOT_GLOBAL: [([u16; 8], u32); 12] = [
        ([0, 0, 0, 0, 0, 0, 0, 0], 128),      // unspecified
        ([0, 0, 0, 0, 0, 0, 0, 1], 128),      // loopback
        ([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48), // local-use IPv4/IPv6 translation
        ([0x100, 0, 0, 0, 0, 0, 0, 0], 64),   // discard-only
        ([0x2001, 0, 0, 0, 0, 0, 0, 0], 23),  // IETF protocol assignments
        ([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32), // documentation
        ([0x2002, 0, 0, 0, 0, 0, 0, 0], 16),  // 6to4
        ([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20),  // documentation
        ([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16),  // segment routing SIDs
        ([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7),   // unique-local
        ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10),  // link-local
        ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8),   // multicast
    ];
    // IPv4-compatible addresses (::a.b.c.d, deprecated) are judged by their IPv4 part.
    if in_v6(ip, [0; 8], 96) {
        return is_global_v4(Ipv4Addr::from((u128::from(ip) & 0xffff_ffff) as u32));
    }
    // NAT64 (64:ff9b::/96) carries an IPv4 address: judged by it.
    if in_v6(ip, [0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96) {
        return is_global_v4(Ipv4Addr::from((u128::from(ip) & 0xffff_ffff) as u32));
    }
    !NOT_GLOBAL.iter().any(|(net, len)| in_v6(ip, *net, *len))
}

/// Resolves the target's host once and picks the address to connect to: the first, after every
/// one was checked.
async fn address(url: &url::Url, allow_private: bool) -> Result<SocketAddr, Attempt> {
    let host = url.host().ok_or_else(|| Attempt::failed("refused", "the URL has no host"))?;
    let port = url.port_or_known_default().ok_or_else(|| Attempt::failed("refused", "the URL has no port"))?;
    let addresses: Vec<SocketAddr> = match host {
        url::Host::Ipv4(ip) => vec![SocketAddr::new(IpAddr::V4(ip), port)],
        url::Host::Ipv6(ip) => vec![SocketAddr::new(IpAddr::V6(ip), port)],
        url::Host::Domain(name) => tokio::net::lookup_host((name, port)).await.map_err(|e| Attempt::failed("error", format!("the name did not resolve: {e}")))?.collect(),
    };
    if !allow_private {
        if let Some(bad) = addresses.iter().find(|a| !is_global(a.ip())) {
            return Err(Attempt::failed("refused", format!("{} is not a global address (EXPORTD_WEBHOOK_ALLOW_PRIVATE is not set)", bad.ip())));
        }
    }
    addresses.first().copied().ok_or_else(|| Attempt::failed("error", "the name resolved to no address"))
}

/// Posts `body` to `url` as notification `id` at `timestamp` (seconds), signed with `secrets`.
pub async fn send(url: &str, id: &str, timestamp: i64, body: &str, secrets: &[String], allow_private: bool) -> Attempt {
    match tokio::time::timeout(TIMEOUT, attempt(url, id, timestamp, body, secrets, allow_private)).await {
        Ok(attempt) => attempt,
        Err(_) => Attempt::failed("timeout", format!("no answer in {} s", TIMEOUT.as_secs())),
    }
}

async fn attempt(url: &str, id: &str, timestamp: i64, body: &str, secrets: &[String], allow_private: bool) -> Attempt {
    let parsed = match target(url, allow_private) {
        Ok(parsed) => parsed,
        Err(problem) => return Attempt::failed("refused", format!("the target is not {problem}")),
    };
    let checked = match address(&parsed, allow_private).await {
        Ok(address) => address,
        Err(attempt) => return attempt,
    };
    let mut client = reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).timeout(TIMEOUT);
    if let Some(name) = parsed.domain() {
        // The connection goes to the address checked above, not to a second resolution's.
        client = client.resolve(name, checked);
    }
    let client = match client.build() {
        Ok(client) => client,
        Err(e) => return Attempt::failed("error", format!("the HTTP client: {e}")),
    };
    let sent = client
        .post(parsed)
        .header("content-type", "application/json")
        .header("user-agent", concat!("exportd/", env!("CARGO_PKG_VERSION")))
        .header("webhook-id", id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature_header(secrets, id, timestamp, body))
        .body(body.to_owned())
        .send()
        .await;
    match sent {
        Ok(answer) if answer.status().is_success() => Attempt { outcome: "delivered", status_code: Some(i32::from(answer.status().as_u16())), detail: None },
        Ok(answer) => {
            let status = answer.status();
            let detail = if status.is_redirection() { format!("answered {status}: redirects are not followed") } else { format!("answered {status}") };
            Attempt { outcome: "rejected", status_code: Some(i32::from(status.as_u16())), detail: Some(detail) }
        }
        Err(e) if e.is_timeout() => Attempt::failed("timeout", format!("no answer in {} s", TIMEOUT.as_secs())),
        Err(e) => Attempt::failed("error", format!("{e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_loopback_link_local_and_documentation_addresses_are_not_global() {
        for text in [
            "10.1.2.3", "127.0.0.1", "169.254.169.254", "172.16.0.1", "192.168.1.1", "100.64.0.1", "0.0.0.0", "192.0.2.5", "198.18.0.1", "224.0.0.1",
            "255.255.255.255", "::1", "::", "fe80::1", "fc00::1", "fd12::1", "2001:db8::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "64:ff9b::a00:1", "ff02::1",
        ] {
            assert!(!is_global(text.parse().unwrap()), "{text} passed as global");
        }
    }

    #[test]
    fn public_addresses_are_global() {
        for text in ["1.1.1.1", "8.8.8.8", "93.184.216.34", "192.0.0.9", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"] {
            assert!(is_global(text.parse().unwrap()), "{text} refused");
        }
    }

    #[test]
    fn the_signature_is_the_standard_webhooks_example() {
        // The example of the Standard Webhooks specification's reference libraries.
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = r#"{"test": 2432232314}"#;
        assert_eq!(sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body).as_deref(), Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="));
    }

    #[test]
    fn two_secrets_give_two_signatures_space_separated() {
        let header = signature_header(&["whsec_AAAA".to_owned(), "whsec_BBBB".to_owned()], "msg_1", 1, "{}");
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert!(parts.iter().all(|p| p.starts_with("v1,")));
        assert_ne!(parts[0], parts[1]);
    }

    #[test]
    fn http_targets_and_credentials_are_refused_unless_private_targets_are_allowed() {
        assert!(target("https://hooks.example/x", false).is_ok());
        assert!(target("http://hooks.example/x", false).is_err());
        assert!(target("http://127.0.0.1:9/x", true).is_ok());
        assert!(target("https://user:pw@hooks.example/x", false).is_err());
        assert!(target("ftp://hooks.example/x", true).is_err());
        assert!(target("not a url", false).is_err());
    }
}
