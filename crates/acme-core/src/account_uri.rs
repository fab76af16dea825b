//! The account URI: the URL of an ACME account (RFC 8555 §7.3: the `Location` of new-account and
//! the `kid` of every request it signs), which RFC 8657 §3 also makes the account's name in the
//! `accounturi` parameter of CAA records.
//!
//! The one shared resource URL, because two crates that know nothing of each other need it byte
//! for byte: the HTTP front end hands it out, and the CAA check compares a DNS record against it
//! (an `accounturi` that differs by one character names another account). Every other URL stays
//! in the front end.

use crate::ids::AccountId;

/// Builds account URIs under one external base URL (`server.external-url`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountUris {
    /// The base URL followed by [`AccountUris::PATH`].
    prefix: String,
}

impl AccountUris {
    /// The path of every account under the base URL, up to the account id.
    pub const PATH: &'static str = "/acme/acct/";

    /// Account URIs under `base_url` (a trailing slash is ignored).
    pub fn new(base_url: &str) -> Self {
        Self {
            prefix: format!("{}{}", base_url.trim_end_matches('/'), Self::PATH),
        }
    }

    /// The URI of account `id`, e.g. `https://acme.internal:14000/acme/acct/7`.
    pub fn uri(&self, id: AccountId) -> String {
        format!("{}{id}", self.prefix)
    }

    /// Where every account URI starts: a `kid` must be this followed by an account id.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The `accountHashPrefix` of dns-persist-01 (draft-ietf-acme-dns-persist-02 §4.1): hashed
    /// account URIs are this followed by `sha-256/<digest>`. Announced in the directory and
    /// compared by the validator, so it has one definition; stable for as long as the base URL
    /// is, as the draft requires. Nothing is served there.
    pub fn hash_prefix(&self) -> String {
        let base = self.prefix.strip_suffix(Self::PATH).unwrap_or(&self.prefix);
        format!("{base}{}", Self::HASH_PATH)
    }

    /// The path of [`AccountUris::hash_prefix`] under the base URL.
    pub const HASH_PATH: &'static str = "/acme/account-hash/";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_uris_sit_under_the_base() {
        for base in [
            "https://acme.internal:14000",
            "https://acme.internal:14000/",
        ] {
            let uris = AccountUris::new(base);
            assert_eq!(
                uris.uri(AccountId(7)),
                "https://acme.internal:14000/acme/acct/7"
            );
            assert_eq!(uris.prefix(), "https://acme.internal:14000/acme/acct/");
            assert_eq!(
                uris.hash_prefix(),
                "https://acme.internal:14000/acme/account-hash/"
            );
        }
    }
}
