//! CAA (RFC 8659) with the RFC 8657 parameters against a real server and the test DNS server:
//! `accounturi` names the account by the URL the server gave it, `validationmethods` the
//! challenge types, `issuewild` governs wildcard orders, and CAA is checked again at finalize
//! for an authorization validated more than `validation.caa-recheck-after` (8 hours) before,
//! with the method that validated it.

use std::sync::Arc;
use std::time::Duration;

use acme_core::clock::FakeClock;
use acme_jose::Algorithm;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use serde_json::json;
use testkit::poll::OnTheWay;
use time::OffsetDateTime;

use crate::harness::Db;
use crate::harness::TestEnv;
use crate::raw::Raw;

/// The issuer domain name this server answers to in CAA records.
const CA: &str = "certeasy.test";
const CAA_ERROR: &str = "urn:ietf:params:acme:error:caa";

/// An environment whose server checks CAA for [`CA`] (not started). One account orders many
/// names here, more than the order-creation limit's burst.
async fn env(db: Db) -> TestEnv {
    let mut env = TestEnv::new(db).await;
    env.section("acme", &format!("  caa-identities: [\"{CA}\"]\n"));
    env.section(
        "rate-limiting",
        "  whitelist: [\"127.0.0.1\", \"::1\"]\n  order-creation:\n    enabled: false\n",
    );
    env
}

async fn started() -> TestEnv {
    let mut env = env(Db::Sqlite).await;
    env.start().await;
    env
}

async fn registered(env: &TestEnv) -> Raw {
    let mut raw = Raw::new(env, Algorithm::Es256);
    raw.register().await;
    raw
}

/// A CSR for `names` with a fresh key, base64url.
fn csr(names: &[&str]) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let mut params = rcgen::CertificateParams::new(names).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    URL_SAFE_NO_PAD.encode(params.serialize_request(&key).unwrap().der())
}

