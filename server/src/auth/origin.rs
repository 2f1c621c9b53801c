//! Where a request comes from, as exportd believes it (SPEC §2, §11): the origin the same-origin
//! rule compares `Origin` with, whether the user reached exportd over TLS (so the session cookie
//! is `Secure` and `__Host-`), and the client's address that login throttling keys on.
//!
//! Behind a reverse proxy, `EXPORTD_PUBLIC_ORIGIN` is the origin users reach exportd at, and
//! `EXPORTD_TRUSTED_PROXIES` the peers whose `X-Forwarded-For` and `X-Forwarded-Proto` are
//! believed; nothing else a client sends is.

use crate::config::{Config, PublicOrigin};
use crate::error::AppError;
use axum::extract::ConnectInfo;
use axum::http::{header, request::Parts, HeaderMap};
use std::net::{IpAddr, SocketAddr};

/// The TCP peer of a request, IPv4-mapped IPv6 addresses unmapped.
fn peer(parts: &Parts) -> Option<IpAddr> {
    parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(addr)| addr.ip().to_canonical())
}

fn trusted(ip: IpAddr, config: &Config) -> bool {
    config.trusted_proxies.iter().any(|net| net.contains(&ip))
}

/// Whether the request came through a trusted proxy.
fn from_trusted_proxy(parts: &Parts, config: &Config) -> bool {
    peer(parts).is_some_and(|ip| trusted(ip, config))
}

/// The request's own origin, when no public origin is configured: its `Host`, over https when
/// a trusted proxy says so (`X-Forwarded-Proto`), else http.
fn own_origin(parts: &Parts, config: &Config) -> Option<PublicOrigin> {
    let host = parts.headers.get(header::HOST)?.to_str().ok()?;
    let scheme = if forwarded_https(parts, config) { "https" } else { "http" };
    PublicOrigin::of_header(&format!("{scheme}://{host}"))
}

fn forwarded_https(parts: &Parts, config: &Config) -> bool {
    from_trusted_proxy(parts, config) && parts.headers.get("x-forwarded-proto").is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"))
}

/// The origin users reach exportd at: the public origin, or the request's own.
pub fn origin(parts: &Parts, config: &Config) -> Option<PublicOrigin> {
    config.public_origin.clone().or_else(|| own_origin(parts, config))
}

/// Whether the user reached exportd over TLS: the public origin is https, or (without one) a
/// trusted proxy says so. The session cookie is then `Secure` and `__Host-`.
pub fn over_tls(parts: &Parts, config: &Config) -> bool {
    match &config.public_origin {
        Some(origin) => origin.is_https(),
        None => forwarded_https(parts, config),
    }
}

/// Refuses a cookie-authenticated unsafe request from another origin (SPEC §2): a
/// `Sec-Fetch-Site` other than `same-origin`/`none`, or an `Origin` that is not exactly (scheme,
/// host, port) the public origin — or, without one, the request's own. A request with neither
/// header is not from a browser that would attach our cookie to a cross-site form, and passes.
pub fn require_same_origin(parts: &Parts, config: &Config) -> Result<(), AppError> {
    if let Some(site) = parts.headers.get("sec-fetch-site") {
        let site = site.to_str().unwrap_or("");
        if site != "same-origin" && site != "none" {
            return Err(AppError::CrossOrigin);
        }
    }
    if let Some(origin) = parts.headers.get(header::ORIGIN) {
        let sent = origin.to_str().ok().and_then(PublicOrigin::of_header);
        let ours = config.public_origin.clone().or_else(|| own_origin(parts, config));
        if sent.is_none() || sent != ours {
            return Err(AppError::CrossOrigin);
        }
    }
    Ok(())
}

/// The client's address (SPEC §11): the TCP peer, unless it is a trusted proxy; then the
/// right-most address of `X-Forwarded-For` that is not a trusted proxy (each proxy appends the
/// address it was reached from, so everything left of the first untrusted hop is the client's to
/// invent). IPv4-mapped IPv6 addresses are unmapped.
pub fn client_ip(parts: &Parts, config: &Config) -> Option<IpAddr> {
    let peer = peer(parts)?;
    if !trusted(peer, config) {
        return Some(peer);
    }
    let hops = forwarded_for(&parts.headers);
    let mut client = peer;
    for hop in hops.iter().rev() {
        match hop {
            Some(ip) => {
                client = *ip;
                if !trusted(*ip, config) {
                    return Some(client);
                }
            }
            // Not an address: a trusted proxy would not have written it; what is left of it is
            // the client's, and the last trusted hop is all that is known.
            None => return Some(client),
        }
    }
    Some(client)
}

/// The addresses of every `X-Forwarded-For` header, in order; `None` for an entry that is not
/// an address (with or without a port).
fn forwarded_for(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    headers
        .get_all("x-forwarded-for")
        .iter()
        .flat_map(|v| v.to_str().unwrap_or("\u{0}").split(',').map(str::trim).map(str::to_owned).collect::<Vec<_>>())
        .map(|hop| hop.parse::<IpAddr>().ok().or_else(|| hop.parse::<SocketAddr>().ok().map(|s| s.ip())).map(|ip| ip.to_canonical()))
        .collect()
}

