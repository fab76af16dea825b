//! CAA checking (RFC 8659), with the RFC 8657 `validationmethods` and `accounturi` parameters.
//!
//! The relevant record set is the first non-empty CAA set found climbing from the validated name
//! towards the root. A lookup failure refuses issuance: RFC 8659 §3 lets a CA issue only when the
//! absence of CAA records is established.

use acme_core::identifier::Identifier;
use acme_core::problem::{Problem, ProblemType};
use acme_core::status::ChallengeType;
use hickory_resolver::proto::rr::rdata::CAA;
use hickory_resolver::proto::rr::rdata::caa::KeyValue;
use hickory_resolver::proto::rr::{RData, RecordType};

use crate::resolver::{Answer, DnsClient};

/// Property tags this CA understands; a critical record with any other tag refuses issuance.
const KNOWN_TAGS: [&str; 3] = ["issue", "issuewild", "iodef"];

/// What a CAA record must permit: this CA, for this account, by this validation method.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request<'a> {
    pub(crate) identifier: &'a Identifier,
    /// The challenge type that validated (or is validating) the identifier.
    pub(crate) method: ChallengeType,
    /// The URI of the account asking (RFC 8657 §3), exactly as the server hands it out.
    pub(crate) account_uri: &'a str,
}

/// `Ok` with the records that allowed issuance, for the validation evidence: the relevant set
/// and the name it was found at, or that no name up to the root has CAA records.
pub(crate) async fn check(
    dns: &DnsClient,
    identities: &[String],
    request: Request<'_>,
) -> Result<Vec<String>, Problem> {
    let identifier = request.identifier;
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
                    evaluate(&caa, &name, identities, request)?;
                    return Ok(caa
                        .iter()
                        .map(|record| format!("{name}. CAA {record}"))
                        .collect());
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
            _ => {
                return Ok(vec![format!(
                    "no CAA records (climbed to the root from {})",
                    identifier.base_name()
                )]);
            }
        }
    }
}

/// Decides on the relevant record set found at `owner`.
fn evaluate(
    records: &[CAA],
    owner: &str,
    identities: &[String],
    request: Request<'_>,
) -> Result<(), Problem> {
    let identifier = request.identifier;
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
        match unmet_parameter(&parameters, request) {
            None => return Ok(()),
            Some(why) => named.push(format!("{issuer} {why}")),
        }
    }
    let ours = identities.first().map_or("", String::as_str);
    let allowed = if named.is_empty() {
        "no CA".to_owned()
    } else {
        named.join(", ")
    };
    refuse(format!(
        "CAA record for {owner} prevents issuance for {} (account {}, validated with {}): its {tag} properties authorize {allowed}; add a record such as {owner}. CAA 0 {tag} \"{ours}\"",
        identifier.value(),
        request.account_uri,
        request.method.as_str(),
    ))
}

