//! ACME identifiers (`dns` and `ip`), normalised once at the edge and trusted everywhere after.
//!
//! An [`Identifier`] can only be built by [`Identifier::parse`], which lower-cases, trims a trailing
//! dot, insists on A-labels and LDH syntax, and writes IP addresses in their canonical text form. Two
//! requests that name the same thing therefore always produce byte-equal identifiers, which the
//! duplicate-certificate limit and the CSR name check depend on.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;

/// The two identifier types Certeasy issues for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IdentifierKind {
    /// A DNS name, possibly a wildcard (RFC 8555 §7.1.3).
    Dns,
    /// An IP address (RFC 8738).
    Ip,
}

impl IdentifierKind {
    /// The ACME wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dns => "dns",
            Self::Ip => "ip",
        }
    }
}

impl FromStr for IdentifierKind {
    type Err = IdentifierError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "dns" => Ok(Self::Dns),
            "ip" => Ok(Self::Ip),
            other => Err(IdentifierError::UnsupportedType(other.to_owned())),
        }
    }
}

/// Why an identifier was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentifierError {
    /// The type is neither `dns` nor `ip`.
    #[error("identifier type {0:?} is not supported; use \"dns\" or \"ip\"")]
    UnsupportedType(String),
    /// The DNS name is not a valid LDH name in A-label form.
    #[error("{value:?} is not a valid DNS name: {reason}")]
    InvalidDns {
        /// The value as received.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The value of an `ip` identifier is not an IP address.
    #[error("{0:?} is not a valid IP address")]
    InvalidIp(String),
    /// Refused by the operator's allow/deny policy.
    #[error("{0} is not allowed by this CA's identifier policy")]
    Forbidden(String),
}

/// A normalised, syntactically valid identifier.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Identifier {
    kind: IdentifierKind,
    value: String,
}

impl Identifier {
    /// Parses and normalises an identifier of the given wire type.
    pub fn parse(kind: &str, value: &str) -> Result<Self, IdentifierError> {
        match kind.parse::<IdentifierKind>()? {
            IdentifierKind::Dns => Self::dns(value),
            IdentifierKind::Ip => Self::ip(value),
        }
    }

    /// Parses a DNS name (or `*.`-wildcard).
    pub fn dns(value: &str) -> Result<Self, IdentifierError> {
        normalise_dns(value).map(|value| Self {
            kind: IdentifierKind::Dns,
            value,
        })
    }

    /// Parses an IP address; the stored value is the canonical text form.
    pub fn ip(value: &str) -> Result<Self, IdentifierError> {
        let addr: IpAddr = value
            .parse()
            .map_err(|_| IdentifierError::InvalidIp(value.to_owned()))?;
        Ok(Self::from_ip(addr))
    }

    /// Wraps an address that is already parsed.
    pub fn from_ip(addr: IpAddr) -> Self {
        let addr = match addr {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        Self {
            kind: IdentifierKind::Ip,
            value: addr.to_string(),
        }
    }

    /// The identifier type.
    pub fn kind(&self) -> IdentifierKind {
        self.kind
    }

    /// The normalised value.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// True for `*.example.com`.
    pub fn is_wildcard(&self) -> bool {
        self.kind == IdentifierKind::Dns && self.value.starts_with("*.")
    }

    /// The name without its `*.` wildcard label: the name that is actually validated.
    pub fn base_name(&self) -> &str {
        self.value.strip_prefix("*.").unwrap_or(&self.value)
    }

    /// The address of an `ip` identifier.
    pub fn ip_addr(&self) -> Option<IpAddr> {
        match self.kind {
            IdentifierKind::Ip => self.value.parse().ok(),
            IdentifierKind::Dns => None,
        }
    }
}

impl fmt::Display for Identifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind.as_str(), self.value)
    }
}

