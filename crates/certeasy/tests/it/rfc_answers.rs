//! Exact RFC 8555 answers to requests the protocol forbids, over raw HTTP against a real server:
//! deactivated accounts (§7.3.6), `badSignatureAlgorithm` with `algorithms` (§6.2), wrong HTTP
//! methods (§6.3), CSR keys (§7.4, §11.1), authorization lifetimes (§7.1.6) and the deny list
//! against wildcards. Every refusal carries the exact type, a detail, a fresh nonce, and changes
//! nothing.

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
use time::format_description::well_known::Rfc3339;

use crate::harness::Db;
use crate::harness::TestEnv;
use crate::raw::Raw;
use crate::raw::Reply;

const ERR: &str = "urn:ietf:params:acme:error:";

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A CSR for `names` signed by `key`, base64url.
pub(crate) fn csr(names: &[&str], key: &impl rcgen::SigningKey) -> String {
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let mut params = rcgen::CertificateParams::new(names).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    b64(params.serialize_request(key).unwrap().der())
}

/// Asserts a problem of `kind` with HTTP `status`, a detail and a fresh nonce.
#[track_caller]
pub(crate) fn assert_problem(r: &Reply, status: u16, kind: &str, what: &str) {
    assert_eq!(r.status, status, "{what}: {r:?}");
    assert_eq!(r.problem_type(), format!("{ERR}{kind}"), "{what}: {r:?}");
    assert!(
        r.body["detail"].as_str().is_some_and(|d| !d.is_empty()),
        "{what}: a detail: {r:?}"
    );
    assert!(
        r.header("replay-nonce").is_some_and(|n| !n.is_empty()),
        "{what}: a fresh nonce: {r:?}"
    );
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/problem+json"),
        "{what}"
    );
}

pub(crate) async fn wait_for_status(raw: &Raw, url: &str, want: &str) -> Value {
    raw.wait_for_status(url, want, OnTheWay::Any, Duration::from_secs(30))
        .await
        .unwrap_or_else(|stuck| panic!("{stuck}"))
}

