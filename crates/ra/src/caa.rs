//! CAA at issuance (RFC 8659; the CA/Browser Forum Baseline Requirements, §3.2.2.8).
//!
//! CAA is checked when an authorization is validated, and that check vouches for issuance for a
//! limited time only: a certificate must be issued within 8 hours of the CAA lookup that allowed
//! it. An authorization is reused for days (`acme.reuse-valid-authorizations`), so an order can
//! reach finalize long after its CAA was last looked at, and the records may have changed since.
//! Which of an order's authorizations must then have CAA checked again, with what, and what a
//! refusal does to the order are decided here. The lookup itself is the validator's
//! (`Validator::check_caa`), and the finalization job runs it just before signing, so the age is
//! measured at issuance even when the job waited in the queue.

use acme_core::identifier::Identifier;
use acme_core::identifier::IdentifierKind;
use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use acme_core::status::ChallengeType;
use storage::model::OrderValidation;
use time::Duration;
use time::OffsetDateTime;

/// Default of `validation.caa-recheck-after`: the Baseline Requirements' 8 hours.
pub const DEFAULT_RECHECK_AFTER: Duration = Duration::hours(8);

/// One CAA check to make again before signing: the identifier, and the method its authorization
/// was validated by (what RFC 8657 `validationmethods` parameters are compared with).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recheck {
    pub identifier: Identifier,
    pub method: ChallengeType,
}

/// The validations of an order whose CAA check no longer vouches for issuance at `now`: those
/// validated more than `after` before. IP identifiers have no CAA. Each is rechecked with the
/// type of the challenge that validated it, and for the order's account.
pub fn rechecks(
    validations: &[OrderValidation],
    now: OffsetDateTime,
    after: Duration,
) -> Vec<Recheck> {
    validations
        .iter()
        .filter(|v| v.identifier.kind() == IdentifierKind::Dns && now - v.validated_at > after)
        .map(|v| Recheck {
            identifier: v.identifier.clone(),
            method: v.method,
        })
        .collect()
}

/// The problem that fails the order when rechecks refused (`refused`: each identifier with the
/// validator's problem), or `None` when none did. The order becomes `invalid` with it (RFC 8555
/// §7.1.6: processing to invalid) rather than the finalize request being refused, because the
/// recheck runs in the finalization job at signing time; the client sees the problem in the
/// order's `error`. It is always `caa`, a lookup failure included (RFC 8659 §3: a CA issues only
/// once the absence of records is established). Several refusals are subproblems, and their
/// details are also all in the top-level detail, because an order keeps only the type and detail
/// of its error.
pub fn refusal(refused: Vec<(Identifier, Problem)>, after: Duration) -> Option<Problem> {
    let age = hours(after);
    let problems: Vec<Problem> = refused
        .into_iter()
        .map(|(identifier, problem)| {
            Problem::new(
                ProblemType::Caa,
                format!(
                    "CAA was checked again at issuance because {} was validated more than {age} ago: {}",
                    identifier.value(),
                    problem.detail
                ),
            )
            .with_identifier(identifier)
        })
        .collect();
    let summary = format!(
        "CAA, checked again at issuance for the {} identifiers validated more than {age} ago, refuses this order: {}",
        problems.len(),
        problems
            .iter()
            .map(|p| p.detail.as_str())
            .collect::<Vec<_>>()
            .join(" | ")
    );
    Problem::combine(problems, summary)
}

/// `after` for people: whole hours when it is some, else what `time` prints.
fn hours(after: Duration) -> String {
    if after.whole_hours() > 0 && after == Duration::hours(after.whole_hours()) {
        format!("{} hours", after.whole_hours())
    } else {
        after.to_string()
    }
}

#[cfg(test)]
mod tests {
    use acme_core::ids::AuthzId;

    use super::*;

    fn validation(name: &str, method: ChallengeType, at: OffsetDateTime) -> OrderValidation {
        let identifier = if name.parse::<std::net::IpAddr>().is_ok() {
            Identifier::ip(name).unwrap()
        } else {
            Identifier::dns(name).unwrap()
        };
        OrderValidation {
            authz_id: AuthzId(1),
            identifier,
            method,
            validated_at: at,
        }
    }

    #[test]
    fn only_dns_validations_older_than_the_limit_are_rechecked() {
        let now = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
        let after = DEFAULT_RECHECK_AFTER;
        let validations = [
            validation("fresh.example.com", ChallengeType::Http01, now),
            validation("edge.example.com", ChallengeType::Http01, now - after),
            validation(
                "old.example.com",
                ChallengeType::TlsAlpn01,
                now - after - Duration::SECOND,
            ),
            validation(
                "*.example.com",
                ChallengeType::Dns01,
                now - Duration::days(3),
            ),
            validation("192.0.2.1", ChallengeType::Http01, now - Duration::days(3)),
        ];
        assert_eq!(
            rechecks(&validations, now, after),
            vec![
                Recheck {
                    identifier: Identifier::dns("old.example.com").unwrap(),
                    method: ChallengeType::TlsAlpn01,
                },
                Recheck {
                    identifier: Identifier::dns("*.example.com").unwrap(),
                    method: ChallengeType::Dns01,
                },
            ]
        );
        // Zero: every validation made before this second is rechecked.
        assert_eq!(rechecks(&validations, now, Duration::ZERO).len(), 3);
    }

    #[test]
    fn refusals_are_caa_problems_with_one_subproblem_per_identifier() {
        assert!(refusal(Vec::new(), DEFAULT_RECHECK_AFTER).is_none());
        let refused = |name: &str| {
            (
                Identifier::dns(name).unwrap(),
                Problem::new(ProblemType::Caa, format!("CAA record for {name} says no")),
            )
        };
        let one = refusal(vec![refused("a.example.com")], DEFAULT_RECHECK_AFTER).unwrap();
        assert_eq!(one.kind, ProblemType::Caa);
        assert!(
            one.detail.contains("more than 8 hours ago"),
            "{}",
            one.detail
        );
        assert!(
            one.detail.contains("CAA record for a.example.com says no"),
            "{}",
            one.detail
        );
        assert_eq!(
            one.identifier,
            Some(Identifier::dns("a.example.com").unwrap())
        );
        let two = refusal(
            vec![refused("a.example.com"), refused("b.example.com")],
            Duration::minutes(90),
        )
        .unwrap();
        assert_eq!(two.kind, ProblemType::Caa);
        assert_eq!(two.subproblems.len(), 2);
        assert!(two.detail.contains("1h30m"), "{}", two.detail);
        // The order keeps only the top-level detail: it tells every refusal.
        for name in ["a.example.com says no", "b.example.com says no"] {
            assert!(two.detail.contains(name), "{}", two.detail);
        }
        assert!(
            two.subproblems
                .iter()
                .all(|p| p.kind == ProblemType::Caa && p.identifier.is_some())
        );
    }
}