/// Why the RFC 8657 parameters of a property naming this CA exclude `request`, or `None` when
/// they permit it. Other parameters have no meaning to this CA and are ignored (RFC 8659 §4.2).
/// Parameter tags are compared without regard to case, so that a restriction is never ignored
/// for its spelling.
fn unmet_parameter(parameters: &[KeyValue], request: Request<'_>) -> Option<String> {
    let values = |tag: &str| {
        parameters
            .iter()
            .filter(|p| p.key().eq_ignore_ascii_case(tag))
            .map(KeyValue::value)
            .collect::<Vec<_>>()
    };
    // RFC 8657 §3: a property without accounturi matches any account; one with an unrecognised
    // accounturi, or with several, is unsatisfiable. The URI is compared exactly: it is the
    // account's name, not a URL to be normalised.
    match values("accounturi").as_slice() {
        [] => {}
        [uri] if *uri == request.account_uri => {}
        [uri] => return Some(format!("for the account {uri} only")),
        _ => {
            return Some(
                "with several accounturi parameters, which no account satisfies (RFC 8657 §3)"
                    .to_owned(),
            );
        }
    }
    // RFC 8657 §4: the method used must be one of the comma-separated names. The value must be
    // `[*(label ",") label]` with `label = 1*(ALPHA / DIGIT / "-")`; a malformed list, like
    // several validationmethods parameters (on which the RFC is silent), is unsatisfiable.
    match values("validationmethods").as_slice() {
        [] => None,
        [""] => Some("with an empty validationmethods list, which no request satisfies".to_owned()),
        [list] => {
            let methods: Vec<&str> = list.split(',').collect();
            let well_formed = methods.iter().all(|m| {
                !m.is_empty() && m.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
            if !well_formed {
                Some(format!(
                    "with the malformed validationmethods={list}, which no request satisfies (RFC 8657 §4)"
                ))
            } else if methods.contains(&request.method.as_str()) {
                None
            } else {
                Some(format!("with validationmethods={list} only"))
            }
        }
        _ => {
            Some("with several validationmethods parameters, which no request satisfies".to_owned())
        }
    }
}

#[cfg(test)]
mod tests {
    use hickory_resolver::proto::rr::Name;

    use super::*;

    const ACCOUNT: &str = "https://ca.test/acme/acct/1";
    const OTHER_ACCOUNT: &str = "https://ca.test/acme/acct/2";

    fn issue(tag: &str, issuer: Option<&str>, params: Vec<KeyValue>) -> CAA {
        let name = issuer.map(|i| Name::from_ascii(i).unwrap());
        let mut caa = CAA::new_issue(false, name, params);
        tag.clone_into(&mut caa.tag);
        caa
    }

    /// A record whose value is `value` as written in a zone file, unparsed.
    fn raw(tag: &str, value: &str) -> CAA {
        let mut caa = issue(tag, None, vec![]);
        caa.value = value.as_bytes().to_vec();
        caa
    }

    fn run_for(
        records: &[CAA],
        id: &str,
        method: ChallengeType,
        account_uri: &str,
    ) -> Result<(), Problem> {
        let identities = vec!["ca.test".to_owned()];
        let identifier = Identifier::dns(id).unwrap();
        let request = Request {
            identifier: &identifier,
            method,
            account_uri,
        };
        evaluate(records, "example.com", &identities, request)
    }

    fn run(records: &[CAA], id: &str, method: ChallengeType) -> Result<(), Problem> {
        run_for(records, id, method, ACCOUNT)
    }

    #[track_caller]
    fn refused(result: Result<(), Problem>, needle: &str) {
        let problem = result.unwrap_err();
        assert_eq!(problem.kind, ProblemType::Caa);
        assert!(problem.detail.contains(needle), "{}", problem.detail);
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
        refused(
            run(&[theirs], "example.com", ChallengeType::Http01),
            "other.example",
        );
        let nobody = issue("issue", None, vec![]);
        assert!(run(&[nobody], "example.com", ChallengeType::Http01).is_err());
    }

    #[test]
    fn validationmethods_restrict_the_method() {
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
        refused(
            run(&[dns_only], "example.com", ChallengeType::Http01),
            "validationmethods=dns-01 only",
        );
        // A list; names this CA does not know (RFC 8657 §4's "ca-" methods) just never match.
        let list = raw(
            "issue",
            "ca.test; validationmethods=ca-foo,http-01,tls-alpn-01",
        );
        for method in [ChallengeType::Http01, ChallengeType::TlsAlpn01] {
            assert!(run(std::slice::from_ref(&list), "example.com", method).is_ok());
        }
        assert!(run(&[list], "example.com", ChallengeType::Dns01).is_err());
        // Several properties widen the choice (the RFC's "equivalent way").
        let dns = raw("issue", "ca.test; validationmethods=dns-01");
        let http = raw("issue", "ca.test; validationmethods=http-01");
        for method in [ChallengeType::Dns01, ChallengeType::Http01] {
            assert!(run(&[dns.clone(), http.clone()], "example.com", method).is_ok());
        }
        assert!(run(&[dns, http], "example.com", ChallengeType::TlsAlpn01).is_err());
        // The parameter tag is matched whatever its case.
        let shouted = raw("issue", "ca.test; ValidationMethods=dns-01");
        assert!(run(&[shouted], "example.com", ChallengeType::Http01).is_err());
    }

    #[test]
    fn malformed_or_repeated_validationmethods_are_unsatisfiable() {
        for list in [
            "dns-01,",
            ",dns-01",
            "dns-01,,http-01",
            "dns_01",
            "dns-01/http-01",
        ] {
            let record = issue(
                "issue",
                Some("ca.test"),
                vec![KeyValue::new("validationmethods", list)],
            );
            refused(
                run(&[record], "example.com", ChallengeType::Dns01),
                "malformed validationmethods",
            );
        }
        let empty = issue(
            "issue",
            Some("ca.test"),
            vec![KeyValue::new("validationmethods", "")],
        );
        refused(
            run(&[empty], "example.com", ChallengeType::Dns01),
            "empty validationmethods",
        );
        let twice = raw(
            "issue",
            "ca.test; validationmethods=dns-01; validationmethods=dns-01",
        );
        refused(
            run(&[twice], "example.com", ChallengeType::Dns01),
            "several validationmethods",
        );
    }

    #[test]
    fn accounturi_must_name_the_account_exactly() {
        let bound = raw("issue", &format!("ca.test; accounturi={ACCOUNT}"));
        assert!(
            run(
                std::slice::from_ref(&bound),
                "example.com",
                ChallengeType::Http01
            )
            .is_ok()
        );
        refused(
            run_for(
                std::slice::from_ref(&bound),
                "example.com",
                ChallengeType::Http01,
                OTHER_ACCOUNT,
            ),
            &format!("for the account {ACCOUNT} only"),
        );
        // The detail names the account that asked, so its URI can be copied into a record.
        refused(
            run_for(
                &[bound],
                "example.com",
                ChallengeType::Http01,
                OTHER_ACCOUNT,
            ),
            OTHER_ACCOUNT,
        );
        // No normalisation: another spelling of the URL is another name.
        for near in [
            format!("{ACCOUNT}/"),
            "https://CA.test/acme/acct/1".to_owned(),
            "https://ca.test:443/acme/acct/1".to_owned(),
            "http://ca.test/acme/acct/1".to_owned(),
            "https://ca.test/acme/acct/10".to_owned(),
        ] {
            let record = raw("issue", &format!("ca.test; accounturi={near}"));
            assert!(
                run(&[record], "example.com", ChallengeType::Http01).is_err(),
                "{near}"
            );
        }
    }

    #[test]
    fn several_accounturi_parameters_are_unsatisfiable() {
        // RFC 8657 §3, even when one of them (or all) name the account.
        for value in [
            format!("ca.test; accounturi={ACCOUNT}; accounturi={OTHER_ACCOUNT}"),
            format!("ca.test; accounturi={ACCOUNT}; accounturi={ACCOUNT}"),
        ] {
            refused(
                run(
                    &[raw("issue", &value)],
                    "example.com",
                    ChallengeType::Http01,
                ),
                "several accounturi",
            );
        }
        // Several accounts are authorized with one property each (the RFC's example).
        let records = [
            raw("issue", &format!("ca.test; accounturi={ACCOUNT}")),
            raw("issue", &format!("ca.test; accounturi={OTHER_ACCOUNT}")),
        ];
        for account in [ACCOUNT, OTHER_ACCOUNT] {
            assert!(run_for(&records, "example.com", ChallengeType::Http01, account).is_ok());
        }
        let third = "https://ca.test/acme/acct/3";
        assert!(run_for(&records, "example.com", ChallengeType::Http01, third).is_err());
    }

    #[test]
    fn accounturi_and_validationmethods_bind_together() {
        // One account may use dns-01 only, the other http-01 only (RFC 8657's example).
        let records = [
            raw(
                "issue",
                &format!("ca.test; accounturi={ACCOUNT}; validationmethods=dns-01"),
            ),
            raw(
                "issue",
                &format!("ca.test; accounturi={OTHER_ACCOUNT}; validationmethods=http-01"),
            ),
        ];
        let cases = [
            (ACCOUNT, ChallengeType::Dns01, true),
            (ACCOUNT, ChallengeType::Http01, false),
            (OTHER_ACCOUNT, ChallengeType::Http01, true),
            (OTHER_ACCOUNT, ChallengeType::Dns01, false),
        ];
        for (account, method, allowed) in cases {
            let result = run_for(&records, "example.com", method, account);
            assert_eq!(result.is_ok(), allowed, "{account} {method:?}: {result:?}");
        }
        // The account's URI under another CA's name authorizes nothing here (RFC 8657 §3).
        let elsewhere = raw("issue", &format!("other.example; accounturi={ACCOUNT}"));
        assert!(run(&[elsewhere], "example.com", ChallengeType::Http01).is_err());
    }

    #[test]
    fn critical_unknown_tags_refuse_and_iodef_alone_allows() {
        let mut critical = raw("tbs", "whatever");
        critical.issuer_critical = true;
        refused(
            run(&[critical], "example.com", ChallengeType::Http01),
            "\"tbs\"",
        );
        let iodef = raw("iodef", "mailto:security@example.com");
        assert!(run(&[iodef], "example.com", ChallengeType::Http01).is_ok());
    }

    #[test]
    fn issuewild_governs_wildcards_only() {
        let wild_theirs = issue("issuewild", Some("other.example"), vec![]);
        let issue_ours = issue("issue", Some("ca.test"), vec![]);
        let records = [wild_theirs, issue_ours.clone()];
        assert!(run(&records, "example.com", ChallengeType::Dns01).is_ok());
        refused(
            run(&records, "*.example.com", ChallengeType::Dns01),
            "issuewild",
        );
        // Without issuewild, issue applies to wildcards too.
        assert!(run(&[issue_ours], "*.example.com", ChallengeType::Dns01).is_ok());
        // issuewild for this CA allows the wildcard while issue names another CA, and its
        // parameters bind the wildcard's issuance.
        let issue_theirs = issue("issue", Some("other.example"), vec![]);
        let wild_ours = raw("issuewild", &format!("ca.test; accounturi={ACCOUNT}"));
        let records = [issue_theirs, wild_ours];
        assert!(run(&records, "*.example.com", ChallengeType::Dns01).is_ok());
        assert!(run(&records, "example.com", ChallengeType::Dns01).is_err());
        assert!(
            run_for(
                &records,
                "*.example.com",
                ChallengeType::Dns01,
                OTHER_ACCOUNT
            )
            .is_err()
        );
    }
}
