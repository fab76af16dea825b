//! Validator configuration.

use std::net::SocketAddr;
use std::time::Duration;

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
    /// Time limit of one attempt's HTTP exchange (including redirects), TCP connect plus TLS
    /// handshake, and each DNS query.
    pub timeout: Duration,
    /// Redirects followed by http-01 before giving up.
    pub max_redirects: usize,
    /// Largest http-01 response body read; anything longer fails the challenge.
    pub max_body_bytes: usize,
    /// Issuer domain names under which CAA records authorize this CA. Empty disables CAA checks.
    pub caa_identities: Vec<String>,
}

impl Default for ValidationSettings {
    fn default() -> Self {
        Self {
            dns_servers: Vec::new(),
            http_port: 80,
            tls_alpn_port: 443,
            allow_loopback: false,
            timeout: Duration::from_secs(10),
            max_redirects: 10,
            max_body_bytes: 64 * 1024,
            caa_identities: Vec::new(),
        }
    }
}
