//! Several issuing CAs at once (issuer rotation): the implicit issuer "default" (the generated
//! CA's intermediate, or `ca.existing`) and the further ones of `ca.issuers`, each named.
//!
//! Which one signs new certificates is not decided here: the active issuer is stored in the
//! database so that every instance of a cluster switches together (`ra::issuers`). This module
//! loads the configured issuers and names them. An issuer whose certificate has expired is
//! loaded as retired: it signs nothing and publishes no CRL (no certificate it signed can still
//! be valid, since none outlives its issuer), and it does not stop the start.

use std::fmt;
use std::path::Path;
use std::path::PathBuf;
use std::str::FromStr;

use time::OffsetDateTime;

use crate::alternate_chains::AlternateChains;
use crate::error::Error;
use crate::loader;
use crate::loader::LoadedCa;
use crate::pem;
use crate::settings::KeySource;

/// The configured name of an issuer: `[a-z0-9-]{1,32}`, so that it can name a CRL's URL path
/// segment as it is; "default" is the implicit issuer's.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IssuerName(String);

impl IssuerName {
    /// The implicit issuer's name; a NULL issuer in the database means it too.
    pub const DEFAULT: &'static str = "default";

    /// The implicit issuer.
    pub fn implicit() -> Self {
        Self(Self::DEFAULT.to_owned())
    }

    /// A name as configured or asked for; `Err` says what is wrong with it.
    pub fn new(name: &str) -> Result<Self, String> {
        let valid = (1..=32).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if valid {
            Ok(Self(name.to_owned()))
        } else {
            Err(format!(
                "issuer name {name:?} must be 1 to 32 characters of a-z, 0-9 and -"
            ))
        }
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is the implicit issuer, whose CRLs keep the URLs of before rotation existed.
    pub fn is_implicit(&self) -> bool {
        self.0 == Self::DEFAULT
    }
}

impl fmt::Display for IssuerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for IssuerName {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

/// One further issuer of `ca.issuers`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerSettings {
    /// Never "default" (the configuration refuses it).
    pub name: IssuerName,
    /// PEM of the issuing CA certificate, as for `ca.existing`.
    pub certificate: PathBuf,
    /// Where its private key is.
    pub private_key: KeySource,
    /// PEM of the CA certificates above it, up to and including the root.
    pub chain: Option<PathBuf>,
    /// Its alternate chains (RFC 8555 §7.4.2), as for `ca.existing.alternate-chains`.
    pub alternate_chains: Vec<PathBuf>,
}

/// A configured issuer whose certificate had expired when it was loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetiredIssuer {
    pub name: IssuerName,
    /// When its certificate expired.
    pub not_after: OffsetDateTime,
}

/// What loading one configured issuer gave.
pub(crate) enum LoadedIssuer {
    /// Ready to sign: the CA as loaded and its alternate chains; `ca.rs` makes the issuer of
    /// them (this module knows nothing of `Ca`, which knows this one).
    Usable {
        loaded: Box<LoadedCa>,
        alternate_chains: Vec<AlternateChains>,
    },
    /// Expired: listed, never used.
    Retired(RetiredIssuer),
}

/// Loads `settings` as an issuing CA of its own (without a listener intermediate: the
/// listener's certificate is signed under the implicit issuer's root). An expired certificate
/// makes it retired, logged here once; anything else wrong stops the start, as for the implicit
/// issuer.
pub(crate) fn load(settings: &IssuerSettings, now: OffsetDateTime) -> Result<LoadedIssuer, Error> {
    let not_after = issuing_not_after(&settings.certificate)?;
    if not_after <= now {
        tracing::warn!(
            issuer = %settings.name,
            certificate = %settings.certificate.display(),
            %not_after,
            "this issuer's certificate has expired: it is loaded as retired, signs nothing and publishes no CRL; remove it from ca.issuers"
        );
        return Ok(LoadedIssuer::Retired(RetiredIssuer {
            name: settings.name.clone(),
            not_after,
        }));
    }
    let loaded = loader::load(
        &settings.certificate,
        &settings.private_key,
        settings.chain.as_deref(),
        now,
    )?;
    let alternate_chains = AlternateChains::of_loaded(&loaded, &settings.alternate_chains, now)?;
    Ok(LoadedIssuer::Usable {
        loaded: Box::new(loaded),
        alternate_chains,
    })
}

/// The notAfter of the first certificate in `path`, read before the key is touched so that an
/// expired issuer is told apart from a broken one.
fn issuing_not_after(path: &Path) -> Result<OffsetDateTime, Error> {
    let text = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let ders = pem::decode_certificates(&text, path)?;
    let first = ders
        .first()
        .ok_or_else(|| Error::InvalidCa(format!("{}: holds no PEM certificate", path.display())))?;
    let (_, cert) = x509_parser::parse_x509_certificate(first).map_err(|e| {
        Error::InvalidCa(format!(
            "{}: a certificate cannot be parsed: {e}",
            path.display()
        ))
    })?;
    Ok(cert.validity().not_after.to_datetime())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lower_case_url_segments() {
        assert!(IssuerName::new("int-2027").is_ok());
        assert!(IssuerName::new("default").unwrap().is_implicit());
        for bad in ["", "Int", "a/b", "a.b", &"x".repeat(33)] {
            assert!(IssuerName::new(bad).is_err(), "{bad:?}");
        }
    }
}
