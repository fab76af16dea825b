//! Strict base64url without padding, as RFC 7515 §2 requires for every JWS member.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::error::Error;

/// Encodes bytes as base64url without padding.
pub(crate) fn encode(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Decodes base64url without padding; `what` names the field for the error detail.
///
/// Padding, the standard alphabet, whitespace and non-canonical trailing bits are all refused so
/// that one JWS has exactly one encoding and nothing can be smuggled past a signature.
pub(crate) fn decode(value: &str, what: &str) -> Result<Vec<u8>, Error> {
    if value.contains('=') {
        return Err(Error::malformed(format!(
            "{what} is base64url with '=' padding; JWS requires base64url without padding \
             (RFC 7515 §2)"
        )));
    }
    if let Some(c) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        let hint = match c {
            '+' | '/' => " (standard base64 alphabet; use the URL-safe alphabet with '-' and '_')",
            _ => "",
        };
        return Err(Error::malformed(format!(
            "{what} contains {c:?}, which is not a base64url character{hint}"
        )));
    }
    URL_SAFE_NO_PAD
        .decode(value)
        .map_err(|e| Error::malformed(format!("{what} is not valid base64url: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        assert_eq!(encode(b"\xfb\xff"), "-_8");
        assert_eq!(decode("-_8", "x").unwrap(), b"\xfb\xff");
        assert_eq!(decode("", "x").unwrap(), b"");
    }

    #[test]
    fn refuses_padding_standard_alphabet_and_junk() {
        for bad in ["-_8=", "+/8", "ab cd", "abc\n", "a", "-_9"] {
            let err = decode(bad, "payload").unwrap_err();
            assert!(matches!(err, Error::Malformed(_)), "{bad:?} accepted");
            assert!(err.to_string().starts_with("payload"), "{err}");
        }
        assert!(
            decode("+/8", "x")
                .unwrap_err()
                .to_string()
                .contains("URL-safe")
        );
        assert!(
            decode("YQ==", "x")
                .unwrap_err()
                .to_string()
                .contains("padding")
        );
    }
}