fn normalise_dns(raw: &str) -> Result<String, IdentifierError> {
    let invalid = |reason: &str| IdentifierError::InvalidDns {
        value: raw.to_owned(),
        reason: reason.to_owned(),
    };
    if !raw.is_ascii() {
        return Err(invalid(
            "names must be sent in A-label (punycode) form, e.g. xn--bcher-kva.example",
        ));
    }
    let lowered = raw.to_ascii_lowercase();
    let name = lowered.strip_suffix('.').unwrap_or(&lowered);
    if name.is_empty() {
        return Err(invalid("the name is empty"));
    }
    if name.len() > 253 {
        return Err(invalid("the name is longer than 253 characters"));
    }
    if name.parse::<IpAddr>().is_ok() {
        return Err(invalid(
            "an IP address must be requested as an \"ip\" identifier",
        ));
    }
    let (wildcard, rest) = match name.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, name),
    };
    if rest.contains('*') {
        return Err(invalid(
            "a wildcard is only allowed as the whole leftmost label (\"*.\")",
        ));
    }
    let labels: Vec<&str> = rest.split('.').collect();
    if labels.len() < 2 {
        return Err(invalid("the name needs at least two labels"));
    }
    for label in &labels {
        check_label(label).map_err(|reason| invalid(&reason))?;
    }
    if labels
        .last()
        .is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(invalid("the last label must not be all digits"));
    }
    Ok(if wildcard {
        format!("*.{rest}")
    } else {
        rest.to_owned()
    })
}

fn check_label(label: &str) -> Result<(), String> {
    if label.is_empty() {
        return Err("it has an empty label".to_owned());
    }
    if label.len() > 63 {
        return Err(format!("label {label:?} is longer than 63 characters"));
    }
    if !label
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err(format!(
            "label {label:?} may only hold letters, digits and hyphens"
        ));
    }
    if label.starts_with('-') || label.ends_with('-') {
        return Err(format!(
            "label {label:?} must not start or end with a hyphen"
        ));
    }
    if label.len() >= 4 && &label[2..4] == "--" {
        if !label.starts_with("xn--") {
            return Err(format!(
                "label {label:?} has hyphens in the 3rd and 4th positions"
            ));
        }
        let (unicode, result) = idna::domain_to_unicode(label);
        if result.is_err() || unicode == label {
            return Err(format!("label {label:?} is not a valid IDNA A-label"));
        }
        match idna::domain_to_ascii(&unicode) {
            Ok(back) if back == label => {}
            _ => return Err(format!("label {label:?} is not a valid IDNA A-label")),
        }
    }
    Ok(())
}

/// Canonical form of an identifier set: sorted, de-duplicated `type:value` strings joined by
/// commas. Wildcards stay distinct from their base names.
pub fn canonical_set(identifiers: &[Identifier]) -> String {
    let mut items: Vec<String> = identifiers.iter().map(ToString::to_string).collect();
    items.sort();
    items.dedup();
    items.join(",")
}

/// SHA-256 of [`canonical_set`], hex encoded: the key of the duplicate-certificate limit.
pub fn canonical_set_hash(identifiers: &[Identifier]) -> String {
    let digest = aws_lc_rs::digest::digest(
        &aws_lc_rs::digest::SHA256,
        canonical_set(identifiers).as_bytes(),
    );
    hex::encode(digest.as_ref())
}

/// The operator's allow/deny list of domains and CIDRs.
///
/// A deny entry always wins. When any allow entry of a kind exists, identifiers of that kind must
/// match one. A domain entry matches the domain itself and every name below it. A wildcard
/// `*.example.com` is refused when example.com is denied or lies below a denied domain, and also
/// when any denied domain lies below example.com: a certificate for the wildcard would be valid
/// for `secret.example.com` even though that name could never be ordered on its own. (A denied
/// `a.b.example.com` refuses `*.example.com` too, although the wildcard does not cover it: the
/// operator's intent "nothing under there" is kept rather than reasoning about label depth.)
#[derive(Debug, Clone, Default)]
pub struct IdentifierPolicy {
    /// Domains that may be issued for (empty: any).
    pub allow_domains: Vec<String>,
    /// Domains never issued for.
    pub deny_domains: Vec<String>,
    /// Networks whose addresses may be issued for (empty: any).
    pub allow_cidrs: Vec<IpNet>,
    /// Networks never issued for.
    pub deny_cidrs: Vec<IpNet>,
}

