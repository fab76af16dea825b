//! The policy an external-account-binding key carries (RFC 8555 §7.3.4), and its checks.
//!
//! An operator hands out an EAB key for one subscriber; the account bound with it inherits what
//! the key allows on every order it places. The checks live here, beside `IdentifierPolicy`, so
//! that the policy layer can judge an order without knowing where the key is stored or how the
//! request arrived.

use ipnet::IpNet;
use time::Duration;

use crate::identifier::Identifier;
use crate::identifier::IdentifierError;
use crate::identifier::IdentifierKind;
use crate::problem::Problem;
use crate::problem::ProblemType;

/// What an account bound to an EAB key may order.
///
/// With no domains and no networks the key restricts no identifier. Once either list is given,
/// only identifiers it covers are allowed, so a key limited to `example.com` does not also allow
/// every IP address just because it names no network.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EabPolicy {
    allowed_domains: Vec<String>,
    allowed_cidrs: Vec<IpNet>,
    allowed_profiles: Vec<String>,
    max_validity: Option<Duration>,
}

impl EabPolicy {
    /// Builds a policy; domains are normalised as identifiers are (lower case, A-labels, no
    /// trailing dot) so that they compare byte for byte with the names of orders.
    pub fn new(
        allowed_domains: &[String],
        allowed_cidrs: Vec<IpNet>,
        allowed_profiles: Vec<String>,
        max_validity: Option<Duration>,
    ) -> Result<Self, IdentifierError> {
        let mut domains = Vec::with_capacity(allowed_domains.len());
        for d in allowed_domains {
            let id = Identifier::dns(d)?;
            if id.is_wildcard() {
                // A domain entry already covers every name below it.
                return Err(IdentifierError::Forbidden(format!(
                    "{d} (an allowed domain covers the names below it; give it without \"*.\")"
                )));
            }
            domains.push(id.value().to_owned());
        }
        domains.sort();
        domains.dedup();
        let mut cidrs: Vec<IpNet> = allowed_cidrs.into_iter().map(|n| n.trunc()).collect();
        cidrs.sort();
        cidrs.dedup();
        let mut profiles = allowed_profiles;
        profiles.sort();
        profiles.dedup();
        Ok(Self {
            allowed_domains: domains,
            allowed_cidrs: cidrs,
            allowed_profiles: profiles,
            max_validity,
        })
    }

    /// The allowed domains, normalised; empty with no network either means any identifier.
    pub fn allowed_domains(&self) -> &[String] {
        &self.allowed_domains
    }

    /// The allowed networks for IP identifiers.
    pub fn allowed_cidrs(&self) -> &[IpNet] {
        &self.allowed_cidrs
    }

    /// The allowed profile names; empty means any.
    pub fn allowed_profiles(&self) -> &[String] {
        &self.allowed_profiles
    }

    /// The longest certificate validity an order may ask for, if the key limits it.
    pub fn max_validity(&self) -> Option<Duration> {
        self.max_validity
    }

    /// True when the key restricts identifiers at all.
    fn restricts_identifiers(&self) -> bool {
        !self.allowed_domains.is_empty() || !self.allowed_cidrs.is_empty()
    }

    /// Whether one identifier is allowed. A wildcard is judged by its base name: `*.example.com`
    /// is allowed by `example.com`, not by `www.example.com`.
    pub fn allows_identifier(&self, id: &Identifier) -> bool {
        if !self.restricts_identifiers() {
            return true;
        }
        match id.kind() {
            IdentifierKind::Dns => {
                let name = id.base_name();
                self.allowed_domains.iter().any(|d| {
                    name == d
                        || name
                            .strip_suffix(d.as_str())
                            .is_some_and(|head| head.ends_with('.'))
                })
            }
            IdentifierKind::Ip => id
                .ip_addr()
                .is_some_and(|addr| self.allowed_cidrs.iter().any(|n| n.contains(&addr))),
        }
    }

    /// Checks every identifier of an order: `rejectedIdentifier`, with one subproblem per refused
    /// identifier when several are refused.
    pub fn check_identifiers(&self, identifiers: &[Identifier]) -> Result<(), Problem> {
        let refused: Vec<Problem> = identifiers
            .iter()
            .filter(|id| !self.allows_identifier(id))
            .map(|id| {
                Problem::new(
                    ProblemType::RejectedIdentifier,
                    format!(
                        "{} {} is outside what this account's external account key allows ({})",
                        id.kind().as_str(),
                        id.value(),
                        self.describe_identifiers()
                    ),
                )
                .with_identifier(id.clone())
            })
            .collect();
        match Problem::combine(
            refused,
            format!(
                "several identifiers are outside what this account's external account key allows ({})",
                self.describe_identifiers()
            ),
        ) {
            Some(problem) => Err(problem),
            None => Ok(()),
        }
    }

