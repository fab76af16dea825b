//! What the HTTP layer needs from the configuration, already validated by the binary.

use acme_core::identifier::IdentifierPolicy;
use time::Duration;

/// Settings of the ACME endpoint.
#[derive(Debug, Clone)]
pub struct ApiSettings {
    /// Base URL clients use, without a trailing slash (`https://acme.internal:14000`).
    pub base_url: String,
    /// When set, new accounts must agree to these terms.
    pub terms_of_service: Option<String>,
    pub website: Option<String>,
    pub caa_identities: Vec<String>,
    /// newAccount must carry an external account binding (RFC 8555 §7.3.4); announced in the
    /// directory. A valid binding is honoured either way.
    pub external_account_required: bool,
    pub order_lifetime: Duration,
    pub authorization_lifetime: Duration,
    pub reuse_valid_authorizations: bool,
    pub orders_per_page: u32,
    pub max_identifiers_per_order: usize,
    /// Retry-After sent with pending authorizations and processing orders.
    pub retry_after: Duration,
    pub max_contacts: usize,
    pub max_body_bytes: usize,
    pub identifier_policy: IdentifierPolicy,
    /// Longest certificate lifetime an order may ask for.
    pub max_validity: Duration,
    /// Lifetime given when the order does not ask.
    pub default_validity: Duration,
    /// How far notBefore may lie in the past.
    pub backdate: Duration,
    /// Unpause links of zombie-paused pairs; `None` disables the page and the links.
    pub unpause: Option<crate::unpause::link::UnpauseSettings>,
}

impl ApiSettings {
    /// The defaults of every setting, the one source of the configuration file's defaults
    /// (`acme.*`, `issuance.*`, `server.max-body-bytes`), with no base URL.
    pub fn defaults() -> Self {
        Self::for_base_url("")
    }

    /// The defaults under `base_url` (tests); the binary builds its own from the config file.
    pub fn for_base_url(base_url: &str) -> Self {
        Self {
            base_url: base_url.trim_end_matches('/').to_owned(),
            terms_of_service: None,
            website: None,
            caa_identities: Vec::new(),
            external_account_required: false,
            order_lifetime: Duration::days(7),
            authorization_lifetime: Duration::days(7),
            reuse_valid_authorizations: true,
            orders_per_page: 100,
            max_identifiers_per_order: 100,
            retry_after: Duration::seconds(3),
            max_contacts: 10,
            max_body_bytes: 64 * 1024,
            identifier_policy: IdentifierPolicy::default(),
            max_validity: Duration::days(397),
            default_validity: Duration::days(90),
            backdate: Duration::minutes(1),
            unpause: None,
        }
    }
}
