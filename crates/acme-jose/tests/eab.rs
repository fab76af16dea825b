//! External account binding verification (RFC 8555 §7.3.4): the accepted form and every refusal.

// Fixture helpers outside `#[test]` functions unwrap too: a failed fixture fails the test.
#![allow(clippy::unwrap_used)]

use acme_core::problem::ProblemType;
use acme_jose::Algorithm;
use acme_jose::Error;
use acme_jose::eab::EabBinding;
use acme_jose::eab::MacAlgorithm;
use acme_jose::sign::SigningKey;
use acme_jose::sign::eab_binding;
use acme_jose::sign::mac_flattened;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use serde_json::json;

const URL: &str = "https://ca.test/acme/new-account";
const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

fn account_key() -> SigningKey {
    SigningKey::generate(Algorithm::Es256).unwrap()
}

fn refused(binding: &Value, jwk: &acme_jose::Jwk) -> Error {
    EabBinding::parse(binding, URL, jwk).unwrap_err()
}

#[test]
fn a_binding_from_the_signer_verifies_with_every_mac_algorithm() {
    let key = account_key();
    for alg in [
        MacAlgorithm::Hs256,
        MacAlgorithm::Hs384,
        MacAlgorithm::Hs512,
    ] {
        let binding = eab_binding("kid-1", KEY, alg, URL, &key.public_jwk());
        let parsed = EabBinding::parse(&binding, URL, &key.public_jwk()).unwrap();
        assert_eq!(parsed.kid(), "kid-1");
        assert_eq!(parsed.algorithm(), alg);
        parsed.verify(KEY).unwrap();
    }
}

#[test]
fn a_wrong_mac_key_is_unauthorized() {
    let key = account_key();
    let binding = eab_binding("kid-1", KEY, MacAlgorithm::Hs256, URL, &key.public_jwk());
    let parsed = EabBinding::parse(&binding, URL, &key.public_jwk()).unwrap();
    let err = parsed
        .verify(b"another key entirely, 32 bytes!!")
        .unwrap_err();
    assert_eq!(err.problem_type(), ProblemType::Unauthorized);
    assert!(err.to_string().contains("kid-1"), "{err}");
    // A tampered signature fails the same way.
    let mut tampered = binding;
    let sig = URL_SAFE_NO_PAD
        .decode(tampered["signature"].as_str().unwrap())
        .unwrap();
    let mut sig = sig;
    sig[0] ^= 1;
    tampered["signature"] = Value::String(URL_SAFE_NO_PAD.encode(&sig));
    let parsed = EabBinding::parse(&tampered, URL, &key.public_jwk()).unwrap();
    assert_eq!(
        parsed.verify(KEY).unwrap_err().problem_type(),
        ProblemType::Unauthorized
    );
}

#[test]
fn header_rules_are_enforced() {
    let key = account_key();
    let jwk = key.public_jwk();
    let payload = jwk.to_json().to_string();
    let cases: Vec<(Value, MacAlgorithm, &str)> = vec![
        (
            json!({"alg": "ES256", "kid": "k", "url": URL}),
            MacAlgorithm::Hs256,
            "HS256",
        ),
        (
            json!({"alg": "none", "kid": "k", "url": URL}),
            MacAlgorithm::Hs256,
            "HS256",
        ),
        (json!({"kid": "k", "url": URL}), MacAlgorithm::Hs256, "alg"),
        (
            json!({"alg": "HS256", "url": URL}),
            MacAlgorithm::Hs256,
            "kid",
        ),
        (
            json!({"alg": "HS256", "kid": "", "url": URL}),
            MacAlgorithm::Hs256,
            "kid",
        ),
        (
            json!({"alg": "HS256", "kid": 7, "url": URL}),
            MacAlgorithm::Hs256,
            "kid",
        ),
        (
            json!({"alg": "HS256", "kid": "k", "url": URL, "nonce": "n"}),
            MacAlgorithm::Hs256,
            "nonce",
        ),
        (
            json!({"alg": "HS256", "kid": "k"}),
            MacAlgorithm::Hs256,
            "url",
        ),
        (
            json!({"alg": "HS256", "kid": "k", "url": "https://ca.test/acme/new-order"}),
            MacAlgorithm::Hs256,
            "outer",
        ),
        (
            json!({"alg": "HS256", "kid": "k", "url": URL, "crit": ["x"]}),
            MacAlgorithm::Hs256,
            "crit",
        ),
    ];
    for (protected, alg, needle) in cases {
        let binding = mac_flattened(&protected, payload.as_bytes(), alg, KEY);
        let err = refused(&binding, &jwk);
        assert_eq!(err.problem_type(), ProblemType::Malformed, "{protected}");
        assert!(err.to_string().contains(needle), "{protected}: {err}");
    }
}

#[test]
fn the_payload_must_be_the_outer_key() {
    let key = account_key();
    let other = account_key();
    let protected = json!({"alg": "HS256", "kid": "k", "url": URL});
    for payload in [
        other.public_jwk().to_json().to_string(),
        "{}".to_owned(),
        "not json".to_owned(),
        String::new(),
    ] {
        let binding = mac_flattened(&protected, payload.as_bytes(), MacAlgorithm::Hs256, KEY);
        let err = refused(&binding, &key.public_jwk());
        assert_eq!(err.problem_type(), ProblemType::Malformed, "{payload}");
    }
    // The same key with extra members (as some clients send) is the same key.
    let mut with_extras = key.public_jwk().to_json();
    with_extras["use"] = json!("sig");
    let binding = mac_flattened(
        &protected,
        with_extras.to_string().as_bytes(),
        MacAlgorithm::Hs256,
        KEY,
    );
    EabBinding::parse(&binding, URL, &key.public_jwk())
        .unwrap()
        .verify(KEY)
        .unwrap();
}

#[test]
fn the_jws_must_be_flattened_and_well_formed() {
    let key = account_key();
    let jwk = key.public_jwk();
    let good = eab_binding("k", KEY, MacAlgorithm::Hs256, URL, &jwk);
    let mut bad = vec![
        json!("a string"),
        json!([good.clone()]),
        json!({"protected": good["protected"], "payload": good["payload"]}),
        json!({"payload": good["payload"], "signature": good["signature"]}),
        json!({"protected": good["protected"], "payload": 5, "signature": good["signature"]}),
        json!({"protected": "!!", "payload": good["payload"], "signature": good["signature"]}),
        json!({"protected": good["protected"], "payload": good["payload"], "signature": ""}),
        json!({"protected": URL_SAFE_NO_PAD.encode("[1]"), "payload": good["payload"], "signature": good["signature"]}),
    ];
    let mut with_header = good.clone();
    with_header["header"] = json!({"kid": "k"});
    bad.push(with_header);
    let mut general = good;
    general["signatures"] = json!([]);
    bad.push(general);
    for value in bad {
        let err = refused(&value, &jwk);
        assert_eq!(err.problem_type(), ProblemType::Malformed, "{value}");
        assert!(
            err.to_string().starts_with("externalAccountBinding"),
            "{err}"
        );
    }
}
