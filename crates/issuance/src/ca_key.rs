//! The issuing CA's signer, wherever its private key is kept.
//!
//! rcgen signs through the [`rcgen::SigningKey`] trait, so one type that is either a key read
//! from a file or a handle to a key on a PKCS#11 token lets every signing path (leaves, CRLs,
//! the start-up probe) stay the same for both. A token key is only a handle: the private key
//! never enters this process.

use std::fmt;

use rcgen::KeyPair;
use rcgen::PublicKeyData;
use rcgen::SignatureAlgorithm;
use rcgen::SigningKey;

use crate::pkcs11::TokenKey;

/// The issuing CA's signing key.
pub enum CaKey {
    /// A key loaded from a PEM file, held in memory.
    File(KeyPair),
    /// A key on a PKCS#11 token: each signature is made on the token.
    Token(TokenKey),
}

impl CaKey {
    /// The public key as X.509 puts it in the subjectPublicKey BIT STRING (EC point, or the
    /// PKCS#1 RSAPublicKey).
    pub fn public_key_raw(&self) -> &[u8] {
        self.der_bytes()
    }
}

impl fmt::Debug for CaKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(key) => f
                .debug_tuple("File")
                .field(&key.algorithm())
                .finish_non_exhaustive(),
            Self::Token(key) => f.debug_tuple("Token").field(key).finish(),
        }
    }
}

impl PublicKeyData for CaKey {
    fn der_bytes(&self) -> &[u8] {
        match self {
            Self::File(key) => key.der_bytes(),
            Self::Token(key) => key.der_bytes(),
        }
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        match self {
            Self::File(key) => key.algorithm(),
            Self::Token(key) => key.algorithm(),
        }
    }
}

impl SigningKey for CaKey {
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        match self {
            Self::File(key) => key.sign(msg),
            Self::Token(key) => key.sign(msg),
        }
    }
}

impl From<KeyPair> for CaKey {
    fn from(key: KeyPair) -> Self {
        Self::File(key)
    }
}

/// Generates a key pair on the token `key` names, labelled `key.key_label`, for the CA
/// ceremony: sensitive and not extractable, so it signs and never leaves the token. Refused if
/// a private key of that label is already there.
pub fn generate_key_on_token(
    key: &crate::settings::Pkcs11Key,
    algorithm: crate::key_algorithm::KeyAlgorithm,
) -> Result<CaKey, crate::error::Error> {
    crate::pkcs11::generate_token_key(key, algorithm).map(CaKey::Token)
}
