//! A key parsed once. That it verifies exactly as the JWK it came from is checked alongside
//! `Jws::verify` in every signature test of `jws.rs`.

use acme_core::problem::ProblemType;
use acme_jose::sign::SigningKey;
use acme_jose::{Algorithm, EcCurve, Jwk, Jws, VerifyingKey};

#[test]
fn one_parsed_key_verifies_every_request_of_its_account() {
    for alg in Algorithm::ALL {
        let key = SigningKey::generate(alg).unwrap();
        let parsed = VerifyingKey::new(key.public_jwk()).unwrap();
        assert_eq!(parsed.jwk(), &key.public_jwk());
        for nonce in ["n1", "n2", "n3"] {
            let signed = key
                .sign_acme(
                    "https://ca.example/acme/order/1",
                    Some(nonce),
                    Some("kid"),
                    None,
                )
                .unwrap();
            let jws = Jws::parse(signed.as_bytes()).unwrap();
            assert_eq!(jws.verify_with(&parsed), Ok(()), "{alg} {nonce}");
        }
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
