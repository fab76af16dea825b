//! The JWS protected header as RFC 8555 §6.2 constrains it.

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Map, Value};

use crate::algorithm::Algorithm;
use crate::error::Error;
use crate::jwk::Jwk;

/// How the request names its key: embedded (newAccount, revokeCert by certificate key) or by
/// account URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyRef {
    /// The `jwk` header parameter.
    Jwk(Jwk),
    /// The `kid` header parameter: the account URL.
    Kid(String),
}

/// The protected header fields ACME uses, already checked for consistency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedHeader {
    /// The signature algorithm; when `key` is a JWK it is known to fit that key.
    pub alg: Algorithm,
    /// The signer's key or account URL; exactly one of `jwk` / `kid` was present.
    pub key: KeyRef,
    /// The anti-replay nonce. Optional here because the inner JWS of keyChange has none; the
    /// HTTP layer requires it everywhere else.
    pub nonce: Option<String>,
    /// The request URL the client signed, to compare with the URL actually requested.
    pub url: String,
}

/// Detects repeated header names, which serde_json would otherwise resolve silently by keeping
/// the last one: two parsers disagreeing on which `url` or `nonce` counts is a classic confusion.
#[derive(Deserialize)]
#[allow(dead_code)] // Fields exist only so serde reports duplicates.
struct DuplicateGuard {
    alg: Option<IgnoredAny>,
    jwk: Option<IgnoredAny>,
    kid: Option<IgnoredAny>,
    nonce: Option<IgnoredAny>,
    url: Option<IgnoredAny>,
    b64: Option<IgnoredAny>,
    crit: Option<IgnoredAny>,
}

impl ProtectedHeader {
    /// Parses the decoded `protected` member; also returns the full JSON object so callers can
    /// read extra parameters.
    pub(crate) fn parse(bytes: &[u8]) -> Result<(ProtectedHeader, Map<String, Value>), Error> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| {
            Error::malformed(format!("JWS protected header is not valid JSON: {e}"))
        })?;
        let Value::Object(map) = value else {
            return Err(Error::malformed(
                "JWS protected header must be a JSON object",
            ));
        };
        serde_json::from_slice::<DuplicateGuard>(bytes).map_err(|e| {
            Error::malformed(format!("JWS protected header repeats a parameter: {e}"))
        })?;

        if map.contains_key("crit") {
            return Err(Error::malformed(
                "JWS protected header has \"crit\"; this server supports no JWS extensions, so remove it",
            ));
        }
        match map.get("b64") {
            None | Some(Value::Bool(true)) => {}
            Some(_) => {
                return Err(Error::malformed(
                    "JWS protected header has \"b64\": unencoded payloads (RFC 7797) are not allowed in ACME",
                ));
            }
        }

        let alg = match map.get("alg") {
            Some(Value::String(name)) => name.parse::<Algorithm>()?,
            Some(_) => {
                return Err(Error::malformed(
                    "JWS protected header \"alg\" must be a string",
                ));
            }
            None => return Err(Error::malformed("JWS protected header has no \"alg\"")),
        };

        let key = match (map.get("jwk"), map.get("kid")) {
            (Some(_), Some(_)) => {
                return Err(Error::malformed(
                    "JWS protected header has both \"jwk\" and \"kid\"; RFC 8555 §6.2 requires exactly one \
                     (use \"jwk\" only for newAccount and revocation by certificate key)",
                ));
            }
            (None, None) => {
                return Err(Error::malformed(
                    "JWS protected header has neither \"jwk\" nor \"kid\"; RFC 8555 §6.2 requires exactly one",
                ));
            }
            (Some(jwk), None) => {
                let jwk = Jwk::from_json(jwk)?;
                jwk.check_algorithm(alg)?;
                KeyRef::Jwk(jwk)
            }
            (None, Some(Value::String(kid))) if !kid.is_empty() => KeyRef::Kid(kid.clone()),
            (None, Some(_)) => {
                return Err(Error::malformed(
                    "JWS protected header \"kid\" must be the account URL as a non-empty string",
                ));
            }
        };

        let url = match map.get("url") {
            Some(Value::String(url)) if !url.is_empty() => url.clone(),
            Some(_) => {
                return Err(Error::malformed(
                    "JWS protected header \"url\" must be a non-empty string",
                ));
            }
            None => {
                return Err(Error::malformed(
                    "JWS protected header has no \"url\"; RFC 8555 §6.4 requires the request URL there",
                ));
            }
        };

        let nonce = match map.get("nonce") {
            Some(Value::String(nonce)) => Some(nonce.clone()),
            Some(_) => {
                return Err(Error::malformed(
                    "JWS protected header \"nonce\" must be a string",
                ));
            }
            None => None,
        };

        Ok((
            ProtectedHeader {
                alg,
                key,
                nonce,
                url,
            },
            map,
        ))
    }
}
