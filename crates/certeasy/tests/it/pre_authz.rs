//! Pre-authorization (RFC 8555 §7.4.1) with raw requests: the directory announces `newAuthz`,
//! an account validates a name before ordering it, a later order reuses the authorization and
//! is ready at once, and the identifier policy, the external-account key, wildcards and the
//! pending-authorization limit refuse as they do for an order, with no change of state.

use acme_jose::Algorithm;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use serde_json::json;

use crate::harness::Db;
use crate::harness::TestEnv;
use crate::harness::admin;
use crate::raw::Raw;
use crate::raw::Reply;
use crate::raw::challenge;
use crate::rfc_answers::assert_problem;
use crate::rfc_answers::csr;
use crate::rfc_answers::wait_for_status;

async fn directory(env: &TestEnv) -> Value {
    Raw::new(env, Algorithm::Es256).directory().await
}

/// The challenge types an authorization offers, in its order.
fn challenge_types(authz: &Value) -> Vec<String> {
    authz["challenges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap().to_owned())
        .collect()
}

async fn new_authz(raw: &Raw, url: &str, kind: &str, value: &str) -> Reply {
    raw.post(
        url,
        Some(&json!({"identifier": {"type": kind, "value": value}})),
    )
    .await
}

/// The account's pending authorizations, as the authorization list of an order cannot show them:
/// counted by reading each URL the test was given.
async fn status_of(raw: &Raw, url: &str) -> String {
    let r = raw.post(url, None).await;
    assert_eq!(r.status, 200, "{r:?}");
    r.body["status"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_authorized_name_is_ordered_without_a_second_validation_sqlite() {
    pre_authorize_then_order(Db::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_authorized_name_is_ordered_without_a_second_validation_postgres() {
    pre_authorize_then_order(Db::Postgres).await;
}

async fn pre_authorize_then_order(db: Db) {
    let mut env = TestEnv::new(db).await;
    env.start().await;
    let dir = directory(&env).await;
    let url = dir["newAuthz"]
        .as_str()
        .expect("newAuthz is announced")
        .to_owned();
    assert_eq!(url, format!("{}/acme/new-authz", env.base_url()));
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("pre");

    let r = new_authz(&raw, &url, "dns", &name).await;
    assert_eq!(r.status, 201, "{r:?}");
    let authz_url = r.location();
    assert!(authz_url.contains("/acme/authz/"), "{authz_url}");
    assert_eq!(r.body["status"], "pending");
    assert_eq!(r.body["identifier"], json!({"type": "dns", "value": name}));
    assert!(r.body.get("wildcard").is_none(), "{r:?}");
    assert!(r.header("replay-nonce").is_some());
    let kinds = challenge_types(&r.body);
    assert!(
        kinds.iter().any(|k| k == "http-01") && kinds.iter().any(|k| k == "dns-01"),
        "{kinds:?}"
    );

    // Another account cannot see it.
    let mut other = Raw::new(&env, Algorithm::Es256);
    other.register().await;
    let r = other.post(&authz_url, None).await;
    assert_eq!(r.status, 404, "{r:?}");

    // Validate it over http-01.
    let ch = challenge(&r_body(&raw, &authz_url).await, "http-01").clone();
    let token = ch["token"].as_str().unwrap();
    env.http.add(token, &raw.key_authorization(token));
    let started = raw
        .post(ch["url"].as_str().unwrap(), Some(&json!({})))
        .await;
    assert_eq!(started.status, 200, "{started:?}");
    wait_for_status(&raw, &authz_url, "valid").await;

    // Asking again returns the valid authorization, 201 as RFC 8555 clients expect.
    let again = new_authz(&raw, &url, "dns", &name).await;
    assert_eq!(again.status, 201, "{again:?}");
    assert_eq!(again.location(), authz_url);
    assert_eq!(again.body["status"], "valid");

    // An order for the name holds that authorization and is ready at once.
    let r = raw
        .post(
            &raw.url("/acme/new-order"),
            Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["status"], "ready", "{r:?}");
    assert_eq!(r.body["authorizations"], json!([authz_url]));
    let order_url = r.location();
    let key = rcgen::KeyPair::generate().unwrap();
    let fin = raw
        .post(
            r.body["finalize"].as_str().unwrap(),
            Some(&json!({"csr": csr(&[&name], &key)})),
        )
        .await;
    assert!(fin.status == 200, "{fin:?}");
    let done = wait_for_status(&raw, &order_url, "valid").await;
    assert!(done["certificate"].is_string(), "{done}");

    // The other account's order for the same name does not reuse it.
    let r = other
        .post(
            &other.url("/acme/new-order"),
            Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["status"], "pending", "{r:?}");
    assert_ne!(r.body["authorizations"], json!([authz_url]));
}

async fn r_body(raw: &Raw, url: &str) -> Value {
    let r = raw.post(url, None).await;
    assert_eq!(r.status, 200, "{r:?}");
    r.body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_authorization_is_refused_as_an_order_would_be() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.section(
        "identifiers",
        "  deny-domains: [\"denied.certeasy.test\"]\n",
    );
    env.section(
        "rate-limiting",
        "  whitelist: [\"127.0.0.1\"]\n  pending-authorizations:\n    max: 2\n",
    );
    env.start().await;
    let url = format!("{}/acme/new-authz", env.base_url());
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;

    let r = new_authz(&raw, &url, "dns", &format!("*.{}", env.name("wild"))).await;
    assert_problem(&r, 400, "rejectedIdentifier", "a wildcard");
    assert!(
        r.body["detail"].as_str().unwrap().contains("wildcard"),
        "{r:?}"
    );
    let r = new_authz(&raw, &url, "dns", "x.denied.certeasy.test").await;
    assert_problem(&r, 400, "rejectedIdentifier", "a denied domain");
    let r = new_authz(&raw, &url, "email", "ops@example.com").await;
    assert_problem(&r, 400, "unsupportedIdentifier", "an unsupported type");
    let r = raw
        .post(
            &url,
            Some(&json!({"identifiers": [{"type": "dns", "value": "a.example"}]})),
        )
        .await;
    assert_problem(&r, 400, "malformed", "an order's payload");

    // The pending-authorization limit counts pre-authorizations: two fit, the third waits.
    let first = new_authz(&raw, &url, "dns", &env.name("one")).await;
    assert_eq!(first.status, 201, "{first:?}");
    let ip = new_authz(&raw, &url, "ip", "127.0.0.1").await;
    assert_eq!(ip.status, 201, "{ip:?}");
    assert_eq!(
        ip.body["identifier"],
        json!({"type": "ip", "value": "127.0.0.1"})
    );
    let r = new_authz(&raw, &url, "dns", &env.name("three")).await;
    assert_problem(&r, 429, "rateLimited", "the third pending authorization");
    assert!(r.header("retry-after").is_some(), "{r:?}");
    assert!(
        r.body["detail"]
            .as_str()
            .unwrap()
            .contains("pending-authorizations"),
        "{r:?}"
    );
    // Deactivating one makes room.
    let r = raw
        .post(&first.location(), Some(&json!({"status": "deactivated"})))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(status_of(&raw, &first.location()).await, "deactivated");
    let r = new_authz(&raw, &url, "dns", &env.name("three")).await;
    assert_eq!(r.status, 201, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_account_key_limits_what_may_be_pre_authorized() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.start().await;
    let domain = format!("{}.certeasy.test", env.suffix);
    let (ok, out) = admin(&env, &["eab", "create", "--json", "--domain", &domain]);
    assert!(ok, "{out}");
    let key: Value = serde_json::from_str(&out).unwrap();
    let kid = key["kid"].as_str().unwrap();
    let hmac = URL_SAFE_NO_PAD
        .decode(key["hmac-key"].as_str().unwrap())
        .unwrap();
    let mut raw = Raw::new(&env, Algorithm::Es256);
    let new_account_url = raw.url("/acme/new-account");
    let binding = acme_jose::sign::eab_binding(
        kid,
        &hmac,
        acme_jose::eab::MacAlgorithm::Hs256,
        &new_account_url,
        &raw.key.public_jwk(),
    );
    let r = raw
        .post(
            &new_account_url,
            Some(&json!({"termsOfServiceAgreed": true, "externalAccountBinding": binding})),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    raw.kid = Some(r.location());

    let url = format!("{}/acme/new-authz", env.base_url());
    let r = new_authz(&raw, &url, "dns", &env.name("inside")).await;
    assert_eq!(r.status, 201, "{r:?}");
    let r = new_authz(&raw, &url, "dns", "outside.example.org").await;
    assert_problem(
        &r,
        400,
        "rejectedIdentifier",
        "a name the key does not allow",
    );
    assert!(
        r.body["detail"]
            .as_str()
            .unwrap()
            .contains("external account key"),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_authorization_can_be_turned_off() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.section("acme", "  pre-authorization: false\n");
    env.start().await;
    let dir = directory(&env).await;
    assert!(dir.get("newAuthz").is_none(), "{dir}");
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let r = new_authz(
        &raw,
        &format!("{}/acme/new-authz", env.base_url()),
        "dns",
        &env.name("off"),
    )
    .await;
    assert_problem(&r, 403, "unauthorized", "pre-authorization turned off");
    // Orders still work.
    let r = raw
        .post(
            &raw.url("/acme/new-order"),
            Some(&json!({"identifiers": [{"type": "dns", "value": env.name("off")}]})),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_authorization_needs_a_profile_the_account_may_use() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    // One profile for everybody that certifies names only over dns-01, one for IP addresses
    // that only account 1 (the first account this fresh database creates) may use.
    env.section(
        "issuance",
        "  default-profile: names\n  profiles:\n    names:\n      description: names\n      identifier-types: [dns]\n      challenge-types: [dns-01]\n    addresses:\n      description: addresses\n      identifier-types: [ip]\n      accounts: [1]\n",
    );
    env.start().await;
    let url = format!("{}/acme/new-authz", env.base_url());
    let mut first = Raw::new(&env, Algorithm::Es256);
    first.register().await;
    assert!(first.kid.as_deref().unwrap().ends_with("/acme/acct/1"));
    let mut second = Raw::new(&env, Algorithm::Es256);
    second.register().await;

    // The profile the account may use shapes the authorization: dns-01 only.
    let r = new_authz(&second, &url, "dns", &env.name("names")).await;
    assert_eq!(r.status, 201, "{r:?}");
    let kinds = challenge_types(&r.body);
    assert_eq!(kinds, ["dns-01"]);
    // An address only the first account's profile certifies.
    let r = new_authz(&second, &url, "ip", "127.0.0.1").await;
    assert_problem(&r, 400, "rejectedIdentifier", "no profile for this account");
    assert!(
        r.body["detail"]
            .as_str()
            .unwrap()
            .contains("no certificate profile"),
        "{r:?}"
    );
    let r = new_authz(&first, &url, "ip", "127.0.0.1").await;
    assert_eq!(r.status, 201, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_reuses_only_an_authorization_validated_with_its_profiles_challenge_types() {
    let mut env = TestEnv::new(Db::Postgres).await;
    env.section(
        "issuance",
        "  default-profile: open\n  profiles:\n    open:\n      description: any method\n      identifier-types: [dns]\n    dns-only:\n      description: dns-01 only\n      identifier-types: [dns]\n      challenge-types: [dns-01]\n",
    );
    env.start().await;
    let url = format!("{}/acme/new-authz", env.base_url());
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("method");

    // Both profiles admit the name, so the pre-authorization offers what either validates with.
    let r = new_authz(&raw, &url, "dns", &name).await;
    assert_eq!(r.status, 201, "{r:?}");
    let authz_url = r.location();
    let ch = challenge(&r.body, "http-01").clone();
    assert!(challenge(&r.body, "dns-01").is_object());
    let token = ch["token"].as_str().unwrap();
    env.http.add(token, &raw.key_authorization(token));
    let started = raw
        .post(ch["url"].as_str().unwrap(), Some(&json!({})))
        .await;
    assert_eq!(started.status, 200, "{started:?}");
    wait_for_status(&raw, &authz_url, "valid").await;

    // Validated over http-01: an order of the dns-01-only profile does not rest on it...
    let order = |profile: &str| json!({"identifiers": [{"type": "dns", "value": name}], "profile": profile});
    let strict = raw
        .post(&raw.url("/acme/new-order"), Some(&order("dns-only")))
        .await;
    assert_eq!(strict.status, 201, "{strict:?}");
    assert_eq!(strict.body["status"], "pending", "{strict:?}");
    assert_ne!(strict.body["authorizations"], json!([authz_url]));
    let fresh = r_body(&raw, strict.body["authorizations"][0].as_str().unwrap()).await;
    let kinds = challenge_types(&fresh);
    assert_eq!(kinds, ["dns-01"]);
    // ...and one of the profile that validates with http-01 does.
    let open = raw
        .post(&raw.url("/acme/new-order"), Some(&order("open")))
        .await;
    assert_eq!(open.status, 201, "{open:?}");
    assert_eq!(open.body["status"], "ready", "{open:?}");
    assert_eq!(open.body["authorizations"], json!([authz_url]));
}
