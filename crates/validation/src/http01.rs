//! http-01 (RFC 8555 §8.3): fetch the key authorization over plain HTTP.

use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use acme_core::identifier::{Identifier, IdentifierKind};
use acme_core::problem::{Problem, ProblemType};
use reqwest::redirect;
use url::Host;

use crate::address_policy::AddressPolicy;
use crate::failure::Failure;
use crate::quote::quote_prefix;
use crate::resolver::{PolicyResolver, ResolveProblem};
use crate::validator::Inner;

pub(crate) async fn validate(
    inner: &Inner,
    identifier: &Identifier,
    token: &str,
    key_authorization: &str,
) -> Result<(), Failure> {
    let settings = &inner.settings;
    let (host, pinned) = match identifier.kind() {
        IdentifierKind::Dns => {
            let name = identifier.base_name();
            let ips = inner.dns.lookup_ips(name).await.map_err(|f| {
                f.map_problem(|p| prefix(p, &url_for(name, settings.http_port, token)))
            })?;
            (name.to_owned(), Some(ips))
        }
        IdentifierKind::Ip => {
            let ip = ip_of(identifier)?;
            inner.policy.check_identifier(ip)?;
            let host = match ip {
                IpAddr::V4(v4) => v4.to_string(),
                IpAddr::V6(v6) => format!("[{v6}]"),
            };
            (host, None)
        }
    };
    let url = url_for(&host, settings.http_port, token);
    let connect_budget = settings.connect_budget();

    // No overall reqwest timeout: the caller bounds the whole attempt. The connect timeout is
    // shared among a name's addresses (hyper gives each an equal part), so a silent first address
    // leaves time for the next.
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .redirect(redirect_policy(inner, identifier.kind()))
        .connect_timeout(connect_budget)
        .tls_danger_accept_invalid_certs(true)
        .user_agent(concat!("Certeasy-validation/", env!("CARGO_PKG_VERSION")))
        .dns_resolver(PolicyResolver::new(inner.dns.clone()));
    if let Some(ips) = pinned {
        // The first request uses exactly the addresses just resolved; redirects resolve afresh
        // through the same policy.
        let addrs: Vec<SocketAddr> = ips.into_iter().map(|ip| SocketAddr::new(ip, 0)).collect();
        builder = builder.resolve_to_addrs(&host, &addrs);
    }
    let client = builder.build().map_err(|e| {
        Problem::new(
            ProblemType::ServerInternal,
            format!("building the http-01 client failed: {e}"),
        )
    })?;

    let mut response = client
        .get(&url)
        .send()
        .await
        .map_err(|e| request_problem(&url, &e, connect_budget))?;
    let final_url = response.url().to_string();
    // Content served by another host than the identifier's (after a redirect) is never quoted:
    // the redirect could have led anywhere the subscriber may not read.
    let same_host = response.url().host_str() == Some(host.as_str());
    let status = response.status();
    if status != reqwest::StatusCode::OK {
        let problem = Problem::new(
            ProblemType::IncorrectResponse,
            format!(
                "Fetching {final_url}: the server answered {status}; it must answer 200 with the key authorization"
            ),
        );
        // A 5xx is the server failing (a proxy whose backend restarts, an overloaded host): it
        // may answer next time. Any other status is the server's answer about the file (404:
        // not in place), and the subscriber puts the file in place before asking.
        return Err(if status.is_server_error() {
            Failure::transient(problem)
        } else {
            Failure::definite(problem)
        });
    }
    let limit = settings.max_body_bytes;
    let too_large = || {
        Problem::new(
            ProblemType::IncorrectResponse,
            format!(
                "Fetching {final_url}: the response body is larger than {limit} bytes; it must hold only the key authorization"
            ),
        )
    };
    if response
        .content_length()
        .is_some_and(|len| len > limit as u64)
    {
        return Err(too_large().into());
    }
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > limit {
                    return Err(too_large().into());
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(e) => return Err(request_problem(&final_url, &e, connect_budget)),
        }
    }
    let trimmed = body.trim_ascii_end();
    if trimmed == key_authorization.as_bytes() {
        return Ok(());
    }
    let got = if same_host {
        format!("got {}", quote_prefix(trimmed))
    } else {
        "the response came from another host after a redirect, so it is not shown".to_owned()
    };
    Err(Failure::definite(Problem::new(
        ProblemType::IncorrectResponse,
        format!(
            "Fetching {final_url}: the key authorization file does not match this challenge: expected {key_authorization:?}, {got}"
        ),
    )))
}

