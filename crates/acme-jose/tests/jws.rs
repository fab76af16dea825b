//! Flattened JWS parsing, header rules and signature verification.

use acme_core::problem::ProblemType;
use acme_jose::sign::SigningKey;
use acme_jose::{Algorithm, EcCurve, Error, Jwk, Jws, KeyRef, VerifyingKey};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

const URL: &str = "https://ca.example/acme/new-order";
const KID: &str = "https://ca.example/acme/acct/1";

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn body(protected: &str, payload: &str, signature: &str) -> Vec<u8> {
    json!({"protected": protected, "payload": payload, "signature": signature})
        .to_string()
        .into_bytes()
}

fn members(body: &str) -> (String, String, String) {
    let v: Value = serde_json::from_str(body).expect("signed body is JSON");
    let get = |name: &str| v[name].as_str().expect("member is a string").to_owned();
    (get("protected"), get("payload"), get("signature"))
}

/// Signs an arbitrary protected header with an ES256 key.
fn signed_with_header(header: Value) -> Vec<u8> {
    let key = SigningKey::generate(Algorithm::Es256).expect("ES256 key generation");
    key.sign_flattened(header, b"{}")
        .expect("signing")
        .into_bytes()
}

/// Verifies with the JWK and with the same key parsed once ([`VerifyingKey`], as the server keeps
/// account keys); the two must agree.
fn verified(jws: &Jws, jwk: &Jwk) -> Result<(), Error> {
    let direct = jws.verify(jwk);
    let parsed = VerifyingKey::new(jwk.clone()).expect("a parsed JWK parses for verification");
    assert_eq!(
        jws.verify_with(&parsed),
        direct,
        "verify and verify_with disagree"
    );
    direct
}

fn malformed_detail(body: &[u8]) -> String {
    match Jws::parse(body) {
        Err(Error::Malformed(detail)) => detail,
        other => panic!("expected Malformed, got {other:?}"),
    }
}

fn kid_header(extra: Value) -> Value {
    let mut header = json!({"alg": "ES256", "kid": KID, "nonce": "n1", "url": URL});
    if let (Some(h), Value::Object(extra)) = (header.as_object_mut(), extra) {
        h.extend(extra);
    }
    header
}

#[test]
fn round_trip_for_every_algorithm() {
    for alg in Algorithm::ALL {
        let key = SigningKey::generate(alg).unwrap();
        assert_eq!(key.algorithm(), alg);
        let payload = json!({"termsOfServiceAgreed": true});
        let signed = key
            .sign_acme(URL, Some("nonce-1"), None, Some(&payload))
            .unwrap();
        let jws = Jws::parse(signed.as_bytes()).unwrap();
        assert_eq!(jws.header().alg, alg);
        assert_eq!(jws.header().url, URL);
        assert_eq!(jws.header().nonce.as_deref(), Some("nonce-1"));
        assert_eq!(jws.header().key, KeyRef::Jwk(key.public_jwk()));
        assert_eq!(jws.payload_json::<Value>().unwrap(), payload);
        assert!(!jws.is_post_as_get());
        assert_eq!(jws.verify_embedded().unwrap(), &key.public_jwk());

        let by_kid = key
            .sign_acme(URL, Some("nonce-2"), Some(KID), Some(&payload))
            .unwrap();
        let jws = Jws::parse(by_kid.as_bytes()).unwrap();
        assert_eq!(jws.header().key, KeyRef::Kid(KID.to_owned()));
        verified(&jws, &key.public_jwk()).unwrap();
        assert!(matches!(jws.verify_embedded(), Err(Error::Malformed(_))));
    }
}

#[test]
fn round_trip_with_larger_rsa_key() {
    let key = SigningKey::generate_rsa(Algorithm::Ps256, 3072).unwrap();
    assert_eq!(key.public_jwk().rsa_bits(), Some(3072));
    let signed = key.sign_acme(URL, Some("n"), Some(KID), None).unwrap();
    Jws::parse(signed.as_bytes())
        .unwrap()
        .verify(&key.public_jwk())
        .unwrap();
    assert!(SigningKey::generate_rsa(Algorithm::Rs256, 1024).is_err());
    assert!(SigningKey::generate_rsa(Algorithm::Es256, 2048).is_err());
}

