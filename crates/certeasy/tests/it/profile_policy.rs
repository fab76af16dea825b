//! Per-profile validation policy (issue 30) end to end with raw RFC 8555 requests: a profile's
//! identifier types, name limit, challenge types, allowed accounts and EAB keys, its pending and
//! valid authorization and order lifetimes (the `expires` the client is told), authorization reuse
//! across profiles under the 7-hour rule of a short-lived profile, and the issuer and EKUs of its
//! certificates. The server runs on a `FakeClock`, so lifetimes are checked to the second and the
//! reuse rule without waiting.

use std::sync::Arc;

use acme_core::clock::FakeClock;
use acme_jose::Algorithm;
use acme_jose::eab::MacAlgorithm;
use acme_jose::sign::eab_binding;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use serde_json::json;
use testkit::poll::OnTheWay;
use time::Duration;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;

use crate::certcheck::assert_chain;
use crate::harness::Db;
use crate::harness::TestEnv;
use crate::harness::admin;
use crate::issuer_reload::ca_section;
use crate::issuer_reload::leaf_issuer_cn;
use crate::issuer_reload::second_intermediate;
use crate::raw::Raw;
use crate::raw::Reply;

const ERR: &str = "urn:ietf:params:acme:error:";
const PARTNER_CN: &str = "Partner Intermediate";

