//! `ca.issuers` and `ca.active-issuer`: further issuing CAs beside the implicit one ("default",
//! the generated intermediate or `ca.existing`), for issuer rotation.
//!
//! Each issuer is loaded at start-up and publishes its own CRLs; which one signs new
//! certificates is `ca.active-issuer` until an operator runs `certeasy admin ca activate`, which
//! stores the choice in the database for every instance (`ra::issuers`).

use std::path::PathBuf;

use issuance::IssuerName;
use issuance::IssuerSettings;
use issuance::KeySource;
use schemars::JsonSchema;
use serde::Deserialize;
use serde::Serialize;

use super::entries::deserialize_optional_path;
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
    /// Its private key, PEM (PKCS#8).
    // Hook: a `pkcs11:` block (exactly one of the two) once `config/pkcs11.rs` exists.
    #[serde(default, deserialize_with = "deserialize_optional_path")]
    #[schemars(with = "Option<schema::Path>")]
    pub private_key: Option<PathBuf>,
    /// Optional PEM file of further CA certificates up to the root.
    #[serde(default, deserialize_with = "deserialize_optional_path")]
    #[schemars(with = "Option<schema::Path>")]
    pub chain: Option<PathBuf>,
    /// Alternate chains of this issuer (RFC 8555 §7.4.2), as `ca.existing.alternate-chains`.
    #[serde(default)]
    #[schemars(with = "Vec<schema::Path>")]
    pub alternate_chains: Vec<PathBuf>,
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
        if issuer.private_key.is_none() {
            found.push((at("private-key"), "is required".to_owned()));
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
        .map(|issuer| {
            let name = IssuerName::new(&issuer.name).map_err(anyhow::Error::msg)?;
            let private_key = issuer
                .private_key
                .clone()
                .ok_or_else(|| anyhow::anyhow!("ca.issuers: issuer {name} has no private-key"))?;
            Ok(IssuerSettings {
                name,
                certificate: issuer.certificate.clone(),
                private_key: KeySource::File(private_key),
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
}
