//! Every URL the ACME API gives to clients, built in one place from the external base URL.
//!
//! A leaf module: handlers, the JSON renderers, problem documents and headers all hand out
//! links. Building them through `ApiState` tied the renderers to the state and, through it, to
//! every module the state holds (an import cycle); a plain value keeps them apart.

use acme_core::account_uri::AccountUris;
use acme_core::ids::AccountId;
use acme_core::ids::AuthzId;
use acme_core::ids::CertificateId;
use acme_core::ids::ChallengeId;
use acme_core::ids::OrderId;

/// Where the directory's `renewalInfo` points; a certificate's identifier follows it.
pub(crate) const RENEWAL_INFO_PATH: &str = "/acme/renewal-info";

/// The external base URL (`server.external-url`) and the resource paths under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Urls {
    /// Without a trailing slash (`https://acme.internal:14000`).
    base: String,
    /// Account URLs, whose one definition `acme-core` shares with the CAA check (RFC 8657).
    accounts: AccountUris,
    /// dns-persist-01's issuer domain names, which every dns-persist-01 challenge object
    /// carries (draft-ietf-acme-dns-persist-02 §3.1); empty when it is not offered. Kept with
    /// the URLs because every renderer of a challenge already takes this value.
    issuer_domain_names: std::sync::Arc<[String]>,
}

impl Urls {
    pub(crate) fn new(base_url: &str) -> Self {
        Self {
            base: base_url.trim_end_matches('/').to_owned(),
            accounts: AccountUris::new(base_url),
            issuer_domain_names: std::sync::Arc::from(Vec::new()),
        }
    }

    /// The same URLs, with dns-persist-01's issuer domain names (`ApiSettings`).
    pub(crate) fn with_issuer_domain_names(mut self, names: &[String]) -> Self {
        self.issuer_domain_names = std::sync::Arc::from(names.to_vec());
        self
    }

    /// dns-persist-01's issuer domain names; empty when it is not offered.
    pub(crate) fn issuer_domain_names(&self) -> &[String] {
        &self.issuer_domain_names
    }

    /// dns-persist-01's `accountHashPrefix` (one definition in `acme-core`).
    pub(crate) fn account_hash_prefix(&self) -> String {
        self.accounts.hash_prefix()
    }

    /// `path` (starting with `/`, query included) under the base URL.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub(crate) fn directory(&self) -> String {
        self.url("/directory")
    }

    pub(crate) fn account(&self, id: AccountId) -> String {
        self.accounts.uri(id)
    }

    /// Where account URLs start: a `kid` must be this followed by an account id.
    pub(crate) fn account_prefix(&self) -> &str {
        self.accounts.prefix()
    }

    pub(crate) fn account_orders(&self, id: AccountId) -> String {
        format!("{}/orders", self.account(id))
    }

    /// The next page of an account's orders, after order `cursor`.
    pub(crate) fn account_orders_after(&self, id: AccountId, cursor: OrderId) -> String {
        format!("{}/orders?cursor={cursor}", self.account(id))
    }

    pub(crate) fn order(&self, id: OrderId) -> String {
        format!("{}/acme/order/{id}", self.base)
    }

    pub(crate) fn finalize(&self, id: OrderId) -> String {
        format!("{}/acme/order/{id}/finalize", self.base)
    }

    pub(crate) fn authz(&self, id: AuthzId) -> String {
        format!("{}/acme/authz/{id}", self.base)
    }

    pub(crate) fn challenge(&self, id: ChallengeId) -> String {
        format!("{}/acme/chall/{id}", self.base)
    }

    pub(crate) fn certificate(&self, id: CertificateId) -> String {
        format!("{}/acme/cert/{id}", self.base)
    }

    /// Alternate chain `n` (from 1) of a certificate (RFC 8555 §7.4.2).
    pub(crate) fn certificate_alternate(&self, id: CertificateId, n: usize) -> String {
        format!("{}/acme/cert/{id}/{n}", self.base)
    }

    /// The documentation of one rate limit, linked from its `rateLimited` problem.
    pub(crate) fn rate_limit_doc(&self, limit: &str) -> String {
        format!("{}/docs/rate-limits#{limit}", self.base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_urls_sit_under_the_base() {
        let urls = Urls::new("https://acme.internal:14000/");
        assert_eq!(urls.directory(), "https://acme.internal:14000/directory");
        assert_eq!(
            urls.account(AccountId(7)),
            "https://acme.internal:14000/acme/acct/7"
        );
        assert!(
            urls.account(AccountId(7))
                .starts_with(urls.account_prefix())
        );
        assert_eq!(
            urls.account_orders_after(AccountId(7), OrderId(9)),
            "https://acme.internal:14000/acme/acct/7/orders?cursor=9"
        );
        assert_eq!(
            urls.finalize(OrderId(3)),
            "https://acme.internal:14000/acme/order/3/finalize"
        );
        assert_eq!(
            urls.authz(AuthzId(4)),
            "https://acme.internal:14000/acme/authz/4"
        );
        assert_eq!(
            urls.challenge(ChallengeId(5)),
            "https://acme.internal:14000/acme/chall/5"
        );
        assert_eq!(
            urls.certificate(CertificateId(6)),
            "https://acme.internal:14000/acme/cert/6"
        );
        assert_eq!(
            urls.certificate_alternate(CertificateId(6), 2),
            "https://acme.internal:14000/acme/cert/6/2"
        );
        assert_eq!(
            urls.rate_limit_doc("certificatesPerDomain"),
            "https://acme.internal:14000/docs/rate-limits#certificatesPerDomain"
        );
    }
}
