//! `ca.issuers` and `ca.active-issuer`: further issuing CAs beside the implicit one ("default",
//! the generated intermediate or `ca.existing`), for issuer rotation.
//!
//! Each issuer is loaded at start-up, and again by every reload (`crate::issuer_reload`), and
//! publishes its own CRLs; which one signs new certificates is `ca.active-issuer` until an
//! operator runs `certeasy admin ca activate`, which stores the choice in the database for every
//! instance (`ra::issuers`).

use std::path::PathBuf;

use issuance::IssuerName;
use issuance::IssuerSettings;
use schemars::JsonSchema;
use serde::Deserialize;
use serde::Serialize;

use super::entries::deserialize_optional_path;
use super::pkcs11;
use super::pkcs11::Pkcs11Config;
use super::schema;

/// One entry of `ca.issuers`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct IssuerConfig {
    /// The issuer's name, `[a-z0-9-]{1,32}`, unique, not `default`: it names the issuer in
    /// `certeasy admin ca`, in the database, and in its CRLs' URL (`<crl.base-url>/<name>/`).
    pub name: String,
    /// PEM file of the issuing CA certificate.
    #[schemars(with = "schema::Path")]
    pub certificate: PathBuf,
    /// Its private key, PEM (PKCS#8); or give `pkcs11` instead, exactly one of the two.
    #[serde(default, deserialize_with = "deserialize_optional_path")]
    #[schemars(with = "Option<schema::Path>")]
    pub private_key: Option<PathBuf>,
    /// The key on a PKCS#11 token instead of `private-key`, as `ca.existing.pkcs11`.
    #[serde(default)]
    pub pkcs11: Option<Pkcs11Config>,
    /// Optional PEM file of further CA certificates up to the root.
    #[serde(default, deserialize_with = "deserialize_optional_path")]
    #[schemars(with = "Option<schema::Path>")]
    pub chain: Option<PathBuf>,
    /// Alternate chains of this issuer (RFC 8555 §7.4.2), as `ca.existing.alternate-chains`.
    #[serde(default)]
    #[schemars(with = "Vec<schema::Path>")]
    pub alternate_chains: Vec<PathBuf>,
}

/// The key path of entry `index`, for messages.
fn at_issuer(index: usize) -> String {
    format!("ca.issuers[{index}]")
}

/// The default of `ca.active-issuer`: the implicit issuer.
pub fn default_active_issuer() -> String {
    IssuerName::DEFAULT.to_owned()
}

/// What is wrong with `issuers` and `active`, as (key path, message), all at once.
pub(super) fn problems(issuers: &[IssuerConfig], active: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut names = vec![IssuerName::DEFAULT];
    for (index, issuer) in issuers.iter().enumerate() {
        let at = |key: &str| format!("ca.issuers[{index}].{key}");
        if let Err(why) = IssuerName::new(&issuer.name) {
            found.push((at("name"), why));
        } else if names.contains(&issuer.name.as_str()) {
            found.push((
                at("name"),
                format!(
                    "{:?} is taken: names are unique, and \"default\" is the implicit issuer's",
                    issuer.name
                ),
            ));
        }
        names.push(issuer.name.as_str());
        if let Err(problem) = pkcs11::key_source(
            &at_issuer(index),
            issuer.private_key.as_ref(),
            issuer.pkcs11.as_ref(),
        ) {
            found.push(problem);
        }
        if let Some(block) = &issuer.pkcs11 {
            found.extend(block.problems(&at("pkcs11")));
        }
    }
    if !names.contains(&active) {
        found.push((
            "ca.active-issuer".to_owned(),
            format!(
                "{active:?} is not a configured issuer ({})",
                names.join(", ")
            ),
        ));
    }
    found
}

/// The issuers as the CA loads them; entries [`problems`] refuses are never reached.
pub fn settings(issuers: &[IssuerConfig]) -> anyhow::Result<Vec<IssuerSettings>> {
    issuers
        .iter()
        .enumerate()
        .map(|(index, issuer)| {
            let name = IssuerName::new(&issuer.name).map_err(anyhow::Error::msg)?;
            let private_key = pkcs11::key_source(
                &at_issuer(index),
                issuer.private_key.as_ref(),
                issuer.pkcs11.as_ref(),
            )
            .map_err(|(key, why)| anyhow::anyhow!("{key} {why}"))?;
            Ok(IssuerSettings {
                name,
                certificate: issuer.certificate.clone(),
                private_key,
                chain: issuer.chain.clone(),
                alternate_chains: issuer.alternate_chains.clone(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issuer(name: &str) -> IssuerConfig {
        IssuerConfig {
            name: name.to_owned(),
            certificate: PathBuf::from("/ca/int.pem"),
            private_key: Some(PathBuf::from("/ca/int.key")),
            pkcs11: None,
            chain: None,
            alternate_chains: Vec::new(),
        }
    }

    #[test]
    fn names_are_unique_valid_and_the_active_one_is_configured() {
        assert!(problems(&[issuer("int-2027")], "int-2027").is_empty());
        assert!(problems(&[], "default").is_empty());
        let found = problems(
            &[issuer("default"), issuer("Bad"), issuer("a"), issuer("a")],
            "nope",
        );
        let paths: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "ca.issuers[0].name",
                "ca.issuers[1].name",
                "ca.issuers[3].name",
                "ca.active-issuer"
            ]
        );
    }

    /// An issuer's key is in a file or on a token, exactly one; the token block is checked
    /// under the entry's own key path, and becomes the issuer's key source.
    #[test]
    fn an_issuer_key_is_a_file_or_a_token_block() {
        let token = Pkcs11Config {
            module: PathBuf::from("/usr/lib/softhsm/libsofthsm2.so"),
            token_label: Some("certeasy".to_owned()),
            slot: None,
            key_label: "int-2027".to_owned(),
            pin_file: PathBuf::from("/etc/certeasy/pin"),
        };
        let on_token = IssuerConfig {
            private_key: None,
            pkcs11: Some(token.clone()),
            ..issuer("int-2027")
        };
        assert!(problems(std::slice::from_ref(&on_token), "default").is_empty());
        let loaded = settings(std::slice::from_ref(&on_token)).unwrap();
        assert!(matches!(
            loaded[0].private_key,
            issuance::KeySource::Pkcs11(_)
        ));

        let both = IssuerConfig {
            pkcs11: Some(token),
            ..issuer("int-2027")
        };
        let neither = IssuerConfig {
            private_key: None,
            ..issuer("int-2028")
        };
        let found = problems(&[both, neither], "default");
        let paths: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            ["ca.issuers[0].pkcs11", "ca.issuers[1].private-key"],
            "{found:?}"
        );
    }
}
