//! Key generation and flattened-JWS signing, for tests and tooling that play the ACME client.
//!
//! The server never signs JWS; this lives in the crate anyway so every test signs with the same
//! code the verifier is checked against, and the testkit does not need a second JOSE stack.

use std::fmt;

use aws_lc_rs::encoding::{AsDer, Pkcs8V1Der, PublicKeyX509Der};
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::KeySize;
use aws_lc_rs::signature::{
    ECDSA_P256_SHA256_FIXED_SIGNING, ECDSA_P384_SHA384_FIXED_SIGNING, EcdsaKeyPair,
    EcdsaSigningAlgorithm, Ed25519KeyPair, KeyPair, RSA_PKCS1_SHA256, RSA_PSS_SHA256, RsaEncoding,
    RsaKeyPair, RsaPublicKeyComponents,
};
use serde_json::{Map, Value, json};

use crate::algorithm::Algorithm;
use crate::b64;
use crate::eab::MacAlgorithm;
use crate::error::Error;
use crate::jwk::{EcCurve, Jwk};

/// A private key bound to the one JWS algorithm it signs with.
pub struct SigningKey {
    alg: Algorithm,
    inner: Inner,
}

enum Inner {
    Rsa(RsaKeyPair),
    Ec(EcdsaKeyPair),
    Ed25519(Ed25519KeyPair),
}

impl fmt::Debug for SigningKey {
    /// Never prints private material.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey({}, {:?})", self.alg, self.public_jwk())
    }
}

fn key_error(what: &str) -> impl FnOnce(aws_lc_rs::error::Unspecified) -> Error + '_ {
    move |_| Error::Key(what.to_owned())
}

fn ec_signing(alg: Algorithm) -> Option<&'static EcdsaSigningAlgorithm> {
    match alg {
        Algorithm::Es256 => Some(&ECDSA_P256_SHA256_FIXED_SIGNING),
        Algorithm::Es384 => Some(&ECDSA_P384_SHA384_FIXED_SIGNING),
        Algorithm::Rs256 | Algorithm::Ps256 | Algorithm::EdDsa => None,
    }
}

impl SigningKey {
    /// Generates a fresh key for `alg`; RSA algorithms get a 2048-bit key.
    pub fn generate(alg: Algorithm) -> Result<SigningKey, Error> {
        let inner = match alg {
            Algorithm::Rs256 | Algorithm::Ps256 => return Self::generate_rsa(alg, 2048),
            Algorithm::Es256 | Algorithm::Es384 => {
                let signing = ec_signing(alg)
                    .ok_or_else(|| Error::Key("not an ECDSA algorithm".to_owned()))?;
                Inner::Ec(
                    EcdsaKeyPair::generate(signing)
                        .map_err(key_error("ECDSA key generation failed"))?,
                )
            }
            Algorithm::EdDsa => Inner::Ed25519(
                Ed25519KeyPair::generate().map_err(key_error("Ed25519 key generation failed"))?,
            ),
        };
        Ok(SigningKey { alg, inner })
    }

    /// Generates an RSA key of 2048, 3072, 4096 or 8192 bits for RS256 or PS256.
    pub fn generate_rsa(alg: Algorithm, bits: usize) -> Result<SigningKey, Error> {
        if !matches!(alg, Algorithm::Rs256 | Algorithm::Ps256) {
            return Err(Error::Key(format!("{alg} does not use RSA keys")));
        }
        let size = match bits {
            2048 => KeySize::Rsa2048,
            3072 => KeySize::Rsa3072,
            4096 => KeySize::Rsa4096,
            8192 => KeySize::Rsa8192,
            other => return Err(Error::Key(format!("cannot generate a {other}-bit RSA key"))),
        };
        let pair = RsaKeyPair::generate(size).map_err(key_error("RSA key generation failed"))?;
        Ok(SigningKey {
            alg,
            inner: Inner::Rsa(pair),
        })
    }

