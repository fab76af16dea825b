//! The certificate-profile decisions of new-order and finalize (draft-ietf-acme-profiles): which
//! profile an order gets, whether its identifiers and requested window fit it, and whether a
//! CSR's key does; and each profile's validation policy (Boulder's validation profiles): who may
//! use it ([`check`]), the challenge types it offers ([`challenges`]), and the lifetimes of its
//! orders and authorizations ([`OrderRules`]), each falling back to the CA-wide `acme.*` value.
//!
//! Domain values in, a [`Problem`] out. The rules themselves are the
//! profile's own ([`issuance::Profile`]); this module only picks the profile and names the ACME
//! problem type of each refusal.

use acme_core::identifier::Identifier;
use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use acme_core::status::ChallengeType;
use issuance::CheckedCsr;
use issuance::Profile;
use issuance::Profiles;
use storage::model::Account;
use time::Duration;
use time::OffsetDateTime;

use crate::settings::PolicySettings;

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
/// The account must be allowed the profile and the identifiers within its limits ([`check`]).
pub(crate) fn new_order<'p>(
    settings: &'p PolicySettings,
    account: &Account,
    request: ProfileRequest<'_>,
    now: OffsetDateTime,
) -> Result<&'p Profile, Problem> {
    let profile = settings.profiles.select(request.profile).map_err(problem)?;
    check(profile, account, request.identifiers, settings)?;
    profile
        .check_window(
            request.not_before,
            request.not_after,
            now,
            settings.backdate,
        )
        .map_err(problem)?;
    Ok(profile)
}

/// Whether `account` may have `identifiers` authorized under `profile`, by its validation
/// policy: the account must be one the profile allows, by id or by the EAB key it was bound
/// with (`unauthorized` otherwise), the identifiers at most the profile's name limit
/// (`rejectedIdentifier`), and each of a type the profile certifies (`rejectedIdentifier`, one
/// subproblem per identifier). Every path that creates authorizations for a profile (new-order,
/// pre-authorization) asks this, before anything is charged or written.
pub(crate) fn check(
    profile: &Profile,
    account: &Account,
    identifiers: &[Identifier],
    settings: &PolicySettings,
) -> Result<(), Problem> {
    let policy = profile.validation();
    let eab_kid = account.eab_kid.as_ref().map(|k| k.0.as_str());
    if !policy.allows_account(account.id, eab_kid) {
        return Err(Problem::new(
            ProblemType::Unauthorized,
            format!(
                "this account may not use profile {:?}; ask the CA's operator, or use another profile",
                profile.name()
            ),
        ));
    }
    let max = OrderRules::of(profile, settings).max_identifiers;
    if identifiers.len() > max {
        return Err(Problem::new(
            ProblemType::RejectedIdentifier,
            format!(
                "an order of profile {:?} may hold at most {max} identifiers; this one holds {}",
                profile.name(),
                identifiers.len()
            ),
        ));
    }
    profile.check_identifiers(identifiers).map_err(problem)
}

/// The challenge types `profile` offers for `identifier`: those `offered` for it (whatever
/// types exist) that the profile allows, in their order. None left is `rejectedIdentifier`: the
/// identifier cannot be validated under this profile (a wildcard under a profile without
/// `dns-01`).
pub(crate) fn challenges(
    profile: &Profile,
    identifier: &Identifier,
    offered: Vec<ChallengeType>,
) -> Result<Vec<ChallengeType>, Problem> {
    let allowed = profile.validation().filter_challenges(offered);
    if allowed.is_empty() {
        let types: Vec<&str> = profile
            .validation()
            .challenge_types
            .iter()
            .map(|t| t.as_str())
            .collect();
        return Err(Problem::new(
            ProblemType::RejectedIdentifier,
            format!(
                "{}: profile {:?} offers only the challenge types {}, none of which can validate it",
                identifier.value(),
                profile.name(),
                types.join(", ")
            ),
        )
        .with_identifier(identifier.clone()));
    }
    Ok(allowed)
}

/// The lifetimes and limits an order of a profile is created with: the profile's own, or the
/// CA-wide `acme.*` ones it leaves out (the one source of each default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OrderRules {
    /// How long a new authorization stays pending.
    pub(crate) pending_authorization_lifetime: Duration,
    /// How long after its validation an authorization serves orders of the profile: stored
    /// with the authorizations the order creates, and bounding the reuse of any other
    /// (`NewOrder::valid_authz_lifetime`).
    pub(crate) valid_authorization_lifetime: Duration,
    /// How long a new order lives.
    pub(crate) order_lifetime: Duration,
    /// Most identifiers an order may hold.
    pub(crate) max_identifiers: usize,
}

