//! The JWS parser and verifier (`acme_jose::Jws`), fed raw request bodies.
//!
//! Besides "no panic", a body that parses must survive a round trip through its own parts, and a
//! body whose embedded key verifies it must stop verifying when one signature bit flips: a
//! verifier that accepts that would accept forgeries.
#![no_main]

use acme_jose::{Jwk, Jws, KeyRef};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fuzz_target!(|body: &[u8]| {
    let Ok(jws) = Jws::parse(body) else {
        return;
    };
    let _ = jws.payload_json::<Value>();
    assert_eq!(jws.is_post_as_get(), jws.payload_b64().is_empty());
    assert!(
        !jws.signature().is_empty(),
        "an empty signature was accepted"
    );

    // The parts rebuild a body that parses to the same request.
    let rebuilt = json!({
        "protected": jws.protected_b64(),
        "payload": jws.payload_b64(),
        "signature": URL_SAFE_NO_PAD.encode(jws.signature()),
    });
    let again = Jws::parse(rebuilt.to_string().as_bytes()).expect("a rebuilt JWS parses");
    assert_eq!(again.header(), jws.header());
    assert_eq!(again.payload(), jws.payload());
    assert_eq!(again.signature(), jws.signature());

    if let KeyRef::Jwk(jwk) = &jws.header().key {
        // The key's JSON form parses back to the same key and thumbprint.
        let back = Jwk::from_json(&jwk.to_json()).expect("a parsed JWK re-parses");
        assert_eq!(&back, jwk);
        assert_eq!(back.thumbprint(), jwk.thumbprint());
    }

    if jws.verify_embedded().is_ok() {
        let mut tampered = jws.signature().to_vec();
        let bit = body.len() % (tampered.len() * 8);
        tampered[bit / 8] ^= 1 << (bit % 8);
        let forged = json!({
            "protected": jws.protected_b64(),
            "payload": jws.payload_b64(),
            "signature": URL_SAFE_NO_PAD.encode(&tampered),
        });
        let forged = Jws::parse(forged.to_string().as_bytes()).expect("same shape parses");
        assert!(
            forged.verify_embedded().is_err(),
            "a signature with a flipped bit verified"
        );
    }
});
