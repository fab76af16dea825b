//! Malformed and hostile requests get the right problem and change nothing.

use acme_jose::Algorithm;
use serde_json::Value;
use serde_json::json;

use crate::harness::Db;
use crate::harness::TestEnv;
use crate::raw::Raw;

const ERR: &str = "urn:ietf:params:acme:error:";

async fn env() -> TestEnv {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.section(
        "acme",
        "  orders-per-page: 2\n  terms-of-service: \"https://example.com/tos\"\n",
    );
    env.start().await;
    env
}

async fn orders_of(raw: &Raw) -> Vec<Value> {
    let kid = raw.kid.clone().unwrap();
    let r = raw.post(&format!("{kid}/orders"), None).await;
    assert_eq!(r.status, 200, "{r:?}");
    r.body["orders"].as_array().unwrap().clone()
}

#[tokio::test]
async fn directory_nonce_and_common_headers() {
    let env = env().await;
    let raw = Raw::new(&env, Algorithm::Es256);
    let dir: Value = serde_json::from_str(
        &raw.http
            .get(env.directory_url())
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    )
    .unwrap();
    for key in [
        "newNonce",
        "newAccount",
        "newOrder",
        "revokeCert",
        "keyChange",
    ] {
        assert!(
            dir[key].as_str().unwrap().starts_with(&env.base_url()),
            "{key}"
        );
    }
    assert_eq!(dir["meta"]["termsOfService"], "https://example.com/tos");
    assert_eq!(dir["meta"]["externalAccountRequired"], false);
    let get = raw
        .http
        .get(raw.url("/acme/new-nonce"))
        .send()
        .await
        .unwrap();
    assert_eq!(get.status().as_u16(), 204);
    assert!(get.headers().contains_key("replay-nonce"));
    assert_eq!(get.headers()["cache-control"], "no-store");
    assert!(
        get.headers()["link"]
            .to_str()
            .unwrap()
            .contains("rel=\"index\"")
    );
}

#[tokio::test]
async fn every_algorithm_can_hold_an_account() {
    let env = env().await;
    for alg in Algorithm::ALL {
        let mut raw = Raw::new(&env, alg);
        let created = raw.register().await;
        assert_eq!(created.status, 201, "{alg}: {created:?}");
        let kid = raw.kid.take().unwrap();
        let again = raw
            .post(
                &raw.url("/acme/new-account"),
                Some(&json!({"onlyReturnExisting": true})),
            )
            .await;
        assert_eq!(again.status, 200, "{alg}: {again:?}");
        assert_eq!(again.location(), kid);
    }
}

#[tokio::test]
async fn terms_of_service_and_contacts_are_enforced() {
    let env = env().await;
    let raw = Raw::new(&env, Algorithm::Es256);
    let r = raw
        .post(&raw.url("/acme/new-account"), Some(&json!({})))
        .await;
    assert_eq!(r.problem_type(), format!("{ERR}userActionRequired"));
    let r = raw
        .post(
            &raw.url("/acme/new-account"),
            Some(&json!({"termsOfServiceAgreed": true, "contact": ["tel:+1555"]})),
        )
        .await;
    assert_eq!(r.problem_type(), format!("{ERR}unsupportedContact"));
    let r = raw
        .post(
            &raw.url("/acme/new-account"),
            Some(&json!({"termsOfServiceAgreed": true, "contact": ["mailto:not-an-address"]})),
        )
        .await;
    assert_eq!(r.problem_type(), format!("{ERR}invalidContact"));
    let r = raw
        .post(
            &raw.url("/acme/new-account"),
            Some(&json!({"onlyReturnExisting": true})),
        )
        .await;
    assert_eq!(r.problem_type(), format!("{ERR}accountDoesNotExist"));
    // None of that created an account.
    let r = raw
        .post(
            &raw.url("/acme/new-account"),
            Some(&json!({"onlyReturnExisting": true})),
        )
        .await;
    assert_eq!(r.problem_type(), format!("{ERR}accountDoesNotExist"));
}

