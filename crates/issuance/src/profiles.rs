//! Certificate profiles (draft-ietf-acme-profiles): named sets of what a certificate may be,
//! chosen by an order's `profile` field.
//!
//! The operator defines them ([`ProfileDefinition`]); [`Profiles::new`] resolves and checks them
//! once, so the request path and the signer only ever see complete [`Profile`]s. Every decision
//! a profile makes (which one an order gets, its validity window, its identifier types, the key
//! types of its CSRs) is a method here, free of HTTP, so the API and the workers judge alike.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use acme_core::identifier::Identifier;
use acme_core::identifier::IdentifierKind;
use acme_core::ids::AccountId;
use acme_core::status::ChallengeType;
use time::Duration;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::csr::CheckedCsr;
use crate::error::Error;
use crate::issuers::IssuerName;
use crate::key_algorithm::KeyAlgorithm;

/// Lifetime of a certificate whose order does not ask for one, for profiles that set none.
pub const DEFAULT_VALIDITY: Duration = Duration::days(90);
/// Longest lifetime an order may ask for, for profiles that set none (the CA/Browser Forum's
/// 397 days).
pub const DEFAULT_MAX_VALIDITY: Duration = Duration::days(397);
/// The profile an order without `profile` gets, in the shipped set.
pub const SHIPPED_DEFAULT: &str = "tls-server";
/// The shipped profile of short-lived certificates, the only shipped one that certifies IP
/// addresses (as Let's Encrypt's `shortlived`).
pub const SHIPPED_SHORT_LIVED: &str = "short-lived";
/// How long an authorization validated for the shipped short-lived profile serves its orders
/// (Let's Encrypt's 7 hours): an IP address changes hands faster than a domain name.
pub const SHORT_LIVED_AUTHORIZATION_LIFETIME: Duration = Duration::hours(7);

/// A key usage a profile may grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyUsage {
    /// digitalSignature: every TLS key signs the handshake.
    DigitalSignature,
    /// keyEncipherment: RSA key transport (TLS 1.2). Granted to RSA keys only, since an ECDSA
    /// key cannot encipher.
    KeyEncipherment,
}

impl KeyUsage {
    /// Every key usage, in configuration order.
    pub const ALL: [Self; 2] = [Self::DigitalSignature, Self::KeyEncipherment];

    /// The configuration name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DigitalSignature => "digital-signature",
            Self::KeyEncipherment => "key-encipherment",
        }
    }
}

/// An extended key usage a profile may grant. Only the TLS purposes: the CA validates DNS names
/// and IP addresses, which authenticate nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ExtendedKeyUsage {
    /// id-kp-serverAuth.
    ServerAuth,
    /// id-kp-clientAuth.
    ClientAuth,
}

impl ExtendedKeyUsage {
    /// Every extended key usage, in configuration order.
    pub const ALL: [Self; 2] = [Self::ServerAuth, Self::ClientAuth];

    /// The configuration name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ServerAuth => "server-auth",
            Self::ClientAuth => "client-auth",
        }
    }
}

macro_rules! named {
    ($ty:ident, $what:literal) => {
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            type Err = Error;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::ALL
                    .into_iter()
                    .find(|v| v.as_str().eq_ignore_ascii_case(s.trim()))
                    .ok_or_else(|| {
                        let known: Vec<&str> = Self::ALL.iter().map(|v| v.as_str()).collect();
                        Error::InvalidRequest(format!(
                            concat!("unknown ", $what, " {:?}; use one of {}"),
                            s,
                            known.join(", ")
                        ))
                    })
            }
        }
    };
}

named!(KeyUsage, "key usage");
named!(ExtendedKeyUsage, "extended key usage");