/// Creates an order for `names`: (order URL, order body).
async fn new_order(raw: &Raw, names: &[&str]) -> (String, Value) {
    let identifiers: Vec<Value> = names
        .iter()
        .map(|n| json!({"type": "dns", "value": n}))
        .collect();
    let r = raw
        .post(
            &raw.url("/acme/new-order"),
            Some(&json!({ "identifiers": identifiers })),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    (r.location(), r.body)
}

/// Answers every pending authorization of `order` with its challenge of type `kind` (`http-01`
/// or `dns-01`), served by the test servers.
async fn answer(env: &TestEnv, raw: &Raw, order: &Value, kind: &str) {
    for authz_url in order["authorizations"].as_array().unwrap() {
        let authz = raw.post(authz_url.as_str().unwrap(), None).await;
        if authz.body["status"] != "pending" {
            continue;
        }
        let challenge = authz.body["challenges"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == kind)
            .unwrap_or_else(|| panic!("no {kind} challenge: {authz:?}"));
        let token = challenge["token"].as_str().unwrap();
        let key_authorization = raw.key_authorization(token);
        match kind {
            "http-01" => env.http.add(token, &key_authorization),
            "dns-01" => {
                let digest = aws_lc_rs::digest::digest(
                    &aws_lc_rs::digest::SHA256,
                    key_authorization.as_bytes(),
                );
                // A wildcard's authorization names its base name (RFC 8555 §7.1.4).
                let name = authz.body["identifier"]["value"].as_str().unwrap();
                env.dns.add_txt(
                    &format!("_acme-challenge.{name}"),
                    &URL_SAFE_NO_PAD.encode(digest.as_ref()),
                );
            }
            other => panic!("unsupported challenge type {other}"),
        }
        let started = raw
            .post(challenge["url"].as_str().unwrap(), Some(&json!({})))
            .await;
        assert_eq!(started.status, 200, "{started:?}");
    }
}

async fn wait_for_status(raw: &Raw, url: &str, want: &str) -> Value {
    let final_ones = OnTheWay::Not(&["invalid", "valid"]);
    raw.wait_for_status(url, want, final_ones, Duration::from_secs(15))
        .await
        .unwrap_or_else(|stuck| panic!("{stuck}"))
}

/// Orders `names`, answers with `kind` and waits for the order to be ready: its URL and body.
async fn ready_order(env: &TestEnv, raw: &Raw, names: &[&str], kind: &str) -> (String, Value) {
    let (url, order) = new_order(raw, names).await;
    answer(env, raw, &order, kind).await;
    let order = wait_for_status(raw, &url, "ready").await;
    (url, order)
}

/// Finalizes a ready order and returns it once it is `want` (`valid` or `invalid`).
async fn finalize(raw: &Raw, url: &str, order: &Value, names: &[&str], want: &str) -> Value {
    let r = raw
        .post(
            order["finalize"].as_str().unwrap(),
            Some(&json!({"csr": csr(names)})),
        )
        .await;
    assert_eq!(r.status, 200, "finalize: {r:?}");
    wait_for_status(raw, url, want).await
}

/// Orders `names`, validates them with `kind` and gets the certificate.
async fn issues(env: &TestEnv, raw: &Raw, names: &[&str], kind: &str) {
    let (url, order) = ready_order(env, raw, names, kind).await;
    let order = finalize(raw, &url, &order, names, "valid").await;
    assert!(order["certificate"].is_string(), "{order}");
}

/// Orders `names`, answers with `kind`, and returns the order's error once validation made it
/// invalid; the failed challenge carries the same `caa` problem.
async fn refused_at_validation(env: &TestEnv, raw: &Raw, names: &[&str], kind: &str) -> Value {
    let (url, order) = new_order(raw, names).await;
    answer(env, raw, &order, kind).await;
    let order = wait_for_status(raw, &url, "invalid").await;
    let authz = raw
        .post(order["authorizations"][0].as_str().unwrap(), None)
        .await;
    assert_eq!(authz.body["status"], "invalid", "{authz:?}");
    let challenge = crate::raw::challenge(&authz.body, kind);
    assert_eq!(challenge["status"], "invalid", "{challenge}");
    assert_eq!(challenge["error"]["type"], CAA_ERROR, "{challenge}");
    let error = order["error"].clone();
    assert_eq!(error["type"], CAA_ERROR, "{order}");
    error
}

#[track_caller]
fn detail_contains(problem: &Value, needle: &str) {
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(detail.contains(needle), "{needle:?} not in {problem}");
}

#[tokio::test]
async fn accounturi_admits_the_named_account_only() {
    let env = started().await;
    let alice = registered(&env).await;
    let bob = registered(&env).await;
    // The URI a record names is the account's Location from new-account: the external URL and
    // the account path.
    let alice_uri = alice.kid.clone().unwrap();
    let bob_uri = bob.kid.clone().unwrap();
    assert!(
        alice_uri.starts_with(&format!("{}/acme/acct/", env.base_url())),
        "{alice_uri}"
    );
    let name = env.name("bound");
    env.dns
        .add_caa(&name, 0, "issue", &format!("{CA}; accounturi={alice_uri}"));

    let error = refused_at_validation(&env, &bob, &[&name], "http-01").await;
    detail_contains(&error, &format!("for the account {alice_uri} only"));
    detail_contains(&error, &bob_uri);
    issues(&env, &alice, &[&name], "http-01").await;

    // The same URI with a trailing slash names no account of this server.
    let other = env.name("slash");
    env.dns.add_caa(
        &other,
        0,
        "issue",
        &format!("{CA}; accounturi={alice_uri}/"),
    );
    refused_at_validation(&env, &alice, &[&other], "http-01").await;
    // A property with two accounturi parameters admits nobody, not even an account it names.
    let both = env.name("both");
    env.dns.add_caa(
        &both,
        0,
        "issue",
        &format!("{CA}; accounturi={alice_uri}; accounturi={bob_uri}"),
    );
    refused_at_validation(&env, &alice, &[&both], "http-01").await;
    // One property per account admits each.
    let each = env.name("each");
    for uri in [&alice_uri, &bob_uri] {
        env.dns
            .add_caa(&each, 0, "issue", &format!("{CA}; accounturi={uri}"));
    }
    issues(&env, &alice, &[&each], "http-01").await;
    issues(&env, &bob, &[&each], "http-01").await;
}

#[tokio::test]
async fn validationmethods_admit_the_listed_challenge_types_only() {
    let env = started().await;
    let raw = registered(&env).await;
    let name = env.name("methods");
    env.dns.add_caa(
        &name,
        0,
        "issue",
        &format!("{CA}; validationmethods=dns-01"),
    );
    let error = refused_at_validation(&env, &raw, &[&name], "http-01").await;
    detail_contains(&error, "validationmethods=dns-01 only");
    detail_contains(&error, "http-01");
    issues(&env, &raw, &[&name], "dns-01").await;

    // Both parameters together: this account, by http-01.
    let kid = raw.kid.clone().unwrap();
    let both = env.name("methods-bound");
    env.dns.add_caa(
        &both,
        0,
        "issue",
        &format!("{CA}; accounturi={kid}; validationmethods=http-01"),
    );
    refused_at_validation(&env, &raw, &[&both], "dns-01").await;
    issues(&env, &raw, &[&both], "http-01").await;
}

#[tokio::test]
async fn issuewild_governs_wildcard_orders() {
    let env = started().await;
    let raw = registered(&env).await;

    // issue admits this CA, issuewild another: the base name issues, the wildcard does not.
    let base = env.name("wild-no");
    let wildcard = format!("*.{base}");
    env.dns.add_caa(&base, 0, "issue", CA);
    env.dns.add_caa(&base, 0, "issuewild", "other-ca.example");
    let error = refused_at_validation(&env, &raw, &[&wildcard], "dns-01").await;
    detail_contains(&error, "issuewild");
    detail_contains(&error, "other-ca.example");
    issues(&env, &raw, &[&base], "dns-01").await;

    // The other way round: the wildcard issues, the base name does not.
    let base = env.name("wild-yes");
    let wildcard = format!("*.{base}");
    env.dns.add_caa(&base, 0, "issue", "other-ca.example");
    env.dns.add_caa(
        &base,
        0,
        "issuewild",
        &format!("{CA}; validationmethods=dns-01"),
    );
    issues(&env, &raw, &[&wildcard], "dns-01").await;
    refused_at_validation(&env, &raw, &[&base], "dns-01").await;

    // Without issuewild, issue governs wildcards too.
    let base = env.name("wild-issue");
    let wildcard = format!("*.{base}");
    env.dns.add_caa(&base, 0, "issue", "other-ca.example");
    refused_at_validation(&env, &raw, &[&wildcard], "dns-01").await;
}

// ---- CAA checked again at finalize (Baseline Requirements §3.2.2.8: 8 hours) ----

#[tokio::test]
async fn caa_is_rechecked_at_finalize_for_old_authorizations_sqlite() {
    caa_is_rechecked_at_finalize_for_old_authorizations(Db::Sqlite).await;
}

#[tokio::test]
async fn caa_is_rechecked_at_finalize_for_old_authorizations_postgres() {
    caa_is_rechecked_at_finalize_for_old_authorizations(Db::Postgres).await;
}

async fn caa_is_rechecked_at_finalize_for_old_authorizations(db: Db) {
    let mut env = env(db).await;
    env.write_config_for_test();
    let config = certeasy::config::load(&env.config_path).unwrap_or_else(|e| panic!("{e}"));
    let start =
        OffsetDateTime::from_unix_timestamp(OffsetDateTime::now_utc().unix_timestamp()).unwrap();
    let clock = FakeClock::new(start);
    env.server = Some(
        certeasy::serve::start(&config, Some(&env.config_path), Arc::new(clock.clone()))
            .await
            .unwrap(),
    );
    let raw = registered(&env).await;
    let kid = raw.kid.clone().unwrap();

    // Every name is validated over http-01 at `start`, without CAA records; none is finalized.
    let young = env.name("young");
    let plain = env.name("plain");
    let forbidden = env.name("forbidden");
    let bound = env.name("bound");
    let wrong_method = env.name("wrong-method");
    let pair = [env.name("pair-a"), env.name("pair-b")];
    let everything = [
        &young,
        &plain,
        &forbidden,
        &bound,
        &wrong_method,
        &pair[0],
        &pair[1],
    ];
    for name in everything {
        ready_order(&env, &raw, &[name.as_str()], "http-01").await;
    }
    // A new order reuses the valid authorization: ready at once, nothing validated again.
    let reuse = |name: &str| {
        let name = name.to_owned();
        let raw = &raw;
        async move {
            let (url, order) = new_order(raw, &[&name]).await;
            assert_eq!(order["status"], "ready", "reused: {order}");
            (url, order)
        }
    };

    // Seven hours on, a record refusing this CA appears; the validation still vouches for CAA.
    clock.advance(time::Duration::hours(7));
    env.dns.add_caa(&young, 0, "issue", "other-ca.example");
    let (url, order) = reuse(&young).await;
    finalize(&raw, &url, &order, &[&young], "valid").await;

    // Nine hours on, CAA is checked again before signing.
    clock.advance(time::Duration::hours(2));
    // No record: issued.
    let (url, order) = reuse(&plain).await;
    finalize(&raw, &url, &order, &[&plain], "valid").await;
    // A record naming another CA, added since the validation: the order fails with `caa`.
    env.dns.add_caa(&forbidden, 0, "issue", "other-ca.example");
    let (url, order) = reuse(&forbidden).await;
    let failed = finalize(&raw, &url, &order, &[&forbidden], "invalid").await;
    assert_eq!(failed["error"]["type"], CAA_ERROR, "{failed}");
    detail_contains(&failed["error"], "checked again at issuance");
    detail_contains(&failed["error"], "other-ca.example");
    assert!(failed["certificate"].is_null(), "{failed}");
    // The recheck is for this account and the method that validated the name (http-01).
    env.dns.add_caa(
        &bound,
        0,
        "issue",
        &format!("{CA}; accounturi={kid}; validationmethods=http-01"),
    );
    let (url, order) = reuse(&bound).await;
    finalize(&raw, &url, &order, &[&bound], "valid").await;
    env.dns.add_caa(
        &wrong_method,
        0,
        "issue",
        &format!("{CA}; accounturi={kid}; validationmethods=dns-01"),
    );
    let (url, order) = reuse(&wrong_method).await;
    let failed = finalize(&raw, &url, &order, &[&wrong_method], "invalid").await;
    assert_eq!(failed["error"]["type"], CAA_ERROR, "{failed}");
    detail_contains(&failed["error"], "validationmethods=dns-01 only");
    // Several refusing names: one `caa` error telling each refusal.
    for name in &pair {
        env.dns.add_caa(name, 0, "issue", "other-ca.example");
    }
    let names = [pair[0].as_str(), pair[1].as_str()];
    let (url, order) = new_order(&raw, &names).await;
    assert_eq!(order["status"], "ready", "{order}");
    let failed = finalize(&raw, &url, &order, &names, "invalid").await;
    assert_eq!(failed["error"]["type"], CAA_ERROR, "{failed}");
    for name in names {
        detail_contains(&failed["error"], &format!("CAA record for {name}"));
    }
}