/// Creates an order for `name`, serves its http-01 key authorization and answers the challenge:
/// (order URL, the challenge response).
async fn answer_http01(env: &TestEnv, raw: &Raw, name: &str) -> (String, Reply) {
    let r = raw
        .post(
            &raw.url("/acme/new-order"),
            Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let order_url = r.location();
    let ch = raw.http01_challenge(&r.body).await;
    let token = ch["token"].as_str().unwrap();
    env.http.add(token, &raw.key_authorization(token));
    let started = raw
        .post(ch["url"].as_str().unwrap(), Some(&json!({})))
        .await;
    assert_eq!(started.status, 200, "{started:?}");
    (order_url, started)
}

/// Creates an order for `name` and validates it over http-01: (order URL, order body).
pub(crate) async fn ready_order(env: &TestEnv, raw: &Raw, name: &str) -> (String, Value) {
    let (order_url, _) = answer_http01(env, raw, name).await;
    let body = wait_for_status(raw, &order_url, "ready").await;
    (order_url, body)
}

async fn order_count(raw: &Raw) -> usize {
    let kid = raw.kid.clone().unwrap();
    let r = raw.post(&format!("{kid}/orders"), None).await;
    assert_eq!(r.status, 200, "{r:?}");
    r.body["orders"].as_array().unwrap().len()
}

fn parse_time(v: &Value) -> OffsetDateTime {
    OffsetDateTime::parse(v.as_str().unwrap(), &Rfc3339).unwrap()
}

// ---- §7.3.6: a deactivated account is unauthorized on every request ----

#[tokio::test]
async fn a_deactivated_account_is_unauthorized_everywhere_sqlite() {
    a_deactivated_account_is_unauthorized_everywhere(Db::Sqlite).await;
}

#[tokio::test]
async fn a_deactivated_account_is_unauthorized_everywhere_postgres() {
    a_deactivated_account_is_unauthorized_everywhere(Db::Postgres).await;
}

async fn a_deactivated_account_is_unauthorized_everywhere(db: Db) {
    let mut env = TestEnv::new(db).await;
    env.start().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let kid = raw.kid.clone().unwrap();
    let name = env.name("deact");
    let (order_url, order) = ready_order(&env, &raw, &name).await;
    let authz_url = order["authorizations"][0].as_str().unwrap().to_owned();
    let finalize = order["finalize"].as_str().unwrap().to_owned();
    let cert_key = rcgen::KeyPair::generate().unwrap();
    let r = raw
        .post(&finalize, Some(&json!({"csr": csr(&[&name], &cert_key)})))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let order = wait_for_status(&raw, &order_url, "valid").await;
    let cert_url = order["certificate"].as_str().unwrap().to_owned();
    let authz = raw.post(&authz_url, None).await;
    let chall_url = authz.body["challenges"][0]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let storage = storage::Storage::connect(&env.database_url())
        .await
        .unwrap();
    let account_id: acme_core::ids::AccountId = kid.rsplit('/').next().unwrap().parse().unwrap();
    let order_id: acme_core::ids::OrderId = order_url.rsplit('/').next().unwrap().parse().unwrap();
    let stored = storage
        .order(order_id, OffsetDateTime::now_utc())
        .await
        .unwrap()
        .unwrap();
    let cert_der = storage
        .certificate(stored.certificate_id.unwrap())
        .await
        .unwrap()
        .unwrap()
        .der;

    // Deactivation itself is answered with the deactivated account.
    let r = raw
        .post(&kid, Some(&json!({"status": "deactivated"})))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["status"], "deactivated");

    // From now on every kid-signed request is 401 unauthorized.
    let key_change_url = raw.url("/acme/key-change");
    let new_key = acme_jose::sign::SigningKey::generate(Algorithm::Es256).unwrap();
    let inner = raw.key_change_inner(&new_key);
    let cases: Vec<(&str, String, Option<Value>)> = vec![
        ("account POST-as-GET", kid.clone(), None),
        (
            "account update",
            kid.clone(),
            Some(json!({"contact": ["mailto:new@example.com"]})),
        ),
        (
            "second deactivation",
            kid.clone(),
            Some(json!({"status": "deactivated"})),
        ),
        ("orders list", format!("{kid}/orders"), None),
        (
            "new-order",
            raw.url("/acme/new-order"),
            Some(json!({"identifiers": [{"type": "dns", "value": env.name("after")}]})),
        ),
        ("order", order_url.clone(), None),
        ("authz", authz_url.clone(), None),
        (
            "authz deactivation",
            authz_url.clone(),
            Some(json!({"status": "deactivated"})),
        ),
        ("challenge", chall_url.clone(), Some(json!({}))),
        ("certificate", cert_url.clone(), None),
        (
            "finalize",
            finalize.clone(),
            Some(json!({"csr": csr(&[&name], &cert_key)})),
        ),
        ("key change", key_change_url.clone(), Some(inner)),
        (
            "revoke by kid",
            raw.url("/acme/revoke-cert"),
            Some(json!({"certificate": b64(&cert_der)})),
        ),
    ];
    for (what, url, payload) in &cases {
        let r = raw.post(url, payload.as_ref()).await;
        assert_problem(&r, 401, "unauthorized", what);
        assert!(
            r.body["detail"].as_str().unwrap().contains("deactivated"),
            "{what}: {r:?}"
        );
    }
    // newAccount with the deactivated account's key does not hand the account back.
    let as_new = Raw {
        kid: None,
        http: raw.http.clone(),
        base: raw.base.clone(),
        key: acme_jose::sign::SigningKey::from_pkcs8(
            Algorithm::Es256,
            &raw.key.to_pkcs8_der().unwrap(),
        )
        .unwrap(),
    };
    for payload in [
        json!({"onlyReturnExisting": true}),
        json!({"termsOfServiceAgreed": true}),
    ] {
        let r = as_new
            .post(&raw.url("/acme/new-account"), Some(&payload))
            .await;
        assert_problem(&r, 401, "unauthorized", "newAccount with the key");
        assert!(r.header("location").is_none(), "{r:?}");
    }

    // Nothing changed: no new order, the certificate is not revoked, contacts and key as before.
    let now = OffsetDateTime::now_utc();
    assert_eq!(
        storage
            .account_orders(account_id, None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    let cert = storage
        .certificate(stored.certificate_id.unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(cert.revoked_at, None);
    let account = storage.account(account_id).await.unwrap().unwrap();
    assert_eq!(account.contacts, vec!["mailto:raw@example.com".to_owned()]);
    assert_eq!(account.thumbprint, raw.key.public_jwk().thumbprint());
    let authz_id: acme_core::ids::AuthzId = authz_url.rsplit('/').next().unwrap().parse().unwrap();
    assert_eq!(
        storage
            .authorization(authz_id, now)
            .await
            .unwrap()
            .unwrap()
            .status,
        acme_core::status::AuthzStatus::Valid
    );
    storage.close().await;
}

// ---- §7.3.1: a registered key gets its account, whatever else newAccount says ----

/// The server looks for the key's account only once the new-account checks refuse or the insert
/// finds the key (`ra::accounts`): every refusal must still end in the account.
#[tokio::test]
async fn a_registered_key_gets_its_account_whatever_the_body_says() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.start().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let kid = raw.kid.take().unwrap();
    let url = raw.url("/acme/new-account");
    for payload in [
        // Passes every check: the insert finds the key.
        json!({"termsOfServiceAgreed": true}),
        // A contact the server refuses, terms not agreed, both: refusals that find the key.
        json!({"termsOfServiceAgreed": true, "contact": ["tel:+15551234"]}),
        json!({"contact": ["mailto:other@example.com"]}),
        json!({"termsOfServiceAgreed": false, "contact": ["mailto:a@localhost"]}),
    ] {
        let r = raw.post(&url, Some(&payload)).await;
        assert_eq!(r.status, 200, "{payload}: {r:?}");
        assert_eq!(r.location(), kid, "{payload}");
        assert_eq!(
            r.body["contact"],
            json!(["mailto:raw@example.com"]),
            "{payload}: the account is unchanged"
        );
    }
}

// ---- §6.2: badSignatureAlgorithm lists the supported algorithms ----

#[tokio::test]
async fn bad_signature_algorithm_lists_the_supported_algorithms() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.start().await;
    let raw = Raw::new(&env, Algorithm::Es256);
    let url = raw.url("/acme/new-account");
    let expected: Vec<&str> = Algorithm::ALL.iter().map(|a| a.as_str()).collect();
    for alg in ["ES512", "HS256", "none", "RS256"] {
        let protected = json!({
            "alg": alg,
            "jwk": raw.key.public_jwk().to_json(),
            "nonce": raw.nonce().await,
            "url": url,
        });
        let body = json!({
            "protected": b64(protected.to_string().as_bytes()),
            "payload": b64(json!({"termsOfServiceAgreed": true}).to_string().as_bytes()),
            "signature": b64(&[7_u8; 64]),
        });
        let r = raw
            .send(&url, body.to_string(), "application/jose+json")
            .await;
        assert_problem(&r, 400, "badSignatureAlgorithm", alg);
        let listed: Vec<&str> = r.body["algorithms"]
            .as_array()
            .unwrap_or_else(|| panic!("{alg}: no algorithms: {r:?}"))
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(listed, expected, "{alg}");
    }
    // Other problems carry no such field.
    let r = raw
        .send(&url, "not json".to_owned(), "application/jose+json")
        .await;
    assert_problem(&r, 400, "malformed", "garbage");
    assert!(r.body.get("algorithms").is_none(), "{r:?}");
    // None of that created an account.
    let r = raw
        .post(&url, Some(&json!({"onlyReturnExisting": true})))
        .await;
    assert_problem(&r, 400, "accountDoesNotExist", "no account");
}

// ---- §6.3: GET (and other methods) where POST-as-GET is required ----

#[tokio::test]
async fn wrong_methods_get_405_with_allow_and_a_problem() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.start().await;
    let raw = Raw::new(&env, Algorithm::Es256);
    let allow = |r: &reqwest::Response| -> Vec<String> {
        let mut methods: Vec<String> = r
            .headers()
            .get("allow")
            .map(|v| v.to_str().unwrap())
            .unwrap_or("")
            .split(',')
            .map(|m| m.trim().to_owned())
            .filter(|m| !m.is_empty())
            .collect();
        methods.sort();
        methods
    };
    let post_only = [
        "/acme/new-account",
        "/acme/new-order",
        "/acme/key-change",
        "/acme/revoke-cert",
        "/acme/acct/1",
        "/acme/acct/1/orders",
        "/acme/order/1",
        "/acme/order/1/finalize",
        "/acme/authz/1",
        "/acme/chall/1",
        "/acme/cert/1",
    ];
    let methods = [
        reqwest::Method::GET,
        reqwest::Method::PUT,
        reqwest::Method::DELETE,
        reqwest::Method::PATCH,
    ];
    for path in post_only {
        for method in &methods {
            let resp = raw
                .http
                .request(method.clone(), raw.url(path))
                .send()
                .await
                .unwrap();
            let what = format!("{method} {path}");
            assert_eq!(allow(&resp), vec!["POST"], "{what}");
            let reply = reply_of(resp).await;
            assert_problem(&reply, 405, "malformed", &what);
            if *method == reqwest::Method::GET {
                assert!(
                    reply.body["detail"]
                        .as_str()
                        .unwrap()
                        .contains("POST-as-GET"),
                    "{what}: {reply:?}"
                );
            }
        }
    }
    // newNonce is read with HEAD or GET (and POST-as-GET); the directory with GET.
    for (path, expected) in [
        ("/acme/new-nonce", vec!["GET", "HEAD", "POST"]),
        ("/directory", vec!["GET", "HEAD"]),
    ] {
        for method in [reqwest::Method::PUT, reqwest::Method::DELETE] {
            let resp = raw
                .http
                .request(method.clone(), raw.url(path))
                .send()
                .await
                .unwrap();
            let what = format!("{method} {path}");
            assert_eq!(allow(&resp), expected, "{what}");
            let reply = reply_of(resp).await;
            assert_problem(&reply, 405, "malformed", &what);
        }
    }
    // What is allowed still works.
    let get = raw
        .http
        .get(raw.url("/acme/new-nonce"))
        .send()
        .await
        .unwrap();
    assert_eq!(get.status().as_u16(), 204);
    let dir = raw.http.get(env.directory_url()).send().await.unwrap();
    assert_eq!(dir.status().as_u16(), 200);
}