/// A profile as the operator writes it. `None` validities fall back to the CA-wide values given
/// to [`Profiles::new`], so the older `issuance.default-validity`/`max-validity` keep their
/// meaning for every profile that does not set its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileDefinition {
    /// Shown to clients in the directory's `meta.profiles`.
    pub description: String,
    /// Lifetime when the order does not ask for one.
    pub validity: Option<Duration>,
    /// Longest lifetime an order may ask for.
    pub max_validity: Option<Duration>,
    /// Key usages of the certificate.
    pub key_usages: Vec<KeyUsage>,
    /// Extended key usages of the certificate.
    pub extended_key_usages: Vec<ExtendedKeyUsage>,
    /// Identifier types an order under this profile may hold.
    pub identifier_types: Vec<IdentifierKind>,
    /// Key types (and sizes) of CSRs this profile certifies.
    pub key_types: Vec<KeyAlgorithm>,
    /// The validation policy (Boulder's validation profiles): lifetimes and limits of orders
    /// under this profile, and who may use it.
    pub validation: ValidationPolicy,
    /// The issuer that signs this profile's certificates; `None` is the active issuer.
    pub issuer: Option<IssuerName>,
}

/// How orders of a profile are validated and who may ask for it. A `None` lifetime or limit is
/// the CA-wide one (`acme.*`): the policy layer resolves it, so each default has one source.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ValidationPolicy {
    /// How long a new authorization stays pending.
    pub pending_authorization_lifetime: Option<Duration>,
    /// How long after its validation an authorization serves orders of this profile: the
    /// expiry of an authorization validated for it, and the limit on reusing any other.
    pub valid_authorization_lifetime: Option<Duration>,
    /// How long a new order lives (never longer than its authorizations).
    pub order_lifetime: Option<Duration>,
    /// Most identifiers one order may hold.
    pub max_identifiers: Option<usize>,
    /// Challenge types offered; empty offers every type the identifier allows.
    pub challenge_types: Vec<ChallengeType>,
    /// Accounts that may use the profile; with `eab_key_ids` also empty, every account may.
    pub accounts: Vec<AccountId>,
    /// Accounts bound with one of these external account binding keys may use the profile.
    pub eab_key_ids: Vec<String>,
}

impl ValidationPolicy {
    /// Whether any account may use the profile.
    pub fn open_to_all(&self) -> bool {
        self.accounts.is_empty() && self.eab_key_ids.is_empty()
    }

    /// Whether the account `id`, bound with the EAB key `eab_kid` if any, may use the profile.
    pub fn allows_account(&self, id: AccountId, eab_kid: Option<&str>) -> bool {
        self.open_to_all()
            || self.accounts.contains(&id)
            || eab_kid.is_some_and(|kid| self.eab_key_ids.iter().any(|k| k == kid))
    }

    /// `offered` narrowed to the types this profile allows, in their order.
    pub fn filter_challenges(&self, offered: Vec<ChallengeType>) -> Vec<ChallengeType> {
        if self.challenge_types.is_empty() {
            return offered;
        }
        offered
            .into_iter()
            .filter(|t| self.challenge_types.contains(t))
            .collect()
    }
}

impl Default for ProfileDefinition {
    /// What a profile holds where its definition is silent: a TLS server certificate for any
    /// identifier and any key `check_csr` accepts.
    fn default() -> Self {
        Self {
            description: String::new(),
            validity: None,
            max_validity: None,
            key_usages: vec![KeyUsage::DigitalSignature, KeyUsage::KeyEncipherment],
            extended_key_usages: vec![ExtendedKeyUsage::ServerAuth],
            identifier_types: vec![IdentifierKind::Dns, IdentifierKind::Ip],
            key_types: KeyAlgorithm::ALL.to_vec(),
            validation: ValidationPolicy::default(),
            issuer: None,
        }
    }
}

