//! The certificate-profile decisions of new-order and finalize (draft-ietf-acme-profiles): which
//! profile an order gets, whether its identifiers and requested window fit it, and whether a
//! CSR's key does.
//!
//! Domain values in, a [`Problem`] out. The rules themselves are the
//! profile's own ([`issuance::Profile`]); this module only picks the profile and names the ACME
//! problem type of each refusal.

use acme_core::identifier::Identifier;
use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use issuance::CheckedCsr;
use issuance::Profile;
use issuance::Profiles;
use time::Duration;
use time::OffsetDateTime;

/// What a new order asks of its certificate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProfileRequest<'a> {
    /// The order's `profile` field; `None` takes the default profile.
    pub(crate) profile: Option<&'a str>,
    /// The order's identifiers, already parsed.
    pub(crate) identifiers: &'a [Identifier],
    pub(crate) not_before: Option<OffsetDateTime>,
    pub(crate) not_after: Option<OffsetDateTime>,
}

/// The profile a new order is created under: the named one (`invalidProfile` when it is not
/// offered, listing those that are) or the default. Its identifiers must all be of a type the
/// profile certifies (`rejectedIdentifier`, one subproblem per identifier), and the requested
/// window must lie within its limits (`malformed`).
pub(crate) fn new_order<'p>(
    profiles: &'p Profiles,
    request: ProfileRequest<'_>,
    now: OffsetDateTime,
    backdate: Duration,
) -> Result<&'p Profile, Problem> {
    let profile = profiles.select(request.profile).map_err(problem)?;
    profile
        .check_identifiers(request.identifiers)
        .map_err(problem)?;
    profile
        .check_window(request.not_before, request.not_after, now, backdate)
        .map_err(problem)?;
    Ok(profile)
}

/// The profile a finalization signs with, if the CSR's key is of a type it certifies
/// (`badCSR` otherwise, and the order stays ready). An order created before profiles existed
/// has none and gets the default.
pub(crate) fn finalize<'p>(
    profiles: &'p Profiles,
    order_profile: Option<&str>,
    csr: &CheckedCsr,
) -> Result<&'p Profile, Problem> {
    let profile = profiles.select(order_profile).map_err(problem)?;
    profile.check_key(csr).map_err(problem)?;
    Ok(profile)
}

/// The certificate's window when `profile`'s order that asked for `not_before`/`not_after` is
/// signed at `now` ([`Profile::signing_window`]); `malformed` when the asked-for notAfter has
/// passed, as for a window refused at new-order.
pub(crate) fn signing_window(
    profile: &Profile,
    not_before: Option<OffsetDateTime>,
    not_after: Option<OffsetDateTime>,
    now: OffsetDateTime,
    backdate: Duration,
) -> Result<(OffsetDateTime, OffsetDateTime), Problem> {
    profile
        .signing_window(not_before, not_after, now, backdate)
        .map_err(problem)
}

/// The ACME problem for a refusal of the profile checks.
fn problem(error: issuance::Error) -> Problem {
    use issuance::Error as E;
    match error {
        E::UnknownProfile { .. } => Problem::new(ProblemType::InvalidProfile, error.to_string()),
        E::IdentifierNotAllowed {
            ref profile,
            ref allowed,
            ref identifiers,
        } => {
            let subproblems = identifiers
                .iter()
                .map(|id| {
                    Problem::new(
                        ProblemType::RejectedIdentifier,
                        format!(
                            "{}: profile {profile:?} certifies only identifiers of type {allowed}",
                            id.value()
                        ),
                    )
                    .with_identifier(id.clone())
                })
                .collect();
            let mut problem = Problem::new(ProblemType::RejectedIdentifier, error.to_string());
            problem.subproblems = subproblems;
            problem
        }
        E::BadValidity(detail) => Problem::new(ProblemType::Malformed, detail),
        E::BadCsr(detail) => Problem::new(ProblemType::BadCsr, detail),
        other => Problem::new(ProblemType::ServerInternal, other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use acme_core::identifier::Identifier;
    use acme_core::problem::ProblemType;
    use issuance::Profiles;
    use time::Duration;
    use time::OffsetDateTime;

    use super::ProfileRequest;
    use super::new_order;

    fn request<'a>(profile: Option<&'a str>, identifiers: &'a [Identifier]) -> ProfileRequest<'a> {
        ProfileRequest {
            profile,
            identifiers,
            not_before: None,
            not_after: None,
        }
    }

    #[test]
    fn refusals_get_their_acme_types() {
        let profiles = Profiles::shipped();
        let now = OffsetDateTime::UNIX_EPOCH + Duration::days(20_000);
        let backdate = Duration::minutes(1);
        let ids = [Identifier::dns("a.example.com").unwrap()];
        let chosen = new_order(&profiles, request(None, &ids), now, backdate).unwrap();
        assert_eq!(chosen.name(), "tls-server");
        let chosen = new_order(&profiles, request(Some("short-lived"), &ids), now, backdate);
        assert_eq!(chosen.unwrap().name(), "short-lived");

        let unknown = new_order(&profiles, request(Some("gold"), &ids), now, backdate).unwrap_err();
        assert_eq!(unknown.kind, ProblemType::InvalidProfile);
        assert!(
            unknown
                .detail
                .contains("short-lived, tls-server, tls-server-client")
        );

        let mut long = request(Some("short-lived"), &ids);
        long.not_after = Some(now + Duration::days(30));
        let refused = new_order(&profiles, long, now, backdate).unwrap_err();
        assert_eq!(refused.kind, ProblemType::Malformed);
        // The same window is fine under the default profile.
        long.profile = None;
        new_order(&profiles, long, now, backdate).unwrap();
    }

    #[test]
    fn identifiers_outside_the_profile_are_rejected_one_by_one() {
        let mut definitions = std::collections::BTreeMap::new();
        definitions.insert(
            "dns".to_owned(),
            issuance::profiles::ProfileDefinition {
                identifier_types: vec![acme_core::identifier::IdentifierKind::Dns],
                ..Default::default()
            },
        );
        let profiles =
            Profiles::new("dns", &definitions, Duration::days(90), Duration::days(90)).unwrap();
        let ip = Identifier::ip("192.0.2.7").unwrap();
        let ids = [Identifier::dns("a.example.com").unwrap(), ip.clone()];
        let refused = new_order(
            &profiles,
            request(None, &ids),
            OffsetDateTime::UNIX_EPOCH,
            Duration::minutes(1),
        )
        .unwrap_err();
        assert_eq!(refused.kind, ProblemType::RejectedIdentifier);
        assert_eq!(refused.subproblems.len(), 1);
        assert_eq!(refused.subproblems[0].identifier, Some(ip));
    }
}
