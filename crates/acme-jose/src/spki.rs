//! SubjectPublicKeyInfo (RFC 5280 §4.1.2.7) to JWK, so CSR and certificate keys can be compared
//! with account keys by thumbprint.

use pkcs1::RsaPublicKeyRef;
use spki::SubjectPublicKeyInfoRef;
use spki::der::Decode;
use spki::der::asn1::ObjectIdentifier;

use crate::error::Error;
use crate::jwk::{EcCurve, Jwk};

// The algorithm and curve OIDs, as the content bytes of their DER encoding: what the reader
// matches on and what `key_hash` writes.

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

fn der_error(e: impl std::fmt::Display) -> Error {
    Error::bad_key(format!(
        "public key is not valid SubjectPublicKeyInfo DER: {e}"
    ))
}

impl Jwk {
    /// Converts a DER SubjectPublicKeyInfo holding an RSA, P-256, P-384 or Ed25519 key.
    ///
    /// The DER is read strictly (the `der` crate refuses BER forms, non-minimal lengths and
    /// integers, and trailing bytes). The result goes through the same checks as
    /// [`Jwk::from_json`], so a key accepted here has the same thumbprint as the client's JWK for
    /// it.
    pub fn from_spki_der(der: &[u8]) -> Result<Jwk, Error> {
        let spki = SubjectPublicKeyInfoRef::from_der(der).map_err(der_error)?;
        let key = spki
            .subject_public_key
            .as_bytes()
            .ok_or_else(|| der_error("BIT STRING with unused bits"))?;
        let parameters = spki.algorithm.parameters;
        match spki.algorithm.oid.as_bytes() {
            OID_RSA_ENCRYPTION => {
                // RFC 3279 requires NULL parameters; some encoders omit them, which is harmless.
                if parameters.is_some_and(|p| !p.is_null()) {
                    return Err(der_error("rsaEncryption parameters other than NULL"));
                }
                rsa_public_key(key)
            }
            OID_EC_PUBLIC_KEY => {
                let curve = parameters
                    .ok_or_else(|| der_error("id-ecPublicKey without a named curve"))?
                    .decode_as::<ObjectIdentifier>()
                    .map_err(der_error)?;
                let curve = match curve.as_bytes() {
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
                ec_point(curve, key)
            }
            OID_ED25519 => {
                if parameters.is_some() {
                    return Err(Error::bad_key(
                        "Ed25519 key must have no algorithm parameters",
                    ));
                }
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

/// Reads RSAPublicKey (RFC 8017 §A.1.1): SEQUENCE { modulus INTEGER, publicExponent INTEGER },
/// both positive.
fn rsa_public_key(key: &[u8]) -> Result<Jwk, Error> {
    let key = RsaPublicKeyRef::from_der(key).map_err(der_error)?;
    let n = positive(key.modulus.as_bytes())?;
    let e = positive(key.public_exponent.as_bytes())?;
    Jwk::rsa_from_parts(n.to_vec(), e.to_vec())
}

/// The magnitude of a non-negative INTEGER (the `der` crate has refused negative ones and
/// stripped the leading zeros), refused when it is zero.
fn positive(magnitude: &[u8]) -> Result<&[u8], Error> {
    if magnitude.iter().all(|b| *b == 0) {
        return Err(der_error("zero where a positive integer is required"));
    }
    Ok(magnitude)
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

#[cfg(test)]
mod tests {
    use crate::Algorithm;
    use crate::jwk::Jwk;
    use crate::sign::SigningKey;

    fn refused(der: &[u8]) -> String {
        Jwk::from_spki_der(der).unwrap_err().to_string()
    }

    #[test]
    fn keys_read_back_as_the_libraries_write_them() {
        for alg in [
            Algorithm::Rs256,
            Algorithm::Es256,
            Algorithm::Es384,
            Algorithm::EdDsa,
        ] {
            let key = SigningKey::generate(alg).unwrap();
            let der = key.public_key_spki_der().unwrap();
            let jwk = Jwk::from_spki_der(&der).unwrap();
            assert_eq!(jwk, key.public_jwk(), "{alg}");
            assert_eq!(jwk.to_spki_der(), der, "{alg}");
        }
    }

    /// What the hand-written reader refused, the `der` crate refuses too: BER forms, truncation,
    /// trailing bytes, negative or zero or non-minimal integers, unused bits.
    #[test]
    fn refuses_non_der_and_truncated() {
        let key = SigningKey::generate(Algorithm::Es256).unwrap();
        let der = key.public_key_spki_der().unwrap();
        assert!(der[1] < 0x80, "a P-256 SPKI has a short-form length");

        let mut trailing = der.clone();
        trailing.push(0);
        assert!(refused(&trailing).contains("SubjectPublicKeyInfo DER"));
        assert!(Jwk::from_spki_der(&der[..der.len() - 1]).is_err());
        assert!(Jwk::from_spki_der(&[]).is_err());
        // A long-form length where the short form fits.
        let mut long = vec![der[0], 0x81];
        long.extend_from_slice(&der[1..]);
        assert!(Jwk::from_spki_der(&long).is_err());
        // Indefinite length (BER).
        let mut indefinite = vec![der[0], 0x80];
        indefinite.extend_from_slice(&der[2..]);
        indefinite.extend([0, 0]);
        assert!(Jwk::from_spki_der(&indefinite).is_err());
        // One unused bit in the key's BIT STRING: 03 42 00 04... becomes 03 42 01 04...
        let bits_at = der
            .windows(3)
            .position(|w| w == [0x03, 0x42, 0x00])
            .unwrap();
        let mut unused = der.clone();
        unused[bits_at + 2] = 1;
        assert!(
            refused(&unused).contains("unused bits"),
            "{}",
            refused(&unused)
        );
    }

    /// RSAPublicKey with the given modulus and exponent contents, wrapped in an SPKI.
    fn rsa_spki(n: &[u8], e: &[u8]) -> Vec<u8> {
        let tlv = |tag: u8, content: &[u8]| {
            let mut out = vec![tag];
            if content.len() < 0x80 {
                out.push(content.len() as u8);
            } else {
                out.extend([0x82, (content.len() >> 8) as u8, content.len() as u8]);
            }
            out.extend_from_slice(content);
            out
        };
        let mut integers = tlv(0x02, n);
        integers.extend(tlv(0x02, e));
        let mut bits = vec![0];
        bits.extend(tlv(0x30, &integers));
        let mut algorithm = tlv(0x06, super::OID_RSA_ENCRYPTION);
        algorithm.extend([0x05, 0x00]);
        let mut spki = tlv(0x30, &algorithm);
        spki.extend(tlv(0x03, &bits));
        tlv(0x30, &spki)
    }

    #[test]
    fn rsa_integers_must_be_positive_and_minimal() {
        let key = SigningKey::generate(Algorithm::Rs256).unwrap();
        let Jwk::Rsa { n, e } = key.public_jwk() else {
            panic!("an RSA key")
        };
        let mut minimal_n = vec![0];
        minimal_n.extend(&n);
        assert_eq!(
            Jwk::from_spki_der(&rsa_spki(&minimal_n, &e)).unwrap(),
            key.public_jwk()
        );
        // The modulus's top bit is set: without the leading zero it is negative.
        assert!(Jwk::from_spki_der(&rsa_spki(&n, &e)).is_err());
        // A leading zero the value does not need.
        let mut padded_e = vec![0];
        padded_e.extend(&e);
        assert!(Jwk::from_spki_der(&rsa_spki(&minimal_n, &padded_e)).is_err());
        assert!(refused(&rsa_spki(&minimal_n, &[0])).contains("zero"));
        assert!(Jwk::from_spki_der(&rsa_spki(&minimal_n, &[])).is_err());
    }
}
