use std::collections::BTreeMap;

use acme_core::identifier::Identifier;
use acme_core::identifier::IdentifierKind;
use time::Duration;
use time::OffsetDateTime;

use super::DEFAULT_MAX_VALIDITY;
use super::DEFAULT_VALIDITY;
use super::ExtendedKeyUsage;
use super::KeyUsage;
use super::ProfileDefinition;
use super::Profiles;
use super::SHIPPED_DEFAULT;
use super::SHORT_LIVED_AUTHORIZATION_LIFETIME;
use super::ValidationPolicy;
use crate::error::Error;

/// 2026-01-01T00:00:00Z.
const NOW: OffsetDateTime = match OffsetDateTime::from_unix_timestamp(1_767_225_600) {
    Ok(t) => t,
    Err(_) => panic!("a valid timestamp"),
};
const BACKDATE: Duration = Duration::minutes(1);

#[test]
fn shipped_profiles_resolve_with_the_ca_wide_validities() {
    let profiles = Profiles::shipped();
    let names: Vec<&str> = profiles.iter().map(|p| p.name()).collect();
    assert_eq!(names, ["short-lived", "tls-server", "tls-server-client"]);
    let default = profiles.default_profile();
    assert_eq!(default.name(), SHIPPED_DEFAULT);
    assert_eq!(default.validity(), DEFAULT_VALIDITY);
    assert_eq!(default.max_validity(), DEFAULT_MAX_VALIDITY);
    assert_eq!(
        default.extended_key_usages(),
        [ExtendedKeyUsage::ServerAuth]
    );
    let short = profiles.select(Some("short-lived")).unwrap();
    assert_eq!(short.validity(), Duration::days(7));
    assert_eq!(short.max_validity(), Duration::days(7));
    let both = profiles.select(Some("tls-server-client")).unwrap();
    assert_eq!(
        both.extended_key_usages(),
        [ExtendedKeyUsage::ServerAuth, ExtendedKeyUsage::ClientAuth]
    );
}