impl ProfileDefinition {
    /// The profiles Certeasy ships with, by name; [`SHIPPED_DEFAULT`] is the default. The
    /// short-lived one's authorizations serve its orders for
    /// [`SHORT_LIVED_AUTHORIZATION_LIFETIME`]. Every shipped profile certifies DNS names and IP
    /// addresses: clients that cannot choose a profile (Debian's certbot and lego) kept renewing
    /// their IP certificates under the default one, so limiting IP addresses to short-lived, as
    /// Let's Encrypt does, is an operator's choice (`identifier-types: [dns]` on the others), not
    /// a default that breaks renewals on upgrade.
    pub fn shipped() -> BTreeMap<String, ProfileDefinition> {
        let base = Self::default();
        let mut profiles = BTreeMap::new();
        profiles.insert(
            SHIPPED_DEFAULT.to_owned(),
            Self {
                description: "TLS server certificate (serverAuth)".to_owned(),
                ..base.clone()
            },
        );
        profiles.insert(
            SHIPPED_SHORT_LIVED.to_owned(),
            Self {
                description:
                    "TLS server certificate valid for 7 days, for DNS names and IP addresses (serverAuth)"
                        .to_owned(),
                validity: Some(Duration::days(7)),
                max_validity: Some(Duration::days(7)),
                validation: ValidationPolicy {
                    valid_authorization_lifetime: Some(SHORT_LIVED_AUTHORIZATION_LIFETIME),
                    ..ValidationPolicy::default()
                },
                ..base.clone()
            },
        );
        profiles.insert(
            "tls-server-client".to_owned(),
            Self {
                description: "TLS server and client certificate (serverAuth, clientAuth)"
                    .to_owned(),
                extended_key_usages: vec![
                    ExtendedKeyUsage::ServerAuth,
                    ExtendedKeyUsage::ClientAuth,
                ],
                ..base
            },
        );
        profiles
    }
}

/// A checked profile with every value resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    name: String,
    description: String,
    validity: Duration,
    max_validity: Duration,
    key_usages: Vec<KeyUsage>,
    extended_key_usages: Vec<ExtendedKeyUsage>,
    identifier_types: Vec<IdentifierKind>,
    key_types: Vec<KeyAlgorithm>,
    validation: ValidationPolicy,
    issuer: Option<IssuerName>,
}

impl Profile {
    /// The name orders choose it by.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the directory tells clients about it.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Lifetime when the order does not ask for one.
    pub fn validity(&self) -> Duration {
        self.validity
    }

    /// Longest lifetime an order may ask for.
    pub fn max_validity(&self) -> Duration {
        self.max_validity
    }

    /// Key usages granted (keyEncipherment only to RSA keys).
    pub fn key_usages(&self) -> &[KeyUsage] {
        &self.key_usages
    }

    /// Extended key usages granted.
    pub fn extended_key_usages(&self) -> &[ExtendedKeyUsage] {
        &self.extended_key_usages
    }

    /// Identifier types an order may hold.
    pub fn identifier_types(&self) -> &[IdentifierKind] {
        &self.identifier_types
    }

    /// Key types certified.
    pub fn key_types(&self) -> &[KeyAlgorithm] {
        &self.key_types
    }

    /// How its orders are validated and who may ask for it.
    pub fn validation(&self) -> &ValidationPolicy {
        &self.validation
    }

    /// The issuer that signs it; `None` is the active issuer.
    pub fn issuer(&self) -> Option<&IssuerName> {
        self.issuer.as_ref()
    }

    /// Refuses the identifiers whose type this profile does not certify, one
    /// [`Error::IdentifierNotAllowed`] naming all of them.
    pub fn check_identifiers(&self, identifiers: &[Identifier]) -> Result<(), Error> {
        let refused: Vec<Identifier> = identifiers
            .iter()
            .filter(|id| !self.identifier_types.contains(&id.kind()))
            .cloned()
            .collect();
        if refused.is_empty() {
            return Ok(());
        }
        let allowed: Vec<&str> = self.identifier_types.iter().map(|k| k.as_str()).collect();
        Err(Error::IdentifierNotAllowed {
            profile: self.name.clone(),
            allowed: allowed.join(", "),
            identifiers: refused,
        })
    }

    /// Refuses a CSR whose key type this profile does not certify ([`Error::BadCsr`]: a CSR's
    /// key is part of the CSR; RFC 8555 keeps `badPublicKey` for JWS keys).
    pub fn check_key(&self, csr: &CheckedCsr) -> Result<(), Error> {
        let key = csr.key_algorithm();
        if self.key_types.contains(&key) {
            return Ok(());
        }
        let allowed: Vec<&str> = self.key_types.iter().map(|k| k.as_str()).collect();
        Err(Error::BadCsr(format!(
            "profile {:?} does not certify {key} keys; use one of {}",
            self.name,
            allowed.join(", ")
        )))
    }