async fn reply_of(resp: reqwest::Response) -> Reply {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.unwrap();
    Reply {
        status,
        headers,
        body: serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    }
}

// ---- §7.4: CSR keys are the CSR's business (badCSR), and never an account key ----

/// An RSA key with only a public half, so a CSR can carry keys no library generates (1024 bits,
/// exponent 3). The server checks the key before the signature, so the dummy signature is
/// never reached for those.
struct PublicOnlyRsa(Vec<u8>);

impl rcgen::PublicKeyData for PublicOnlyRsa {
    fn der_bytes(&self) -> &[u8] {
        &self.0
    }

    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        &rcgen::PKCS_RSA_SHA256
    }
}

impl rcgen::SigningKey for PublicOnlyRsa {
    fn sign(&self, _msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        Ok(vec![0x5a; 256])
    }
}

fn der_tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(u8::try_from(len).unwrap());
    } else if len < 0x100 {
        out.extend([0x81, u8::try_from(len).unwrap()]);
    } else {
        out.extend([0x82, u8::try_from(len >> 8).unwrap(), (len & 0xff) as u8]);
    }
    out.extend_from_slice(content);
    out
}

/// PKCS#1 RSAPublicKey with a `bits`-bit modulus and the given exponent.
fn rsa_public_key(bits: usize, exponent: u8) -> PublicOnlyRsa {
    let mut modulus = vec![0_u8];
    modulus.extend(vec![0xc3_u8; bits / 8]);
    modulus[1] = 0xd5;
    let mut body = der_tlv(0x02, &modulus);
    body.extend(der_tlv(0x02, &[exponent]));
    PublicOnlyRsa(der_tlv(0x30, &body))
}