#[test]
fn select_defaults_and_names_the_known_profiles() {
    let profiles = Profiles::shipped();
    assert_eq!(profiles.select(None).unwrap().name(), "tls-server");
    match profiles.select(Some("nope")) {
        Err(Error::UnknownProfile { name, known }) => {
            assert_eq!(name, "nope");
            assert_eq!(known, "short-lived, tls-server, tls-server-client");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn left_out_validities_follow_the_ca_wide_ones() {
    let mut defs = BTreeMap::new();
    defs.insert("a".to_owned(), ProfileDefinition::default());
    let profiles = Profiles::new("a", &defs, Duration::days(30), Duration::days(45)).unwrap();
    let a = profiles.default_profile();
    assert_eq!(
        (a.validity(), a.max_validity()),
        (Duration::days(30), Duration::days(45))
    );
}

#[test]
fn bad_definitions_are_refused() {
    let refused = |default: &str, def: ProfileDefinition| {
        let mut defs = BTreeMap::new();
        defs.insert("p".to_owned(), def);
        matches!(
            Profiles::new(default, &defs, DEFAULT_VALIDITY, DEFAULT_MAX_VALIDITY),
            Err(Error::InvalidProfile(_))
        )
    };
    assert!(refused("other", ProfileDefinition::default()));
    assert!(refused(
        "p",
        ProfileDefinition {
            validity: Some(Duration::days(10)),
            max_validity: Some(Duration::days(5)),
            ..ProfileDefinition::default()
        }
    ));
    assert!(refused(
        "p",
        ProfileDefinition {
            validity: Some(Duration::ZERO),
            ..ProfileDefinition::default()
        }
    ));
    assert!(refused(
        "p",
        ProfileDefinition {
            extended_key_usages: Vec::new(),
            ..ProfileDefinition::default()
        }
    ));
    assert!(refused(
        "p",
        ProfileDefinition {
            key_types: Vec::new(),
            ..ProfileDefinition::default()
        }
    ));
    let mut defs = BTreeMap::new();
    defs.insert("with space".to_owned(), ProfileDefinition::default());
    assert!(matches!(
        Profiles::new("with space", &defs, DEFAULT_VALIDITY, DEFAULT_MAX_VALIDITY),
        Err(Error::InvalidProfile(_))
    ));
}

#[test]
fn identifier_types_outside_the_profile_are_named() {
    let mut defs = BTreeMap::new();
    defs.insert(
        "dns-only".to_owned(),
        ProfileDefinition {
            identifier_types: vec![IdentifierKind::Dns],
            ..ProfileDefinition::default()
        },
    );
    let profiles =
        Profiles::new("dns-only", &defs, DEFAULT_VALIDITY, DEFAULT_MAX_VALIDITY).unwrap();
    let p = profiles.default_profile();
    let dns = Identifier::dns("a.example.com").unwrap();
    let ip = Identifier::ip("192.0.2.1").unwrap();
    p.check_identifiers(std::slice::from_ref(&dns)).unwrap();
    match p.check_identifiers(&[dns, ip.clone()]) {
        Err(Error::IdentifierNotAllowed {
            profile,
            allowed,
            identifiers,
        }) => {
            assert_eq!((profile.as_str(), allowed.as_str()), ("dns-only", "dns"));
            assert_eq!(identifiers, [ip]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn windows_are_held_to_the_profile() {
    let profiles = Profiles::shipped();
    let short = profiles.select(Some("short-lived")).unwrap();
    let check = |nb: Option<OffsetDateTime>, na: Option<OffsetDateTime>| {
        short.check_window(nb, na, NOW, BACKDATE)
    };
    check(None, None).unwrap();
    check(Some(NOW), Some(NOW + Duration::days(7))).unwrap();
    check(None, Some(NOW + Duration::days(3))).unwrap();
    let bad = |r: Result<(), Error>| matches!(r, Err(Error::BadValidity(_)));
    assert!(bad(check(Some(NOW), Some(NOW + Duration::days(8)))));
    assert!(bad(check(Some(NOW - Duration::hours(1)), None)));
    assert!(bad(check(Some(NOW + Duration::days(8)), None)));
    assert!(bad(check(
        Some(NOW + Duration::days(2)),
        Some(NOW + Duration::days(1))
    )));
    // The same window fits the 397-day default profile.
    profiles
        .default_profile()
        .check_window(Some(NOW), Some(NOW + Duration::days(8)), NOW, BACKDATE)
        .unwrap();
    assert_eq!(
        short.window(None, None, NOW, BACKDATE),
        (NOW - BACKDATE, NOW - BACKDATE + Duration::days(7))
    );
    let asked = (NOW + Duration::hours(1), NOW + Duration::days(2));
    assert_eq!(
        short.window(Some(asked.0), Some(asked.1), NOW, BACKDATE),
        asked
    );
}

#[test]
fn the_signing_window_is_fixed_when_signing_not_when_ordering() {
    let profiles = Profiles::shipped();
    let default = profiles.default_profile();
    let ordered = NOW;
    let signed = ordered + Duration::days(6);
    // notBefore = the moment of ordering, finalized six days later: backdated by the
    // configured minute from the signing time, not by six days.
    assert_eq!(
        default
            .signing_window(Some(ordered), None, signed, BACKDATE)
            .unwrap(),
        (signed - BACKDATE, signed - BACKDATE + DEFAULT_VALIDITY)
    );
    // An asked-for end is kept; the certificate is only shorter.
    let end = ordered + Duration::days(30);
    assert_eq!(
        default
            .signing_window(Some(ordered), Some(end), signed, BACKDATE)
            .unwrap(),
        (signed - BACKDATE, end)
    );
    // A start still ahead is kept as asked.
    let ahead = signed + Duration::hours(3);
    assert_eq!(
        default
            .signing_window(Some(ahead), Some(end), signed, BACKDATE)
            .unwrap(),
        (ahead, end)
    );
    // Nothing asked: from the signing time.
    assert_eq!(
        default
            .signing_window(None, None, signed, BACKDATE)
            .unwrap(),
        default.window(None, None, signed, BACKDATE)
    );
    // An end that has passed, or passes now, is refused.
    for end in [signed - Duration::days(1), signed] {
        let refused = default.signing_window(Some(ordered), Some(end), signed, BACKDATE);
        assert!(
            matches!(&refused, Err(Error::BadValidity(m)) if m.contains("has passed")),
            "{refused:?}"
        );
    }
    default
        .signing_window(None, Some(signed + Duration::seconds(1)), signed, BACKDATE)
        .unwrap();
}

#[test]
fn usage_names_round_trip() {
    for usage in KeyUsage::ALL {
        assert_eq!(usage.as_str().parse::<KeyUsage>().unwrap(), usage);
    }
    for usage in ExtendedKeyUsage::ALL {
        assert_eq!(
            usage.to_string().parse::<ExtendedKeyUsage>().unwrap(),
            usage
        );
    }
    assert!(matches!(
        "code-signing".parse::<ExtendedKeyUsage>(),
        Err(Error::InvalidRequest(m)) if m.contains("server-auth, client-auth")
    ));
}

#[test]
fn every_shipped_profile_certifies_ip_addresses() {
    let profiles = Profiles::shipped();
    let ip = Identifier::ip("192.0.2.1").unwrap();
    for profile in profiles.iter() {
        assert!(
            profile.check_identifiers(std::slice::from_ref(&ip)).is_ok(),
            "{}",
            profile.name()
        );
        assert_eq!(profile.issuer(), None);
        assert!(profile.validation().open_to_all());
    }
    let short = profiles.select(Some("short-lived")).unwrap();
    assert_eq!(
        short.validation().valid_authorization_lifetime,
        Some(SHORT_LIVED_AUTHORIZATION_LIFETIME)
    );
    // The other lifetimes and limits are the CA-wide ones.
    assert_eq!(short.validation().order_lifetime, None);
    assert_eq!(short.validation().max_identifiers, None);
    let default = profiles.default_profile();
    assert_eq!(default.validation(), &ValidationPolicy::default());
}

#[test]
fn the_validation_policy_filters_challenges_and_accounts() {
    use acme_core::ids::AccountId;
    use acme_core::status::ChallengeType;

    let all = vec![
        ChallengeType::Http01,
        ChallengeType::Dns01,
        ChallengeType::TlsAlpn01,
    ];
    let open = ValidationPolicy::default();
    assert_eq!(open.filter_challenges(all.clone()), all);
    assert!(open.allows_account(AccountId(7), None));

    let narrow = ValidationPolicy {
        challenge_types: vec![ChallengeType::Dns01, ChallengeType::Http01],
        accounts: vec![AccountId(7)],
        eab_key_ids: vec!["kid-1".to_owned()],
        ..ValidationPolicy::default()
    };
    // The identifier's own order is kept; a type the identifier is not offered stays out.
    assert_eq!(
        narrow.filter_challenges(all),
        [ChallengeType::Http01, ChallengeType::Dns01]
    );
    assert_eq!(narrow.filter_challenges(vec![ChallengeType::TlsAlpn01]), []);
    assert!(narrow.allows_account(AccountId(7), None));
    assert!(narrow.allows_account(AccountId(8), Some("kid-1")));
    assert!(!narrow.allows_account(AccountId(8), Some("kid-2")));
    assert!(!narrow.allows_account(AccountId(8), None));
}

#[test]
fn validation_lifetimes_and_limits_must_be_positive() {
    for (validation, why) in [
        (
            ValidationPolicy {
                order_lifetime: Some(Duration::ZERO),
                ..ValidationPolicy::default()
            },
            "the order lifetime must be longer than zero",
        ),
        (
            ValidationPolicy {
                valid_authorization_lifetime: Some(Duration::seconds(-1)),
                ..ValidationPolicy::default()
            },
            "the valid authorization lifetime must be longer than zero",
        ),
        (
            ValidationPolicy {
                max_identifiers: Some(0),
                ..ValidationPolicy::default()
            },
            "the most identifiers per order must be at least 1",
        ),
    ] {
        let mut defs = BTreeMap::new();
        defs.insert(
            "p".to_owned(),
            ProfileDefinition {
                validation,
                ..ProfileDefinition::default()
            },
        );
        match Profiles::new("p", &defs, DEFAULT_VALIDITY, DEFAULT_MAX_VALIDITY) {
            Err(Error::InvalidProfile(detail)) => assert!(detail.contains(why), "{detail}"),
            other => panic!("{other:?}"),
        }
    }
}