fn url_for(host: &str, port: u16, token: &str) -> String {
    format!("http://{host}:{port}/.well-known/acme-challenge/{token}")
}

fn ip_of(identifier: &Identifier) -> Result<IpAddr, Problem> {
    identifier.ip_addr().ok_or_else(|| {
        Problem::new(
            ProblemType::Malformed,
            format!("{} is not an IP address", identifier.value()),
        )
    })
}

fn prefix(mut problem: Problem, url: &str) -> Problem {
    problem.detail = format!("Fetching {url}: {}", problem.detail);
    problem
}

/// Why a redirect was not followed; travels through reqwest's error chain.
#[derive(Debug)]
struct RedirectRefused(String);

impl fmt::Display for RedirectRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl StdError for RedirectRefused {}

/// Follows at most `max_redirects` redirects, only over http/https to the configured ports, never
/// to an address the policy refuses, and to IP literals only when validating an IP identifier.
/// Names in redirects are held to the policy by the resolver.
fn redirect_policy(inner: &Inner, kind: IdentifierKind) -> redirect::Policy {
    let rules = RedirectRules {
        max: inner.settings.max_redirects,
        http_port: inner.settings.http_port,
        https_port: inner.settings.tls_alpn_port,
        policy: Arc::clone(&inner.policy),
        kind,
    };
    redirect::Policy::custom(move |attempt| {
        match rules.refusal(attempt.url(), attempt.previous().len()) {
            Some(why) => attempt.error(RedirectRefused(why)),
            None => attempt.follow(),
        }
    })
}

/// The limits a redirect target is checked against.
struct RedirectRules {
    max: usize,
    http_port: u16,
    https_port: u16,
    policy: Arc<AddressPolicy>,
    kind: IdentifierKind,
}

impl RedirectRules {
    /// Why the redirect to `url` (after `previous` requests) must not be followed, if it must not.
    ///
    /// The address policy is checked before the port, so a redirect to a refused address is
    /// reported as such whatever port it names.
    fn refusal(&self, url: &url::Url, previous: usize) -> Option<String> {
        let max = self.max;
        let (http_port, https_port) = (self.http_port, self.https_port);
        if previous > max {
            return Some(format!(
                "too many redirects (more than {max}); the last pointed to {url}"
            ));
        }
        let expected_port = match url.scheme() {
            "http" => http_port,
            "https" => https_port,
            other => {
                return Some(format!(
                    "redirect to {url} refused: scheme {other:?} is not http or https"
                ));
            }
        };
        let ip = match url.host() {
            Some(Host::Domain(_)) => None,
            Some(Host::Ipv4(v4)) => Some(IpAddr::V4(v4)),
            Some(Host::Ipv6(v6)) => Some(IpAddr::V6(v6)),
            None => return Some(format!("redirect to {url} refused: no host")),
        };
        if let Some(ip) = ip
            && let Some(why) = self.policy.refusal(ip)
        {
            return Some(format!("redirect to {url} refused: {ip} is {why}"));
        }
        if url.port_or_known_default() != Some(expected_port) {
            return Some(format!(
                "redirect to {url} refused: only port {http_port} (http) and port {https_port} (https) are followed"
            ));
        }
        if ip.is_some() && self.kind != IdentifierKind::Ip {
            return Some(format!(
                "redirect to {url} refused: redirects to bare IP addresses are only followed for IP identifiers"
            ));
        }
        None
    }
}