    /// Checks an order's requested `notBefore`/`notAfter` at `now` against this profile: the
    /// start at most `backdate` in the past and at most `max_validity` ahead, the end after the
    /// start, and the lifetime (the default one when `notAfter` is absent) within
    /// `max_validity`. Refusals are [`Error::BadValidity`].
    pub fn check_window(
        &self,
        not_before: Option<OffsetDateTime>,
        not_after: Option<OffsetDateTime>,
        now: OffsetDateTime,
        backdate: Duration,
    ) -> Result<(), Error> {
        let start = not_before.unwrap_or(now - backdate);
        if let Some(nb) = not_before {
            if nb < now - backdate {
                let nb = nb.format(&Rfc3339).unwrap_or_else(|_| nb.to_string());
                return Err(Error::BadValidity(format!(
                    "notBefore {nb} lies in the past; it may be at most {backdate} before now"
                )));
            }
            if nb > now + self.max_validity {
                return Err(Error::BadValidity(
                    "notBefore lies too far in the future".to_owned(),
                ));
            }
        }
        let end = not_after.unwrap_or(start + self.validity);
        if end <= start {
            return Err(Error::BadValidity(
                "notAfter must be later than notBefore".to_owned(),
            ));
        }
        if end - start > self.max_validity {
            return Err(Error::BadValidity(format!(
                "the requested validity of {} days exceeds the maximum of {} days of profile {:?}",
                (end - start).whole_days(),
                self.max_validity.whole_days(),
                self.name
            )));
        }
        Ok(())
    }

    /// The certificate's window when signing at `now` an order that asked for `not_before` and
    /// `not_after` (each optional): the start defaults to `now - backdate`, the end to the
    /// start plus this profile's validity.
    pub fn window(
        &self,
        not_before: Option<OffsetDateTime>,
        not_after: Option<OffsetDateTime>,
        now: OffsetDateTime,
        backdate: Duration,
    ) -> (OffsetDateTime, OffsetDateTime) {
        let start = not_before.unwrap_or(now - backdate);
        (start, not_after.unwrap_or(start + self.validity))
    }

    /// The certificate's window when an order that asked for `not_before` and `not_after`
    /// (each optional) is signed at `now`: fixed then, never at the order's creation. The start
    /// is the requested notBefore while it is still later than `now - backdate`, and
    /// `now - backdate` otherwise, so no certificate is backdated by more than `backdate`
    /// however long its order waited (a notBefore the order asked for days ago only says the
    /// certificate may not be valid before then, which a later start honours). The end is the
    /// requested notAfter, or the start plus this profile's validity; the lifetime is then never
    /// longer than the one [`Profile::check_window`] accepted. A requested notAfter that is not
    /// later than `now` is [`Error::BadValidity`]: the certificate would be born expired.
    pub fn signing_window(
        &self,
        not_before: Option<OffsetDateTime>,
        not_after: Option<OffsetDateTime>,
        now: OffsetDateTime,
        backdate: Duration,
    ) -> Result<(OffsetDateTime, OffsetDateTime), Error> {
        let earliest = now - backdate;
        let start = not_before.map_or(earliest, |nb| nb.max(earliest));
        match not_after {
            Some(end) if end <= now => {
                let end = end.format(&Rfc3339).unwrap_or_else(|_| end.to_string());
                Err(Error::BadValidity(format!(
                    "the order's notAfter {end} has passed; create a new order with a later notAfter, or none"
                )))
            }
            Some(end) => Ok((start, end)),
            None => Ok((start, start + self.validity)),
        }
    }
}

/// Every profile of the CA and which one orders get by default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profiles {
    default: String,
    by_name: BTreeMap<String, Profile>,
}