/// What login throttling keys a client by: an IPv4 address, or an IPv6 address's /64 (one
/// subscriber's network, which rotates its low 64 bits at will).
pub fn throttle_address(ip: Option<IpAddr>) -> String {
    match ip {
        Some(IpAddr::V6(v6)) => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
        Some(IpAddr::V4(v4)) => v4.to_string(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Request;

    fn config(trusted: &str, public: Option<&str>) -> Config {
        let mut c = Config::defaults("sqlite::memory:", "file://objects");
        c.trusted_proxies = crate::config::trusted_proxies(trusted).unwrap();
        c.public_origin = public.map(|p| PublicOrigin::parse(p).unwrap());
        c
    }

    fn parts(peer: &str, headers: &[(&str, &str)]) -> Parts {
        let mut req = Request::builder().uri("/api/session");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let (mut parts, _) = req.body(()).unwrap().into_parts();
        parts.extensions.insert(ConnectInfo(peer.parse::<SocketAddr>().unwrap()));
        parts
    }

    #[test]
    fn the_client_is_the_right_most_forwarded_address_that_is_not_a_trusted_proxy() {
        let c = config("10.0.0.0/8, 127.0.0.1", None);
        let ip = |p: &Parts| client_ip(p, &c).unwrap().to_string();
        assert_eq!(ip(&parts("10.1.2.3:5000", &[("x-forwarded-for", "6.6.6.6, 203.0.113.9, 10.0.0.7")])), "203.0.113.9");
        assert_eq!(ip(&parts("10.1.2.3:5000", &[("x-forwarded-for", "6.6.6.6"), ("x-forwarded-for", "203.0.113.9")])), "203.0.113.9");
        // An untrusted peer's header is not believed.
        assert_eq!(ip(&parts("198.51.100.1:5000", &[("x-forwarded-for", "6.6.6.6")])), "198.51.100.1");
        // Garbage left of the first untrusted hop is never reached; garbage right of it stops the walk.
        assert_eq!(ip(&parts("127.0.0.1:5000", &[("x-forwarded-for", "not-an-ip, 203.0.113.9")])), "203.0.113.9");
        assert_eq!(ip(&parts("127.0.0.1:5000", &[("x-forwarded-for", "203.0.113.9, not-an-ip")])), "127.0.0.1");
        assert_eq!(ip(&parts("[::ffff:10.0.0.1]:5000", &[("x-forwarded-for", "::ffff:203.0.113.9")])), "203.0.113.9");
        assert_eq!(ip(&parts("127.0.0.1:5000", &[])), "127.0.0.1");
    }

    #[test]
    fn ipv6_clients_are_throttled_by_their_slash_64_and_mapped_ipv4_as_ipv4() {
        let a = throttle_address("2001:db8:1:2:aaaa::1".parse().ok());
        let b = throttle_address("2001:db8:1:2:bbbb:cccc:dddd:eeee".parse().ok());
        assert_eq!(a, b);
        assert_eq!(a, "2001:db8:1:2::/64");
        assert_ne!(a, throttle_address("2001:db8:1:3::1".parse().ok()));
        assert_eq!(throttle_address("203.0.113.9".parse().ok()), "203.0.113.9");
    }

    #[test]
    fn the_origin_is_compared_exactly_with_the_public_one_behind_a_proxy_that_rewrites_host() {
        let c = config("127.0.0.1", Some("https://exports.example.com"));
        let check = |origin: &str| require_same_origin(&parts("127.0.0.1:1", &[("host", "127.0.0.1:3000"), ("origin", origin)]), &c).is_ok();
        assert!(check("https://exports.example.com"));
        assert!(check("https://EXPORTS.example.com:443"));
        assert!(!check("http://exports.example.com"), "another scheme");
        assert!(!check("https://exports.example.com:8443"), "another port");
        assert!(!check("https://evil.example"));
        assert!(!check("null"));
        let own = config("", None);
        let check = |origin: &str, host: &str| require_same_origin(&parts("127.0.0.1:1", &[("host", host), ("origin", origin)]), &own).is_ok();
        assert!(check("http://127.0.0.1:3000", "127.0.0.1:3000"));
        assert!(check("http://localhost", "localhost:80"));
        assert!(!check("https://127.0.0.1:3000", "127.0.0.1:3000"), "without a trusted proxy saying so, the request came over http");
    }

    #[test]
    fn tls_is_the_public_origins_scheme_or_a_trusted_proxys_word() {
        let behind = config("127.0.0.1", None);
        assert!(over_tls(&parts("127.0.0.1:1", &[("x-forwarded-proto", "https")]), &behind));
        assert!(!over_tls(&parts("203.0.113.9:1", &[("x-forwarded-proto", "https")]), &behind), "anyone can send the header");
        assert!(over_tls(&parts("203.0.113.9:1", &[]), &config("", Some("https://exports.example.com"))));
        assert!(PublicOrigin::parse("https://exports.example.com/path").is_none());
        assert!(PublicOrigin::parse("ftp://exports.example.com").is_none());
    }
}
