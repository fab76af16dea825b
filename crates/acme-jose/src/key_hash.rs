//! The name of a public key in the operator's blocklist: the SHA-256 of its
//! SubjectPublicKeyInfo DER (RFC 5280 §4.1.2.7), the hash Boulder's blocked-keys table and
//! `openssl pkey -pubin -outform DER | sha256sum` give.
//!
//! The DER is re-encoded from the key itself, in its one DER form (rsaEncryption with NULL
//! parameters, the uncompressed EC point), so an account's JWK, a CSR whose encoder left out
//! the NULL, and the operator's PEM file of the same key all have one hash.

use std::fmt;
use std::str::FromStr;

use aws_lc_rs::digest;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use base64::engine::general_purpose::URL_SAFE;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use pkcs1::RsaPublicKeyRef;
use spki::AlgorithmIdentifierRef;
use spki::SubjectPublicKeyInfoRef;
use spki::der::Encode;
use spki::der::asn1::AnyRef;
use spki::der::asn1::BitStringRef;
use spki::der::asn1::ObjectIdentifier;
use spki::der::asn1::UintRef;

use crate::error::Error;
use crate::jwk::EcCurve;
use crate::jwk::Jwk;
use crate::spki::OID_EC_PUBLIC_KEY;
use crate::spki::OID_ED25519;
use crate::spki::OID_P256;
use crate::spki::OID_P384;
use crate::spki::OID_RSA_ENCRYPTION;

/// SHA-256 of a key's SubjectPublicKeyInfo DER.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpkiHash([u8; 32]);

impl SpkiHash {
    /// The hash of `key`.
    pub fn of(key: &Jwk) -> Self {
        Self::of_der(&key.to_spki_der())
    }

    /// The hash of the key in `der` (a SubjectPublicKeyInfo), after re-encoding it: refused
    /// like [`Jwk::from_spki_der`] refuses a key.
    pub fn of_spki_der(der: &[u8]) -> Result<Self, Error> {
        Ok(Self::of(&Jwk::from_spki_der(der)?))
    }

    fn of_der(der: &[u8]) -> Self {
        let mut hash = [0_u8; 32];
        hash.copy_from_slice(digest::digest(&digest::SHA256, der).as_ref());
        Self(hash)
    }

    /// Reads a hash written as 64 hex digits (any case, colons allowed) or as base64 (standard
    /// or URL-safe, with or without padding): the forms `sha256sum` and Boulder's blocked-keys
    /// file use.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let text = text.trim();
        let hex: String = text.chars().filter(|c| *c != ':').collect();
        if hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit()) {
            let mut hash = [0_u8; 32];
            for (i, byte) in hash.iter_mut().enumerate() {
                *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
                    .map_err(|_| Error::malformed("not a hex digit"))?;
            }
            return Ok(Self(hash));
        }
        let decoded = [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD]
            .iter()
            .find_map(|engine| engine.decode(text).ok());
        match decoded {
            Some(bytes) => <[u8; 32]>::try_from(bytes.as_slice())
                .map(Self)
                .map_err(|_| {
                    Error::malformed(format!(
                        "{text:?} decodes to {} bytes; a SHA-256 hash has 32",
                        bytes.len()
                    ))
                }),
            None => Err(Error::malformed(format!(
                "{text:?} is not a SHA-256 hash: write 64 hex digits or base64"
            ))),
        }
    }

    /// The 32 bytes of the hash.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Lowercase hex, the form this server stores and prints.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Display for SpkiHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for SpkiHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SpkiHash({})", self.to_hex())
    }
}

impl FromStr for SpkiHash {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl Jwk {
    /// The key as SubjectPublicKeyInfo DER, in its one DER form.
    pub fn to_spki_der(&self) -> Vec<u8> {
        // Cannot fail: the OIDs are constants, and a key's parts are far below DER's length
        // limit (256 MiB).
        self.encode_spki()
            .expect("a key's SubjectPublicKeyInfo is always encodable")
    }

