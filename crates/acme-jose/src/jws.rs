//! Flattened JWS JSON serialization (RFC 7515 §7.2.2), the only form RFC 8555 §6.2 allows.

use serde::Deserialize;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde_json::{Map, Value};

use crate::b64;
use crate::error::Error;
use crate::header::{KeyRef, ProtectedHeader};
use crate::jwk::Jwk;
use crate::verify;
use crate::verifying_key::VerifyingKey;

/// A parsed, not yet verified, ACME JWS.
///
/// Parsing checks structure and header rules; [`Jws::verify`] checks the signature against the
/// key the caller resolved (embedded `jwk` or the account key behind `kid`).
#[derive(Debug, Clone)]
pub struct Jws {
    protected_b64: String,
    payload_b64: String,
    signature: Vec<u8>,
    header: ProtectedHeader,
    header_json: Map<String, Value>,
    payload: Vec<u8>,
}

/// Detects repeated top-level members, which would let two parsers see different payloads.
#[derive(Deserialize)]
#[allow(dead_code)] // Fields exist only so serde reports duplicates.
struct DuplicateGuard {
    protected: Option<IgnoredAny>,
    payload: Option<IgnoredAny>,
    signature: Option<IgnoredAny>,
}

impl Jws {
    /// Parses a request body in flattened JSON serialization.
    pub fn parse(body: &[u8]) -> Result<Jws, Error> {
        let value: Value = serde_json::from_slice(body).map_err(|e| {
            if looks_compact(body) {
                Error::malformed(
                    "request body is a JWS in compact serialization; ACME requires the flattened JSON \
                     serialization (RFC 8555 §6.2)",
                )
            } else {
                Error::malformed(format!("request body is not valid JSON: {e}"))
            }
        })?;
        let Value::Object(members) = value else {
            return Err(Error::malformed(
                "request body must be a JSON object holding a flattened JWS",
            ));
        };
        if members.contains_key("signatures") {
            return Err(Error::malformed(
                "JWS uses the general JSON serialization (\"signatures\"); ACME requires the flattened \
                 serialization with exactly one signature (RFC 8555 §6.2)",
            ));
        }
        if members.contains_key("header") {
            return Err(Error::malformed(
                "JWS has an unprotected header; RFC 8555 requires all header parameters in the protected header",
            ));
        }
        if let Some(unknown) = members
            .keys()
            .find(|k| !matches!(k.as_str(), "protected" | "payload" | "signature"))
        {
            return Err(Error::malformed(format!(
                "JWS has unknown member \"{unknown}\"; a flattened JWS has only \"protected\", \"payload\" \
                 and \"signature\""
            )));
        }
        serde_json::from_slice::<DuplicateGuard>(body)
            .map_err(|e| Error::malformed(format!("JWS repeats a member: {e}")))?;

        let protected_b64 = string_member(&members, "protected")?;
        let payload_b64 = string_member(&members, "payload")?;
        let signature_b64 = string_member(&members, "signature")?;

        if protected_b64.is_empty() {
            return Err(Error::malformed(
                "JWS \"protected\" is empty; all header parameters must be protected",
            ));
        }
        let protected = b64::decode(&protected_b64, "JWS \"protected\"")?;
        // The header goes first so that an `alg` of "none" with its empty signature is reported
        // as the algorithm problem it is.
        let (header, header_json) = ProtectedHeader::parse(&protected)?;
        let payload = b64::decode(&payload_b64, "JWS \"payload\"")?;
        let signature = b64::decode(&signature_b64, "JWS \"signature\"")?;
        if signature.is_empty() {
            return Err(Error::malformed("JWS \"signature\" is empty"));
        }
        if let Some(expected) = header.alg.fixed_signature_len()
            && signature.len() != expected
        {
            return Err(Error::malformed(format!(
                "JWS signature for {} must be {expected} bytes (the fixed-length r||s form for ECDSA, \
                 RFC 7518 §3.4), got {}; DER-encoded ECDSA signatures are not allowed",
                header.alg,
                signature.len()
            )));
        }

        Ok(Jws {
            protected_b64,
            payload_b64,
            signature,
            header,
            header_json,
            payload,
        })
    }

