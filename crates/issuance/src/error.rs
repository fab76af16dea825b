//! The one error type of the issuance crate.

use std::path::PathBuf;

/// Why a CA could not be loaded or a certificate, CSR or CRL could not be handled.
///
/// `BadCsr` is the client's fault and maps to the ACME problem type of the same name (an
/// unacceptable CSR key included: `badPublicKey` is for JWS keys); everything else is the
/// operator's or the server's.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The CSR is malformed, badly signed, names the wrong identifiers, or holds a key of a type
    /// or size this CA does not certify.
    #[error("{0}")]
    BadCsr(String),
    /// A CA file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The CA files are unusable (not a CA, key does not match, expired, incomplete).
    #[error("{0}")]
    InvalidCa(String),
    /// Building or signing a certificate or CRL failed.
    #[error("signing failed: {0}")]
    Signing(String),
    /// The caller asked for something the CA cannot produce (e.g. an empty validity window).
    #[error("{0}")]
    InvalidRequest(String),
    /// An order names a profile this CA does not offer (ACME `invalidProfile`).
    #[error("profile {name:?} is not offered; the profiles are: {known}")]
    UnknownProfile {
        /// The name asked for.
        name: String,
        /// The offered names, comma-separated.
        known: String,
    },
    /// An order holds identifiers of a type its profile does not certify (ACME
    /// `rejectedIdentifier`).
    #[error("profile {profile:?} certifies only identifiers of type {allowed}")]
    IdentifierNotAllowed {
        /// The profile.
        profile: String,
        /// Its identifier types, comma-separated.
        allowed: String,
        /// The refused identifiers.
        identifiers: Vec<acme_core::identifier::Identifier>,
    },
    /// An order's notBefore/notAfter fall outside its profile's limits (ACME `malformed`).
    #[error("{0}")]
    BadValidity(String),
    /// The operator's profile definitions are unusable.
    #[error("{0}")]
    InvalidProfile(String),
    /// A key algorithm name that is not one of the supported ones.
    #[error(
        "unknown key algorithm {0:?}; use one of ecdsa-p256, ecdsa-p384, rsa-2048, rsa-3072, rsa-4096"
    )]
    UnknownKeyAlgorithm(String),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn signing(err: rcgen::Error) -> Self {
        Self::Signing(err.to_string())
    }
}
