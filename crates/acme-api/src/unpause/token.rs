//! Signed, versioned unpause tokens.
//!
//! `base64url(JSON claims) "." base64url(HMAC-SHA256(key, first part))`. Anyone holding the link
//! can unpause the account it names, which is the point: the subscriber got it in their client's
//! error output. Bumping the version invalidates every outstanding link at once.

use std::io::Write;
use std::path::Path;

use acme_core::ids::AccountId;
use aws_lc_rs::hmac;
use aws_lc_rs::rand::SecureRandom;
use aws_lc_rs::rand::SystemRandom;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;
use serde::Serialize;

/// What a token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnpauseClaims {
    pub account: AccountId,
    /// The paused names shown to the subscriber (at most 15).
    pub identifiers: Vec<String>,
    pub issued_at: i64,
    pub expires_at: i64,
    pub version: u32,
}

#[derive(Serialize, Deserialize)]
struct Wire {
    a: i64,
    n: Vec<String>,
    iat: i64,
    exp: i64,
    v: u32,
}

/// Why a token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenError {
    /// Not a token at all (truncated, garbled).
    Malformed,
    /// The signature does not match: tampered, or signed with another key.
    BadSignature,
    /// Past its expiry.
    Expired,
    /// Signed under a version that was revoked.
    WrongVersion,
}

/// The HMAC key.
pub struct UnpauseKey(hmac::Key);

impl std::fmt::Debug for UnpauseKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UnpauseKey(..)")
    }
}

impl UnpauseKey {
    pub fn new(bytes: &[u8]) -> Self {
        Self(hmac::Key::new(hmac::HMAC_SHA256, bytes))
    }

    pub fn sign(&self, claims: &UnpauseClaims) -> String {
        let wire = Wire {
            a: claims.account.0,
            n: claims.identifiers.clone(),
            iat: claims.issued_at,
            exp: claims.expires_at,
            v: claims.version,
        };
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&wire).unwrap_or_default());
        let tag = hmac::sign(&self.0, payload.as_bytes());
        format!("{payload}.{}", URL_SAFE_NO_PAD.encode(tag.as_ref()))
    }

    /// Checks signature first (so nothing of a forged token is trusted), then version and expiry.
    pub fn verify(
        &self,
        token: &str,
        now: i64,
        current_version: u32,
    ) -> Result<UnpauseClaims, TokenError> {
        let (payload, tag) = token.trim().split_once('.').ok_or(TokenError::Malformed)?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| TokenError::Malformed)?;
        hmac::verify(&self.0, payload.as_bytes(), &tag).map_err(|_| TokenError::BadSignature)?;
        let json = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| TokenError::Malformed)?;
        let wire: Wire = serde_json::from_slice(&json).map_err(|_| TokenError::Malformed)?;
        if wire.v != current_version {
            return Err(TokenError::WrongVersion);
        }
        if now > wire.exp {
            return Err(TokenError::Expired);
        }
        Ok(UnpauseClaims {
            account: AccountId(wire.a),
            identifiers: wire.n,
            issued_at: wire.iat,
            expires_at: wire.exp,
            version: wire.v,
        })
    }
}

/// Reads the key file (64 hex characters), or creates it with 32 random bytes, mode 0600 from
/// the moment it exists.
pub fn load_or_create_key(path: &Path) -> std::io::Result<Vec<u8>> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let bytes = hex::decode(text.trim()).map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{} must hold 64 hex characters", path.display()),
                )
            })?;
            if bytes.len() < 32 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "{} must hold at least 32 bytes (64 hex characters)",
                        path.display()
                    ),
                ));
            }
            Ok(bytes)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut key = vec![0_u8; 32];
            SystemRandom::new()
                .fill(&mut key)
                .map_err(|_| std::io::Error::other("the system random number generator failed"))?;
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let mut file = options.open(path)?;
            file.write_all(format!("{}\n", hex::encode(&key)).as_bytes())?;
            Ok(key)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(exp: i64, version: u32) -> UnpauseClaims {
        UnpauseClaims {
            account: AccountId(7),
            identifiers: vec!["a.example.com".into()],
            issued_at: 100,
            expires_at: exp,
            version,
        }
    }

    #[test]
    fn round_trip_and_every_refusal() {
        let key = UnpauseKey::new(b"0123456789abcdef0123456789abcdef");
        let token = key.sign(&claims(1_000, 1));
        assert_eq!(key.verify(&token, 500, 1).unwrap(), claims(1_000, 1));
        assert_eq!(key.verify(&token, 1_001, 1), Err(TokenError::Expired));
        assert_eq!(key.verify(&token, 500, 2), Err(TokenError::WrongVersion));
        let other = UnpauseKey::new(b"another key, same length.........");
        assert_eq!(other.verify(&token, 500, 1), Err(TokenError::BadSignature));
        // Tampering with the claims (another account) breaks the signature.
        let forged_payload =
            URL_SAFE_NO_PAD.encode(br#"{"a":8,"n":[],"iat":100,"exp":1000,"v":1}"#);
        let tag = token.split_once('.').unwrap().1;
        assert_eq!(
            key.verify(&format!("{forged_payload}.{tag}"), 500, 1),
            Err(TokenError::BadSignature)
        );
        assert_eq!(
            key.verify(&format!("{token}x"), 500, 1),
            Err(TokenError::BadSignature)
        );
        assert_eq!(key.verify("garbage", 500, 1), Err(TokenError::Malformed));
        assert_eq!(key.verify(&token[..10], 500, 1), Err(TokenError::Malformed));
    }

    #[test]
    fn key_file_is_created_0600_and_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("unpause.key");
        let first = load_or_create_key(&path).unwrap();
        assert_eq!(first.len(), 32);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(
                std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
        assert_eq!(load_or_create_key(&path).unwrap(), first);
        std::fs::write(&path, "zz").unwrap();
        assert!(load_or_create_key(&path).is_err());
    }
}
