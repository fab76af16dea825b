//! What the operator configures about the CA.

use std::path::PathBuf;

use time::Duration;

use crate::key_algorithm::KeyAlgorithm;

/// How the CA is created or found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaSettings {
    /// Where a generated CA lives (`root.pem`, `root.key`, `intermediate.pem`, `intermediate.key`).
    /// Created with mode 0700 if missing.
    pub dir: PathBuf,
    /// Algorithm of generated root and intermediate keys.
    pub key_algorithm: KeyAlgorithm,
    /// Organization (O) of the generated CA subjects.
    pub organization: String,
    /// Common name of the generated root.
    pub root_common_name: String,
    /// Common name of the generated intermediate.
    pub intermediate_common_name: String,
    /// Lifetime of a generated root.
    pub root_validity: Duration,
    /// Lifetime of a generated intermediate.
    pub intermediate_validity: Duration,
    /// An operator-supplied CA to use instead of generating one.
    pub existing: Option<ExistingCa>,
}

impl CaSettings {
    /// Defaults for everything but the directory.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            key_algorithm: KeyAlgorithm::default(),
            organization: "Certeasy".to_owned(),
            root_common_name: "Certeasy Root CA".to_owned(),
            intermediate_common_name: "Certeasy Intermediate CA".to_owned(),
            root_validity: Duration::days(3653),
            intermediate_validity: Duration::days(1826),
            existing: None,
        }
    }
}

/// Files of an operator-supplied issuing CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExistingCa {
    /// PEM of the issuing CA certificate. Further certificates in the same file are treated as
    /// if they came first in `chain`.
    pub certificate: PathBuf,
    /// Its private key: PEM, PKCS#8 (SEC1 and PKCS#1 are accepted too), EC or RSA.
    pub private_key: PathBuf,
    /// PEM of the further CA certificates, issuer of `certificate` first, up to and including
    /// the root. Without it the issuing certificate is itself the trust anchor.
    pub chain: Option<PathBuf>,
}
