//! Validator configuration.

use std::net::SocketAddr;
use std::time::Duration;

use ipnet::IpNet;

/// How long after `timeout` a cancelled attempt may still take to return: dropping the attempt's
/// futures closes its sockets at once, so this only covers scheduling delays on a loaded host.
const ATTEMPT_GRACE: Duration = Duration::from_secs(2);

/// The share of `timeout` that connecting (all addresses of one name together) may use, as a
/// divisor: with two addresses per name each gets a quarter, so a silent first address leaves time
/// for the second and still half of the attempt for the exchange itself.
const CONNECT_SHARE_DIVISOR: u32 = 2;

/// Whether an http-01 redirect may lead into a private network (RFC 1918, RFC 6598 shared
/// address space, IPv6 unique local addresses) when the identifier itself did not resolve to one.
/// Off: a subscriber must not be able to point the CA at the networks it sits in and map them.
/// The one source of this default, for [`ValidationSettings`] and the configuration file.
pub const DEFAULT_ALLOW_PRIVATE_REDIRECTS: bool = false;

/// Default of `validation.timeout`: the time limit of one whole attempt. Ten seconds covers a
/// slow DNS answer, a second address and a redirect, and is still well inside the time clients
/// poll for a verdict. The configuration file reads it as `ValidationSettings::default().timeout`.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How validation attempts reach the outside world.
///
/// The defaults are production values: ports 80 and 443, loopback refused. Tests point
/// `dns_servers` at a test DNS server and the ports at test responders, and set `allow_loopback`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationSettings {
    /// Nameservers to query (UDP, TCP on truncation or error). When non-empty, only these are used;
    /// when empty, the system configuration (`/etc/resolv.conf`) is used.
    pub dns_servers: Vec<SocketAddr>,
    /// Port http-01 connects to, and the only port an `http://` redirect may target.
    pub http_port: u16,
    /// Port tls-alpn-01 connects to, and the only port an `https://` redirect may target.
    pub tls_alpn_port: u16,
    /// Whether targets on loopback addresses may be contacted. Only tests should set this.
    pub allow_loopback: bool,
    /// Networks never connected to, on top of the built-in refusals (link-local, metadata,
    /// multicast, …; see the crate docs). Judged also against the IPv4 address carried by an
    /// IPv4-mapped, IPv4-compatible, NAT64 or 6to4 IPv6 address.
    pub deny_target_cidrs: Vec<IpNet>,
    /// Whether an http-01 redirect may lead to a private address (10/8, 172.16/12, 192.168/16,
    /// 100.64/10, fc00::/7) although the identifier did not resolve to one. When `false`, such
    /// redirects are refused before connecting, unless the identifier itself is or resolved to a
    /// private address (a private CA validating a private name may be redirected within it).
    pub allow_private_redirects: bool,
    /// Time limit of one whole attempt: every DNS query, address, redirect and the CAA check.
    /// Connecting gets a share of it (see [`ValidationSettings::connect_budget`]).
    pub timeout: Duration,
    /// Redirects followed by http-01 before giving up.
    pub max_redirects: usize,
    /// Largest http-01 response body read; anything longer fails the challenge.
    pub max_body_bytes: usize,
    /// Issuer domain names under which CAA records authorize this CA. Empty disables CAA checks.
    pub caa_identities: Vec<String>,
    /// The issuer domain names a dns-persist-01 record may name (draft-ietf-acme-dns-persist-02
    /// §3.1): at most 10 domain names. Empty when dns-persist-01 is not offered, and then every
    /// dns-persist-01 attempt fails.
    pub dns_persist_issuer_domain_names: Vec<String>,
    /// The `accountHashPrefix` of dns-persist-01 hashed account URIs
    /// (`acme_core::account_uri::AccountUris::hash_prefix`).
    pub account_hash_prefix: String,
}

impl Default for ValidationSettings {
    fn default() -> Self {
        Self {
            dns_servers: Vec::new(),
            http_port: 80,
            tls_alpn_port: 443,
            allow_loopback: false,
            deny_target_cidrs: Vec::new(),
            allow_private_redirects: DEFAULT_ALLOW_PRIVATE_REDIRECTS,
            timeout: DEFAULT_TIMEOUT,
            max_redirects: 10,
            max_body_bytes: 64 * 1024,
            caa_identities: Vec::new(),
            dns_persist_issuer_domain_names: Vec::new(),
            account_hash_prefix: String::new(),
        }
    }
}

impl ValidationSettings {
    /// The longest one [`Validator::validate`](crate::Validator::validate) call can take:
    /// `timeout` plus a small grace for cancellation. A job lease must outlast it.
    pub fn worst_case_attempt(&self) -> Duration {
        self.timeout.saturating_add(ATTEMPT_GRACE)
    }

    /// How long connecting to one name may take, all its addresses together (at most
    /// [`MAX_ADDRESSES_PER_NAME`](crate::MAX_ADDRESSES_PER_NAME), each getting an equal part).
    pub(crate) fn connect_budget(&self) -> Duration {
        self.timeout / CONNECT_SHARE_DIVISOR
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_case_covers_the_timeout_and_connecting_leaves_room() {
        let settings = ValidationSettings::default();
        assert!(settings.worst_case_attempt() > settings.timeout);
        assert!(settings.worst_case_attempt() <= settings.timeout + Duration::from_secs(5));
        assert!(settings.connect_budget() < settings.timeout);
    }
}