impl Profiles {
    /// Resolves `definitions` (validities they leave out become `validity`/`max_validity`) and
    /// checks them: at least one profile, `default` among them, names that are printable ASCII
    /// without spaces, lifetimes longer than zero with the default within the maximum, and no
    /// empty list. Refusals are [`Error::InvalidProfile`].
    pub fn new(
        default: &str,
        definitions: &BTreeMap<String, ProfileDefinition>,
        validity: Duration,
        max_validity: Duration,
    ) -> Result<Self, Error> {
        let invalid =
            |name: &str, why: &str| Error::InvalidProfile(format!("profile {name:?}: {why}"));
        let mut by_name = BTreeMap::new();
        for (name, def) in definitions {
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(invalid(name, "a name is printable ASCII without spaces"));
            }
            let profile = Profile {
                name: name.clone(),
                description: def.description.clone(),
                validity: def.validity.unwrap_or(validity),
                max_validity: def.max_validity.unwrap_or(max_validity),
                key_usages: def.key_usages.clone(),
                extended_key_usages: def.extended_key_usages.clone(),
                identifier_types: def.identifier_types.clone(),
                key_types: def.key_types.clone(),
                validation: def.validation.clone(),
                issuer: def.issuer.clone(),
            };
            if !profile.validity.is_positive() {
                return Err(invalid(name, "the validity must be longer than zero"));
            }
            let v = &profile.validation;
            for (what, lifetime) in [
                (
                    "pending authorization lifetime",
                    v.pending_authorization_lifetime,
                ),
                (
                    "valid authorization lifetime",
                    v.valid_authorization_lifetime,
                ),
                ("order lifetime", v.order_lifetime),
            ] {
                if lifetime.is_some_and(|l| !l.is_positive()) {
                    return Err(invalid(
                        name,
                        &format!("the {what} must be longer than zero"),
                    ));
                }
            }
            if v.max_identifiers == Some(0) {
                return Err(invalid(
                    name,
                    "the most identifiers per order must be at least 1",
                ));
            }
            if profile.max_validity < profile.validity {
                return Err(invalid(
                    name,
                    &format!(
                        "the maximum validity ({}) is shorter than the validity ({})",
                        profile.max_validity, profile.validity
                    ),
                ));
            }
            for (list, empty) in [
                ("key usages", profile.key_usages.is_empty()),
                (
                    "extended key usages",
                    profile.extended_key_usages.is_empty(),
                ),
                ("identifier types", profile.identifier_types.is_empty()),
                ("key types", profile.key_types.is_empty()),
            ] {
                if empty {
                    return Err(invalid(name, &format!("the list of {list} is empty")));
                }
            }
            by_name.insert(name.clone(), profile);
        }
        if !by_name.contains_key(default) {
            let known: Vec<&str> = by_name.keys().map(String::as_str).collect();
            return Err(Error::InvalidProfile(format!(
                "the default profile {default:?} is not defined; defined are: {}",
                known.join(", ")
            )));
        }
        Ok(Self {
            default: default.to_owned(),
            by_name,
        })
    }

    /// The shipped profiles ([`ProfileDefinition::shipped`]) with the shipped validities.
    pub fn shipped() -> Self {
        let definitions = ProfileDefinition::shipped();
        match Self::new(
            SHIPPED_DEFAULT,
            &definitions,
            DEFAULT_VALIDITY,
            DEFAULT_MAX_VALIDITY,
        ) {
            Ok(profiles) => profiles,
            // A unit test builds the shipped set; this arm is unreachable in a tested build.
            Err(e) => panic!("the shipped profiles are invalid: {e}"),
        }
    }

    /// The profile an order gets: the named one, or the default when `name` is `None`. An
    /// unknown name is [`Error::UnknownProfile`], which lists the known ones.
    pub fn select(&self, name: Option<&str>) -> Result<&Profile, Error> {
        let name = name.unwrap_or(&self.default);
        self.by_name.get(name).ok_or_else(|| Error::UnknownProfile {
            name: name.to_owned(),
            known: self.by_name.keys().cloned().collect::<Vec<_>>().join(", "),
        })
    }

    /// The default profile.
    pub fn default_profile(&self) -> &Profile {
        // `new` refuses a default that is not among the profiles.
        &self.by_name[&self.default]
    }

    /// Every profile, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Profile> {
        self.by_name.values()
    }
}

#[cfg(test)]
mod tests;
