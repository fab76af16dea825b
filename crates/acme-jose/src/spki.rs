//! SubjectPublicKeyInfo (RFC 5280 §4.1.2.7) to JWK, so CSR and certificate keys can be compared
//! with account keys by thumbprint.

use crate::der::{DerError, Reader, TAG_NULL, TAG_OID, TAG_SEQUENCE};
use crate::error::Error;
use crate::jwk::{EcCurve, Jwk};

/// rsaEncryption, 1.2.840.113549.1.1.1.
pub(crate) const OID_RSA_ENCRYPTION: &[u8] =
    &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
/// id-RSASSA-PSS, 1.2.840.113549.1.1.10: named only to give a precise refusal.
const OID_RSASSA_PSS: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a];
/// id-ecPublicKey, 1.2.840.10045.2.1.
pub(crate) const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
/// secp256r1, 1.2.840.10045.3.1.7.
pub(crate) const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
/// secp384r1, 1.3.132.0.34.
pub(crate) const OID_P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
/// secp521r1, 1.3.132.0.35: named only to give a precise refusal.
const OID_P521: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x23];
/// id-Ed25519, 1.3.101.112.
pub(crate) const OID_ED25519: &[u8] = &[0x2b, 0x65, 0x70];
/// id-Ed448, 1.3.101.113: named only to give a precise refusal.
const OID_ED448: &[u8] = &[0x2b, 0x65, 0x71];

fn der_error(e: DerError) -> Error {
    Error::bad_key(format!(
        "public key is not valid SubjectPublicKeyInfo DER: {}",
        e.0
    ))
}

impl Jwk {
    /// Converts a DER SubjectPublicKeyInfo holding an RSA, P-256, P-384 or Ed25519 key.
    ///
    /// The result goes through the same checks as [`Jwk::from_json`], so a key accepted here has
    /// the same thumbprint as the client's JWK for it.
    pub fn from_spki_der(der: &[u8]) -> Result<Jwk, Error> {
        let mut outer = Reader::new(der);
        let spki = outer.read(TAG_SEQUENCE).map_err(der_error)?;
        outer.finish().map_err(der_error)?;

        let mut spki = Reader::new(spki);
        let algorithm = spki.read(TAG_SEQUENCE).map_err(der_error)?;
        let key = spki.read_bit_string().map_err(der_error)?;
        spki.finish().map_err(der_error)?;

        let mut algorithm = Reader::new(algorithm);
        let oid = algorithm.read(TAG_OID).map_err(der_error)?;
        match oid {
            OID_RSA_ENCRYPTION => {
                // RFC 3279 requires NULL parameters; some encoders omit them, which is harmless.
                if algorithm.peek_tag() == Some(TAG_NULL) {
                    algorithm.read(TAG_NULL).map_err(der_error)?;
                }
                algorithm.finish().map_err(der_error)?;
                rsa_public_key(key)
            }
            OID_EC_PUBLIC_KEY => {
                let curve = match algorithm.read(TAG_OID).map_err(der_error)? {
                    OID_P256 => EcCurve::P256,
                    OID_P384 => EcCurve::P384,
                    OID_P521 => {
                        return Err(Error::bad_key(
                            "ECDSA P-521 keys are not supported; use P-256 or P-384",
                        ));
                    }
                    _ => {
                        return Err(Error::bad_key(
                            "ECDSA key on an unsupported curve; use P-256 or P-384",
                        ));
                    }
                };
                algorithm.finish().map_err(der_error)?;
                ec_point(curve, key)
            }
            OID_ED25519 => {
                algorithm
                    .finish()
                    .map_err(|_| Error::bad_key("Ed25519 key must have no algorithm parameters"))?;
                Jwk::ed25519_from_parts(key.to_vec())
            }
            OID_RSASSA_PSS => Err(Error::bad_key(
                "RSASSA-PSS-restricted keys are not supported; use an rsaEncryption RSA key",
            )),
            OID_ED448 => Err(Error::bad_key("Ed448 keys are not supported; use Ed25519")),
            _ => Err(Error::bad_key(
                "unsupported public key algorithm; use RSA, ECDSA P-256/P-384 or Ed25519",
            )),
        }
    }
}

/// Reads RSAPublicKey (RFC 8017 §A.1.1): SEQUENCE { modulus INTEGER, publicExponent INTEGER }.
fn rsa_public_key(key: &[u8]) -> Result<Jwk, Error> {
    let mut outer = Reader::new(key);
    let sequence = outer.read(TAG_SEQUENCE).map_err(der_error)?;
    outer.finish().map_err(der_error)?;
    let mut fields = Reader::new(sequence);
    let n = fields.read_unsigned_integer().map_err(der_error)?;
    let e = fields.read_unsigned_integer().map_err(der_error)?;
    fields.finish().map_err(der_error)?;
    Jwk::rsa_from_parts(n.to_vec(), e.to_vec())
}

fn ec_point(curve: EcCurve, point: &[u8]) -> Result<Jwk, Error> {
    let len = curve.coordinate_len();
    match point.split_first() {
        Some((0x04, coordinates)) if coordinates.len() == 2 * len => {
            let (x, y) = coordinates.split_at(len);
            Jwk::ec_from_parts(curve, x.to_vec(), y.to_vec())
        }
        Some((0x02 | 0x03, _)) => Err(Error::bad_key(format!(
            "{} key uses a compressed point; use the uncompressed form",
            curve.as_str()
        ))),
        _ => Err(Error::bad_key(format!(
            "{} public key point has the wrong encoding or length",
            curve.as_str()
        ))),
    }
}