/// Three profiles: `web` (the default) narrows identifiers, names, challenge types and lifetimes;
/// `short` certifies IP addresses with 7-hour authorizations; `partners` is open to account 1 and
/// accounts bound with `kid` only, signed by the issuer `int-2` with serverAuth and clientAuth.
fn issuance_section(kid: &str) -> String {
    format!(
        "  default-profile: web
  profiles:
    web:
      description: DNS names over http-01, two at most
      identifier-types: [dns]
      max-identifiers-per-order: 2
      challenge-types: [http-01]
      pending-authorization-lifetime: 4h
      order-lifetime: 3h
    short:
      description: DNS names and IP addresses, 7-hour authorizations
      identifier-types: [dns, ip]
      validity: 7d
      max-validity: 7d
      valid-authorization-lifetime: 7h
    partners:
      description: Partners only, serverAuth and clientAuth
      accounts: [1]
      eab-key-ids: [\"{kid}\"]
      extended-key-usages: [server-auth, client-auth]
      issuer: int-2
"
    )
}

fn at(value: &Value) -> OffsetDateTime {
    OffsetDateTime::parse(value.as_str().unwrap(), &Rfc3339).unwrap()
}

async fn new_order(raw: &Raw, profile: Option<&str>, identifiers: &[(&str, &str)]) -> Reply {
    let ids: Vec<Value> = identifiers
        .iter()
        .map(|(kind, value)| json!({"type": kind, "value": value}))
        .collect();
    let mut payload = json!({ "identifiers": ids });
    if let Some(profile) = profile {
        payload["profile"] = json!(profile);
    }
    raw.post(&raw.url("/acme/new-order"), Some(&payload)).await
}

/// A refusal of `kind` that carries a fresh nonce, its detail containing `needle`.
fn refused(r: &Reply, status: u16, kind: &str, needle: &str) {
    assert_eq!(r.status, status, "{r:?}");
    assert_eq!(r.problem_type(), format!("{ERR}{kind}"), "{r:?}");
    assert!(r.header("replay-nonce").is_some(), "{r:?}");
    let detail = r.body["detail"].as_str().unwrap();
    assert!(detail.contains(needle), "{detail}");
}

/// The account's orders: nothing a refusal may have written.
async fn orders_of(raw: &Raw) -> Vec<Value> {
    let url = format!("{}/orders", raw.kid.as_deref().unwrap());
    raw.post(&url, None).await.body["orders"]
        .as_array()
        .unwrap()
        .clone()
}

/// Answers the order's first authorization over http-01 and waits for the order to be ready.
async fn validate(env: &TestEnv, raw: &Raw, order_url: &str, order: &Value) {
    let challenge = raw.http01_challenge(order).await;
    let token = challenge["token"].as_str().unwrap();
    env.http.add(token, &raw.key_authorization(token));
    raw.post(challenge["url"].as_str().unwrap(), Some(&json!({})))
        .await;
    ready(raw, order_url).await;
}

async fn ready(raw: &Raw, order_url: &str) -> Value {
    raw.wait_for_status(
        order_url,
        "ready",
        OnTheWay::Any,
        std::time::Duration::from_secs(10),
    )
    .await
    .unwrap_or_else(|stuck| panic!("order {stuck}"))
}

/// Finalizes a ready order for `name` and returns the certificate chain.
async fn finalize(raw: &Raw, order_url: &str, order: &Value, name: &str) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    let csr = URL_SAFE_NO_PAD.encode(params.serialize_request(&key).unwrap().der());
    let r = raw
        .post(
            order["finalize"].as_str().unwrap(),
            Some(&json!({ "csr": csr })),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let order = raw
        .wait_for_status(
            order_url,
            "valid",
            OnTheWay::Any,
            std::time::Duration::from_secs(10),
        )
        .await
        .unwrap_or_else(|stuck| panic!("order {stuck}"));
    raw.post(order["certificate"].as_str().unwrap(), None)
        .await
        .text
}

/// serverAuth and clientAuth of the leaf.
fn ekus(der: &[u8]) -> (bool, bool) {
    let (_, leaf) = X509Certificate::from_der(der).unwrap();
    let eku = leaf.extended_key_usage().unwrap().unwrap().value;
    (eku.server_auth, eku.client_auth)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_setting_of_a_profile_is_held_to_on_sqlite() {
    every_setting_of_a_profile_is_held_to(Db::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_setting_of_a_profile_is_held_to_on_postgres() {
    every_setting_of_a_profile_is_held_to(Db::Postgres).await;
}

async fn every_setting_of_a_profile_is_held_to(db: Db) {
    let mut env = TestEnv::new(db).await;
    let second = second_intermediate(&env, "int-2", PARTNER_CN);
    env.section("ca", &ca_section(&second));
    // The EAB key's id is random: made on a first start, then named by the profile.
    env.section("issuance", &issuance_section("placeholder"));
    env.start().await;
    let (ok, out) = admin(&env, &["eab", "create", "--json", "--reusable"]);
    assert!(ok, "{out}");
    let key: Value = serde_json::from_str(&out).unwrap();
    let kid = key["kid"].as_str().unwrap().to_owned();
    let hmac = URL_SAFE_NO_PAD
        .decode(key["hmac-key"].as_str().unwrap())
        .unwrap();
    env.server.take().unwrap().shutdown().await;
    env.section("issuance", &issuance_section(&kid));
    env.write_config_for_test();
    let config = certeasy::config::load(&env.config_path).unwrap_or_else(|e| panic!("{e}"));
    let t0 =
        OffsetDateTime::from_unix_timestamp(OffsetDateTime::now_utc().unix_timestamp()).unwrap();
    let clock = FakeClock::new(t0);
    env.server = Some(
        certeasy::serve::start(&config, Some(&env.config_path), Arc::new(clock.clone()))
            .await
            .unwrap(),
    );

    let mut first = Raw::new(&env, Algorithm::Es256);
    first.register().await;
    assert!(
        first.kid.as_deref().unwrap().ends_with("/acct/1"),
        "{:?}",
        first.kid
    );
    let name = env.name("web");

    // Identifier types: an IP address is not the default profile's (IP only via `short`).
    let r = new_order(&first, None, &[("ip", "127.0.0.1")]).await;
    refused(&r, 400, "rejectedIdentifier", "profile \"web\"");
    assert_eq!(r.body["subproblems"][0]["identifier"]["value"], "127.0.0.1");
    // The name limit of the profile, below the CA-wide one.
    let three = [env.name("a"), env.name("b"), env.name("c")];
    let ids: Vec<(&str, &str)> = three.iter().map(|n| ("dns", n.as_str())).collect();
    let r = new_order(&first, None, &ids).await;
    refused(&r, 400, "rejectedIdentifier", "at most 2 identifiers");
    // Challenge types: a wildcard needs dns-01, which the profile does not offer.
    let wildcard = format!("*.{name}");
    let r = new_order(&first, None, &[("dns", &wildcard)]).await;
    refused(&r, 400, "rejectedIdentifier", "http-01");
    assert!(
        orders_of(&first).await.is_empty(),
        "a refusal wrote nothing"
    );

    // Accepted: http-01 only, the authorization pending for 4 h, the order living 3 h.
    let r = new_order(&first, None, &[("dns", &name)]).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["profile"], "web");
    assert_eq!(at(&r.body["expires"]), t0 + Duration::hours(3));
    let web_url = r.location();
    let authz = first
        .post(r.body["authorizations"][0].as_str().unwrap(), None)
        .await;
    let types: Vec<&str> = authz.body["challenges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["http-01"]);
    assert_eq!(at(&authz.body["expires"]), t0 + Duration::hours(4));
    // Validated at t0 under `web`: valid for the CA-wide 30 days.
    validate(&env, &first, &web_url, &r.body).await;
    let authz = first
        .post(r.body["authorizations"][0].as_str().unwrap(), None)
        .await;
    assert_eq!(authz.body["status"], "valid");
    assert_eq!(at(&authz.body["expires"]), t0 + Duration::days(30));

    // One hour on, `short` reuses it, but only under its own rule: the order expires 7 h after
    // the validation, not with the authorization.
    clock.advance(Duration::hours(1));
    let r = new_order(&first, Some("short"), &[("dns", &name)]).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["status"], "ready", "{r:?}");
    assert_eq!(at(&r.body["expires"]), t0 + Duration::hours(7));
    // Four hours after the validation fewer than the reuse margin (half of 7 h) remain: `short`
    // gets a new authorization, while `web` still reuses it under its 30 days.
    clock.advance(Duration::hours(3));
    let r = new_order(&first, Some("short"), &[("dns", &name)]).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["status"], "pending", "{r:?}");
    let short_url = r.location();
    let short_order = r.body.clone();
    let r = new_order(&first, None, &[("dns", &name)]).await;
    assert_eq!(r.body["status"], "ready", "{r:?}");
    // The first `web` order has expired (3 h); this one is finalized at the end.
    let web_url = r.location();
    // Validated for `short`, an authorization expires 7 h after its validation.
    let t1 = t0 + Duration::hours(4);
    validate(&env, &first, &short_url, &short_order).await;
    let authz = first
        .post(short_order["authorizations"][0].as_str().unwrap(), None)
        .await;
    assert_eq!(at(&authz.body["expires"]), t1 + Duration::hours(7));
    // IP addresses are the short-lived profile's.
    let r = new_order(&first, Some("short"), &[("ip", "127.0.0.1")]).await;
    assert_eq!(r.status, 201, "{r:?}");

    // Allowed accounts: another account is unauthorized for `partners`, and nothing is written.
    let mut stranger = Raw::new(&env, Algorithm::Es256);
    stranger.register().await;
    let partner_name = env.name("partner");
    let r = new_order(&stranger, Some("partners"), &[("dns", &partner_name)]).await;
    refused(&r, 403, "unauthorized", "profile \"partners\"");
    assert!(orders_of(&stranger).await.is_empty());
    // An account bound with the profile's EAB key may use it.
    let mut bound = Raw::new(&env, Algorithm::Es256);
    let url = bound.url("/acme/new-account");
    let binding = eab_binding(
        &kid,
        &hmac,
        MacAlgorithm::Hs256,
        &url,
        &bound.key.public_jwk(),
    );
    let r = bound
        .post(
            &url,
            Some(&json!({"termsOfServiceAgreed": true, "externalAccountBinding": binding})),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    bound.kid = Some(r.location());
    let r = new_order(&bound, Some("partners"), &[("dns", &partner_name)]).await;
    assert_eq!(r.status, 201, "{r:?}");

    // The issuer and EKUs of a profile: `partners` by int-2 with clientAuth, `web` by the
    // active issuer with serverAuth only.
    let r = new_order(&first, Some("partners"), &[("dns", &partner_name)]).await;
    assert_eq!(r.status, 201, "{r:?}");
    let partners_url = r.location();
    validate(&env, &first, &partners_url, &r.body).await;
    let order = first.post(&partners_url, None).await.body;
    let chain = finalize(&first, &partners_url, &order, &partner_name).await;
    assert_eq!(leaf_issuer_cn(&chain), PARTNER_CN);
    let leaf = crate::certcheck::pem_ders(&chain)[0].clone();
    assert_eq!(ekus(&leaf), (true, true));

    let order = first.post(&web_url, None).await.body;
    let chain = finalize(&first, &web_url, &order, &name).await;
    assert_ne!(leaf_issuer_cn(&chain), PARTNER_CN);
    let leaf = assert_chain(&chain, &env.root_pem(), &[&name]);
    assert_eq!(ekus(&leaf), (true, false));
}
