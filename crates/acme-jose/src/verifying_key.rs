//! An account key prepared once for the many signatures it will verify.
//!
//! Every request of an account is signed by the same key, and turning the JWK into the crypto
//! library's key (decoding the point, checking that it is on the curve, converting it to the
//! library's form) was done anew for each one: twice per request, once when the stored JWK was
//! read and once inside the verification. A `VerifyingKey` holds that work's result, so a caller
//! that keeps one per account (the HTTP layer does) pays for it once.

use aws_lc_rs::signature::{
    ECDSA_P256_SHA256_FIXED, ECDSA_P384_SHA384_FIXED, ED25519, ParsedPublicKey,
};

use crate::algorithm::Algorithm;
use crate::error::Error;
use crate::jwk::EcCurve;
use crate::jwk::Jwk;

/// A public JWK together with the crypto library's parsed form of it.
#[derive(Debug)]
pub struct VerifyingKey {
    jwk: Jwk,
    /// `None` for RSA, which aws-lc-rs verifies from the modulus and exponent directly.
    parsed: Option<ParsedPublicKey>,
}

impl VerifyingKey {
    /// Parses `jwk`'s key for verification. Fails when the point is not on its curve, which
    /// [`Jwk::from_json`] already refuses, so a key that parsed as a JWK fails here only if it
    /// was built by hand.
    pub fn new(jwk: Jwk) -> Result<Self, Error> {
        let parsed = match &jwk {
            Jwk::Ec { curve, .. } => {
                let algorithm = match curve {
                    EcCurve::P256 => &ECDSA_P256_SHA256_FIXED,
                    EcCurve::P384 => &ECDSA_P384_SHA384_FIXED,
                };
                let point = jwk.ec_uncompressed_point().unwrap_or_default();
                Some(ParsedPublicKey::new(algorithm, point).map_err(|_| {
                    Error::bad_key(format!("jwk {} point is not on the curve", curve.as_str()))
                })?)
            }
            Jwk::Ed25519 { x } => Some(
                ParsedPublicKey::new(&ED25519, x)
                    .map_err(|_| Error::bad_key("jwk Ed25519 key is not a valid point"))?,
            ),
            Jwk::Rsa { .. } => None,
        };
        Ok(Self { jwk, parsed })
    }

    /// The key as a JWK.
    pub fn jwk(&self) -> &Jwk {
        &self.jwk
    }

    /// Verifies `signature` over `message` with algorithm `alg`, which the caller has checked
    /// fits the key.
    pub(crate) fn verify(
        &self,
        alg: Algorithm,
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), Error> {
        let fits = match &self.jwk {
            Jwk::Ec { curve, .. } => curve.algorithm() == alg,
            Jwk::Ed25519 { .. } => alg == Algorithm::EdDsa,
            Jwk::Rsa { .. } => false,
        };
        match &self.parsed {
            Some(parsed) if fits => parsed
                .verify_sig(message, signature)
                .map_err(|_| Error::BadSignature),
            // RSA, or an algorithm that does not fit (which fails closed there).
            _ => crate::verify::signature(alg, &self.jwk, message, signature),
        }
    }
}