    /// Loads an unencrypted PKCS#8 private key to sign with `alg`.
    pub fn from_pkcs8(alg: Algorithm, der: &[u8]) -> Result<SigningKey, Error> {
        let rejected = |e: aws_lc_rs::error::KeyRejected| {
            Error::Key(format!("PKCS#8 key rejected for {alg}: {e}"))
        };
        let inner = match alg {
            Algorithm::Rs256 | Algorithm::Ps256 => {
                Inner::Rsa(RsaKeyPair::from_pkcs8(der).map_err(rejected)?)
            }
            Algorithm::Es256 | Algorithm::Es384 => {
                let signing = ec_signing(alg)
                    .ok_or_else(|| Error::Key("not an ECDSA algorithm".to_owned()))?;
                Inner::Ec(EcdsaKeyPair::from_pkcs8(signing, der).map_err(rejected)?)
            }
            Algorithm::EdDsa => Inner::Ed25519(Ed25519KeyPair::from_pkcs8(der).map_err(rejected)?),
        };
        Ok(SigningKey { alg, inner })
    }

    /// The private key as unencrypted PKCS#8 v1 DER (usable with rcgen, for example).
    pub fn to_pkcs8_der(&self) -> Result<Vec<u8>, Error> {
        let what = "PKCS#8 export failed";
        Ok(match &self.inner {
            Inner::Rsa(pair) => AsDer::<Pkcs8V1Der>::as_der(pair)
                .map_err(key_error(what))?
                .as_ref()
                .to_vec(),
            Inner::Ec(pair) => pair
                .to_pkcs8v1()
                .map_err(key_error(what))?
                .as_ref()
                .to_vec(),
            Inner::Ed25519(pair) => pair
                .to_pkcs8v1()
                .map_err(key_error(what))?
                .as_ref()
                .to_vec(),
        })
    }

    /// The public key as SubjectPublicKeyInfo DER, as it appears in a CSR or certificate.
    pub fn public_key_spki_der(&self) -> Result<Vec<u8>, Error> {
        let what = "SubjectPublicKeyInfo export failed";
        Ok(match &self.inner {
            Inner::Rsa(pair) => AsDer::<PublicKeyX509Der>::as_der(pair.public_key())
                .map_err(key_error(what))?
                .as_ref()
                .to_vec(),
            Inner::Ec(pair) => AsDer::<PublicKeyX509Der>::as_der(pair.public_key())
                .map_err(key_error(what))?
                .as_ref()
                .to_vec(),
            Inner::Ed25519(pair) => AsDer::<PublicKeyX509Der>::as_der(pair.public_key())
                .map_err(key_error(what))?
                .as_ref()
                .to_vec(),
        })
    }

    /// The algorithm this key signs with.
    pub fn algorithm(&self) -> Algorithm {
        self.alg
    }

    /// The public key as a JWK.
    pub fn public_jwk(&self) -> Jwk {
        match &self.inner {
            Inner::Rsa(pair) => {
                let components = RsaPublicKeyComponents::<Vec<u8>>::from(pair.public_key());
                Jwk::Rsa {
                    n: components.n,
                    e: components.e,
                }
            }
            Inner::Ec(pair) => {
                let curve = if self.alg == Algorithm::Es384 {
                    EcCurve::P384
                } else {
                    EcCurve::P256
                };
                // The public key is the uncompressed point 0x04 || x || y.
                let point = pair.public_key().as_ref();
                let coordinates = point.get(1..).unwrap_or_default();
                let (x, y) = coordinates.split_at(coordinates.len() / 2);
                Jwk::Ec {
                    curve,
                    x: x.to_vec(),
                    y: y.to_vec(),
                }
            }
            Inner::Ed25519(pair) => Jwk::Ed25519 {
                x: pair.public_key().as_ref().to_vec(),
            },
        }
    }