#[test]
fn pkcs8_export_reloads_the_same_key() {
    for alg in Algorithm::ALL {
        let key = SigningKey::generate(alg).unwrap();
        let reloaded = SigningKey::from_pkcs8(alg, &key.to_pkcs8_der().unwrap()).unwrap();
        assert_eq!(reloaded.public_jwk(), key.public_jwk());
        let signed = reloaded.sign_acme(URL, Some("n"), Some(KID), None).unwrap();
        Jws::parse(signed.as_bytes())
            .unwrap()
            .verify(&key.public_jwk())
            .unwrap();
    }
}

#[test]
fn post_as_get_has_empty_payload() {
    let key = SigningKey::generate(Algorithm::Es256).unwrap();
    let signed = key.sign_acme(URL, Some("n"), Some(KID), None).unwrap();
    assert_eq!(members(&signed).1, "");
    let jws = Jws::parse(signed.as_bytes()).unwrap();
    assert!(jws.is_post_as_get());
    assert!(jws.payload().is_empty());
    assert!(matches!(
        jws.payload_json::<Value>(),
        Err(Error::Malformed(_))
    ));
    jws.verify(&key.public_jwk()).unwrap();

    // "{}" is an empty JSON object, not POST-as-GET.
    let empty_object = key
        .sign_acme(URL, Some("n"), Some(KID), Some(&json!({})))
        .unwrap();
    let jws = Jws::parse(empty_object.as_bytes()).unwrap();
    assert!(!jws.is_post_as_get());
    assert_eq!(jws.payload(), b"{}");
}

