//! External account binding (RFC 8555 §7.3.4): the MAC-signed JWS inside a newAccount payload
//! that ties the new ACME account to a key the CA handed out.
//!
//! Checking is split in two because the MAC key is found by the `kid` the binding names:
//! [`EabBinding::parse`] checks everything that needs no key (a flattened JWS, a MAC `alg`, a
//! `kid`, no `nonce`, the outer `url`, and a payload that is the outer JWS's key), and
//! [`EabBinding::verify`] checks the MAC with the key the caller looked up, in constant time.

use aws_lc_rs::hmac;
use serde_json::Map;
use serde_json::Value;

use crate::b64;
use crate::error::Error;
use crate::jwk::Jwk;

/// The MAC algorithms a binding may use (RFC 7518 §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MacAlgorithm {
    Hs256,
    Hs384,
    Hs512,
}

impl MacAlgorithm {
    /// The JWS `alg` name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hs256 => "HS256",
            Self::Hs384 => "HS384",
            Self::Hs512 => "HS512",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        match name {
            "HS256" => Some(Self::Hs256),
            "HS384" => Some(Self::Hs384),
            "HS512" => Some(Self::Hs512),
            _ => None,
        }
    }

    pub(crate) fn hmac(self) -> hmac::Algorithm {
        match self {
            Self::Hs256 => hmac::HMAC_SHA256,
            Self::Hs384 => hmac::HMAC_SHA384,
            Self::Hs512 => hmac::HMAC_SHA512,
        }
    }
}

/// A binding whose form, header and payload key are checked; only the MAC is left.
#[derive(Debug, Clone)]
pub struct EabBinding {
    kid: String,
    alg: MacAlgorithm,
    signing_input: Vec<u8>,
    signature: Vec<u8>,
}

fn malformed(detail: impl Into<String>) -> Error {
    Error::Malformed(format!("externalAccountBinding: {}", detail.into()))
}

impl EabBinding {
    /// Checks steps 1, 2 and 5 of RFC 8555 §7.3.4 for the `externalAccountBinding` member of a
    /// newAccount payload. `outer_url` and `outer_jwk` come from the verified outer JWS.
    pub fn parse(value: &Value, outer_url: &str, outer_jwk: &Jwk) -> Result<EabBinding, Error> {
        let Value::Object(members) = value else {
            return Err(malformed(
                "must be a JWS object in flattened JSON serialization",
            ));
        };
        if let Some(unknown) = members
            .keys()
            .find(|k| !matches!(k.as_str(), "protected" | "payload" | "signature"))
        {
            return Err(malformed(format!(
                "has unknown member \"{unknown}\"; a flattened JWS has only \"protected\", \
                 \"payload\" and \"signature\" (no unprotected header)"
            )));
        }
        let protected_b64 = string_member(members, "protected")?;
        let payload_b64 = string_member(members, "payload")?;
        let signature_b64 = string_member(members, "signature")?;
        let protected = b64::decode(protected_b64, "externalAccountBinding \"protected\"")?;
        let payload = b64::decode(payload_b64, "externalAccountBinding \"payload\"")?;
        let signature = b64::decode(signature_b64, "externalAccountBinding \"signature\"")?;

        let header: Map<String, Value> = match serde_json::from_slice(&protected) {
            Ok(Value::Object(map)) => map,
            _ => return Err(malformed("the protected header is not a JSON object")),
        };
        if header.contains_key("crit") {
            return Err(malformed(
                "the protected header has \"crit\"; no JWS extensions are supported",
            ));
        }
        let alg = match header.get("alg") {
            Some(Value::String(name)) => MacAlgorithm::parse(name).ok_or_else(|| {
                malformed(format!(
                    "\"alg\" is {name:?}, but the binding must be MACed with HS256, HS384 or HS512"
                ))
            })?,
            _ => return Err(malformed("the protected header has no \"alg\" string")),
        };
        let kid = match header.get("kid") {
            Some(Value::String(kid)) if !kid.is_empty() => kid.clone(),
            _ => {
                return Err(malformed(
                    "the protected header must carry the key identifier the CA gave you as \"kid\"",
                ));
            }
        };
        if header.contains_key("nonce") {
            return Err(malformed("the protected header must not have a \"nonce\""));
        }
        match header.get("url") {
            Some(Value::String(url)) if url == outer_url => {}
            Some(Value::String(url)) => {
                return Err(malformed(format!(
                    "\"url\" is {url:?} but must equal the outer JWS \"url\" {outer_url:?}"
                )));
            }
            _ => return Err(malformed("the protected header has no \"url\" string")),
        }
        if signature.is_empty() {
            return Err(malformed("\"signature\" is empty"));
        }

        let payload_json: Value = serde_json::from_slice(&payload).map_err(|_| {
            malformed("the payload is not a JSON object (it must be the account JWK)")
        })?;
        let payload_jwk = Jwk::from_json(&payload_json)
            .map_err(|e| malformed(format!("the payload is not a valid JWK: {e}")))?;
        // Equal keys have equal thumbprints; comparing the keys themselves also rules out a
        // thumbprint collision.
        if payload_jwk.thumbprint() != outer_jwk.thumbprint() || payload_jwk != *outer_jwk {
            return Err(malformed(
                "the payload must be the same key as the \"jwk\" of the outer JWS (the new \
                 account's key)",
            ));
        }

        let mut signing_input = Vec::with_capacity(protected_b64.len() + 1 + payload_b64.len());
        signing_input.extend_from_slice(protected_b64.as_bytes());
        signing_input.push(b'.');
        signing_input.extend_from_slice(payload_b64.as_bytes());
        Ok(EabBinding {
            kid,
            alg,
            signing_input,
            signature,
        })
    }

    /// The key identifier the binding names.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The MAC algorithm the binding uses.
    pub fn algorithm(&self) -> MacAlgorithm {
        self.alg
    }

    /// Step 4: the MAC verifies with `hmac_key` (aws-lc-rs compares in constant time).
    pub fn verify(&self, hmac_key: &[u8]) -> Result<(), Error> {
        let key = hmac::Key::new(self.alg.hmac(), hmac_key);
        hmac::verify(&key, &self.signing_input, &self.signature).map_err(|_| {
            Error::EabUnauthorized(format!(
                "externalAccountBinding: the MAC does not verify with the HMAC key of \"{}\"; \
                 check that the client was given the HMAC key (base64url) that belongs to this key \
                 identifier",
                self.kid
            ))
        })
    }
}

fn string_member<'a>(members: &'a Map<String, Value>, name: &str) -> Result<&'a str, Error> {
    match members.get(name) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(malformed(format!("\"{name}\" must be a base64url string"))),
        None => Err(malformed(format!("has no \"{name}\" member"))),
    }
}