impl OrderRules {
    pub(crate) fn of(profile: &Profile, settings: &PolicySettings) -> Self {
        let policy = profile.validation();
        Self {
            pending_authorization_lifetime: policy
                .pending_authorization_lifetime
                .unwrap_or(settings.authorization_lifetime),
            // The CA-wide lifetime bounds every authorization (a shorter one set by the operator
            // cuts the shipped short-lived profile's 7 h too), as it bounds the name limit.
            valid_authorization_lifetime: policy
                .valid_authorization_lifetime
                .unwrap_or(settings.valid_authorization_lifetime)
                .min(settings.valid_authorization_lifetime),
            order_lifetime: policy.order_lifetime.unwrap_or(settings.order_lifetime),
            max_identifiers: policy
                .max_identifiers
                .unwrap_or(settings.max_identifiers_per_order)
                .min(settings.max_identifiers_per_order),
        }
    }
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
    use std::collections::BTreeMap;

    use acme_core::identifier::Identifier;
    use acme_core::identifier::IdentifierKind;
    use acme_core::ids::AccountId;
    use acme_core::ids::EabKid;
    use acme_core::problem::ProblemType;
    use acme_core::status::AccountStatus;
    use acme_core::status::ChallengeType;
    use issuance::Profiles;
    use issuance::profiles::ProfileDefinition;
    use issuance::profiles::ValidationPolicy;
    use storage::model::Account;
    use time::Duration;
    use time::OffsetDateTime;

    use super::OrderRules;
    use super::ProfileRequest;
    use super::challenges;
    use super::new_order;
    use crate::settings::PolicySettings;

    const NOW: OffsetDateTime = OffsetDateTime::UNIX_EPOCH;

    fn request<'a>(profile: Option<&'a str>, identifiers: &'a [Identifier]) -> ProfileRequest<'a> {
        ProfileRequest {
            profile,
            identifiers,
            not_before: None,
            not_after: None,
        }
    }

    fn account(id: i64, eab: Option<&str>) -> Account {
        Account {
            id: AccountId(id),
            status: AccountStatus::Valid,
            jwk_json: String::new(),
            thumbprint: String::new(),
            contacts: Vec::new(),
            tos_agreed: true,
            created_at: NOW,
            eab_kid: eab.map(|k| EabKid(k.to_owned())),
        }
    }

    /// The policy settings with one profile, `p`, defined as `definition`.
    fn one_profile(definition: ProfileDefinition) -> PolicySettings {
        let mut definitions = BTreeMap::new();
        definitions.insert("p".to_owned(), definition);
        PolicySettings {
            profiles: Profiles::new("p", &definitions, Duration::days(90), Duration::days(90))
                .unwrap(),
            ..PolicySettings::default()
        }
    }

    #[test]
    fn refusals_get_their_acme_types() {
        let settings = PolicySettings::default();
        let now = NOW + Duration::days(20_000);
        let acct = account(1, None);
        let ids = [Identifier::dns("a.example.com").unwrap()];
        let chosen = new_order(&settings, &acct, request(None, &ids), now).unwrap();
        assert_eq!(chosen.name(), "tls-server");
        let chosen = new_order(&settings, &acct, request(Some("short-lived"), &ids), now);
        assert_eq!(chosen.unwrap().name(), "short-lived");

        let unknown = new_order(&settings, &acct, request(Some("gold"), &ids), now).unwrap_err();
        assert_eq!(unknown.kind, ProblemType::InvalidProfile);
        assert!(
            unknown
                .detail
                .contains("short-lived, tls-server, tls-server-client")
        );

        let mut long = request(Some("short-lived"), &ids);
        long.not_after = Some(now + Duration::days(30));
        let refused = new_order(&settings, &acct, long, now).unwrap_err();
        assert_eq!(refused.kind, ProblemType::Malformed);
        // The same window is fine under the default profile.
        long.profile = None;
        new_order(&settings, &acct, long, now).unwrap();
    }

    #[test]
    fn the_ca_wide_valid_authorization_lifetime_bounds_every_profiles() {
        let mut settings = PolicySettings::default();
        let short_lived = settings
            .profiles
            .select(Some("short-lived"))
            .unwrap()
            .clone();
        assert_eq!(
            OrderRules::of(&short_lived, &settings).valid_authorization_lifetime,
            Duration::hours(7)
        );
        // An operator who shortens acme.valid-authorization-lifetime below the shipped 7 h
        // shortens the profile's too, rather than meeting a refusal of a default.
        settings.valid_authorization_lifetime = Duration::hours(2);
        assert_eq!(
            OrderRules::of(&short_lived, &settings).valid_authorization_lifetime,
            Duration::hours(2)
        );
        let tls_server = settings.profiles.select(None).unwrap().clone();
        assert_eq!(
            OrderRules::of(&tls_server, &settings).valid_authorization_lifetime,
            Duration::hours(2)
        );
    }

    #[test]
    fn ip_addresses_are_ordered_under_the_default_and_short_lived_profiles() {
        let settings = PolicySettings::default();
        let acct = account(1, None);
        let ids = [Identifier::ip("192.0.2.7").unwrap()];
        let chosen = new_order(&settings, &acct, request(None, &ids), NOW);
        assert_eq!(chosen.unwrap().name(), "tls-server");
        let chosen = new_order(&settings, &acct, request(Some("short-lived"), &ids), NOW);
        assert_eq!(chosen.unwrap().name(), "short-lived");
    }