    /// The checked protected header.
    pub fn header(&self) -> &ProtectedHeader {
        &self.header
    }

    /// The whole protected header object, for parameters beyond the ones ACME defines.
    pub fn header_json(&self) -> &Map<String, Value> {
        &self.header_json
    }

    /// The decoded payload; empty for POST-as-GET.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// The `protected` member exactly as received.
    pub fn protected_b64(&self) -> &str {
        &self.protected_b64
    }

    /// The `payload` member exactly as received.
    pub fn payload_b64(&self) -> &str {
        &self.payload_b64
    }

    /// The decoded signature bytes.
    pub fn signature(&self) -> &[u8] {
        &self.signature
    }

    /// True when the payload is the empty string, which RFC 8555 §6.3 defines as POST-as-GET.
    /// A payload of `{}` is a different request (for example, an empty update) and is not one.
    pub fn is_post_as_get(&self) -> bool {
        self.payload_b64.is_empty()
    }

    /// Deserializes the payload as JSON, refusing POST-as-GET where a body is required.
    pub fn payload_json<T: DeserializeOwned>(&self) -> Result<T, Error> {
        if self.is_post_as_get() {
            return Err(Error::malformed(
                "JWS payload is empty (POST-as-GET), but this request requires a JSON payload",
            ));
        }
        serde_json::from_slice(&self.payload).map_err(|e| {
            Error::malformed(format!("JWS payload is not the expected JSON object: {e}"))
        })
    }

    /// Verifies the signature with `key`.
    ///
    /// The algorithm must fit the key and RSA keys must be 2048 to 8192 bits; both are checked
    /// before any signature work so a weak key is reported as such rather than as a bad signature.
    pub fn verify(&self, key: &Jwk) -> Result<(), Error> {
        key.check_algorithm(self.header.alg)?;
        key.check_strength()?;
        verify::signature(self.header.alg, key, &self.signing_input(), &self.signature)
    }

    /// [`Jws::verify`] with a key parsed beforehand, for a key that verifies many requests.
    pub fn verify_with(&self, key: &VerifyingKey) -> Result<(), Error> {
        key.jwk().check_algorithm(self.header.alg)?;
        key.jwk().check_strength()?;
        key.verify(self.header.alg, &self.signing_input(), &self.signature)
    }

    /// What the signature covers (RFC 7515 §5.2): `protected || '.' || payload`, as sent.
    fn signing_input(&self) -> Vec<u8> {
        let mut message = Vec::with_capacity(self.protected_b64.len() + 1 + self.payload_b64.len());
        message.extend_from_slice(self.protected_b64.as_bytes());
        message.push(b'.');
        message.extend_from_slice(self.payload_b64.as_bytes());
        message
    }

    /// Verifies with the embedded `jwk` and returns it; for requests that must carry their key
    /// (newAccount, keyChange inner JWS, revocation by certificate key).
    pub fn verify_embedded(&self) -> Result<&Jwk, Error> {
        match &self.header.key {
            KeyRef::Jwk(jwk) => {
                self.verify(jwk)?;
                Ok(jwk)
            }
            KeyRef::Kid(_) => Err(Error::malformed(
                "this request must identify its key with \"jwk\" in the protected header, not \"kid\"",
            )),
        }
    }
}

fn string_member(members: &Map<String, Value>, name: &str) -> Result<String, Error> {
    match members.get(name) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(Error::malformed(format!(
            "JWS \"{name}\" must be a base64url string"
        ))),
        None => Err(Error::malformed(format!("JWS has no \"{name}\" member"))),
    }
}

/// Compact serialization is three base64url parts separated by dots.
fn looks_compact(body: &[u8]) -> bool {
    let text = body.trim_ascii();
    text.iter().filter(|b| **b == b'.').count() == 2
        && text
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}
