//! The signature check itself, one aws-lc-rs primitive per algorithm.

use aws_lc_rs::signature::{
    ECDSA_P256_SHA256_FIXED, ECDSA_P384_SHA384_FIXED, ED25519, RSA_PKCS1_2048_8192_SHA256,
    RSA_PSS_2048_8192_SHA256, RsaPublicKeyComponents, UnparsedPublicKey,
};

use crate::algorithm::Algorithm;
use crate::error::Error;
use crate::jwk::Jwk;

/// Verifies `signature` over `message`. The caller has already checked that `alg` fits `key`;
/// a mismatch that slips through still fails closed as a bad signature.
pub(crate) fn signature(
    alg: Algorithm,
    key: &Jwk,
    message: &[u8],
    signature: &[u8],
) -> Result<(), Error> {
    let outcome = match (alg, key) {
        (Algorithm::Rs256, Jwk::Rsa { n, e }) => RsaPublicKeyComponents {
            n: n.as_slice(),
            e: e.as_slice(),
        }
        .verify(&RSA_PKCS1_2048_8192_SHA256, message, signature),
        (Algorithm::Ps256, Jwk::Rsa { n, e }) => RsaPublicKeyComponents {
            n: n.as_slice(),
            e: e.as_slice(),
        }
        .verify(&RSA_PSS_2048_8192_SHA256, message, signature),
        (Algorithm::Es256 | Algorithm::Es384, Jwk::Ec { curve, .. })
            if curve.algorithm() == alg =>
        {
            let verification = match alg {
                Algorithm::Es384 => &ECDSA_P384_SHA384_FIXED,
                _ => &ECDSA_P256_SHA256_FIXED,
            };
            match key.ec_uncompressed_point() {
                Some(point) => {
                    UnparsedPublicKey::new(verification, point).verify(message, signature)
                }
                None => return Err(Error::BadSignature),
            }
        }
        (Algorithm::EdDsa, Jwk::Ed25519 { x }) => {
            UnparsedPublicKey::new(&ED25519, x).verify(message, signature)
        }
        _ => return Err(Error::BadSignature),
    };
    outcome.map_err(|_| Error::BadSignature)
}
