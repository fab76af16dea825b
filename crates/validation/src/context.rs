//! What every challenge check reads, in a leaf module of its own: `validator` builds it and hands
//! it to `http01`, `dns01` and `tls_alpn01`, which therefore need not import `validator` back.

use std::sync::Arc;

use crate::address_policy::AddressPolicy;
use crate::resolver::DnsClient;
use crate::settings::ValidationSettings;

/// The settings, resolver, address policy and TLS configuration shared by every check of one
/// validator (and its clones).
#[derive(Debug)]
pub(crate) struct CheckContext {
    pub(crate) settings: ValidationSettings,
    /// The target-address policy; `dns` holds the same one for the names it resolves.
    pub(crate) policy: Arc<AddressPolicy>,
    pub(crate) dns: DnsClient,
    pub(crate) tls: Arc<rustls::ClientConfig>,
    /// `caa_identities`, lower-cased and without trailing dots, for comparison.
    pub(crate) caa_identities: Vec<String>,
    /// `dns_persist_issuer_domain_names`, normalised the same way.
    pub(crate) dns_persist_issuers: Vec<String>,
}
