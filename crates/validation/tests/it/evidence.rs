//! The evidence of a successful attempt: the addresses reached, what was seen there, and the CAA
//! records that allowed issuance.

use acme_core::status::ChallengeType::{Dns01, Http01, TlsAlpn01};

use crate::common::{Env, KEY_AUTH, account, dns, ip};
use crate::dns01::txt_value;

const TOKEN: &str = "tok3n";

#[tokio::test]
async fn http01_names_the_address_and_the_url_that_matched() {
    let env = Env::start().await;
    env.http.add(TOKEN, KEY_AUTH);
    let port = env.http.port();
    let evidence = env
        .validator()
        .attempt(&dns("a.test"), Http01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();
    assert_eq!(evidence.addresses, [format!("127.0.0.1:{port}")]);
    assert_eq!(
        evidence.observed,
        format!(
            "key authorization matched at http://a.test:{port}/.well-known/acme-challenge/{TOKEN} (HTTP 200)"
        )
    );
    assert_eq!(
        evidence.caa,
        ["no CAA check: no CAA identities are configured (acme.caa-identities)"]
    );

    let evidence = env
        .validator()
        .attempt(&ip("127.0.0.1"), Http01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();
    assert_eq!(evidence.addresses, [format!("127.0.0.1:{port}")]);
    assert!(
        evidence.caa[0].contains("not IP addresses"),
        "{:?}",
        evidence.caa
    );
}

#[tokio::test]
async fn http01_names_every_hop_of_a_redirect() {
    let env = Env::start().await;
    let port = env.http.port();
    let start = format!("http://a.test:{port}/.well-known/acme-challenge/{TOKEN}");
    let target = format!("http://b.test:{port}/.well-known/acme-challenge/moved");
    env.http
        .add_redirect(&format!("/.well-known/acme-challenge/{TOKEN}"), &target);
    env.http.add("moved", KEY_AUTH);
    let evidence = env
        .validator()
        .attempt(&dns("a.test"), Http01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();
    assert_eq!(
        evidence.observed,
        format!(
            "key authorization matched at {target} (HTTP 200), reached from {start} by 1 redirect: {target}"
        )
    );
    // Both hops (a.test, then b.test) reached the responder.
    assert_eq!(
        evidence.addresses,
        [format!("127.0.0.1:{port}"), format!("127.0.0.1:{port}")]
    );
}

#[tokio::test]
async fn dns01_names_the_record_and_the_resolver() {
    let env = Env::start().await;
    env.dns.add_txt("_acme-challenge.a.test", "stale-value");
    env.dns
        .add_txt("_acme-challenge.a.test", &txt_value(KEY_AUTH));
    let evidence = env
        .validator()
        .attempt(&dns("a.test"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();
    assert_eq!(evidence.addresses, [format!("resolver {}", env.dns.addr())]);
    assert_eq!(
        evidence.observed,
        format!(
            "TXT record with the expected digest {:?} at _acme-challenge.a.test (and 1 other TXT value)",
            txt_value(KEY_AUTH)
        )
    );
}

#[tokio::test]
async fn tls_alpn01_names_the_address_and_the_extension() {
    let env = Env::start().await;
    env.tls.add("a.test", KEY_AUTH).unwrap();
    let evidence = env
        .validator()
        .attempt(&dns("a.test"), TlsAlpn01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();
    assert_eq!(
        evidence.addresses,
        [format!("127.0.0.1:{}", env.tls.port())]
    );
    assert!(
        evidence
            .observed
            .starts_with("acmeIdentifier extension matched the key authorization digest"),
        "{}",
        evidence.observed
    );
    assert!(
        evidence.observed.contains("SNI a.test"),
        "{}",
        evidence.observed
    );
}

#[tokio::test]
async fn the_caa_records_that_allowed_issuance_are_named() {
    let env = Env::start().await;
    env.dns
        .set_a("a.example.com", std::net::Ipv4Addr::LOCALHOST);
    env.dns
        .add_txt("_acme-challenge.a.example.com", &txt_value(KEY_AUTH));
    let validator = env.validator_with(|s| s.caa_identities = vec!["ca.test".to_owned()]);

    let evidence = validator
        .attempt(&dns("a.example.com"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();
    assert_eq!(
        evidence.caa,
        ["no CAA records (climbed to the root from a.example.com)"]
    );

    env.dns.add_caa("example.com", 0, "issue", "ca.test");
    env.dns.add_caa("example.com", 0, "issue", "other.example");
    let evidence = validator
        .attempt(&dns("a.example.com"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();
    assert_eq!(evidence.caa.len(), 2, "{:?}", evidence.caa);
    for record in &evidence.caa {
        assert!(record.starts_with("example.com. CAA 0 issue "), "{record}");
    }
    assert!(
        evidence.caa.iter().any(|r| r.contains("ca.test")),
        "{:?}",
        evidence.caa
    );
}
