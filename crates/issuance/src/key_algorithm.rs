//! The key algorithms Certeasy generates its CA keys with and certifies subscriber keys of.

use std::fmt;
use std::str::FromStr;

use rcgen::KeyPair;
use rcgen::RsaKeySize;

use crate::error::Error;

/// Algorithm (and size) of a generated CA key, or of a CSR's key (exactly the keys
/// `check_csr` accepts, which profiles list by these names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KeyAlgorithm {
    /// ECDSA on NIST P-256 with SHA-256: small, fast, universally supported.
    #[default]
    EcdsaP256,
    /// ECDSA on NIST P-384 with SHA-384.
    EcdsaP384,
    /// RSA 2048-bit, PKCS#1 v1.5 with SHA-256.
    Rsa2048,
    /// RSA 3072-bit, PKCS#1 v1.5 with SHA-256.
    Rsa3072,
    /// RSA 4096-bit, PKCS#1 v1.5 with SHA-256 (slow to generate: seconds).
    Rsa4096,
}

impl KeyAlgorithm {
    /// Every supported algorithm, in the order of [`KeyAlgorithm::as_str`] documentation.
    pub const ALL: [Self; 5] = [
        Self::EcdsaP256,
        Self::EcdsaP384,
        Self::Rsa2048,
        Self::Rsa3072,
        Self::Rsa4096,
    ];

    /// The configuration name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EcdsaP256 => "ecdsa-p256",
            Self::EcdsaP384 => "ecdsa-p384",
            Self::Rsa2048 => "rsa-2048",
            Self::Rsa3072 => "rsa-3072",
            Self::Rsa4096 => "rsa-4096",
        }
    }

    /// True for the RSA variants: their leaves also get keyEncipherment.
    pub fn is_rsa(self) -> bool {
        matches!(self, Self::Rsa2048 | Self::Rsa3072 | Self::Rsa4096)
    }

    pub(crate) fn generate(self) -> Result<KeyPair, Error> {
        let rsa = |size| KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, size);
        match self {
            Self::EcdsaP256 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256),
            Self::EcdsaP384 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384),
            Self::Rsa2048 => rsa(RsaKeySize::_2048),
            Self::Rsa3072 => rsa(RsaKeySize::_3072),
            Self::Rsa4096 => rsa(RsaKeySize::_4096),
        }
        .map_err(|e| Error::Signing(format!("cannot generate a {} key: {e}", self.as_str())))
    }
}

impl fmt::Display for KeyAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for KeyAlgorithm {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|alg| alg.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| Error::UnknownKeyAlgorithm(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::KeyAlgorithm;
    use crate::error::Error;

    #[test]
    fn names_round_trip() {
        for alg in KeyAlgorithm::ALL {
            assert_eq!(alg.as_str().parse::<KeyAlgorithm>().unwrap(), alg);
            assert_eq!(alg.to_string(), alg.as_str());
        }
        assert_eq!(
            "ECDSA-P384".parse::<KeyAlgorithm>().unwrap(),
            KeyAlgorithm::EcdsaP384
        );
        assert!(
            matches!("ed25519".parse::<KeyAlgorithm>(), Err(Error::UnknownKeyAlgorithm(s)) if s == "ed25519")
        );
        assert_eq!(KeyAlgorithm::default(), KeyAlgorithm::EcdsaP256);
        assert!(KeyAlgorithm::Rsa3072.is_rsa());
        assert!(!KeyAlgorithm::EcdsaP256.is_rsa());
    }
}
