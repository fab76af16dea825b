use acme_core::problem::ProblemType;
use acme_core::status::ChallengeType::{Dns01, Http01};
use validation::Validator;

use crate::common::{ACCOUNT_URI, Env, KEY_AUTH, account, dns};
use crate::dns01::txt_value;

const TOKEN: &str = "tok3n";

/// An environment whose dns-01 challenges for `a.example.com` and `*.example.com` pass.
async fn env() -> (Env, Validator) {
    let env = Env::start().await;
    env.dns
        .set_a("a.example.com", std::net::Ipv4Addr::LOCALHOST);
    env.dns
        .add_txt("_acme-challenge.a.example.com", &txt_value(KEY_AUTH));
    env.dns
        .add_txt("_acme-challenge.example.com", &txt_value(KEY_AUTH));
    let validator = env.validator_with(|s| s.caa_identities = vec!["ca.test".to_owned()]);
    (env, validator)
}

#[tokio::test]
async fn no_records_allow() {
    let (_env, validator) = env().await;
    validator
        .validate(&dns("a.example.com"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_record_for_us_on_the_parent_allows() {
    let (env, validator) = env().await;
    env.dns.add_caa("example.com", 0, "issue", "ca.test");
    validator
        .validate(&dns("a.example.com"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_record_for_another_ca_refuses() {
    let (env, validator) = env().await;
    env.dns
        .add_caa("example.com", 0, "issue", "other-ca.example");
    let problem = validator
        .validate(&dns("a.example.com"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::Caa);
    assert!(
        problem.detail.contains("other-ca.example"),
        "{}",
        problem.detail
    );
    assert!(
        problem.detail.contains("CAA record for example.com"),
        "{}",
        problem.detail
    );
}

#[tokio::test]
async fn the_closest_record_set_wins() {
    let (env, validator) = env().await;
    env.dns
        .add_caa("example.com", 0, "issue", "other-ca.example");
    env.dns.add_caa("a.example.com", 0, "issue", "ca.test");
    validator
        .validate(&dns("a.example.com"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();
}

#[tokio::test]
async fn issuewild_governs_wildcards() {
    let (env, validator) = env().await;
    env.dns.add_caa("example.com", 0, "issue", "ca.test");
    env.dns
        .add_caa("example.com", 0, "issuewild", "other-ca.example");
    let problem = validator
        .validate(&dns("*.example.com"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::Caa);
    assert!(problem.detail.contains("issuewild"), "{}", problem.detail);
    // The same records allow the non-wildcard name.
    env.dns
        .add_txt("_acme-challenge.example.com", &txt_value(KEY_AUTH));
    validator
        .validate(&dns("example.com"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();
    // And issuewild for us allows the wildcard even though issue names someone else.
    env.dns.clear_caa("example.com");
    env.dns
        .add_caa("example.com", 0, "issue", "other-ca.example");
    env.dns.add_caa("example.com", 0, "issuewild", "ca.test");
    validator
        .validate(&dns("*.example.com"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();
}

#[tokio::test]
async fn critical_unknown_tags_refuse() {
    let (env, validator) = env().await;
    env.dns.add_caa("example.com", 0, "issue", "ca.test");
    env.dns.add_caa("example.com", 128, "futuretag", "value");
    let problem = validator
        .validate(&dns("a.example.com"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::Caa);
    assert!(problem.detail.contains("futuretag"), "{}", problem.detail);
    // Without the critical flag the unknown tag is ignored.
    env.dns.clear_caa("example.com");
    env.dns.add_caa("example.com", 0, "issue", "ca.test");
    env.dns.add_caa("example.com", 0, "futuretag", "value");
    validator
        .validate(&dns("a.example.com"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();
}

#[tokio::test]
async fn validationmethods_limit_the_challenge_types() {
    let (env, validator) = env().await;
    env.dns.add_caa(
        "example.com",
        0,
        "issue",
        "ca.test; validationmethods=dns-01",
    );
    validator
        .validate(&dns("a.example.com"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();
    env.http.add(TOKEN, KEY_AUTH);
    let problem = validator
        .validate(&dns("a.example.com"), Http01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::Caa);
}

#[tokio::test]
async fn a_failed_challenge_is_reported_before_caa() {
    let (env, validator) = env().await;
    env.dns
        .add_caa("example.com", 0, "issue", "other-ca.example");
    env.dns.clear_txt("_acme-challenge.a.example.com");
    let problem = validator
        .validate(&dns("a.example.com"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::Unauthorized);
}

#[tokio::test]
async fn accounturi_binds_the_account() {
    let (env, validator) = env().await;
    env.dns.add_caa(
        "example.com",
        0,
        "issue",
        &format!("ca.test; accounturi={ACCOUNT_URI}"),
    );
    validator
        .validate(&dns("a.example.com"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();
    let other = "https://ca.test/acme/acct/2";
    let problem = validator
        .validate(
            &dns("a.example.com"),
            Dns01,
            TOKEN,
            KEY_AUTH,
            &validation::AttemptAccount {
                uri: other,
                ..account()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::Caa);
    assert!(problem.detail.contains(ACCOUNT_URI), "{}", problem.detail);
    assert!(problem.detail.contains(other), "{}", problem.detail);
    // Two accounturi parameters in one property satisfy nobody (RFC 8657 §3).
    env.dns.clear_caa("example.com");
    env.dns.add_caa(
        "example.com",
        0,
        "issue",
        &format!("ca.test; accounturi={ACCOUNT_URI}; accounturi={other}"),
    );
    let problem = validator
        .validate(&dns("a.example.com"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::Caa);
}

#[tokio::test]
async fn check_caa_alone_honours_the_method_and_the_account() {
    let (env, validator) = env().await;
    assert!(validator.checks_caa());
    env.dns.add_caa(
        "example.com",
        0,
        "issue",
        &format!("ca.test; accounturi={ACCOUNT_URI}; validationmethods=http-01"),
    );
    let name = dns("a.example.com");
    validator
        .check_caa(&name, Http01, ACCOUNT_URI)
        .await
        .unwrap();
    for (method, account) in [
        (Dns01, ACCOUNT_URI),
        (Http01, "https://ca.test/acme/acct/2"),
    ] {
        let problem = validator
            .check_caa(&name, method, account)
            .await
            .unwrap_err();
        assert_eq!(problem.kind, ProblemType::Caa, "{method:?} {account}");
    }
    // IP identifiers have no CAA; a validator without CAA identities checks nothing.
    let ip = acme_core::identifier::Identifier::ip("127.0.0.1").unwrap();
    validator.check_caa(&ip, Http01, ACCOUNT_URI).await.unwrap();
    let unchecked = env.validator_with(|_| {});
    assert!(!unchecked.checks_caa());
    unchecked
        .check_caa(&name, Dns01, "https://ca.test/acme/acct/2")
        .await
        .unwrap();
}

#[tokio::test]
async fn a_caa_lookup_failure_refuses() {
    let (env, _) = env().await;
    let validator = env.validator_with(|s| {
        s.caa_identities = vec!["ca.test".to_owned()];
        s.timeout = std::time::Duration::from_secs(1);
    });
    // Nobody answers any more: no absence of records is established.
    drop(env);
    let problem = validator
        .check_caa(&dns("a.example.com"), Dns01, ACCOUNT_URI)
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::Caa);
}
