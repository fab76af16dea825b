//! The `pkcs11:` block: an issuing CA key kept on a PKCS#11 token (an HSM) instead of in a file.
//!
//! Used by `ca.existing` and by each entry of `ca.issuers`, in place of `private-key` (exactly
//! one of the two). Only names are configured here, never the PIN itself: the PIN is in a file
//! readable by its owner only, so the configuration can be shown, diffed and backed up.
//!
//! ```yaml
//! pkcs11:
//!   module: /usr/lib/softhsm/libsofthsm2.so
//!   token-label: certeasy        # or slot: 1234 (exactly one)
//!   key-label: issuing-2027
//!   pin-file: /etc/certeasy/token.pin
//! ```

use std::path::PathBuf;

use issuance::KeySource;
use issuance::Pkcs11Key;
use issuance::TokenSelector;
use schemars::JsonSchema;
use serde::Deserialize;
use serde::Serialize;

use super::schema;

/// The longest token label PKCS#11 can hold (CK_TOKEN_INFO.label is 32 bytes).
const TOKEN_LABEL_MAX: usize = 32;

/// A private key on a PKCS#11 token.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Pkcs11Config {
    /// The token vendor's PKCS#11 module (shared library), e.g.
    /// `/usr/lib/softhsm/libsofthsm2.so` for SoftHSM2.
    #[schemars(with = "schema::Path")]
    pub module: PathBuf,
    /// The label of the token holding the key (`softhsm2-util --init-token --label`). Exactly
    /// one of `token-label` and `slot`.
    #[serde(default)]
    pub token_label: Option<String>,
    /// The slot id of the token holding the key. Exactly one of `token-label` and `slot`.
    #[serde(default)]
    pub slot: Option<u64>,
    /// The label (CKA_LABEL) of the private key; its public key or certificate object on the
    /// token carries the same label.
    pub key_label: String,
    /// A file holding the token's user PIN on one line; it must be readable by its owner only
    /// (mode 0600 or 0400), or the start is refused.
    #[schemars(with = "schema::Path")]
    pub pin_file: PathBuf,
}

impl Pkcs11Config {
    /// What is wrong with the block at key path `at` (e.g. `ca.existing.pkcs11`), as (key path,
    /// message).
    pub(super) fn problems(&self, at: &str) -> Vec<(String, String)> {
        let key = |name: &str| format!("{at}.{name}");
        let mut found = Vec::new();
        if self.module.as_os_str().is_empty() {
            found.push((
                key("module"),
                "is empty: name the token's PKCS#11 module".to_owned(),
            ));
        }
        match (&self.token_label, self.slot) {
            (Some(_), Some(_)) => found.push((
                key("slot"),
                format!("is set and so is {at}.token-label: name the token by one of them"),
            )),
            (None, None) => found.push((
                key("token-label"),
                "is required (or slot): which token of the module holds the key".to_owned(),
            )),
            (Some(label), None) if label.is_empty() || label.len() > TOKEN_LABEL_MAX => {
                found.push((
                    key("token-label"),
                    format!(
                        "must be 1 to {TOKEN_LABEL_MAX} bytes long, as PKCS#11 token labels are"
                    ),
                ));
            }
            _ => {}
        }
        if self.key_label.is_empty() {
            found.push((
                key("key-label"),
                "is empty: give the private key's label".to_owned(),
            ));
        }
        if self.pin_file.as_os_str().is_empty() {
            found.push((
                key("pin-file"),
                "is empty: name the file holding the user PIN".to_owned(),
            ));
        }
        found
    }

    /// The key as the CA loads it; a block [`Pkcs11Config::problems`] refuses never gets here.
    pub fn key(&self) -> Pkcs11Key {
        Pkcs11Key {
            module: self.module.clone(),
            token: match (&self.token_label, self.slot) {
                (_, Some(slot)) => TokenSelector::Slot(slot),
                (Some(label), None) => TokenSelector::Label(label.clone()),
                (None, None) => TokenSelector::Label(String::new()),
            },
            key_label: self.key_label.clone(),
            pin_file: self.pin_file.clone(),
        }
    }
}

/// Where a configured issuer's key is: `private-key` or `pkcs11:`. `Err` says why not, for the
/// key path `at` (the entry holding both keys), when neither or both are given.
pub fn key_source(
    at: &str,
    private_key: Option<&PathBuf>,
    pkcs11: Option<&Pkcs11Config>,
) -> Result<KeySource, (String, String)> {
    match (private_key, pkcs11) {
        (Some(path), None) => Ok(KeySource::File(path.clone())),
        (None, Some(block)) => Ok(KeySource::Pkcs11(block.key())),
        (Some(_), Some(_)) => Err((
            format!("{at}.pkcs11"),
            format!(
                "is set and so is {at}.private-key: the key is in a file or on a token, give one of them"
            ),
        )),
        (None, None) => Err((
            format!("{at}.private-key"),
            format!("is required (or {at}.pkcs11 for a key on a PKCS#11 token)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block() -> Pkcs11Config {
        Pkcs11Config {
            module: PathBuf::from("/usr/lib/softhsm/libsofthsm2.so"),
            token_label: Some("certeasy".to_owned()),
            slot: None,
            key_label: "issuing".to_owned(),
            pin_file: PathBuf::from("/etc/certeasy/token.pin"),
        }
    }

    #[test]
    fn a_block_names_one_token_and_a_key() {
        assert!(block().problems("ca.existing.pkcs11").is_empty());
        assert_eq!(
            block().key().token,
            TokenSelector::Label("certeasy".to_owned())
        );
        let by_slot = Pkcs11Config {
            token_label: None,
            slot: Some(7),
            ..block()
        };
        assert!(by_slot.problems("x").is_empty());
        assert_eq!(by_slot.key().token, TokenSelector::Slot(7));

        let both = Pkcs11Config {
            slot: Some(7),
            ..block()
        };
        let neither = Pkcs11Config {
            token_label: None,
            key_label: String::new(),
            ..block()
        };
        let paths = |c: &Pkcs11Config| -> Vec<String> {
            c.problems("ca.existing.pkcs11")
                .into_iter()
                .map(|(p, _)| p)
                .collect()
        };
        assert_eq!(paths(&both), ["ca.existing.pkcs11.slot"]);
        assert_eq!(
            paths(&neither),
            [
                "ca.existing.pkcs11.token-label",
                "ca.existing.pkcs11.key-label"
            ]
        );
        let long = Pkcs11Config {
            token_label: Some("x".repeat(33)),
            ..block()
        };
        assert_eq!(paths(&long), ["ca.existing.pkcs11.token-label"]);
    }

    #[test]
    fn exactly_one_of_private_key_and_pkcs11() {
        let file = PathBuf::from("/ca/int.key");
        assert_eq!(
            key_source("ca.existing", Some(&file), None),
            Ok(KeySource::File(file.clone()))
        );
        assert!(matches!(
            key_source("ca.existing", None, Some(&block())),
            Ok(KeySource::Pkcs11(_))
        ));
        assert_eq!(
            key_source("ca.existing", Some(&file), Some(&block()))
                .unwrap_err()
                .0,
            "ca.existing.pkcs11"
        );
        assert_eq!(
            key_source("ca.issuers[0]", None, None).unwrap_err().0,
            "ca.issuers[0].private-key"
        );
    }
}