#[tokio::test]
async fn unacceptable_csr_keys_and_account_keys_are_bad_csrs() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.start().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    // Another account, with an RSA key (a CSR key the CA would otherwise accept).
    let mut other = Raw::new(&env, Algorithm::Rs256);
    other.register().await;
    let name = env.name("csrkey");
    let (order_url, order) = ready_order(&env, &raw, &name).await;
    let finalize = order["finalize"].as_str().unwrap().to_owned();

    let p521 = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P521_SHA512).unwrap();
    let other_key = rcgen::KeyPair::try_from(other.key.to_pkcs8_der().unwrap().as_slice()).unwrap();
    let own_key = rcgen::KeyPair::try_from(raw.key.to_pkcs8_der().unwrap().as_slice()).unwrap();
    let cases = [
        (csr(&[&name], &p521), "P-521", "curve"),
        (csr(&[&name], &rsa_public_key(1024, 3)), "RSA 1024", "1024"),
        (
            csr(&[&name], &rsa_public_key(2048, 3)),
            "RSA exponent 3",
            "exponent",
        ),
        (
            csr(&[&name], &other_key),
            "another account's key",
            "account",
        ),
        (csr(&[&name], &own_key), "the account's own key", "account"),
    ];
    for (csr_b64, what, detail) in cases {
        let r = raw.post(&finalize, Some(&json!({"csr": csr_b64}))).await;
        assert_problem(&r, 400, "badCSR", what);
        assert!(
            r.body["detail"].as_str().unwrap().contains(detail),
            "{what}: {r:?}"
        );
        assert_eq!(
            raw.post(&order_url, None).await.body["status"],
            "ready",
            "{what}: the order is untouched"
        );
    }
    // A fresh key finalizes.
    let good = rcgen::KeyPair::generate().unwrap();
    let r = raw
        .post(&finalize, Some(&json!({"csr": csr(&[&name], &good)})))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    wait_for_status(&raw, &order_url, "valid").await;
}

