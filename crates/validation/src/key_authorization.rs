//! The digests of a key authorization that dns-01 and tls-alpn-01 publish.

use aws_lc_rs::digest;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// SHA-256 of the key authorization (the tls-alpn-01 `acmeIdentifier` content).
pub(crate) fn sha256(key_authorization: &str) -> [u8; 32] {
    let digest = digest::digest(&digest::SHA256, key_authorization.as_bytes());
    let mut out = [0_u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// base64url(SHA-256(key authorization)) without padding: the dns-01 TXT value (RFC 8555 §8.4).
pub(crate) fn dns01_txt_value(key_authorization: &str) -> String {
    URL_SAFE_NO_PAD.encode(sha256(key_authorization))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn txt_value_matches_rfc_8555_example_shape() {
        // 32 bytes of digest are 43 base64url characters without padding.
        let value = dns01_txt_value("token.thumbprint");
        assert_eq!(value.len(), 43);
        assert!(!value.contains('=') && !value.contains('+') && !value.contains('/'));
        assert_eq!(
            URL_SAFE_NO_PAD.decode(&value).unwrap(),
            sha256("token.thumbprint")
        );
    }
}
