//! Certificate profiles (draft-ietf-acme-profiles) end to end: the directory lists them, an
//! order chooses one, and the certificate has that profile's lifetime and usages, as
//! x509-parser and `openssl x509 -text` read it.

use std::collections::BTreeMap;
use std::process::Command;

use acme_jose::Algorithm;
use instant_acme::ChallengeType;
use instant_acme::Identifier;
use instant_acme::NewOrder;
use serde_json::Value;
use serde_json::json;
use testkit::poll::OnTheWay;
use time::Duration;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;

use crate::certcheck::assert_chain;
use crate::certcheck::pem_ders;
use crate::flow::issue_order;
use crate::harness::Db;
use crate::harness::TestEnv;
use crate::raw::Raw;
use crate::raw::Reply;

const ERR: &str = "urn:ietf:params:acme:error:";

/// Lifetime, serverAuth and clientAuth of a leaf.
fn leaf_facts(der: &[u8]) -> (OffsetDateTime, OffsetDateTime, bool, bool) {
    let (_, leaf) = X509Certificate::from_der(der).unwrap();
    let eku = leaf.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.other.is_empty() && !eku.code_signing);
    (
        leaf.validity().not_before.to_datetime(),
        leaf.validity().not_after.to_datetime(),
        eku.server_auth,
        eku.client_auth,
    )
}

/// What `openssl x509 -text` says of the leaf of a PEM chain.
fn openssl_text(dir: &std::path::Path, label: &str, chain_pem: &str) -> String {
    let path = dir.join(format!("{label}.pem"));
    std::fs::write(&path, chain_pem).unwrap();
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(&path)
        .output()
        .expect("openssl is installed");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn the_shipped_profiles_are_listed_and_shape_the_certificates() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.start().await;
    let account = env.account().await;

    let listed: BTreeMap<String, String> = account
        .profiles()
        .map(|p| (p.name.to_owned(), p.description.to_owned()))
        .collect();
    assert_eq!(
        listed.keys().map(String::as_str).collect::<Vec<_>>(),
        ["short-lived", "tls-server", "tls-server-client"]
    );
    assert!(listed["tls-server-client"].contains("clientAuth"));

    // No profile: the default one, 90 days, serverAuth only.
    let name = env.name("default");
    let ids = [Identifier::Dns(name.clone())];
    let (chain, profile) =
        issue_order(&env, &account, &NewOrder::new(&ids), ChallengeType::Http01).await;
    assert_eq!(profile.as_deref(), Some("tls-server"));
    let leaf = assert_chain(&chain, &env.root_pem(), &[&name]);
    let (nb, na, server, client) = leaf_facts(&leaf);
    assert_eq!(na - nb, Duration::days(90));
    assert!(server && !client);

    // short-lived: 7 days.
    let name = env.name("short");
    let ids = [Identifier::Dns(name.clone())];
    let (chain, profile) = issue_order(
        &env,
        &account,
        &NewOrder::new(&ids).profile("short-lived"),
        ChallengeType::Http01,
    )
    .await;
    assert_eq!(profile.as_deref(), Some("short-lived"));
    let leaf = assert_chain(&chain, &env.root_pem(), &[&name]);
    let (nb, na, server, client) = leaf_facts(&leaf);
    assert_eq!(na - nb, Duration::days(7));
    assert!(server && !client);
    let text = openssl_text(env.dir.path(), "short", &chain);
    assert!(text.contains("TLS Web Server Authentication"), "{text}");
    assert!(!text.contains("TLS Web Client Authentication"), "{text}");

    // tls-server-client: serverAuth and clientAuth.
    let name = env.name("both");
    let ids = [Identifier::Dns(name.clone())];
    let (chain, profile) = issue_order(
        &env,
        &account,
        &NewOrder::new(&ids).profile("tls-server-client"),
        ChallengeType::Http01,
    )
    .await;
    assert_eq!(profile.as_deref(), Some("tls-server-client"));
    let leaf = assert_chain(&chain, &env.root_pem(), &[&name]);
    let (nb, na, server, client) = leaf_facts(&leaf);
    assert_eq!(na - nb, Duration::days(90));
    assert!(server && client);
    let text = openssl_text(env.dir.path(), "both", &chain);
    assert!(
        text.contains("TLS Web Server Authentication, TLS Web Client Authentication"),
        "{text}"
    );
    assert!(text.contains("Digital Signature"), "{text}");
    // An ECDSA key never gets keyEncipherment, although the profile lists it.
    assert!(!text.contains("Key Encipherment"), "{text}");

    // An unknown profile is invalidProfile, naming the offered ones.
    let ids = [Identifier::Dns(env.name("gold"))];
    let err = account
        .new_order(&NewOrder::new(&ids).profile("gold"))
        .await
        .map(|_| ())
        .unwrap_err();
    match err {
        instant_acme::Error::Api(problem) => {
            assert_eq!(
                problem.r#type.as_deref(),
                Some("urn:ietf:params:acme:error:invalidProfile")
            );
            assert_eq!(problem.status, Some(400));
            let detail = problem.detail.unwrap_or_default();
            assert!(
                detail.contains("short-lived, tls-server, tls-server-client"),
                "{detail}"
            );
        }
        other => panic!("expected a problem, got {other:?}"),
    }
}