impl IdentifierPolicy {
    /// Checks one identifier against the policy.
    pub fn check(&self, id: &Identifier) -> Result<(), IdentifierError> {
        let forbidden = || IdentifierError::Forbidden(id.value().to_owned());
        match id.kind() {
            IdentifierKind::Dns => {
                let name = id.base_name();
                if self
                    .deny_domains
                    .iter()
                    .any(|d| domain_matches(name, d) || (id.is_wildcard() && below(d, name)))
                {
                    return Err(forbidden());
                }
                // A wildcard's base name must itself be allowed: `*.example.com` covers every
                // name one label below example.com, which an allow entry `www.example.com`
                // does not.
                if !self.allow_domains.is_empty()
                    && !self.allow_domains.iter().any(|d| domain_matches(name, d))
                {
                    return Err(forbidden());
                }
            }
            IdentifierKind::Ip => {
                let addr = id.ip_addr().ok_or_else(forbidden)?;
                if self.deny_cidrs.iter().any(|n| n.contains(&addr)) {
                    return Err(forbidden());
                }
                if !self.allow_cidrs.is_empty()
                    && !self.allow_cidrs.iter().any(|n| n.contains(&addr))
                {
                    return Err(forbidden());
                }
            }
        }
        Ok(())
    }
}

/// True when the policy entry `domain` lies strictly below `name`.
fn below(domain: &str, name: &str) -> bool {
    let domain = domain.trim_end_matches('.').to_ascii_lowercase();
    domain
        .strip_suffix(name)
        .is_some_and(|head| head.len() > 1 && head.ends_with('.'))
}

