//! http-01 (RFC 8555 §8.3): fetch the key authorization over plain HTTP.
//!
//! Redirects are followed within limits (`RedirectRules`), and two rules keep a subscriber from
//! using the CA to map the networks it sits in:
//! - a redirect leads into a private network (`address_policy::private_network`) only when the
//!   identifier itself is or resolved to a private address, or the operator set
//!   `allow_private_redirects`; an IP literal is refused by the redirect rules, a name by
//!   `RedirectResolver`, both before connecting;
//! - once a redirect has left the identifier's host, nothing that happens there is reported:
//!   not a status, not a connection error, not a DNS answer, not content. Every such failure is
//!   the same definite `incorrectResponse` (`at_another_host`), so neither the detail, the type
//!   nor a retry tells whether the other host refused, timed out, answered 500 or served a page.

use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use acme_core::identifier::{Identifier, IdentifierKind};
use acme_core::problem::{Problem, ProblemType};
use reqwest::dns::{Name, Resolve, Resolving};
use reqwest::redirect;
use tokio::time::Instant;
use url::{Host, Url};

use crate::address_policy::{AddressPolicy, private_network};
use crate::context::CheckContext;
use crate::evidence::Seen;
use crate::failure::Failure;
use crate::quote::quote_prefix;
use crate::resolver::{PolicyResolver, ResolveProblem};

pub(crate) async fn validate(
    context: &CheckContext,
    identifier: &Identifier,
    token: &str,
    key_authorization: &str,
) -> Result<Seen, Failure> {
    let settings = &context.settings;
    // The attempt's time limit runs from about now (the caller starts it just before).
    let stalled_elsewhere_at = Instant::now() + settings.timeout / 10 * STALLED_ELSEWHERE_TENTHS;
    let (host, pinned, addresses) = match identifier.kind() {
        IdentifierKind::Dns => {
            let name = identifier.base_name();
            let ips = context.dns.lookup_ips(name).await.map_err(|f| {
                f.map_problem(|p| prefix(p, &url_for(name, settings.http_port, token)))
            })?;
            (name.to_owned(), Some(ips.clone()), ips)
        }
        IdentifierKind::Ip => {
            let ip = ip_of(identifier)?;
            context.policy.check_identifier(ip)?;
            let host = match ip {
                IpAddr::V4(v4) => v4.to_string(),
                IpAddr::V6(v6) => format!("[{v6}]"),
            };
            (host, None, vec![ip])
        }
    };
    let url = url_for(&host, settings.http_port, token);
    let origin = Url::parse(&url).map_err(|e| {
        Problem::new(
            ProblemType::ServerInternal,
            format!("the http-01 URL {url:?} does not parse: {e}"),
        )
    })?;
    let connect_budget = settings.connect_budget();
    let private_redirects = private_redirects_allowed(settings.allow_private_redirects, &addresses);
    let trail = Trail::new(&origin);
    let rules = redirect_rules(context, identifier.kind(), private_redirects);

    // No overall reqwest timeout: the caller bounds the whole attempt. The connect timeout is
    // shared among a name's addresses (hyper gives each an equal part), so a silent first address
    // leaves time for the next.
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        // Redirects are followed by `fetch`, which learns each hop's peer address on the way.
        .redirect(redirect::Policy::none())
        .connect_timeout(connect_budget)
        .tls_danger_accept_invalid_certs(true)
        .user_agent(concat!("Certeasy-validation/", env!("CARGO_PKG_VERSION")))
        .dns_resolver(Arc::new(RedirectResolver {
            names: PolicyResolver::new(context.dns.clone()),
            private_allowed: private_redirects,
        }));
    if let Some(ips) = pinned {
        // The first request, and any redirect back to the same name, uses exactly the addresses
        // just resolved; other names in redirects are resolved through `RedirectResolver`.
        let addrs: Vec<SocketAddr> = ips.into_iter().map(|ip| SocketAddr::new(ip, 0)).collect();
        builder = builder.resolve_to_addrs(&host, &addrs);
    }
    let client = builder.build().map_err(|e| {
        Problem::new(
            ProblemType::ServerInternal,
            format!("building the http-01 client failed: {e}"),
        )
    })?;

    let fetched = unless_stalled_elsewhere(
        &trail,
        stalled_elsewhere_at,
        fetch(&client, &rules, &trail, origin.clone()),
    )
    .await;
    let mut response = match fetched {
        Some(Fetched::Response(response)) => response,
        None => return Err(at_another_host(&url, key_authorization)),
        Some(_) if trail.elsewhere() => {
            return Err(at_another_host(&url, key_authorization));
        }
        Some(Fetched::Failed(e)) => return Err(request_problem(&url, &e, connect_budget)),
        Some(Fetched::Refused { from, why }) => {
            return Err(Failure::definite(Problem::new(
                ProblemType::Connection,
                format!("Fetching {from}: {why}"),
            )));
        }
    };
    // Whatever another host than the identifier's (after a redirect) answers is never reported:
    // the redirect could have led anywhere the subscriber may not read.
    if response.url().host() != origin.host() {
        let status = response.status();
        let final_url = response.url().to_string();
        let body = unless_stalled_elsewhere(
            &trail,
            stalled_elsewhere_at,
            read_body(&mut response, settings.max_body_bytes),
        )
        .await;
        return match body {
            Some(Ok(body))
                if status == reqwest::StatusCode::OK
                    && body.trim_ascii_end() == key_authorization.as_bytes() =>
            {
                Ok(trail.seen(&url, &final_url))
            }
            _ => Err(at_another_host(&url, key_authorization)),
        };
    }
    let final_url = response.url().to_string();
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
    let body = match read_body(&mut response, limit).await {
        Ok(body) => body,
        Err(BodyError::TooLarge) => {
            return Err(Problem::new(
                ProblemType::IncorrectResponse,
                format!(
                    "Fetching {final_url}: the response body is larger than {limit} bytes; it must hold only the key authorization"
                ),
            )
            .into());
        }
        Err(BodyError::Read(e)) => return Err(request_problem(&final_url, &e, connect_budget)),
    };
    let trimmed = body.trim_ascii_end();
    if trimmed == key_authorization.as_bytes() {
        return Ok(trail.seen(&url, &final_url));
    }
    Err(Failure::definite(Problem::new(
        ProblemType::IncorrectResponse,
        format!(
            "Fetching {final_url}: the key authorization file does not match this challenge: expected {key_authorization:?}, got {}",
            quote_prefix(trimmed)
        ),
    )))
}