    /// Signs `message` and returns the JWS signature bytes (fixed-length `r||s` for ECDSA).
    pub fn sign(&self, message: &[u8]) -> Result<Vec<u8>, Error> {
        let what = "signing failed";
        match &self.inner {
            Inner::Rsa(pair) => {
                let padding: &'static dyn RsaEncoding = if self.alg == Algorithm::Ps256 {
                    &RSA_PSS_SHA256
                } else {
                    &RSA_PKCS1_SHA256
                };
                let mut signature = vec![0u8; pair.public_modulus_len()];
                pair.sign(padding, &SystemRandom::new(), message, &mut signature)
                    .map_err(key_error(what))?;
                Ok(signature)
            }
            Inner::Ec(pair) => Ok(pair
                .sign(&SystemRandom::new(), message)
                .map_err(key_error(what))?
                .as_ref()
                .to_vec()),
            Inner::Ed25519(pair) => Ok(pair
                .try_sign(message)
                .map_err(key_error(what))?
                .as_ref()
                .to_vec()),
        }
    }

    /// Signs a flattened JWS and returns the request body.
    ///
    /// `alg` is added to `protected` when absent and left alone when present, so tests can send
    /// wrong algorithms on purpose. An empty `payload` produces POST-as-GET (`"payload": ""`).
    pub fn sign_flattened(&self, protected: Value, payload: &[u8]) -> Result<String, Error> {
        let Value::Object(mut protected) = protected else {
            return Err(Error::Key(
                "protected header must be a JSON object".to_owned(),
            ));
        };
        protected
            .entry("alg")
            .or_insert_with(|| Value::String(self.alg.as_str().to_owned()));
        self.sign_flattened_raw(&Value::Object(protected).to_string(), payload)
    }

    /// Signs a flattened JWS whose protected header is exactly `protected_json`, for tests that
    /// need headers serde_json would not produce (repeated names, odd formatting).
    pub fn sign_flattened_raw(
        &self,
        protected_json: &str,
        payload: &[u8],
    ) -> Result<String, Error> {
        let protected_b64 = b64::encode(protected_json.as_bytes());
        let payload_b64 = b64::encode(payload);
        let signature = self.sign(format!("{protected_b64}.{payload_b64}").as_bytes())?;
        Ok(json!({
            "protected": protected_b64,
            "payload": payload_b64,
            "signature": b64::encode(&signature),
        })
        .to_string())
    }

    /// An ACME protected header: `kid` when given, otherwise this key's `jwk`.
    pub fn acme_header(&self, url: &str, nonce: Option<&str>, kid: Option<&str>) -> Value {
        let mut header = Map::new();
        header.insert(
            "alg".to_owned(),
            Value::String(self.alg.as_str().to_owned()),
        );
        match kid {
            Some(kid) => header.insert("kid".to_owned(), Value::String(kid.to_owned())),
            None => header.insert("jwk".to_owned(), self.public_jwk().to_json()),
        };
        if let Some(nonce) = nonce {
            header.insert("nonce".to_owned(), Value::String(nonce.to_owned()));
        }
        header.insert("url".to_owned(), Value::String(url.to_owned()));
        Value::Object(header)
    }

    /// Signs an ACME request: `payload` `None` is POST-as-GET, otherwise the JSON is the payload.
    pub fn sign_acme(
        &self,
        url: &str,
        nonce: Option<&str>,
        kid: Option<&str>,
        payload: Option<&Value>,
    ) -> Result<String, Error> {
        let payload = payload.map(Value::to_string).unwrap_or_default();
        self.sign_flattened(self.acme_header(url, nonce, kid), payload.as_bytes())
    }
}

/// An external account binding (RFC 8555 §7.3.4) for `jwk`, as a client puts it into the
/// newAccount payload: `kid` and `url` protected, `jwk` as the payload, MACed with `hmac_key`.
pub fn eab_binding(kid: &str, hmac_key: &[u8], alg: MacAlgorithm, url: &str, jwk: &Jwk) -> Value {
    let protected = json!({ "alg": alg.as_str(), "kid": kid, "url": url });
    mac_flattened(
        &protected,
        jwk.to_json().to_string().as_bytes(),
        alg,
        hmac_key,
    )
}

/// A flattened JWS over exactly `protected` and `payload`, MACed with `hmac_key`; for tests that
/// need bindings a client should not send (extra header parameters, another payload).
pub fn mac_flattened(
    protected: &Value,
    payload: &[u8],
    alg: MacAlgorithm,
    hmac_key: &[u8],
) -> Value {
    let protected_b64 = b64::encode(protected.to_string().as_bytes());
    let payload_b64 = b64::encode(payload);
    let key = aws_lc_rs::hmac::Key::new(alg.hmac(), hmac_key);
    let tag = aws_lc_rs::hmac::sign(&key, format!("{protected_b64}.{payload_b64}").as_bytes());
    json!({
        "protected": protected_b64,
        "payload": payload_b64,
        "signature": b64::encode(tag.as_ref()),
    })
}
