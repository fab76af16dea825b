//! A key parsed once verifies exactly as the JWK it came from.

use acme_core::problem::ProblemType;
use acme_jose::sign::SigningKey;
use acme_jose::{Algorithm, EcCurve, Error, Jwk, Jws, VerifyingKey};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

const URL: &str = "https://ca.example/acme/new-order";
const KID: &str = "https://ca.example/acme/acct/1";

fn members(body: &str) -> (String, String, String) {
    let v: Value = serde_json::from_str(body).expect("signed body is JSON");
    let get = |name: &str| v[name].as_str().expect("member is a string").to_owned();
    (get("protected"), get("payload"), get("signature"))
}

fn body(protected: &str, payload: &str, signature: &str) -> Vec<u8> {
    json!({"protected": protected, "payload": payload, "signature": signature})
        .to_string()
        .into_bytes()
}

/// Both ways of verifying, which must agree.
fn both(jws: &Jws, jwk: &Jwk) -> (Result<(), Error>, Result<(), Error>) {
    let parsed = VerifyingKey::new(jwk.clone()).expect("a generated key parses");
    (jws.verify(jwk), jws.verify_with(&parsed))
}

#[test]
fn accepts_what_the_jwk_accepts_and_refuses_what_it_refuses() {
    for alg in Algorithm::ALL {
        let key = SigningKey::generate(alg).unwrap();
        let jwk = key.public_jwk();
        let signed = key
            .sign_acme(URL, Some("n"), Some(KID), Some(&json!({"a": 1})))
            .unwrap();
        let jws = Jws::parse(signed.as_bytes()).unwrap();
        let parsed = VerifyingKey::new(jwk.clone()).unwrap();
        assert_eq!(parsed.jwk(), &jwk);
        assert_eq!(jws.verify_with(&parsed), Ok(()), "{alg} genuine");
        // The same parsed key verifies any number of requests.
        let second = key.sign_acme(URL, Some("m"), Some(KID), None).unwrap();
        assert_eq!(
            Jws::parse(second.as_bytes()).unwrap().verify_with(&parsed),
            Ok(()),
            "{alg} second request"
        );

        let (protected, payload, signature) = members(&signed);
        let other_payload = URL_SAFE_NO_PAD.encode(br#"{"a":2}"#);
        let tampered = Jws::parse(&body(&protected, &other_payload, &signature)).unwrap();
        assert_eq!(
            both(&tampered, &jwk),
            (Err(Error::BadSignature), Err(Error::BadSignature)),
            "{alg} payload"
        );
        let mut sig = URL_SAFE_NO_PAD.decode(&signature).unwrap();
        sig[5] ^= 0x01;
        let tampered =
            Jws::parse(&body(&protected, &payload, &URL_SAFE_NO_PAD.encode(&sig))).unwrap();
        assert_eq!(
            both(&tampered, &jwk),
            (Err(Error::BadSignature), Err(Error::BadSignature)),
            "{alg} signature"
        );

        let stranger = SigningKey::generate(alg).unwrap().public_jwk();
        assert_eq!(
            both(&jws, &stranger),
            (Err(Error::BadSignature), Err(Error::BadSignature)),
            "{alg} other key"
        );
    }
}

#[test]
fn a_key_of_another_algorithm_is_bad_signature_algorithm() {
    let es256 = SigningKey::generate(Algorithm::Es256).unwrap();
    let signed = es256.sign_acme(URL, Some("n"), Some(KID), None).unwrap();
    let jws = Jws::parse(signed.as_bytes()).unwrap();
    for other in [Algorithm::Rs256, Algorithm::Es384, Algorithm::EdDsa] {
        let parsed = VerifyingKey::new(SigningKey::generate(other).unwrap().public_jwk()).unwrap();
        let err = jws.verify_with(&parsed).unwrap_err();
        assert_eq!(
            err.problem_type(),
            ProblemType::BadSignatureAlgorithm,
            "{other}: {err:?}"
        );
    }
}

#[test]
fn a_point_off_the_curve_is_refused_when_parsed() {
    let off_curve = Jwk::Ec {
        curve: EcCurve::P256,
        x: vec![1; 32],
        y: vec![2; 32],
    };
    let err = VerifyingKey::new(off_curve).unwrap_err();
    assert_eq!(err.problem_type(), ProblemType::BadPublicKey, "{err:?}");
}