/// Turns a reqwest failure into the problem the subscriber can act on. Only connecting has a
/// reqwest timeout (`connect_budget`); the attempt as a whole is bounded by the caller.
///
/// Network failures (refused, reset, timed out, a name not resolving) are transient; a redirect
/// the rules refuse, or a name resolving only to refused addresses, is definite.
fn request_problem(url: &str, error: &reqwest::Error, connect_budget: Duration) -> Failure {
    let url = error
        .url()
        .map_or_else(|| url.to_owned(), ToString::to_string);
    let mut source = error.source();
    let mut innermost = None;
    while let Some(cause) = source {
        if let Some(ResolveProblem(failure)) = cause.downcast_ref::<ResolveProblem>() {
            return failure.clone().map_problem(|p| prefix(p, &url));
        }
        if let Some(refused) = cause.downcast_ref::<RedirectRefused>() {
            return Failure::definite(Problem::new(
                ProblemType::Connection,
                format!("Fetching {url}: {refused}"),
            ));
        }
        if let Some(io) = cause.downcast_ref::<io::Error>()
            && io.kind() == io::ErrorKind::ConnectionRefused
        {
            return Failure::transient(Problem::new(
                ProblemType::Connection,
                format!("Fetching {url}: connection refused"),
            ));
        }
        innermost = Some(cause.to_string());
        source = cause.source();
    }
    let detail = if error.is_timeout() {
        format!(
            "Fetching {url}: connecting timed out after {}s",
            connect_budget.as_secs_f64()
        )
    } else {
        let why = innermost.unwrap_or_else(|| error.to_string());
        format!("Fetching {url}: {why}")
    };
    Failure::transient(Problem::new(ProblemType::Connection, detail))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(kind: IdentifierKind, policy: AddressPolicy) -> RedirectRules {
        RedirectRules {
            max: 10,
            http_port: 80,
            https_port: 443,
            policy: Arc::new(policy),
            kind,
        }
    }

    fn refusal(kind: IdentifierKind, url: &str, previous: usize) -> Option<String> {
        rules(kind, AddressPolicy::new(false, Vec::new())).refusal(&url.parse().unwrap(), previous)
    }

    #[test]
    fn redirect_rules() {
        use IdentifierKind::{Dns, Ip};
        assert_eq!(refusal(Dns, "http://a.example.com/x", 1), None);
        assert_eq!(refusal(Dns, "https://a.example.com/x", 10), None);
        assert!(
            refusal(Dns, "http://a.example.com/x", 11)
                .unwrap()
                .contains("too many redirects")
        );
        assert!(
            refusal(Dns, "http://a.example.com:8080/x", 1)
                .unwrap()
                .contains("only port 80")
        );
        assert!(refusal(Dns, "https://a.example.com:80/x", 1).is_some());
        assert!(
            refusal(Dns, "ftp://a.example.com/x", 1)
                .unwrap()
                .contains("scheme")
        );
        assert!(
            refusal(Dns, "http://192.0.2.1/x", 1)
                .unwrap()
                .contains("bare IP")
        );
        assert_eq!(refusal(Ip, "http://192.0.2.1/x", 1), None);
        assert!(
            refusal(Ip, "http://127.0.0.1/x", 1)
                .unwrap()
                .contains("loopback")
        );
        assert!(
            refusal(Ip, "http://[::1]/x", 1)
                .unwrap()
                .contains("loopback")
        );
    }

    #[test]
    fn redirects_to_refused_addresses_are_refused_before_port_and_kind_rules() {
        use IdentifierKind::{Dns, Ip};
        let cases = [
            ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
            ("http://169.254.169.254:8080/", "cloud metadata"),
            ("http://[fd00:ec2::254]/", "cloud metadata"),
            (
                "http://[::ffff:169.254.169.254]/",
                "IPv4-mapped form of 169.254.169.254",
            ),
            (
                "http://[::ffff:127.0.0.1]/",
                "IPv4-mapped form of 127.0.0.1",
            ),
            ("http://[::127.0.0.1]/", "IPv4-compatible form of 127.0.0.1"),
            ("http://[64:ff9b::a9fe:a9fe]/", "NAT64"),
            ("http://[2002:a9fe:a9fe::1]/", "6to4"),
            ("http://[fe80::1]/", "link-local"),
            ("http://169.254.1.2/", "link-local"),
            ("https://224.0.0.1/", "multicast"),
            ("http://255.255.255.255/", "broadcast"),
            ("http://0.0.0.0/", "unspecified"),
            ("http://0.1.2.3/", "0.0.0.0/8"),
            ("http://127.0.0.1/", "loopback"),
            ("http://[::1]/", "loopback"),
        ];
        for kind in [Dns, Ip] {
            for (url, why) in cases {
                let refused = refusal(kind, url, 1).unwrap_or_else(|| panic!("{url} followed"));
                assert!(refused.contains(why), "{url}: {refused}");
            }
        }
    }

    #[test]
    fn denied_networks_apply_to_redirects_even_with_loopback_allowed() {
        let deny = vec!["127.0.0.0/8".parse().unwrap()];
        let rules = rules(IdentifierKind::Ip, AddressPolicy::new(true, deny));
        for url in ["http://127.0.0.1/", "http://[::ffff:127.0.0.2]/"] {
            let why = rules.refusal(&url.parse().unwrap(), 1).unwrap();
            assert!(why.contains("127.0.0.0/8"), "{url}: {why}");
        }
        assert_eq!(rules.refusal(&"http://[::1]/".parse().unwrap(), 1), None);
    }
}
