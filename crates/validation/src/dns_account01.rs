//! dns-account-01 (draft-ietf-acme-dns-account-label-02): dns-01's TXT record and value, at a
//! name scoped to the account, `_<label>._acme-challenge.<name>`, so that several accounts (an
//! HA pair, several regions) validate one name at once without overwriting each other's record.
//!
//! The label is `base32(SHA-256(account URL)[0..10])` in lower case (RFC 4648 alphabet, no
//! padding: ten octets are exactly sixteen characters). The account URL is the one the server
//! hands out (`Location` of new-account), byte for byte. A wildcard validates its base name, as
//! dns-01 does.

use acme_core::identifier::Identifier;
use aws_lc_rs::digest;

use crate::context::CheckContext;
use crate::dns01;
use crate::evidence::Seen;
use crate::failure::Failure;

/// Octets of the account URL's SHA-256 that name the label.
const LABEL_OCTETS: usize = 10;

/// The account label without its leading underscore: 16 lower-case base32 characters.
pub(crate) fn account_label(account_uri: &str) -> String {
    let hash = digest::digest(&digest::SHA256, account_uri.as_bytes());
    // Ten octets are exactly sixteen characters, so there is no padding to leave out; the draft
    // writes the label in lower case.
    data_encoding::BASE32_NOPAD
        .encode(&hash.as_ref()[..LABEL_OCTETS])
        .to_ascii_lowercase()
}

/// The validation domain name for `base_name` (a wildcard's base) and the account.
pub(crate) fn validation_name(base_name: &str, account_uri: &str) -> String {
    format!(
        "_{}._acme-challenge.{base_name}",
        account_label(account_uri)
    )
}

pub(crate) async fn validate(
    context: &CheckContext,
    identifier: &Identifier,
    key_authorization: &str,
    account_uri: &str,
) -> Result<Seen, Failure> {
    let name = validation_name(identifier.base_name(), account_uri);
    dns01::validate_at(context, &name, key_authorization).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_matches_the_published_example() {
        // The example clients document for draft-ietf-acme-dns-account-label (Certify The Web,
        // Posh-ACME): this account URL gets the label `_ujmmovf2vn55tgye`.
        assert_eq!(
            account_label("https://example.com/acme/acct/ExampleAccount"),
            "ujmmovf2vn55tgye"
        );
        assert_eq!(
            validation_name(
                "example.org",
                "https://example.com/acme/acct/ExampleAccount"
            ),
            "_ujmmovf2vn55tgye._acme-challenge.example.org"
        );
    }

    #[test]
    fn labels_differ_per_account_and_are_dns_labels() {
        let a = account_label("https://ca.test/acme/acct/1");
        let b = account_label("https://ca.test/acme/acct/2");
        assert_ne!(a, b);
        for label in [a, b] {
            assert_eq!(label.len(), 16);
            assert!(
                label
                    .bytes()
                    .all(|c| c.is_ascii_lowercase() || (b'2'..=b'7').contains(&c)),
                "{label}"
            );
        }
    }
}