/// Tenths of the attempt's time limit after which a request stalled at another host is given up
/// (see [`unless_stalled_elsewhere`]): late enough for any honest answer, early enough that the
/// attempt's own limit, which would say "time limit", has not struck yet.
const STALLED_ELSEWHERE_TENTHS: u32 = 9;

/// Awaits `work`, unless the request is at another host (after a redirect) when `deadline`
/// comes: then `None`. A host that accepts a connection and never answers is thereby reported
/// like any other failure at another host, not as the attempt's time limit, which would tell
/// the subscriber that something listens there. At the identifier's own host nothing changes.
async fn unless_stalled_elsewhere<T>(
    trail: &Trail,
    deadline: Instant,
    work: impl Future<Output = T>,
) -> Option<T> {
    tokio::pin!(work);
    tokio::select! {
        out = &mut work => Some(out),
        () = tokio::time::sleep_until(deadline) => {
            if trail.elsewhere() {
                None
            } else {
                Some(work.await)
            }
        }
    }
}

/// Whether redirects may lead into private networks: when the operator allows it, or when the
/// identifier itself is or resolved to a private address (`addresses`: the IP identifier, or
/// the addresses its name resolved to and the validator connects to), so that a private CA
/// validating a private name may be redirected within that network. A public name never opens
/// the private networks to its redirects.
fn private_redirects_allowed(allow_setting: bool, addresses: &[IpAddr]) -> bool {
    allow_setting || addresses.iter().any(|ip| private_network(*ip).is_some())
}