/// Posts `payload` to new-order.
async fn new_order(raw: &Raw, payload: Value) -> Reply {
    raw.post(&raw.url("/acme/new-order"), Some(&payload)).await
}

/// Polls an order until its status is `status`.
async fn wait_for(raw: &Raw, order_url: &str, status: &str) -> Value {
    let within = std::time::Duration::from_secs(10);
    raw.wait_for_status(order_url, status, OnTheWay::Any, within)
        .await
        .unwrap_or_else(|stuck| panic!("order {stuck}"))
}

fn csr_b64(name: &str, alg: &'static rcgen::SignatureAlgorithm) -> String {
    let key = rcgen::KeyPair::generate_for(alg).unwrap();
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    let der = params.serialize_request(&key).unwrap();
    base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, der.der())
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap()
}

/// An operator's own profile on PostgreSQL: its identifier types, key types and validity limits
/// are enforced, and an accepted notBefore/notAfter window is exactly the certificate's.
#[tokio::test]
async fn a_configured_profile_holds_orders_to_its_limits_and_window() {
    let mut env = TestEnv::new(Db::Postgres).await;
    env.section(
        "issuance",
        "  default-profile: web
  profiles:
    web:
      description: DNS names only, ECDSA P-256 keys
      validity: 10d
      max-validity: 20d
      identifier-types: [dns]
      key-types: [ecdsa-p256]
",
    );
    env.start().await;
    let directory = crate::raw::client(&env)
        .get(env.directory_url())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let directory: Value = serde_json::from_str(&directory).unwrap();
    assert_eq!(
        directory["meta"]["profiles"],
        json!({"web": "DNS names only, ECDSA P-256 keys"})
    );

    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("window");

    // An IP address is outside the profile: rejectedIdentifier, with the identifier named.
    let r = new_order(
        &raw,
        json!({"identifiers": [{"type": "dns", "value": name}, {"type": "ip", "value": "127.0.0.1"}]}),
    )
    .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(
        r.problem_type(),
        format!("{ERR}rejectedIdentifier"),
        "{r:?}"
    );
    assert_eq!(r.body["subproblems"][0]["identifier"]["value"], "127.0.0.1");

    // A window longer than the profile's 20 days is malformed; the shipped profiles are gone.
    let start = OffsetDateTime::now_utc().replace_nanosecond(0).unwrap() + Duration::hours(1);
    let r = new_order(
        &raw,
        json!({"identifiers": [{"type": "dns", "value": name}],
               "notBefore": rfc3339(start), "notAfter": rfc3339(start + Duration::days(21))}),
    )
    .await;
    assert_eq!(r.problem_type(), format!("{ERR}malformed"), "{r:?}");
    let r = new_order(
        &raw,
        json!({"identifiers": [{"type": "dns", "value": name}], "profile": "short-lived"}),
    )
    .await;
    assert_eq!(r.problem_type(), format!("{ERR}invalidProfile"), "{r:?}");
    assert!(r.body["detail"].as_str().unwrap().contains("web"), "{r:?}");

    // 15 days starting in an hour: accepted, echoed, and the certificate's exact window.
    let end = start + Duration::days(15);
    let r = new_order(
        &raw,
        json!({"identifiers": [{"type": "dns", "value": name}],
               "notBefore": rfc3339(start), "notAfter": rfc3339(end)}),
    )
    .await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["profile"], "web");
    assert_eq!(r.body["notBefore"], rfc3339(start));
    assert_eq!(r.body["notAfter"], rfc3339(end));
    let order_url = r.location();
    let finalize = r.body["finalize"].as_str().unwrap().to_owned();
    let challenge = raw.http01_challenge(&r.body).await;
    let token = challenge["token"].as_str().unwrap();
    env.http.add(token, &raw.key_authorization(token));
    raw.post(challenge["url"].as_str().unwrap(), Some(&json!({})))
        .await;
    wait_for(&raw, &order_url, "ready").await;

    // A P-384 key is not among the profile's key types: badCSR, and the order stays ready.
    let r = raw
        .post(
            &finalize,
            Some(&json!({"csr": csr_b64(&name, &rcgen::PKCS_ECDSA_P384_SHA384)})),
        )
        .await;
    assert_eq!(r.problem_type(), format!("{ERR}badCSR"), "{r:?}");
    assert!(
        r.body["detail"].as_str().unwrap().contains("ecdsa-p384"),
        "{r:?}"
    );
    assert_eq!(raw.post(&order_url, None).await.body["status"], "ready");

    let r = raw
        .post(
            &finalize,
            Some(&json!({"csr": csr_b64(&name, &rcgen::PKCS_ECDSA_P256_SHA256)})),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let order = wait_for(&raw, &order_url, "valid").await;
    assert_eq!(order["profile"], "web");
    let cert = raw.post(order["certificate"].as_str().unwrap(), None).await;
    let leaf = assert_chain(&cert.text, &env.root_pem(), &[&name]);
    assert_eq!(pem_ders(&cert.text)[0], leaf);
    let (nb, na, server, client) = leaf_facts(&leaf);
    assert_eq!((nb, na), (start, end));
    assert!(server && !client);
}