#[tokio::test]
async fn bad_signature_wrong_url_reused_nonce_and_content_type() {
    let env = env().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let kid = raw.kid.clone().unwrap();
    let order_url = raw.url("/acme/new-order");
    let name = env.name("hostile");
    let payload = json!({"identifiers": [{"type": "dns", "value": name}]});

    // Bad signature: a valid JWS whose payload is swapped afterwards.
    let nonce = raw.nonce().await;
    let body = raw
        .key
        .sign_acme(&order_url, Some(&nonce), Some(&kid), Some(&payload))
        .unwrap();
    let mut jws: Value = serde_json::from_str(&body).unwrap();
    jws["payload"] = Value::String("eyJpZGVudGlmaWVycyI6W119".to_owned());
    let r = raw
        .send(&order_url, jws.to_string(), "application/jose+json")
        .await;
    assert_eq!(r.problem_type(), format!("{ERR}malformed"), "{r:?}");
    assert!(
        r.header("replay-nonce").is_some(),
        "errors carry a fresh nonce"
    );

    // Wrong url.
    let nonce = raw.nonce().await;
    let body = raw
        .key
        .sign_acme(
            &raw.url("/acme/new-account"),
            Some(&nonce),
            Some(&kid),
            Some(&payload),
        )
        .unwrap();
    let r = raw.send(&order_url, body, "application/jose+json").await;
    assert_eq!(r.problem_type(), format!("{ERR}unauthorized"), "{r:?}");

    // Reused nonce: the first use works, the replay is refused.
    let nonce = raw.nonce().await;
    let body = raw
        .key
        .sign_acme(&format!("{kid}/orders"), Some(&nonce), Some(&kid), None)
        .unwrap();
    assert_eq!(
        raw.send(
            &format!("{kid}/orders"),
            body.clone(),
            "application/jose+json"
        )
        .await
        .status,
        200
    );
    let r = raw
        .send(&format!("{kid}/orders"), body, "application/jose+json")
        .await;
    assert_eq!(r.problem_type(), format!("{ERR}badNonce"), "{r:?}");
    assert_eq!(r.status, 400);

    // Unknown nonce.
    let body = raw
        .key
        .sign_acme(
            &order_url,
            Some("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
            Some(&kid),
            Some(&payload),
        )
        .unwrap();
    let r = raw.send(&order_url, body, "application/jose+json").await;
    assert_eq!(r.problem_type(), format!("{ERR}badNonce"), "{r:?}");

    // Wrong content type.
    let nonce = raw.nonce().await;
    let body = raw
        .key
        .sign_acme(&order_url, Some(&nonce), Some(&kid), Some(&payload))
        .unwrap();
    let r = raw.send(&order_url, body, "application/json").await;
    assert_eq!(r.status, 415);
    assert_eq!(r.problem_type(), format!("{ERR}malformed"));

    // jwk where kid is required.
    let nonce = raw.nonce().await;
    let body = raw
        .key
        .sign_acme(&order_url, Some(&nonce), None, Some(&payload))
        .unwrap();
    let r = raw.send(&order_url, body, "application/jose+json").await;
    assert_eq!(r.problem_type(), format!("{ERR}malformed"));

    // Not JSON at all, and an oversized body.
    let r = raw
        .send(&order_url, "not json".to_owned(), "application/jose+json")
        .await;
    assert_eq!(r.problem_type(), format!("{ERR}malformed"));
    let r = raw
        .send(&order_url, "x".repeat(70_000), "application/jose+json")
        .await;
    assert_eq!(r.status, 413);

    // None of the above created an order.
    assert!(orders_of(&raw).await.is_empty());
}

#[tokio::test]
async fn another_accounts_kid_and_objects_are_out_of_reach() {
    let env = env().await;
    let mut alice = Raw::new(&env, Algorithm::Es256);
    alice.register().await;
    let mut mallory = Raw::new(&env, Algorithm::Es256);
    mallory.register().await;
    let name = env.name("alice");
    let r = alice
        .post(
            &alice.url("/acme/new-order"),
            Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let order_url = r.location();
    let authz_url = r.body["authorizations"][0].as_str().unwrap().to_owned();

    // Mallory signs with her key but names Alice's account.
    let as_alice = Raw {
        kid: alice.kid.clone(),
        http: mallory.http.clone(),
        base: mallory.base.clone(),
        key: acme_jose::sign::SigningKey::from_pkcs8(
            Algorithm::Es256,
            &mallory.key.to_pkcs8_der().unwrap(),
        )
        .unwrap(),
    };
    let r = as_alice.post(&order_url, None).await;
    assert_eq!(r.problem_type(), format!("{ERR}malformed"), "{r:?}");

    // Mallory with her own account cannot read or touch Alice's objects.
    for url in [&order_url, &authz_url] {
        let r = mallory.post(url, None).await;
        assert_eq!(r.status, 404, "{url}: {r:?}");
    }
    let r = mallory
        .post(&authz_url, Some(&json!({"status": "deactivated"})))
        .await;
    assert_eq!(r.status, 404);
    let r = mallory
        .post(&format!("{}/orders", alice.kid.clone().unwrap()), None)
        .await;
    assert_eq!(r.problem_type(), format!("{ERR}unauthorized"));
    // Alice's authorization is untouched.
    let r = alice.post(&authz_url, None).await;
    assert_eq!(r.body["status"], "pending");
}

#[tokio::test]
async fn bad_identifiers_get_subproblems_and_validity_is_checked() {
    let env = env().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let url = raw.url("/acme/new-order");
    let r = raw
        .post(&url, Some(&json!({"identifiers": [{"type": "dns", "value": "bad_name.example"}, {"type": "email", "value": "a@b.example"}, {"type": "dns", "value": "ok.example.com"}]})))
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.problem_type(), format!("{ERR}compound"));
    assert_eq!(r.body["subproblems"].as_array().unwrap().len(), 2);
    let r = raw.post(&url, Some(&json!({"identifiers": []}))).await;
    assert_eq!(r.problem_type(), format!("{ERR}malformed"));
    let name = env.name("long");
    let r = raw
        .post(&url, Some(&json!({"identifiers": [{"type": "dns", "value": name}], "notAfter": "2099-01-01T00:00:00Z"})))
        .await;
    assert_eq!(r.problem_type(), format!("{ERR}malformed"), "{r:?}");
    assert!(
        r.body["detail"].as_str().unwrap().contains("maximum"),
        "{r:?}"
    );
    let r = raw
        .post(
            &url,
            Some(&json!({"identifiers": [{"type": "dns", "value": "*.example.com"}]})),
        )
        .await;
    assert_eq!(r.status, 201, "wildcards are allowed: {r:?}");
    assert_eq!(r.body["identifiers"][0]["value"], "*.example.com");
    assert_eq!(orders_of(&raw).await.len(), 1);
}

#[tokio::test]
async fn finalize_rules_and_csr_checks() {
    let env = env().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("csr");
    let r = raw
        .post(
            &raw.url("/acme/new-order"),
            Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
        )
        .await;
    let order_url = r.location();
    let finalize = r.body["finalize"].as_str().unwrap().to_owned();
    let key = rcgen::KeyPair::generate().unwrap();
    let csr = |names: Vec<String>, key: &rcgen::KeyPair| {
        let mut params = rcgen::CertificateParams::new(names).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        let der = params.serialize_request(key).unwrap();
        base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, der.der())
    };
    // Not ready yet.
    let r = raw
        .post(
            &finalize,
            Some(&json!({"csr": csr(vec![name.clone()], &key)})),
        )
        .await;
    assert_eq!(r.problem_type(), format!("{ERR}orderNotReady"), "{r:?}");
    assert_eq!(r.status, 403);

    // Validate over http-01.
    let order = raw.post(&order_url, None).await;
    let ch = raw.http01_challenge(&order.body).await;
    let token = ch["token"].as_str().unwrap();
    env.http.add(token, &raw.key_authorization(token));
    let r = raw
        .post(ch["url"].as_str().unwrap(), Some(&json!({})))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    for _ in 0..100 {
        if raw.post(&order_url, None).await.body["status"] == "ready" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(raw.post(&order_url, None).await.body["status"], "ready");

    // Extra name, missing name, the account key, garbage: all badCSR, the order stays ready.
    let other = env.name("extra");
    for (csr_b64, what) in [
        (csr(vec![name.clone(), other.clone()], &key), "extra name"),
        (csr(vec![other.clone()], &key), "wrong name"),
        ("AAAA".to_owned(), "garbage"),
    ] {
        let r = raw.post(&finalize, Some(&json!({"csr": csr_b64}))).await;
        assert_eq!(r.problem_type(), format!("{ERR}badCSR"), "{what}: {r:?}");
        assert_eq!(
            raw.post(&order_url, None).await.body["status"],
            "ready",
            "{what}"
        );
    }
    let account_key = rcgen::KeyPair::try_from(raw.key.to_pkcs8_der().unwrap().as_slice()).unwrap();
    let r = raw
        .post(
            &finalize,
            Some(&json!({"csr": csr(vec![name.clone()], &account_key)})),
        )
        .await;
    assert_eq!(
        r.problem_type(),
        format!("{ERR}badCSR"),
        "account key: {r:?}"
    );

    // A good CSR finalizes.
    let r = raw
        .post(
            &finalize,
            Some(&json!({"csr": csr(vec![name.clone()], &key)})),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(matches!(
        r.body["status"].as_str(),
        Some("processing" | "valid")
    ));
    let mut cert_url = None;
    for _ in 0..100 {
        let o = raw.post(&order_url, None).await;
        if o.body["status"] == "valid" {
            cert_url = o.body["certificate"].as_str().map(str::to_owned);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let cert_url = cert_url.expect("order becomes valid");
    let cert = raw.post(&cert_url, None).await;
    assert_eq!(
        cert.header("content-type").as_deref(),
        Some("application/pem-certificate-chain")
    );
    crate::certcheck::assert_chain(&cert.text, &env.root_pem(), &[&name]);
    // Finalizing twice is refused.
    let r = raw
        .post(
            &finalize,
            Some(&json!({"csr": csr(vec![name.clone()], &key)})),
        )
        .await;
    assert_eq!(r.problem_type(), format!("{ERR}orderNotReady"));
}

#[tokio::test]
async fn orders_list_is_paginated_and_key_change_conflicts() {
    let env = env().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    for i in 0..3 {
        let name = env.name(&format!("page{i}"));
        let r = raw
            .post(
                &raw.url("/acme/new-order"),
                Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
            )
            .await;
        assert_eq!(r.status, 201);
    }
    let kid = raw.kid.clone().unwrap();
    let first = raw.post(&format!("{kid}/orders"), None).await;
    assert_eq!(first.body["orders"].as_array().unwrap().len(), 2);
    let link = first.header("link").unwrap();
    let next = link
        .split(',')
        .find(|l| l.contains("rel=\"next\""))
        .unwrap();
    let next_url = next
        .trim()
        .trim_start_matches('<')
        .split('>')
        .next()
        .unwrap()
        .to_owned();
    let second = raw.post(&next_url, None).await;
    assert_eq!(
        second.body["orders"].as_array().unwrap().len(),
        1,
        "{second:?}"
    );

    // keyChange to a key another account holds: 409 with that account's URL.
    let mut other = Raw::new(&env, Algorithm::Es256);
    other.register().await;
    let url = raw.url("/acme/key-change");
    let inner = raw.key_change_inner(&other.key);
    let r = raw.post(&url, Some(&inner)).await;
    assert_eq!(r.status, 409, "{r:?}");
    assert_eq!(r.location(), other.kid.clone().unwrap());
}

#[tokio::test]
async fn after_a_key_change_the_old_key_signs_nothing() {
    let env = env().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let kid = raw.kid.clone().unwrap();
    // A first request makes the old key the one the server keeps parsed for this account.
    assert_eq!(raw.post(&kid, None).await.status, 200);

    // The same algorithm, so that only the signature itself can tell the keys apart.
    let new_key = acme_jose::sign::SigningKey::generate(Algorithm::Es256).unwrap();
    let inner = raw.key_change_inner(&new_key);
    let r = raw.post(&raw.url("/acme/key-change"), Some(&inner)).await;
    assert_eq!(r.status, 200, "{r:?}");

    let r = raw.post(&kid, None).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.body["type"], "urn:ietf:params:acme:error:malformed");
    raw.key = new_key;
    let r = raw.post(&kid, None).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["status"], "valid");
}
