//! What the HTTP layer needs from the configuration, already validated by the binary. Policy
//! settings (lifetimes, validity, identifiers, contacts, terms) belong to `ra::settings`.

use ipnet::IpNet;
use time::Duration;

/// Settings of the ACME endpoint.
#[derive(Debug, Clone)]
pub struct ApiSettings {
    /// Base URL clients use, without a trailing slash (`https://acme.internal:14000`).
    pub base_url: String,
    pub website: Option<String>,
    pub caa_identities: Vec<String>,
    /// dns-persist-01's issuer domain names (lower case, no trailing dot; at most 10), announced
    /// in the directory's `meta.issuerDomainNames` and in every dns-persist-01 challenge. Empty
    /// when dns-persist-01 is not offered.
    pub dns_persist_issuer_domain_names: Vec<String>,
    pub orders_per_page: u32,
    /// Retry-After sent with pending authorizations and processing orders.
    pub retry_after: Duration,
    pub max_body_bytes: usize,
    /// Proxies whose `X-Forwarded-For` is believed (see [`crate::client_ip`]).
    pub trusted_proxies: Vec<IpNet>,
    /// Unpause links of zombie-paused pairs; `None` disables the page and the links.
    pub unpause: Option<crate::unpause::link::UnpauseSettings>,
}

impl ApiSettings {
    /// The defaults of every setting, the one source of the configuration file's defaults
    /// for these keys (`acme.*` HTTP keys, `server.max-body-bytes`), with no base URL.
    pub fn defaults() -> Self {
        Self::for_base_url("")
    }

    /// The defaults under `base_url` (tests); the binary builds its own from the config file.
    pub fn for_base_url(base_url: &str) -> Self {
        Self {
            base_url: base_url.trim_end_matches('/').to_owned(),
            website: None,
            caa_identities: Vec::new(),
            dns_persist_issuer_domain_names: Vec::new(),
            orders_per_page: 100,
            retry_after: Duration::seconds(3),
            max_body_bytes: 64 * 1024,
            trusted_proxies: Vec::new(),
            unpause: None,
        }
    }
}
