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
    /// Where the root key goes when a first start generates the CA (never into `dir`).
    pub generated_root_key: GeneratedRootKey,
    /// Alternate chains of the issuing CA in `existing` (RFC 8555 §7.4.2,
    /// `ca.existing.alternate-chains`): PEM files, each a certificate of the issuing CA's subject
    /// and key signed by another issuer, then that issuer's chain (see the `alternate_chains`
    /// module). Not used for a generated CA.
    pub alternate_chains: Vec<PathBuf>,
}

/// What a first start does with the private key of the root it generates. Nothing Certeasy
/// runs signs with the root again (the intermediates are signed at once), so the key is kept
/// only for the operator: for signing the next intermediate (`certeasy ca new-intermediate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GeneratedRootKey {
    /// Written to this file (mode 0600, its directory created 0700), which must lie outside the
    /// CA directory; a start warns while it is still there.
    KeepAt(PathBuf),
    /// Not written anywhere: a throw-away CA (test mode) never needs another intermediate.
    Discard,
}

impl GeneratedRootKey {
    /// `<dir>.root-offline/root.key`: beside `dir`, never inside it. For a data directory this
    /// is on the same volume and writable by the same user, yet out of what is copied or
    /// mounted as the data directory. A directory named `.` or `..` is made absolute first, so the sibling is not inside it.
    pub fn beside(dir: &std::path::Path) -> Self {
        let mut dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        if dir.file_name().is_none() {
            dir = dir.canonicalize().unwrap_or(dir);
        }
        let mut name = dir
            .file_name()
            .map(std::ffi::OsStr::to_os_string)
            .unwrap_or_else(|| "certeasy".into());
        name.push(".root-offline");
        let sibling = match dir.file_name() {
            Some(_) => dir.with_file_name(name),
            None => dir.join(name),
        };
        Self::KeepAt(sibling.join("root.key"))
    }
}

impl CaSettings {
    /// Defaults for everything but the directory; the generated root key goes beside the CA
    /// directory ([`GeneratedRootKey::beside`]).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        Self {
            generated_root_key: GeneratedRootKey::beside(&dir),
            dir,
            key_algorithm: KeyAlgorithm::default(),
            organization: "Certeasy".to_owned(),
            root_common_name: "Certeasy Root CA".to_owned(),
            intermediate_common_name: "Certeasy Intermediate CA".to_owned(),
            root_validity: Duration::days(3653),
            intermediate_validity: Duration::days(1826),
            alternate_chains: Vec::new(),
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
    /// Where its private key is: a file, or a PKCS#11 token.
    pub private_key: KeySource,
    /// PEM of the further CA certificates, issuer of `certificate` first, up to and including
    /// the root. Without it the issuing certificate is itself the trust anchor.
    pub chain: Option<PathBuf>,
}

/// Where an issuing CA's private key is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// A PEM file: PKCS#8 (SEC1 and PKCS#1 are accepted too), EC or RSA. The key is read into
    /// memory.
    File(PathBuf),
    /// A key on a PKCS#11 token (an HSM): it signs there and never leaves it.
    Pkcs11(Pkcs11Key),
}

/// A private key on a PKCS#11 token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pkcs11Key {
    /// The PKCS#11 module (shared library) of the token's vendor, e.g.
    /// `/usr/lib/softhsm/libsofthsm2.so`.
    pub module: PathBuf,
    /// Which token of the module.
    pub token: TokenSelector,
    /// The key's CKA_LABEL.
    pub key_label: String,
    /// A file holding the user PIN (one line); readable by its owner only.
    pub pin_file: PathBuf,
}

/// How a token is found among a module's slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSelector {
    /// The token's label (CKA_LABEL of the token, as `softhsm2-util --init-token --label` sets).
    Label(String),
    /// The slot id.
    Slot(u64),
}
