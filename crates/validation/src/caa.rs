//! CAA checking (RFC 8659), with the RFC 8657 `validationmethods` and `accounturi` parameters.
//!
//! The relevant record set is the first non-empty CAA set found climbing from the validated name
//! towards the root. A lookup failure refuses issuance: RFC 8659 §3 lets a CA issue only when the
//! absence of CAA records is established.

use acme_core::identifier::Identifier;
use acme_core::problem::{Problem, ProblemType};
use acme_core::status::ChallengeType;
use hickory_resolver::proto::rr::rdata::CAA;
use hickory_resolver::proto::rr::{RData, RecordType};

use crate::resolver::{Answer, DnsClient};

/// Property tags this CA understands; a critical record with any other tag refuses issuance.
const KNOWN_TAGS: [&str; 3] = ["issue", "issuewild", "iodef"];

pub(crate) async fn check(
    dns: &DnsClient,
    identities: &[String],
    identifier: &Identifier,
    challenge: ChallengeType,
) -> Result<(), Problem> {
    let mut name = identifier.base_name().to_owned();
    loop {
        match dns.query(&name, RecordType::CAA).await {
            Answer::Records(records) => {
                let caa: Vec<CAA> = records
                    .into_iter()
                    .filter_map(|r| match r {
                        RData::CAA(caa) => Some(caa),
                        _ => None,
                    })
                    .collect();
                if !caa.is_empty() {
                    return evaluate(&caa, &name, identities, identifier, challenge);
                }
            }
            Answer::NxDomain | Answer::NoData => {}
            Answer::Failed(why) => {
                return Err(Problem::new(
                    ProblemType::Caa,
                    format!(
                        "DNS problem: {why} looking up CAA for {name}; issuance for {} is refused until CAA can be checked",
                        identifier.value()
                    ),
                ));
            }
        }
        match name.split_once('.') {
            Some((_, parent)) if !parent.is_empty() => name = parent.to_owned(),
            _ => return Ok(()),
        }
    }
}

/// Decides on the relevant record set found at `owner`.
fn evaluate(
    records: &[CAA],
    owner: &str,
    identities: &[String],
    identifier: &Identifier,
    challenge: ChallengeType,
) -> Result<(), Problem> {
    let refuse = |detail: String| Err(Problem::new(ProblemType::Caa, detail));
    if let Some(unknown) = records
        .iter()
        .find(|r| r.issuer_critical && !KNOWN_TAGS.iter().any(|t| r.tag.eq_ignore_ascii_case(t)))
    {
        return refuse(format!(
            "CAA record for {owner} has the critical property {:?}, which this CA does not understand; issuance for {} is refused",
            unknown.tag,
            identifier.value()
        ));
    }
    let with_tag = |tag: &str| {
        records
            .iter()
            .filter(|r| r.tag.eq_ignore_ascii_case(tag))
            .collect::<Vec<_>>()
    };
    let issuewild = with_tag("issuewild");
    let (relevant, tag) = if identifier.is_wildcard() && !issuewild.is_empty() {
        (issuewild, "issuewild")
    } else {
        (with_tag("issue"), "issue")
    };
    if relevant.is_empty() {
        return Ok(());
    }
    let mut named = Vec::new();
    for record in &relevant {
        let Ok((issuer, parameters)) = record.value_as_issue() else {
            // A malformed value authorizes nobody (RFC 8659 §4.2).
            continue;
        };
        let Some(issuer) = issuer else { continue };
        let issuer = issuer.to_ascii().trim_end_matches('.').to_ascii_lowercase();
        if !identities.contains(&issuer) {
            named.push(issuer);
            continue;
        }
        let mut permitted = true;
        for parameter in &parameters {
            if parameter.key().eq_ignore_ascii_case("validationmethods") {
                permitted &= parameter
                    .value()
                    .split(',')
                    .any(|m| m.trim() == challenge.as_str());
            } else if parameter.key().eq_ignore_ascii_case("accounturi") {
                // The account is not known here; an account-bound record cannot be satisfied.
                permitted = false;
            }
        }
        if permitted {
            return Ok(());
        }
        named.push(format!(
            "{issuer} (with parameters that exclude this {} request)",
            challenge.as_str()
        ));
    }
    let ours = identities.first().map_or("", String::as_str);
    let allowed = if named.is_empty() {
        "no CA".to_owned()
    } else {
        named.join(", ")
    };
    refuse(format!(
        "CAA record for {owner} prevents issuance for {}: its {tag} properties authorize {allowed}; add a record such as {owner}. CAA 0 {tag} \"{ours}\"",
        identifier.value()
    ))
}

