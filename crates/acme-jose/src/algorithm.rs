//! The JWS algorithms an ACME account may sign with.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// A supported JWS `alg`. Anything else, `none` and MAC algorithms included, is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    Rs256,
    /// RSASSA-PSS with SHA-256 and MGF1-SHA-256, salt length 32.
    Ps256,
    /// ECDSA on P-256 with SHA-256, signature as fixed-length `r||s`.
    Es256,
    /// ECDSA on P-384 with SHA-384, signature as fixed-length `r||s`.
    Es384,
    /// Ed25519 (RFC 8037).
    EdDsa,
}

impl Algorithm {
    /// Every supported algorithm, in the order to advertise them in a `badSignatureAlgorithm`
    /// problem's `algorithms` field.
    pub const ALL: [Algorithm; 5] = [
        Algorithm::Es256,
        Algorithm::Es384,
        Algorithm::Rs256,
        Algorithm::Ps256,
        Algorithm::EdDsa,
    ];

    /// The registered JWS name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rs256 => "RS256",
            Self::Ps256 => "PS256",
            Self::Es256 => "ES256",
            Self::Es384 => "ES384",
            Self::EdDsa => "EdDSA",
        }
    }

    /// The fixed signature length, for algorithms where it does not depend on the key.
    pub(crate) fn fixed_signature_len(self) -> Option<usize> {
        match self {
            Self::Es256 | Self::EdDsa => Some(64),
            Self::Es384 => Some(96),
            Self::Rs256 | Self::Ps256 => None,
        }
    }

    fn supported_list() -> String {
        Self::ALL
            .iter()
            .map(|a| a.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Algorithm {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "RS256" => Ok(Self::Rs256),
            "PS256" => Ok(Self::Ps256),
            "ES256" => Ok(Self::Es256),
            "ES384" => Ok(Self::Es384),
            "EdDSA" => Ok(Self::EdDsa),
            "none" => Err(Error::bad_alg(format!(
                "JWS alg \"none\" is not allowed: ACME requests must be signed; supported: {}",
                Self::supported_list()
            ))),
            "HS256" | "HS384" | "HS512" => Err(Error::bad_alg(format!(
                "JWS alg \"{s}\" is a MAC algorithm, which ACME forbids; sign with an asymmetric \
                 key using one of: {}",
                Self::supported_list()
            ))),
            other => Err(Error::bad_alg(format!(
                "JWS alg \"{other}\" is not supported; supported: {}",
                Self::supported_list()
            ))),
        }
    }
}