    #[test]
    fn identifiers_outside_the_profile_are_rejected_one_by_one() {
        let settings = one_profile(ProfileDefinition {
            identifier_types: vec![IdentifierKind::Dns],
            ..Default::default()
        });
        let ip = Identifier::ip("192.0.2.7").unwrap();
        let ids = [Identifier::dns("a.example.com").unwrap(), ip.clone()];
        let refused =
            new_order(&settings, &account(1, None), request(None, &ids), NOW).unwrap_err();
        assert_eq!(refused.kind, ProblemType::RejectedIdentifier);
        assert_eq!(refused.subproblems.len(), 1);
        assert_eq!(refused.subproblems[0].identifier, Some(ip));
    }

    #[test]
    fn accounts_and_eab_keys_the_profile_does_not_name_are_unauthorized() {
        let settings = one_profile(ProfileDefinition {
            validation: ValidationPolicy {
                accounts: vec![AccountId(5)],
                eab_key_ids: vec!["partner".to_owned()],
                ..ValidationPolicy::default()
            },
            ..Default::default()
        });
        let ids = [Identifier::dns("a.example.com").unwrap()];
        new_order(&settings, &account(5, None), request(None, &ids), NOW).unwrap();
        new_order(
            &settings,
            &account(6, Some("partner")),
            request(None, &ids),
            NOW,
        )
        .unwrap();
        for stranger in [account(6, None), account(7, Some("other"))] {
            let refused = new_order(&settings, &stranger, request(None, &ids), NOW).unwrap_err();
            assert_eq!(refused.kind, ProblemType::Unauthorized);
            assert!(
                refused.detail.contains("profile \"p\""),
                "{}",
                refused.detail
            );
        }
    }

    #[test]
    fn the_name_limit_is_the_profiles_within_the_ca_wide_one() {
        let ids: Vec<Identifier> = ["a.example.com", "b.example.com", "c.example.com"]
            .into_iter()
            .map(|n| Identifier::dns(n).unwrap())
            .collect();
        let settings = one_profile(ProfileDefinition {
            validation: ValidationPolicy {
                max_identifiers: Some(2),
                ..ValidationPolicy::default()
            },
            ..Default::default()
        });
        let refused =
            new_order(&settings, &account(1, None), request(None, &ids), NOW).unwrap_err();
        assert_eq!(refused.kind, ProblemType::RejectedIdentifier);
        assert!(refused.detail.contains("at most 2"), "{}", refused.detail);
        new_order(&settings, &account(1, None), request(None, &ids[..2]), NOW).unwrap();
    }

    #[test]
    fn lifetimes_fall_back_to_the_ca_wide_ones() {
        let settings = PolicySettings::default();
        let rules = OrderRules::of(settings.profiles.default_profile(), &settings);
        assert_eq!(
            rules,
            OrderRules {
                pending_authorization_lifetime: settings.authorization_lifetime,
                valid_authorization_lifetime: settings.valid_authorization_lifetime,
                order_lifetime: settings.order_lifetime,
                max_identifiers: settings.max_identifiers_per_order,
            }
        );
        let short = settings.profiles.select(Some("short-lived")).unwrap();
        let rules = OrderRules::of(short, &settings);
        assert_eq!(rules.valid_authorization_lifetime, Duration::hours(7));
        assert_eq!(rules.order_lifetime, settings.order_lifetime);

        let own = one_profile(ProfileDefinition {
            validation: ValidationPolicy {
                pending_authorization_lifetime: Some(Duration::hours(1)),
                order_lifetime: Some(Duration::hours(2)),
                ..ValidationPolicy::default()
            },
            ..Default::default()
        });
        let rules = OrderRules::of(own.profiles.default_profile(), &own);
        assert_eq!(rules.pending_authorization_lifetime, Duration::hours(1));
        assert_eq!(rules.order_lifetime, Duration::hours(2));
    }

    #[test]
    fn challenge_types_are_filtered_and_an_identifier_left_without_one_is_rejected() {
        let settings = one_profile(ProfileDefinition {
            validation: ValidationPolicy {
                challenge_types: vec![ChallengeType::Http01],
                ..ValidationPolicy::default()
            },
            ..Default::default()
        });
        let profile = settings.profiles.default_profile();
        let name = Identifier::dns("a.example.com").unwrap();
        let offered = vec![
            ChallengeType::Http01,
            ChallengeType::Dns01,
            ChallengeType::TlsAlpn01,
        ];
        assert_eq!(
            challenges(profile, &name, offered).unwrap(),
            [ChallengeType::Http01]
        );
        let wildcard = Identifier::dns("*.example.com").unwrap();
        let refused = challenges(profile, &wildcard, vec![ChallengeType::Dns01]).unwrap_err();
        assert_eq!(refused.kind, ProblemType::RejectedIdentifier);
        assert_eq!(refused.identifier, Some(wildcard));
    }
}
