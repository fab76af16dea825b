use std::net::IpAddr;

use acme_core::problem::ProblemType;
use acme_core::status::ChallengeType::TlsAlpn01;

use crate::common::{Env, KEY_AUTH, account, closed_port, dns, ip};

const TOKEN: &str = "tok3n";

#[tokio::test]
async fn accepts_the_validation_certificate() {
    let env = Env::start().await;
    env.tls.add("a.test", KEY_AUTH).unwrap();
    env.validator()
        .validate(&dns("a.test"), TlsAlpn01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();
}

#[tokio::test]
async fn wrong_key_authorization_is_an_incorrect_response() {
    let env = Env::start().await;
    env.tls.add("a.test", "tok3n.another-account").unwrap();
    let problem = env
        .validator()
        .validate(&dns("a.test"), TlsAlpn01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::IncorrectResponse);
    assert!(
        problem.detail.contains("SHA-256 of the key authorization"),
        "{}",
        problem.detail
    );
}

#[tokio::test]
async fn a_certificate_for_another_name_is_an_incorrect_response() {
    let env = Env::start().await;
    // The responder answers SNI a.test with a certificate naming b.test.
    env.tls.add("b.test", KEY_AUTH).unwrap();
    assert!(env.tls.add_alias("a.test", "b.test"));
    let problem = env
        .validator()
        .validate(&dns("a.test"), TlsAlpn01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::IncorrectResponse);
    assert!(
        problem.detail.contains("does not match a.test"),
        "{}",
        problem.detail
    );
}

#[tokio::test]
async fn unknown_sni_is_a_tls_problem() {
    let env = Env::start().await;
    let problem = env
        .validator()
        .validate(&dns("a.test"), TlsAlpn01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::Tls);
    assert!(problem.detail.contains("SNI a.test"), "{}", problem.detail);
}

#[tokio::test]
async fn nothing_listening_is_a_connection_problem() {
    let env = Env::start().await;
    let port = closed_port();
    let validator = env.validator_with(|s| s.tls_alpn_port = port);
    let problem = validator
        .validate(&dns("a.test"), TlsAlpn01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::Connection);
    assert!(
        problem
            .detail
            .contains(&format!("127.0.0.1:{port}: connection refused")),
        "{}",
        problem.detail
    );
}

#[tokio::test]
async fn nxdomain_is_a_dns_problem() {
    let env = Env::start().await;
    let problem = env
        .validator()
        .validate(&dns("missing.test"), TlsAlpn01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::Dns);
}

#[tokio::test]
async fn ip_identifiers_use_the_reverse_name_and_an_ip_san() {
    let env = Env::start().await;
    env.tls
        .add_ip("127.0.0.1".parse::<IpAddr>().unwrap(), KEY_AUTH)
        .unwrap();
    env.validator()
        .validate(&ip("127.0.0.1"), TlsAlpn01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();
}

#[tokio::test]
async fn loopback_ip_is_refused_unless_allowed() {
    let env = Env::start().await;
    env.tls
        .add_ip("127.0.0.1".parse::<IpAddr>().unwrap(), KEY_AUTH)
        .unwrap();
    let strict = env.validator_with(|s| s.allow_loopback = false);
    let problem = strict
        .validate(&ip("127.0.0.1"), TlsAlpn01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::RejectedIdentifier);
}

#[tokio::test]
async fn wildcards_are_refused() {
    let env = Env::start().await;
    let problem = env
        .validator()
        .validate(
            &dns("*.example.com"),
            TlsAlpn01,
            TOKEN,
            KEY_AUTH,
            &account(),
        )
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::Malformed);
}

#[tokio::test]
async fn tls12_handshakes_are_verified_too() {
    let env = Env::start().await;
    let tls12 = testkit::tls_alpn::TlsAlpnResponder::start_tls12_only()
        .await
        .unwrap();
    tls12.add("a.test", KEY_AUTH).unwrap();
    tls12.add_with_mismatched_key("b.test", KEY_AUTH).unwrap();
    let validator = env.validator_with(|s| s.tls_alpn_port = tls12.port());
    validator
        .validate(&dns("a.test"), TlsAlpn01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();
    let problem = validator
        .validate(&dns("b.test"), TlsAlpn01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::Tls);
    assert!(
        problem.detail.contains("BadSignature"),
        "{}",
        problem.detail
    );
}

#[tokio::test]
async fn a_handshake_signed_with_another_key_is_a_tls_problem() {
    let env = Env::start().await;
    env.tls.add_with_mismatched_key("a.test", KEY_AUTH).unwrap();
    let problem = env
        .validator()
        .validate(&dns("a.test"), TlsAlpn01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::Tls);
    assert!(
        problem.detail.contains("TLS handshake"),
        "{}",
        problem.detail
    );
    assert!(
        problem.detail.contains("BadSignature"),
        "{}",
        problem.detail
    );
}