// ---- §7.1.6: valid authorizations expire, and orders with them ----

#[tokio::test]
async fn authorizations_expire_and_orders_follow_sqlite() {
    authorizations_expire_and_orders_follow(Db::Sqlite).await;
}

#[tokio::test]
async fn authorizations_expire_and_orders_follow_postgres() {
    authorizations_expire_and_orders_follow(Db::Postgres).await;
}

async fn authorizations_expire_and_orders_follow(db: Db) {
    let mut env = TestEnv::new(db).await;
    env.section("acme", "  valid-authorization-lifetime: 2h\n");
    env.write_config_for_test();
    let config = certeasy::config::load(&env.config_path).unwrap_or_else(|e| panic!("{e}"));
    // Whole seconds, like the database, so expiries compare exactly.
    let start =
        OffsetDateTime::from_unix_timestamp(OffsetDateTime::now_utc().unix_timestamp()).unwrap();
    let clock = FakeClock::new(start);
    env.server = Some(
        certeasy::serve::start(&config, Some(&env.config_path), Arc::new(clock.clone()))
            .await
            .unwrap(),
    );
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("lifetime");

    // Validated at `start` (the fake clock stands still): valid for two hours from then, and the
    // order expires with it.
    let (order_url, order) = ready_order(&env, &raw, &name).await;
    let authz_url = order["authorizations"][0].as_str().unwrap().to_owned();
    let authz = raw.post(&authz_url, None).await;
    assert_eq!(authz.body["status"], "valid", "{authz:?}");
    let valid_until = start + time::Duration::hours(2);
    assert_eq!(parse_time(&authz.body["expires"]), valid_until, "{authz:?}");
    assert_eq!(parse_time(&order["expires"]), valid_until, "{order}");

    // Reused at once: the new order is ready and expires with the reused authorization.
    let reuse = raw
        .post(
            &raw.url("/acme/new-order"),
            Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
        )
        .await;
    assert_eq!(reuse.status, 201, "{reuse:?}");
    assert_eq!(reuse.body["status"], "ready");
    assert_eq!(reuse.body["authorizations"][0], authz_url.as_str());
    assert_eq!(parse_time(&reuse.body["expires"]), valid_until);

    // With less than the reuse margin (an hour, half the lifetime) left, it is not reused.
    clock.advance(time::Duration::minutes(61));
    let fresh = raw
        .post(
            &raw.url("/acme/new-order"),
            Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
        )
        .await;
    assert_eq!(fresh.status, 201, "{fresh:?}");
    assert_eq!(fresh.body["status"], "pending");
    assert_ne!(fresh.body["authorizations"][0], authz_url.as_str());
    assert!(parse_time(&fresh.body["expires"]) > valid_until);

    // Past the lifetime, finalize is refused with orderNotReady: the order is invalid, the
    // authorization expired.
    clock.advance(time::Duration::minutes(60));
    let finalize = order["finalize"].as_str().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let r = raw
        .post(finalize, Some(&json!({"csr": csr(&[&name], &key)})))
        .await;
    assert_problem(&r, 403, "orderNotReady", "finalize after expiry");
    assert_eq!(raw.post(&order_url, None).await.body["status"], "invalid");
    assert_eq!(raw.post(&authz_url, None).await.body["status"], "expired");
    assert_eq!(
        raw.post(&reuse.location(), None).await.body["status"],
        "invalid"
    );
    assert_eq!(order_count(&raw).await, 3);
}