#[test]
fn tampering_is_detected_for_every_algorithm() {
    for alg in Algorithm::ALL {
        let key = SigningKey::generate(alg).unwrap();
        let jwk = key.public_jwk();
        let signed = key
            .sign_acme(URL, Some("n"), Some(KID), Some(&json!({"a": 1})))
            .unwrap();
        let (protected, payload, signature) = members(&signed);

        let other_payload = b64(br#"{"a":2}"#);
        let jws = Jws::parse(&body(&protected, &other_payload, &signature)).unwrap();
        assert_eq!(
            verified(&jws, &jwk),
            Err(Error::BadSignature),
            "{alg} payload"
        );

        let other_header = key.acme_header("https://ca.example/acme/other", Some("n"), Some(KID));
        let other_protected = b64(other_header.to_string().as_bytes());
        let jws = Jws::parse(&body(&other_protected, &payload, &signature)).unwrap();
        assert_eq!(
            verified(&jws, &jwk),
            Err(Error::BadSignature),
            "{alg} protected"
        );

        let mut sig = URL_SAFE_NO_PAD.decode(&signature).unwrap();
        sig[5] ^= 0x01;
        let jws = Jws::parse(&body(&protected, &payload, &b64(&sig))).unwrap();
        assert_eq!(
            verified(&jws, &jwk),
            Err(Error::BadSignature),
            "{alg} signature"
        );

        let stranger = SigningKey::generate(alg).unwrap().public_jwk();
        let jws = Jws::parse(signed.as_bytes()).unwrap();
        assert_eq!(
            verified(&jws, &stranger),
            Err(Error::BadSignature),
            "{alg} other key"
        );
    }
}

#[test]
fn embedded_jwk_must_fit_alg() {
    let cases = [
        (Algorithm::Rs256, Algorithm::Es256),
        (Algorithm::Es256, Algorithm::Es384),
        (Algorithm::Es384, Algorithm::Es256),
        (Algorithm::EdDsa, Algorithm::Rs256),
        (Algorithm::Es256, Algorithm::EdDsa),
        (Algorithm::Ps256, Algorithm::EdDsa),
    ];
    for (key_alg, claimed) in cases {
        let key = SigningKey::generate(key_alg).unwrap();
        let mut header = key.acme_header(URL, Some("n"), None);
        header["alg"] = json!(claimed.as_str());
        let signed = key.sign_flattened(header, b"{}").unwrap();
        match Jws::parse(signed.as_bytes()) {
            Err(Error::BadSignatureAlgorithm(detail)) => {
                assert!(detail.contains(claimed.as_str()), "{detail}");
            }
            other => panic!("{key_alg} key claiming {claimed}: {other:?}"),
        }
    }
}

#[test]
fn kid_key_must_fit_alg_at_verification() {
    let es256 = SigningKey::generate(Algorithm::Es256).unwrap();
    let signed = es256.sign_acme(URL, Some("n"), Some(KID), None).unwrap();
    let jws = Jws::parse(signed.as_bytes()).unwrap();
    for other in [Algorithm::Rs256, Algorithm::Es384, Algorithm::EdDsa] {
        let jwk = SigningKey::generate(other).unwrap().public_jwk();
        let err = verified(&jws, &jwk).unwrap_err();
        assert!(
            matches!(err, Error::BadSignatureAlgorithm(_)),
            "{other}: {err:?}"
        );
        assert_eq!(err.problem_type(), ProblemType::BadSignatureAlgorithm);
    }
}

#[test]
fn rsa_1024_is_refused_before_the_signature_is_checked() {
    // A 1024-bit odd modulus: verification must stop at the key size.
    let mut n = vec![0xc3; 128];
    n[127] = 0x01;
    let weak = Jwk::from_json(&json!({"kty": "RSA", "n": b64(&n), "e": "AQAB"})).unwrap();
    assert_eq!(weak.rsa_bits(), Some(1024));
    assert_eq!(weak.describe(), "RSA 1024");

    let header = json!({"alg": "RS256", "jwk": weak.to_json(), "nonce": "n", "url": URL});
    let jws = Jws::parse(&body(
        &b64(header.to_string().as_bytes()),
        "",
        &b64(&[0x55; 128]),
    ))
    .unwrap();
    let err = jws.verify_embedded().unwrap_err();
    match &err {
        Error::BadPublicKey(detail) => assert!(
            detail.contains("1024") && detail.contains("2048"),
            "{detail}"
        ),
        other => panic!("expected BadPublicKey, got {other:?}"),
    }
    assert_eq!(err.problem_type(), ProblemType::BadPublicKey);

    let mut huge = vec![0xc3; 1025];
    huge[1024] = 0x01;
    let huge = Jwk::Rsa {
        n: huge,
        e: vec![1, 0, 1],
    };
    let by_kid = json!({"alg": "RS256", "kid": KID, "nonce": "n", "url": URL});
    let jws = Jws::parse(&body(
        &b64(by_kid.to_string().as_bytes()),
        "",
        &b64(&[0x55; 1025]),
    ))
    .unwrap();
    assert!(matches!(jws.verify(&huge), Err(Error::BadPublicKey(d)) if d.contains("8192")));
}

#[test]
fn ecdsa_signatures_must_be_fixed_length() {
    let key = SigningKey::generate(Algorithm::Es256).unwrap();
    let signed = key.sign_acme(URL, Some("n"), Some(KID), None).unwrap();
    let (protected, payload, _) = members(&signed);
    for len in [63, 65, 70, 72] {
        let detail = malformed_detail(&body(&protected, &payload, &b64(&vec![1; len])));
        assert!(detail.contains("64 bytes"), "{detail}");
    }
    let p384 = SigningKey::generate(Algorithm::Es384).unwrap();
    let signed = p384.sign_acme(URL, Some("n"), Some(KID), None).unwrap();
    let (protected, payload, _) = members(&signed);
    assert!(malformed_detail(&body(&protected, &payload, &b64(&[1; 64]))).contains("96 bytes"));
}

#[test]
fn members_must_be_strict_base64url() {
    let key = SigningKey::generate(Algorithm::Es256).unwrap();
    let signed = key
        .sign_acme(URL, Some("n"), Some(KID), Some(&json!({"x": "y"})))
        .unwrap();
    let (protected, payload, signature) = members(&signed);

    let cases = [
        body(&format!("{protected}="), &payload, &signature),
        body(&protected, &format!("{payload}=="), &signature),
        body(&protected, &payload, &format!("+/{}", &signature[2..])),
        body(&protected, &format!(" {payload}"), &signature),
        body(&protected, &payload, &format!("{signature}\n")),
        body(&protected, &payload, ""),
        body("", &payload, &signature),
    ];
    for case in cases {
        let detail = malformed_detail(&case);
        assert!(detail.starts_with("JWS \""), "{detail}");
    }
    let padded = malformed_detail(&body(&protected, &format!("{payload}="), &signature));
    assert!(padded.contains("padding"), "{padded}");
}

#[test]
fn body_shape_rules() {
    let key = SigningKey::generate(Algorithm::Es256).unwrap();
    let signed = key.sign_acme(URL, Some("n"), Some(KID), None).unwrap();
    let (protected, payload, signature) = members(&signed);

    let unprotected = json!({"protected": protected, "payload": payload, "signature": signature, "header": {"kid": KID}});
    let detail = malformed_detail(unprotected.to_string().as_bytes());
    assert!(detail.contains("unprotected header"), "{detail}");

    let general = json!({"payload": payload, "signatures": [{"protected": protected, "signature": signature}]});
    assert!(
        malformed_detail(general.to_string().as_bytes()).contains("general JSON serialization")
    );

    let compact = format!("{protected}.{payload}.{signature}");
    assert!(malformed_detail(compact.as_bytes()).contains("compact serialization"));

    let unknown =
        json!({"protected": protected, "payload": payload, "signature": signature, "extra": 1});
    assert!(malformed_detail(unknown.to_string().as_bytes()).contains("\"extra\""));

    let missing = json!({"protected": protected, "payload": payload});
    assert!(malformed_detail(missing.to_string().as_bytes()).contains("\"signature\""));

    let not_string = json!({"protected": protected, "payload": {}, "signature": signature});
    assert!(malformed_detail(not_string.to_string().as_bytes()).contains("\"payload\""));

    assert!(malformed_detail(b"[1,2]").contains("JSON object"));
    assert!(malformed_detail(b"{not json").contains("not valid JSON"));

    let duplicated = format!(
        r#"{{"protected":"{protected}","payload":"{payload}","payload":"","signature":"{signature}"}}"#
    );
    assert!(malformed_detail(duplicated.as_bytes()).contains("repeats"));
}

#[test]
fn header_requires_exactly_one_of_jwk_and_kid() {
    let key = SigningKey::generate(Algorithm::Es256).unwrap();
    let both = kid_header(json!({"jwk": key.public_jwk().to_json()}));
    let detail = malformed_detail(&key.sign_flattened(both, b"{}").unwrap().into_bytes());
    assert!(detail.contains("both \"jwk\" and \"kid\""), "{detail}");

    let neither = json!({"alg": "ES256", "nonce": "n", "url": URL});
    assert!(malformed_detail(&signed_with_header(neither)).contains("neither"));

    assert!(malformed_detail(&signed_with_header(kid_header(json!({"kid": ""})))).contains("kid"));
    assert!(malformed_detail(&signed_with_header(kid_header(json!({"kid": 7})))).contains("kid"));
}

#[test]
fn header_alg_rules() {
    for (alg, needle) in [
        ("none", "not allowed"),
        ("HS256", "MAC"),
        ("ES512", "not supported"),
        ("RS512", "ES256"),
    ] {
        match Jws::parse(&signed_with_header(kid_header(json!({"alg": alg})))) {
            Err(err @ Error::BadSignatureAlgorithm(_)) => {
                assert!(err.to_string().contains(needle), "{alg}: {err}");
                assert_eq!(err.problem_type(), ProblemType::BadSignatureAlgorithm);
            }
            other => panic!("alg {alg}: {other:?}"),
        }
    }
    // "none" comes with an empty signature; the algorithm is what the client must hear about.
    let none = kid_header(json!({"alg": "none"}));
    let unsigned = body(&b64(none.to_string().as_bytes()), "", "");
    assert!(matches!(
        Jws::parse(&unsigned),
        Err(Error::BadSignatureAlgorithm(_))
    ));

    let mut no_alg = kid_header(json!({}));
    if let Some(h) = no_alg.as_object_mut() {
        h.remove("alg");
    }
    // sign_flattened fills in a missing alg, so build this one by hand.
    let raw = body(&b64(no_alg.to_string().as_bytes()), "", &b64(&[0; 64]));
    assert!(malformed_detail(&raw).contains("no \"alg\""));
    assert!(
        malformed_detail(&signed_with_header(kid_header(json!({"alg": 256})))).contains("\"alg\"")
    );
}

#[test]
fn header_url_nonce_and_extension_rules() {
    let mut no_url = kid_header(json!({}));
    if let Some(h) = no_url.as_object_mut() {
        h.remove("url");
    }
    assert!(malformed_detail(&signed_with_header(no_url)).contains("no \"url\""));
    assert!(
        malformed_detail(&signed_with_header(kid_header(json!({"url": 5})))).contains("\"url\"")
    );
    assert!(
        malformed_detail(&signed_with_header(kid_header(json!({"url": ""})))).contains("\"url\"")
    );
    assert!(
        malformed_detail(&signed_with_header(kid_header(json!({"nonce": 5}))))
            .contains("\"nonce\"")
    );

    let b64_false = malformed_detail(&signed_with_header(kid_header(
        json!({"b64": false, "crit": ["b64"]}),
    )));
    assert!(
        b64_false.contains("crit") || b64_false.contains("b64"),
        "{b64_false}"
    );
    assert!(
        malformed_detail(&signed_with_header(kid_header(json!({"b64": false}))))
            .contains("RFC 7797")
    );
    assert!(
        malformed_detail(&signed_with_header(kid_header(
            json!({"crit": ["exp"], "exp": 1})
        )))
        .contains("crit")
    );

    // The keyChange inner JWS has no nonce, and unknown parameters are ignored.
    let mut inner = kid_header(json!({"typ": "JWT", "x-custom": {"a": 1}}));
    if let Some(h) = inner.as_object_mut() {
        h.remove("nonce");
    }
    let jws = Jws::parse(&signed_with_header(inner)).unwrap();
    assert_eq!(jws.header().nonce, None);
    assert_eq!(jws.header_json()["typ"], "JWT");
}

#[test]
fn header_must_be_a_unique_json_object() {
    let key = SigningKey::generate(Algorithm::Es256).unwrap();
    let repeated = format!(
        r#"{{"alg":"ES256","kid":"{KID}","nonce":"n","url":"{URL}","url":"https://evil.example/"}}"#
    );
    let signed = key.sign_flattened_raw(&repeated, b"{}").unwrap();
    assert!(malformed_detail(signed.as_bytes()).contains("repeats"));

    let signed = key.sign_flattened_raw("[1]", b"{}").unwrap();
    assert!(malformed_detail(signed.as_bytes()).contains("JSON object"));
    let signed = key.sign_flattened_raw("{", b"{}").unwrap();
    assert!(malformed_detail(signed.as_bytes()).contains("not valid JSON"));
}

#[test]
fn embedded_jwk_problems_are_bad_public_key() {
    let mut header = kid_header(json!({}));
    if let Some(h) = header.as_object_mut() {
        h.remove("kid");
        h.insert(
            "jwk".to_owned(),
            json!({"kty": "EC", "crv": "P-256", "x": b64(&[1; 32]), "y": b64(&[1; 31])}),
        );
    }
    let err = Jws::parse(&signed_with_header(header)).unwrap_err();
    assert!(matches!(err, Error::BadPublicKey(_)), "{err:?}");
    assert_eq!(err.problem_type(), ProblemType::BadPublicKey);
}

#[test]
fn error_problem_mapping() {
    assert_eq!(Error::BadSignature.problem_type(), ProblemType::Malformed);
    assert_eq!(Error::BadSignature.to_string(), "JWS signature is invalid");
    assert_eq!(
        Error::Malformed("x".to_owned()).problem_type(),
        ProblemType::Malformed
    );
    let problem = acme_core::problem::Problem::from(Error::BadPublicKey("weak".to_owned()));
    assert_eq!(problem.kind, ProblemType::BadPublicKey);
    assert_eq!(problem.detail, "weak");
    assert_eq!(EcCurve::P384.algorithm(), Algorithm::Es384);
}