#[cfg(test)]
mod tests {
    use hickory_resolver::proto::rr::Name;
    use hickory_resolver::proto::rr::rdata::caa::KeyValue;

    use super::*;

    fn issue(tag: &str, issuer: Option<&str>, params: Vec<KeyValue>) -> CAA {
        let name = issuer.map(|i| Name::from_ascii(i).unwrap());
        let mut caa = CAA::new_issue(false, name, params);
        tag.clone_into(&mut caa.tag);
        caa
    }

    fn run(records: &[CAA], id: &str, challenge: ChallengeType) -> Result<(), Problem> {
        let identities = vec!["ca.test".to_owned()];
        evaluate(
            records,
            "example.com",
            &identities,
            &Identifier::dns(id).unwrap(),
            challenge,
        )
    }

    #[test]
    fn issue_properties_select_issuers() {
        let ours = issue("issue", Some("ca.test"), vec![]);
        let theirs = issue("issue", Some("other.example"), vec![]);
        assert!(
            run(
                std::slice::from_ref(&ours),
                "example.com",
                ChallengeType::Http01
            )
            .is_ok()
        );
        assert!(
            run(
                &[theirs.clone(), ours],
                "example.com",
                ChallengeType::Http01
            )
            .is_ok()
        );
        let problem = run(&[theirs], "example.com", ChallengeType::Http01).unwrap_err();
        assert_eq!(problem.kind, ProblemType::Caa);
        assert!(
            problem.detail.contains("other.example"),
            "{}",
            problem.detail
        );
        let nobody = issue("issue", None, vec![]);
        assert!(run(&[nobody], "example.com", ChallengeType::Http01).is_err());
    }

    #[test]
    fn validationmethods_and_accounturi_restrict() {
        let dns_only = issue(
            "issue",
            Some("ca.test"),
            vec![KeyValue::new("validationmethods", "dns-01")],
        );
        assert!(
            run(
                std::slice::from_ref(&dns_only),
                "example.com",
                ChallengeType::Dns01
            )
            .is_ok()
        );
        assert!(run(&[dns_only], "example.com", ChallengeType::Http01).is_err());
        let bound = issue(
            "issue",
            Some("ca.test"),
            vec![KeyValue::new("accounturi", "https://ca.test/acct/1")],
        );
        assert!(run(&[bound], "example.com", ChallengeType::Http01).is_err());
    }

    #[test]
    fn critical_unknown_tags_refuse_and_iodef_alone_allows() {
        let mut critical = issue("tbs", None, vec![]);
        critical.issuer_critical = true;
        critical.value = b"whatever".to_vec();
        let problem = run(&[critical], "example.com", ChallengeType::Http01).unwrap_err();
        assert!(problem.detail.contains("\"tbs\""), "{}", problem.detail);
        let mut iodef = issue("iodef", None, vec![]);
        iodef.value = b"mailto:security@example.com".to_vec();
        assert!(run(&[iodef], "example.com", ChallengeType::Http01).is_ok());
    }

    #[test]
    fn issuewild_governs_wildcards_only() {
        let wild_theirs = issue("issuewild", Some("other.example"), vec![]);
        let issue_ours = issue("issue", Some("ca.test"), vec![]);
        let records = [wild_theirs, issue_ours.clone()];
        assert!(run(&records, "example.com", ChallengeType::Dns01).is_ok());
        assert!(run(&records, "*.example.com", ChallengeType::Dns01).is_err());
        // Without issuewild, issue applies to wildcards too.
        assert!(run(&[issue_ours], "*.example.com", ChallengeType::Dns01).is_ok());
    }
}
