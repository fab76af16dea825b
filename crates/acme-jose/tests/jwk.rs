//! JWK parsing, thumbprints and SubjectPublicKeyInfo conversion.

use acme_jose::sign::SigningKey;
use acme_jose::{Algorithm, EcCurve, Error, Jwk};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde_json::{Value, json};

const RFC7638_N: &str = "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw";

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn assert_bad_key(value: Value, needle: &str) {
    match Jwk::from_json(&value) {
        Err(Error::BadPublicKey(detail)) => {
            assert!(detail.contains(needle), "{detail:?} lacks {needle:?}")
        }
        other => panic!("expected BadPublicKey for {value}, got {other:?}"),
    }
}

fn p256_jwk_json() -> Value {
    SigningKey::generate(Algorithm::Es256)
        .expect("ES256 key generation")
        .public_jwk()
        .to_json()
}

#[test]
fn rfc7638_thumbprint_vector() {
    let jwk = Jwk::from_json(&json!({
        "kty": "RSA",
        "n": RFC7638_N,
        "e": "AQAB",
        "alg": "RS256",
        "kid": "2011-04-29",
    }))
    .unwrap();
    assert_eq!(
        jwk.thumbprint(),
        "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"
    );
    assert_eq!(jwk.rsa_bits(), Some(2048));
    assert_eq!(jwk.describe(), "RSA 2048");
    // Optional members are dropped on output.
    assert_eq!(
        jwk.to_json(),
        json!({"kty": "RSA", "n": RFC7638_N, "e": "AQAB"})
    );
}

#[test]
fn to_json_round_trips_and_thumbprints_are_stable() {
    for alg in Algorithm::ALL {
        let jwk = SigningKey::generate(alg).unwrap().public_jwk();
        let json = jwk.to_json();
        let again = Jwk::from_json(&json).unwrap();
        assert_eq!(again, jwk);
        assert_eq!(again.thumbprint(), jwk.thumbprint());
        assert_eq!(jwk.thumbprint().len(), 43);
        assert!(jwk.supports(alg));
    }
}

#[test]
fn thumbprint_canonical_form_for_ec_and_okp() {
    let jwk = Jwk::Ec {
        curve: EcCurve::P256,
        x: vec![1; 32],
        y: vec![2; 32],
    };
    let canonical = format!(
        r#"{{"crv":"P-256","kty":"EC","x":"{}","y":"{}"}}"#,
        b64(&[1; 32]),
        b64(&[2; 32])
    );
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, canonical.as_bytes());
    assert_eq!(jwk.thumbprint(), b64(digest.as_ref()));

    let jwk = Jwk::Ed25519 { x: vec![7; 32] };
    let canonical = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{}"}}"#, b64(&[7; 32]));
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, canonical.as_bytes());
    assert_eq!(jwk.thumbprint(), b64(digest.as_ref()));
}

#[test]
fn describe_names_each_key_type() {
    let p256 = SigningKey::generate(Algorithm::Es256).unwrap().public_jwk();
    let p384 = SigningKey::generate(Algorithm::Es384).unwrap().public_jwk();
    let ed = SigningKey::generate(Algorithm::EdDsa).unwrap().public_jwk();
    assert_eq!(p256.describe(), "ECDSA P-256");
    assert_eq!(p384.describe(), "ECDSA P-384");
    assert_eq!(ed.describe(), "Ed25519");
    assert_eq!(p256.rsa_bits(), None);
    assert_eq!(
        format!("{p256:?}"),
        format!("Jwk(ECDSA P-256, {})", p256.thumbprint())
    );
}

#[test]
fn refuses_private_members() {
    for member in ["d", "p", "q", "dp", "dq", "qi", "oth", "k"] {
        let mut jwk = p256_jwk_json();
        jwk[member] = json!("AAAA");
        assert_bad_key(jwk, &format!("\"{member}\""));
    }
}

#[test]
fn refuses_wrong_coordinate_lengths() {
    let mut jwk = p256_jwk_json();
    jwk["x"] = json!(b64(&[1; 31]));
    assert_bad_key(jwk, "exactly 32");

    let mut jwk = SigningKey::generate(Algorithm::Es384)
        .unwrap()
        .public_jwk()
        .to_json();
    jwk["y"] = json!(b64(&[1; 32]));
    assert_bad_key(jwk, "exactly 48");

    // A P-256 key labelled P-384 has the wrong coordinate size.
    let mut jwk = p256_jwk_json();
    jwk["crv"] = json!("P-384");
    assert_bad_key(jwk, "exactly 48");

    assert_bad_key(
        json!({"kty": "OKP", "crv": "Ed25519", "x": b64(&[1; 31])}),
        "exactly 32",
    );
}

#[test]
fn refuses_points_off_the_curve() {
    let mut jwk = p256_jwk_json();
    jwk["y"] = json!(b64(&[0x42; 32]));
    assert_bad_key(jwk, "not on the curve");
}

#[test]
fn refuses_unsupported_types_and_curves() {
    assert_bad_key(json!({"kty": "oct", "k": "AAAA"}), "\"k\"");
    assert_bad_key(json!({"kty": "oct"}), "symmetric");
    assert_bad_key(json!({"kty": "DSA"}), "not supported");
    assert_bad_key(
        json!({"kty": "EC", "crv": "P-521", "x": "AA", "y": "AA"}),
        "P-521",
    );
    assert_bad_key(
        json!({"kty": "EC", "crv": "secp256k1", "x": "AA", "y": "AA"}),
        "secp256k1",
    );
    assert_bad_key(json!({"kty": "OKP", "crv": "Ed448", "x": "AA"}), "Ed448");
    assert_bad_key(
        json!({"kty": "OKP", "crv": "X25519", "x": b64(&[1; 32])}),
        "X25519",
    );
    assert_bad_key(json!({"crv": "P-256"}), "\"kty\"");
    assert_bad_key(json!({"kty": 1}), "must be a string");
    assert_bad_key(json!("RSA"), "JSON object");
    assert_bad_key(
        json!({"kty": "EC", "crv": "P-256", "x": b64(&[1; 32])}),
        "\"y\"",
    );
}