fn domain_matches(name: &str, domain: &str) -> bool {
    let domain = domain.trim_end_matches('.').to_ascii_lowercase();
    name == domain
        || name
            .strip_suffix(domain.as_str())
            .is_some_and(|head| head.ends_with('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_names_are_normalised() {
        let id = Identifier::parse("dns", "WWW.Example.COM.").unwrap();
        assert_eq!(id.value(), "www.example.com");
        assert_eq!(id.kind(), IdentifierKind::Dns);
        let wc = Identifier::dns("*.Example.com").unwrap();
        assert!(wc.is_wildcard());
        assert_eq!(wc.base_name(), "example.com");
        assert_eq!(
            Identifier::dns("xn--bcher-kva.example").unwrap().value(),
            "xn--bcher-kva.example"
        );
    }

    #[test]
    fn bad_dns_names_are_refused() {
        for bad in [
            "",
            ".",
            "bücher.example",
            "a..b",
            "-a.example",
            "a-.example",
            "a_b.example",
            "*.*.example.com",
            "a.*.example.com",
            "foo*.example.com",
            "localhost",
            "ab--c.example",
            "xn--zz.example",
            "1.2.3.4",
            "example.123",
            &format!("{}.com", "a".repeat(64)),
        ] {
            assert!(Identifier::dns(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn ips_are_canonical() {
        assert_eq!(
            Identifier::ip("2001:DB8:0:0::1").unwrap().value(),
            "2001:db8::1"
        );
        assert_eq!(
            Identifier::ip("::ffff:10.0.0.1").unwrap().value(),
            "10.0.0.1"
        );
        assert!(Identifier::ip("10.0.0.256").is_err());
        assert!(Identifier::parse("email", "a@b.c").is_err());
    }

    #[test]
    fn canonical_set_sorts_dedups_and_keeps_wildcards_apart() {
        let a = [
            Identifier::dns("b.example.com").unwrap(),
            Identifier::dns("A.example.com.").unwrap(),
            Identifier::dns("*.example.com").unwrap(),
            Identifier::dns("a.example.com").unwrap(),
        ];
        assert_eq!(
            canonical_set(&a),
            "dns:*.example.com,dns:a.example.com,dns:b.example.com"
        );
        let b = [Identifier::dns("example.com").unwrap()];
        let c = [Identifier::dns("*.example.com").unwrap()];
        assert_ne!(canonical_set_hash(&b), canonical_set_hash(&c));
        assert_eq!(canonical_set_hash(&a).len(), 64);
    }

    #[test]
    fn policy_allows_and_denies() {
        let policy = IdentifierPolicy {
            allow_domains: vec!["example.com".into()],
            deny_domains: vec!["bad.example.com".into()],
            allow_cidrs: vec!["10.0.0.0/8".parse().unwrap()],
            deny_cidrs: vec!["10.9.0.0/16".parse().unwrap()],
        };
        assert!(
            policy
                .check(&Identifier::dns("www.example.com").unwrap())
                .is_ok()
        );
        assert!(
            policy
                .check(&Identifier::dns("*.other.example.com").unwrap())
                .is_ok()
        );
        assert!(
            policy
                .check(&Identifier::dns("example.com").unwrap())
                .is_ok()
        );
        assert!(
            policy
                .check(&Identifier::dns("notexample.com").unwrap())
                .is_err()
        );
        assert!(
            policy
                .check(&Identifier::dns("x.bad.example.com").unwrap())
                .is_err()
        );
        assert!(policy.check(&Identifier::ip("10.1.2.3").unwrap()).is_ok());
        assert!(policy.check(&Identifier::ip("10.9.2.3").unwrap()).is_err());
        assert!(policy.check(&Identifier::ip("192.0.2.1").unwrap()).is_err());
    }

    fn allowed(policy: &IdentifierPolicy, name: &str) -> bool {
        policy.check(&Identifier::dns(name).unwrap()).is_ok()
    }

    fn deny(domains: &[&str]) -> IdentifierPolicy {
        IdentifierPolicy {
            deny_domains: domains.iter().map(|d| (*d).to_owned()).collect(),
            ..IdentifierPolicy::default()
        }
    }

    #[test]
    fn a_wildcard_cannot_cover_a_denied_name() {
        // The denied name lies under the wildcard's base: the wildcard would cover it.
        let policy = deny(&["secret.example.com"]);
        assert!(!allowed(&policy, "secret.example.com"));
        assert!(!allowed(&policy, "*.secret.example.com"));
        assert!(!allowed(&policy, "*.example.com"));
        assert!(!allowed(&policy, "*.EXAMPLE.com"));
        assert!(allowed(&policy, "www.example.com"));
        assert!(allowed(&policy, "example.com"));
        assert!(allowed(&policy, "*.www.example.com"));
        assert!(allowed(&policy, "*.notsecret.example.com"));
        // Deeper below the base counts too (see the type's documentation).
        assert!(!allowed(&deny(&["a.b.example.com"]), "*.example.com"));
        // Denying the base itself, or a parent of it.
        for entry in ["example.com", "Example.COM.", "com"] {
            let policy = deny(&[entry]);
            assert!(!allowed(&policy, "*.example.com"), "{entry}");
            assert!(!allowed(&policy, "example.com"), "{entry}");
        }
        // A sibling whose name merely ends in the same letters is unrelated.
        let policy = deny(&["notexample.com"]);
        assert!(allowed(&policy, "*.example.com"));
        let policy = deny(&["secret.example.com"]);
        assert!(allowed(&policy, "*.ample.com"));
    }

    #[test]
    fn a_wildcard_needs_its_base_name_allowed() {
        let policy = IdentifierPolicy {
            allow_domains: vec!["www.example.com".into(), "example.org".into()],
            ..IdentifierPolicy::default()
        };
        // `*.example.com` would also cover names outside www.example.com.
        assert!(!allowed(&policy, "*.example.com"));
        assert!(allowed(&policy, "*.www.example.com"));
        assert!(allowed(&policy, "www.example.com"));
        assert!(allowed(&policy, "*.example.org"));
        assert!(allowed(&policy, "*.a.example.org"));
        assert!(!allowed(&policy, "*.other.org"));
        // Allowed and denied at once: the deny below the base wins for the wildcard.
        let policy = IdentifierPolicy {
            allow_domains: vec!["example.org".into()],
            deny_domains: vec!["secret.example.org".into()],
            ..IdentifierPolicy::default()
        };
        assert!(!allowed(&policy, "*.example.org"));
        assert!(allowed(&policy, "www.example.org"));
        assert!(allowed(&policy, "*.www.example.org"));
    }
}