    /// Checks the validity an order asks for (`notAfter - notBefore`, defaults applied by the
    /// caller) against the key's maximum; the refusal is `malformed`, as for the CA's own maximum.
    pub fn check_validity(&self, requested: Duration) -> Result<(), Problem> {
        match self.max_validity {
            Some(max) if requested > max => Err(Problem::new(
                ProblemType::Malformed,
                format!(
                    "the requested validity of {} exceeds the maximum of {} that this account's \
                     external account key allows; ask for a shorter notAfter",
                    human(requested),
                    human(max)
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Checks a certificate profile name against the allowed ones (empty: any).
    pub fn check_profile(&self, profile: &str) -> Result<(), Problem> {
        if self.allowed_profiles.is_empty() || self.allowed_profiles.iter().any(|p| p == profile) {
            return Ok(());
        }
        Err(Problem::new(
            ProblemType::Malformed,
            format!(
                "profile {profile:?} is not allowed for this account's external account key; \
                 allowed: {}",
                self.allowed_profiles.join(", ")
            ),
        ))
    }

    fn describe_identifiers(&self) -> String {
        let mut parts: Vec<String> = self.allowed_domains.clone();
        parts.extend(self.allowed_cidrs.iter().map(ToString::to_string));
        if parts.is_empty() {
            "any".to_owned()
        } else {
            format!("allowed: {}", parts.join(", "))
        }
    }
}

/// Whole days when the duration is whole days, seconds otherwise.
fn human(d: Duration) -> String {
    if d.whole_seconds() % 86_400 == 0 {
        format!("{} days", d.whole_days())
    } else {
        format!("{} s", d.whole_seconds())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(domains: &[&str], cidrs: &[&str]) -> EabPolicy {
        EabPolicy::new(
            &domains.iter().map(|d| (*d).to_owned()).collect::<Vec<_>>(),
            cidrs.iter().map(|c| c.parse().unwrap()).collect(),
            vec![],
            None,
        )
        .unwrap()
    }

    fn dns(name: &str) -> Identifier {
        Identifier::dns(name).unwrap()
    }

    #[test]
    fn empty_policy_allows_everything() {
        let p = EabPolicy::default();
        assert!(p.allows_identifier(&dns("anything.test")));
        assert!(p.allows_identifier(&Identifier::ip("10.0.0.1").unwrap()));
        assert!(p.check_profile("any").is_ok());
        assert!(p.check_validity(Duration::days(10_000)).is_ok());
    }

    #[test]
    fn domains_cover_themselves_and_below_only() {
        let p = policy(&["Example.COM."], &[]);
        assert_eq!(p.allowed_domains(), ["example.com"]);
        assert!(p.allows_identifier(&dns("example.com")));
        assert!(p.allows_identifier(&dns("a.b.example.com")));
        assert!(p.allows_identifier(&dns("*.example.com")));
        assert!(!p.allows_identifier(&dns("badexample.com")));
        assert!(!p.allows_identifier(&dns("example.org")));
        // A domain-only key does not allow IP identifiers.
        assert!(!p.allows_identifier(&Identifier::ip("192.0.2.1").unwrap()));
        let www = policy(&["www.example.com"], &[]);
        assert!(!www.allows_identifier(&dns("*.example.com")));
        assert!(www.allows_identifier(&dns("*.www.example.com")));
    }

    #[test]
    fn cidrs_cover_ip_identifiers_only() {
        let p = policy(&[], &["10.1.0.0/16", "2001:db8::/32"]);
        assert!(p.allows_identifier(&Identifier::ip("10.1.2.3").unwrap()));
        assert!(!p.allows_identifier(&Identifier::ip("10.2.0.1").unwrap()));
        assert!(p.allows_identifier(&Identifier::ip("2001:db8::1").unwrap()));
        assert!(!p.allows_identifier(&dns("example.com")));
    }

    #[test]
    fn refusals_name_each_identifier() {
        let p = policy(&["example.com"], &["10.0.0.0/8"]);
        let ok = [dns("www.example.com"), Identifier::ip("10.9.9.9").unwrap()];
        assert!(p.check_identifiers(&ok).is_ok());
        let one = p
            .check_identifiers(&[dns("www.example.com"), dns("evil.test")])
            .unwrap_err();
        assert_eq!(one.kind, ProblemType::RejectedIdentifier);
        assert_eq!(one.identifier, Some(dns("evil.test")));
        assert!(one.detail.contains("evil.test"), "{}", one.detail);
        let two = p
            .check_identifiers(&[dns("evil.test"), Identifier::ip("192.0.2.1").unwrap()])
            .unwrap_err();
        assert_eq!(two.kind, ProblemType::RejectedIdentifier);
        assert_eq!(two.subproblems.len(), 2);
        assert_eq!(
            two.subproblems[1].identifier,
            Some(Identifier::ip("192.0.2.1").unwrap())
        );
    }

    #[test]
    fn wildcard_entries_are_refused() {
        assert!(EabPolicy::new(&["*.example.com".to_owned()], vec![], vec![], None).is_err());
        assert!(EabPolicy::new(&["not a name".to_owned()], vec![], vec![], None).is_err());
    }

    #[test]
    fn validity_and_profiles() {
        let p = EabPolicy::new(
            &[],
            vec![],
            vec!["tls-server".to_owned(), "short".to_owned()],
            Some(Duration::days(30)),
        )
        .unwrap();
        assert!(p.check_validity(Duration::days(30)).is_ok());
        let err = p.check_validity(Duration::days(31)).unwrap_err();
        assert_eq!(err.kind, ProblemType::Malformed);
        assert!(err.detail.contains("30 days"), "{}", err.detail);
        assert!(p.check_profile("short").is_ok());
        let err = p.check_profile("long").unwrap_err();
        assert!(err.detail.contains("short, tls-server"), "{}", err.detail);
    }
}
