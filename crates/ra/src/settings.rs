//! The policy settings: what the configuration file says about who may get what. The defaults
//! here are the one source of the configuration file's defaults for these keys.

use acme_core::identifier::IdentifierPolicy;
use time::Duration;

/// Settings of the policy decisions.
#[derive(Debug, Clone)]
pub struct PolicySettings {
    /// When set, new accounts must agree to these terms.
    pub terms_of_service: Option<String>,
    pub order_lifetime: Duration,
    pub authorization_lifetime: Duration,
    pub reuse_valid_authorizations: bool,
    pub max_identifiers_per_order: usize,
    pub max_contacts: usize,
    pub identifier_policy: IdentifierPolicy,
    /// Longest certificate lifetime an order may ask for.
    pub max_validity: Duration,
    /// Lifetime given when the order does not ask.
    pub default_validity: Duration,
    /// How far notBefore may lie in the past.
    pub backdate: Duration,
}

impl Default for PolicySettings {
    fn default() -> Self {
        Self {
            terms_of_service: None,
            order_lifetime: Duration::days(7),
            authorization_lifetime: Duration::days(7),
            reuse_valid_authorizations: true,
            max_identifiers_per_order: 100,
            max_contacts: 10,
            identifier_policy: IdentifierPolicy::default(),
            max_validity: Duration::days(397),
            default_validity: Duration::days(90),
            backdate: Duration::minutes(1),
        }
    }
}