    fn encode_spki(&self) -> Result<Vec<u8>, spki::der::Error> {
        let curve_oid;
        let (algorithm, parameters, key) = match self {
            Jwk::Rsa { n, e } => {
                let key = RsaPublicKeyRef {
                    modulus: UintRef::new(n)?,
                    public_exponent: UintRef::new(e)?,
                };
                (OID_RSA_ENCRYPTION, Some(AnyRef::NULL), key.to_der()?)
            }
            Jwk::Ec { curve, .. } => {
                curve_oid = ObjectIdentifier::from_bytes(match curve {
                    EcCurve::P256 => OID_P256,
                    EcCurve::P384 => OID_P384,
                })?;
                (
                    OID_EC_PUBLIC_KEY,
                    Some(AnyRef::from(&curve_oid)),
                    self.ec_uncompressed_point().unwrap_or_default(),
                )
            }
            Jwk::Ed25519 { x } => (OID_ED25519, None, x.clone()),
        };
        SubjectPublicKeyInfoRef {
            algorithm: AlgorithmIdentifierRef {
                oid: ObjectIdentifier::from_bytes(algorithm)?,
                parameters,
            },
            subject_public_key: BitStringRef::from_bytes(&key)?,
        }
        .to_der()
    }
}

#[cfg(test)]
mod tests {
    use aws_lc_rs::digest;
    use base64::Engine;

    use super::SpkiHash;
    use crate::Algorithm;
    use crate::sign::SigningKey;

    #[test]
    fn the_hash_is_that_of_the_libraries_spki() {
        for alg in [
            Algorithm::Rs256,
            Algorithm::Es256,
            Algorithm::Es384,
            Algorithm::EdDsa,
        ] {
            let key = SigningKey::generate(alg).unwrap();
            let der = key.public_key_spki_der().unwrap();
            assert_eq!(key.public_jwk().to_spki_der(), der, "{alg}");
            let expected = digest::digest(&digest::SHA256, &der);
            let hash = SpkiHash::of(&key.public_jwk());
            assert_eq!(hash.as_bytes().as_slice(), expected.as_ref(), "{alg}");
            assert_eq!(SpkiHash::of_spki_der(&der).unwrap(), hash);
        }
    }

    #[test]
    fn hashes_parse_from_hex_and_base64() {
        let key = SigningKey::generate(Algorithm::Es256).unwrap();
        let hash = SpkiHash::of(&key.public_jwk());
        let hex = hash.to_hex();
        assert_eq!(SpkiHash::parse(&hex).unwrap(), hash);
        assert_eq!(SpkiHash::parse(&hex.to_uppercase()).unwrap(), hash);
        let colons: Vec<String> = hash.as_bytes().iter().map(|b| format!("{b:02X}")).collect();
        assert_eq!(SpkiHash::parse(&colons.join(":")).unwrap(), hash);
        let b64 = base64::engine::general_purpose::STANDARD.encode(hash.as_bytes());
        assert_eq!(SpkiHash::parse(&format!(" {b64}\n")).unwrap(), hash);
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hash.as_bytes());
        assert_eq!(url.parse::<SpkiHash>().unwrap(), hash);
        assert!(SpkiHash::parse("abcd").is_err());
        assert!(SpkiHash::parse(&hex[..62]).is_err());
        assert!(SpkiHash::parse("not a hash at all!").is_err());
    }

    #[test]
    fn an_rsa_spki_without_null_parameters_has_the_same_hash() {
        let key = SigningKey::generate(Algorithm::Rs256).unwrap();
        let der = key.public_key_spki_der().unwrap();
        // SEQUENCE { SEQUENCE { OID, NULL }, BIT STRING }: drop the NULL (05 00) and fix the
        // two enclosing lengths, as some encoders write it.
        let null_at = der.windows(2).position(|w| w == [0x05, 0x00]).unwrap();
        let mut short = der.clone();
        short.drain(null_at..null_at + 2);
        short[3] -= 2; // outer length (82 xx xx form for RSA 2048: low byte at index 3)
        short[5] -= 2; // AlgorithmIdentifier length
        assert_eq!(
            SpkiHash::of_spki_der(&short).unwrap(),
            SpkiHash::of_spki_der(&der).unwrap()
        );
    }
}