/// The failure of a fetch that a redirect took to another host: one detail, one type and one
/// classification whatever happened there, so the subscriber learns nothing about that host.
fn at_another_host(url: &str, key_authorization: &str) -> Failure {
    Failure::definite(Problem::new(
        ProblemType::IncorrectResponse,
        format!(
            "Fetching {url}: a redirect led to another host, which did not serve the key authorization {key_authorization:?}; what another host answers is never reported, fetch the URL yourself to see why"
        ),
    ))
}

/// Why a response body was not read whole.
enum BodyError {
    /// It is longer than the limit.
    TooLarge,
    /// Reading it failed.
    Read(reqwest::Error),
}

/// Reads the body of `response`, at most `limit` bytes.
async fn read_body(response: &mut reqwest::Response, limit: usize) -> Result<Vec<u8>, BodyError> {
    if response
        .content_length()
        .is_some_and(|len| len > limit as u64)
    {
        return Err(BodyError::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(BodyError::Read)? {
        if body.len() + chunk.len() > limit {
            return Err(BodyError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Where the request in flight is: at the identifier's host or, after a redirect, at another.
/// The redirect policy updates it when it follows a redirect, so a failure of the request it
/// leads to (connecting, resolving the name) and a refusal of a redirect another host issued are
/// both known to have happened elsewhere.
#[derive(Debug)]
struct Trail {
    origin: Host<String>,
    elsewhere: AtomicBool,
    /// The redirect targets followed, in order, for the evidence.
    hops: std::sync::Mutex<Vec<String>>,
    /// The peer address of each response, in order, for the evidence.
    reached: std::sync::Mutex<Vec<String>>,
}

impl Trail {
    fn new(origin: &Url) -> Self {
        Self {
            origin: origin
                .host()
                .map_or(Host::Domain(String::new()), |h| h.to_owned()),
            elsewhere: AtomicBool::new(false),
            hops: std::sync::Mutex::default(),
            reached: std::sync::Mutex::default(),
        }
    }

    /// Records that the next request goes to `next`.
    fn follow(&self, next: &Url) {
        let elsewhere = next.host().map(|h| h.to_owned()) != Some(self.origin.clone());
        self.elsewhere.store(elsewhere, Ordering::SeqCst);
        // A poisoned lock only loses the evidence's list of hops, never the verdict.
        if let Ok(mut hops) = self.hops.lock() {
            hops.push(next.to_string());
        }
    }

    /// Records the peer address a response came from.
    fn reached(&self, peer: Option<SocketAddr>) {
        if let (Some(peer), Ok(mut reached)) = (peer, self.reached.lock()) {
            reached.push(peer.to_string());
        }
    }

    /// The evidence of a match at `final_url`, starting at `url`: every hop's peer address and
    /// the redirects followed.
    fn seen(&self, url: &str, final_url: &str) -> Seen {
        let hops = self.hops.lock().map(|h| h.clone()).unwrap_or_default();
        let addresses = self.reached.lock().map(|a| a.clone()).unwrap_or_default();
        let observed = if hops.is_empty() {
            format!("key authorization matched at {final_url} (HTTP 200)")
        } else {
            format!(
                "key authorization matched at {final_url} (HTTP 200), reached from {url} by {} redirect{}: {}",
                hops.len(),
                if hops.len() == 1 { "" } else { "s" },
                hops.join(" -> ")
            )
        };
        Seen {
            addresses,
            observed,
        }
    }

    /// Whether the request in flight (or the one whose redirect was refused) is at another host.
    fn elsewhere(&self) -> bool {
        self.elsewhere.load(Ordering::SeqCst)
    }
}

/// Resolves the names redirects lead to (the identifier's own name is pinned to the addresses
/// resolved for it): the validator's resolver and address policy, then, unless private
/// redirects are allowed for this attempt, without private addresses. A name left with none
/// fails before anything is connected to.
struct RedirectResolver {
    names: Arc<PolicyResolver>,
    private_allowed: bool,
}

/// A redirect target name resolved only to private addresses, which this attempt may not reach.
#[derive(Debug)]
struct PrivateOnly(String);

impl fmt::Display for PrivateOnly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} resolves only to private addresses, which redirects from a public identifier do not lead to",
            self.0
        )
    }
}

impl StdError for PrivateOnly {}

impl Resolve for RedirectResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        let resolving = self.names.resolve(name);
        let private_allowed = self.private_allowed;
        Box::pin(async move {
            let addrs = resolving.await?;
            if private_allowed {
                return Ok(addrs);
            }
            let public: Vec<SocketAddr> = addrs
                .filter(|addr| private_network(addr.ip()).is_none())
                .collect();
            if public.is_empty() {
                return Err(Box::new(PrivateOnly(host)) as Box<dyn StdError + Send + Sync>);
            }
            let addrs: reqwest::dns::Addrs = Box::new(public.into_iter());
            Ok(addrs)
        })
    }
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

/// What fetching the challenge URL came to.
enum Fetched {
    /// The first response that is not a redirect followed.
    Response(reqwest::Response),
    /// A request failed (connecting, resolving, reading the head).
    Failed(reqwest::Error),
    /// A redirect from `from` the rules refuse, and why.
    Refused { from: String, why: String },
}

/// Fetches `origin`, following redirects by hand rather than by reqwest's policy so that each
/// hop's peer address is known (reqwest reports only the last response's): at most
/// `max_redirects`, only over http/https to the configured ports, never to an address the policy
/// refuses nor, unless `private_allowed`, to a private one, and to IP literals only when
/// validating an IP identifier (`RedirectRules`). Names in redirects are held to the same rules
/// by the resolver. Each followed redirect and each peer is recorded in `trail`.
async fn fetch(
    client: &reqwest::Client,
    rules: &RedirectRules,
    trail: &Trail,
    origin: Url,
) -> Fetched {
    let mut url = origin;
    let mut followed = 0_usize;
    loop {
        let response = match client.get(url.clone()).send().await {
            Ok(response) => response,
            Err(e) => return Fetched::Failed(e),
        };
        trail.reached(response.remote_addr());
        let Some(next) = redirect_target(&response) else {
            return Fetched::Response(response);
        };
        followed += 1;
        if let Some(why) = rules.refusal(&next, followed) {
            return Fetched::Refused {
                from: url.to_string(),
                why,
            };
        }
        trail.follow(&next);
        url = next;
    }
}

/// Where a response redirects to, for the statuses reqwest follows (301, 302, 303, 307, 308);
/// `None` (the response stands) without a usable `Location`, as reqwest does.
fn redirect_target(response: &reqwest::Response) -> Option<Url> {
    use reqwest::StatusCode;
    let redirects = [
        StatusCode::MOVED_PERMANENTLY,
        StatusCode::FOUND,
        StatusCode::SEE_OTHER,
        StatusCode::TEMPORARY_REDIRECT,
        StatusCode::PERMANENT_REDIRECT,
    ];
    if !redirects.contains(&response.status()) {
        return None;
    }
    let location = response.headers().get(reqwest::header::LOCATION)?;
    let location = std::str::from_utf8(location.as_bytes()).ok()?;
    response.url().join(location).ok()
}

fn redirect_rules(
    context: &CheckContext,
    kind: IdentifierKind,
    private_allowed: bool,
) -> RedirectRules {
    RedirectRules {
        max: context.settings.max_redirects,
        http_port: context.settings.http_port,
        https_port: context.settings.tls_alpn_port,
        policy: Arc::clone(&context.policy),
        kind,
        private_allowed,
    }
}

/// The limits a redirect target is checked against.
struct RedirectRules {
    max: usize,
    http_port: u16,
    https_port: u16,
    policy: Arc<AddressPolicy>,
    kind: IdentifierKind,
    /// Whether a redirect may lead to a private address ([`private_redirects_allowed`]).
    private_allowed: bool,
}

impl RedirectRules {
    /// Why the redirect to `url` (after `previous` requests) must not be followed, if it must not.
    ///
    /// The address policy is checked before the port, so a redirect to a refused address is
    /// reported as such whatever port it names.
    fn refusal(&self, url: &Url, previous: usize) -> Option<String> {
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
        if let Some(ip) = ip
            && !self.private_allowed
            && let Some(net) = private_network(ip)
        {
            return Some(format!(
                "redirect to {url} refused: {ip} is in the private network {net}, and redirects lead into private networks only from an identifier that is or resolves to a private address"
            ));
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
            private_allowed: false,
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
    fn redirects_to_private_literals_need_a_private_identifier_or_the_setting() {
        let strict = rules(IdentifierKind::Ip, AddressPolicy::new(false, Vec::new()));
        let open = RedirectRules {
            private_allowed: true,
            ..rules(IdentifierKind::Ip, AddressPolicy::new(false, Vec::new()))
        };
        let cases = [
            ("http://10.1.2.3/x", "10.0.0.0/8"),
            ("http://172.20.0.1/x", "172.16.0.0/12"),
            ("http://192.168.0.1/x", "192.168.0.0/16"),
            ("http://100.64.1.1/x", "100.64.0.0/10"),
            ("http://[fd00::1]/x", "fc00::/7"),
            ("http://[::ffff:10.0.0.1]/x", "10.0.0.0/8"),
            // Refused for the address before the port is looked at.
            ("http://10.0.0.1:8080/x", "10.0.0.0/8"),
        ];
        for (url, net) in cases {
            let why = strict
                .refusal(&url.parse().unwrap(), 1)
                .unwrap_or_else(|| panic!("{url} followed"));
            assert!(
                why.contains(&format!("is in the private network {net}")),
                "{url}: {why}"
            );
        }
        for (url, _) in &cases[..6] {
            assert_eq!(open.refusal(&url.parse().unwrap(), 1), None, "{url}");
        }
        // Public literals are not affected; refused classes stay refused when private is open.
        assert_eq!(
            strict.refusal(&"http://192.0.2.1/x".parse().unwrap(), 1),
            None
        );
        assert!(
            open.refusal(&"http://169.254.169.254/".parse().unwrap(), 1)
                .unwrap()
                .contains("cloud metadata")
        );
    }

    #[test]
    fn only_a_private_identifier_or_the_setting_opens_private_redirects() {
        let ips =
            |list: &[&str]| -> Vec<IpAddr> { list.iter().map(|ip| ip.parse().unwrap()).collect() };
        assert!(!private_redirects_allowed(false, &ips(&["192.0.2.1"])));
        assert!(!private_redirects_allowed(
            false,
            &ips(&["127.0.0.1", "::1"])
        ));
        assert!(!private_redirects_allowed(false, &[]));
        assert!(private_redirects_allowed(false, &ips(&["10.0.0.5"])));
        assert!(private_redirects_allowed(
            false,
            &ips(&["2001:db8::1", "192.168.1.2"])
        ));
        assert!(private_redirects_allowed(false, &ips(&["fd00::7"])));
        assert!(private_redirects_allowed(true, &ips(&["192.0.2.1"])));
    }

    #[test]
    fn the_trail_knows_when_a_redirect_left_the_identifiers_host() {
        let trail = Trail::new(
            &"http://a.test:80/.well-known/acme-challenge/t"
                .parse()
                .unwrap(),
        );
        assert!(!trail.elsewhere());
        trail.follow(&"https://a.test/other".parse().unwrap());
        assert!(!trail.elsewhere(), "the same host on another scheme");
        trail.follow(&"http://b.test/".parse().unwrap());
        assert!(trail.elsewhere());
        trail.follow(&"http://A.TEST/back".parse().unwrap());
        assert!(!trail.elsewhere(), "back on the identifier's host");
        let v6 = Trail::new(&"http://[::1]:80/x".parse().unwrap());
        v6.follow(&"http://[0:0::1]/y".parse().unwrap());
        assert!(!v6.elsewhere());
        v6.follow(&"http://127.0.0.1/y".parse().unwrap());
        assert!(v6.elsewhere());
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