// ---- identifiers.deny-domains cannot be bypassed with a wildcard ----

#[tokio::test]
async fn a_wildcard_cannot_cover_a_denied_domain() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.section(
        "identifiers",
        "  deny-domains: [\"secret.example.com\", \"example.net\"]\n",
    );
    env.start().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let url = raw.url("/acme/new-order");
    for name in [
        "*.example.com",
        "secret.example.com",
        "*.secret.example.com",
        "*.example.net",
        "*.a.example.net",
    ] {
        let r = raw
            .post(
                &url,
                Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
            )
            .await;
        assert_problem(&r, 400, "rejectedIdentifier", name);
        assert!(
            r.body["detail"].as_str().unwrap().contains(name),
            "{name}: {r:?}"
        );
    }
    assert_eq!(order_count(&raw).await, 0, "no order was created");
    // Names beside the denied one stay orderable.
    let r = raw
        .post(
            &url,
            Some(&json!({"identifiers": [{"type": "dns", "value": "*.www.example.com"}]})),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
}

// ---- §7.5.1 and §7.4: quick work is answered with its outcome ----

#[tokio::test]
async fn a_quick_validation_and_issuance_answer_with_their_outcome_sqlite() {
    a_quick_validation_and_issuance_answer_with_their_outcome(Db::Sqlite).await;
}

#[tokio::test]
async fn a_quick_validation_and_issuance_answer_with_their_outcome_postgres() {
    a_quick_validation_and_issuance_answer_with_their_outcome(Db::Postgres).await;
}

/// A reachable http-01 target is validated while the challenge request waits, so its response
/// already says `valid` (no `Retry-After`: nothing to poll for), and the order is ready at once;
/// a finalization answers `valid` with the certificate URL. A slow target still gets
/// `processing` (restart.rs, bounded_work.rs).
async fn a_quick_validation_and_issuance_answer_with_their_outcome(db: Db) {
    let mut env = TestEnv::new(db).await;
    env.start().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("quick");
    let (order_url, started) = answer_http01(&env, &raw, &name).await;
    assert_eq!(started.body["status"], "valid", "{started:?}");
    assert!(started.body["validated"].is_string(), "{started:?}");
    assert_eq!(started.header("retry-after"), None, "{started:?}");
    assert!(
        started
            .header("link")
            .is_some_and(|l| l.contains("rel=\"up\"")),
        "{started:?}"
    );
    let order = raw.post(&order_url, None).await;
    assert_eq!(order.body["status"], "ready", "{order:?}");

    let cert_key = rcgen::KeyPair::generate().unwrap();
    let finalize = order.body["finalize"].as_str().unwrap().to_owned();
    let r = raw
        .post(&finalize, Some(&json!({"csr": csr(&[&name], &cert_key)})))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["status"], "valid", "{r:?}");
    assert_eq!(r.header("retry-after"), None, "{r:?}");
    assert_eq!(r.location(), order_url);
    let cert = raw
        .post(r.body["certificate"].as_str().unwrap(), None)
        .await;
    assert_eq!(cert.status, 200, "{cert:?}");
    crate::certcheck::assert_chain(&cert.text, &env.root_pem(), &[&name]);
}