#[test]
fn refuses_bad_rsa_integers() {
    let n = URL_SAFE_NO_PAD.decode(RFC7638_N).unwrap();
    let mut padded = vec![0];
    padded.extend_from_slice(&n);
    assert_bad_key(
        json!({"kty": "RSA", "n": b64(&padded), "e": "AQAB"}),
        "leading zero",
    );
    assert_bad_key(
        json!({"kty": "RSA", "n": RFC7638_N, "e": "AAEAAQ"}),
        "leading zero",
    );
    assert_bad_key(json!({"kty": "RSA", "n": RFC7638_N, "e": "AQ"}), "e = 1");
    assert_bad_key(json!({"kty": "RSA", "n": RFC7638_N, "e": "AQAA"}), "odd");
    assert_bad_key(
        json!({"kty": "RSA", "n": RFC7638_N, "e": b64(&[1; 9])}),
        "32 bits",
    );
    assert_bad_key(json!({"kty": "RSA", "n": "", "e": "AQAB"}), "empty");
    let mut even = n.clone();
    if let Some(last) = even.last_mut() {
        *last &= 0xfe;
    }
    assert_bad_key(json!({"kty": "RSA", "n": b64(&even), "e": "AQAB"}), "even");
}

#[test]
fn refuses_non_canonical_base64_in_members() {
    let jwk = p256_jwk_json();
    let x = jwk["x"].as_str().unwrap().to_owned();
    let mut padded = jwk.clone();
    padded["x"] = json!(format!("{x}="));
    assert_bad_key(padded, "padding");
    let mut std_alphabet = jwk;
    std_alphabet["x"] = json!(format!("+/{}", &x[2..]));
    assert_bad_key(std_alphabet, "URL-safe");
}

#[test]
fn spki_matches_jwk_for_every_key_type() {
    for alg in [
        Algorithm::Rs256,
        Algorithm::Es256,
        Algorithm::Es384,
        Algorithm::EdDsa,
    ] {
        let key = SigningKey::generate(alg).unwrap();
        let spki = key.public_key_spki_der().unwrap();
        let from_spki = Jwk::from_spki_der(&spki).unwrap();
        assert_eq!(from_spki, key.public_jwk(), "{alg}");
        assert_eq!(
            from_spki.thumbprint(),
            key.public_jwk().thumbprint(),
            "{alg}"
        );
    }
}

#[test]
fn spki_rfc8410_ed25519_vector() {
    let der = STANDARD
        .decode("MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=")
        .unwrap();
    let jwk = Jwk::from_spki_der(&der).unwrap();
    let expected: Vec<u8> = (0..32)
        .map(|i| {
            u8::from_str_radix(
                &"19bf44096984cdfe8541bac167dc3b96c85086aa30b6b6cb0c5c38ad703166e1"
                    [2 * i..2 * i + 2],
                16,
            )
            .unwrap()
        })
        .collect();
    assert_eq!(jwk, Jwk::Ed25519 { x: expected });
}

#[test]
fn spki_refusals() {
    let key = SigningKey::generate(Algorithm::Es256).unwrap();
    let spki = key.public_key_spki_der().unwrap();

    let mut trailing = spki.clone();
    trailing.push(0);
    assert!(matches!(
        Jwk::from_spki_der(&trailing),
        Err(Error::BadPublicKey(_))
    ));
    assert!(matches!(
        Jwk::from_spki_der(&spki[..spki.len() - 1]),
        Err(Error::BadPublicKey(_))
    ));
    assert!(matches!(
        Jwk::from_spki_der(b""),
        Err(Error::BadPublicKey(_))
    ));

    // Ed448 (RFC 8410 example): a well-formed SPKI for an unsupported algorithm.
    let ed448 = STANDARD
        .decode("MEMwBQYDK2VxAzoAX9dEm1m0Yf0s54fsYWrUah2hNCSFpw4fig6nXYDpZ3jt8SR2m0bHBhvWeD3x5Q9s0foavq/oJWGA")
        .unwrap();
    let err = Jwk::from_spki_der(&ed448).unwrap_err();
    assert!(err.to_string().contains("Ed448"), "{err}");

    // The same P-256 point in compressed form.
    let point_start = spki.len() - 65;
    assert_eq!(spki[point_start], 0x04);
    let mut compressed = spki[..point_start].to_vec();
    let y_odd = spki[spki.len() - 1] & 1;
    compressed.push(0x02 | y_odd);
    compressed.extend_from_slice(&spki[point_start + 1..point_start + 33]);
    // Fix the lengths: outer SEQUENCE and BIT STRING both shrink by 32 bytes.
    compressed[1] -= 32;
    let bit_string_len_at = point_start - 2;
    compressed[bit_string_len_at] -= 32;
    let err = Jwk::from_spki_der(&compressed).unwrap_err();
    assert!(err.to_string().contains("compressed"), "{err}");
}

#[test]
fn algorithm_names_round_trip() {
    for alg in Algorithm::ALL {
        assert_eq!(alg.as_str().parse::<Algorithm>().unwrap(), alg);
        assert_eq!(alg.to_string(), alg.as_str());
    }
    for bad in ["none", "HS256", "ES512", "RS384", "es256", ""] {
        assert!(
            matches!(
                bad.parse::<Algorithm>(),
                Err(Error::BadSignatureAlgorithm(_))
            ),
            "{bad}"
        );
    }
}
