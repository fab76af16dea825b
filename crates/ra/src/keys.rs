//! Which public keys may be an account's (new-account, key change: RFC 8555 §7.3, §7.3.5) or a
//! certificate's (finalize, §7.4): not a weak key ([`acme_jose::goodkey`], Boulder's checks),
//! and not a key the operator blocked, in the blocked-keys file (`acme.blocked-keys-file`) or
//! in the database (`certeasy admin keys block`).
//!
//! Keys are named by the SHA-256 of their SubjectPublicKeyInfo ([`SpkiHash`]), so one list
//! covers account keys (JWKs) and CSR keys alike. The file suits a list kept elsewhere (a
//! configuration repository, the debian-weak-keys style lists Boulder loads); the table suits
//! a key reported compromised today, blocked on every instance at once. A key named in
//! either is refused.
//!
//! Only keys being registered are judged: an existing account whose key is blocked later keeps
//! signing its requests (revoke its certificates and deactivate it to stop it), as in Boulder.

use std::collections::HashSet;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::RwLock;

use acme_jose::Jwk;
use acme_jose::SpkiHash;
use acme_jose::goodkey;
use acme_jose::goodkey::Weakness;
use base64::Engine;
use storage::blocked_keys::BlockedKey;
use x509_parser::certificate::X509Certificate;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::prelude::FromDer;

use crate::Ra;
use crate::audit::AuditKind;
use crate::audit::Requester;
use crate::error::Error;
use crate::error::Refusal;

pub use crate::error::KeyUse;

/// The detail of a refusal for a blocked key.
pub const BLOCKED_DETAIL: &str = "key is blocked by the operator";

/// The blocked-keys file: the hashes it held when last read, and where to read it again (on
/// SIGHUP and `certeasy admin reload`). Cheap to clone; clones share the list.
#[derive(Debug, Clone, Default)]
pub struct BlockedKeysFile {
    path: Option<PathBuf>,
    hashes: Arc<RwLock<Arc<HashSet<SpkiHash>>>>,
}

impl BlockedKeysFile {
    /// Reads `path`: one hash per line (64 hex digits or base64, see [`SpkiHash::parse`]),
    /// blank lines and `#` comments (whole-line or after a hash) ignored. A line that is not a
    /// hash fails the whole file, naming its line, so a typo never silently unblocks a key.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let hashes = read(path)?;
        Ok(Self {
            path: Some(path.to_owned()),
            hashes: Arc::new(RwLock::new(Arc::new(hashes))),
        })
    }

    /// Reads the file again and swaps the new list in; on an error the old list stays. Returns
    /// the number of hashes now in force (0 without a file).
    pub fn reload(&self) -> Result<usize, Error> {
        let Some(path) = &self.path else {
            return Ok(0);
        };
        let hashes = Arc::new(read(path)?);
        let count = hashes.len();
        *self.hashes.write().unwrap_or_else(|e| e.into_inner()) = hashes;
        Ok(count)
    }

    /// Whether the file names `hash`.
    pub fn contains(&self, hash: &SpkiHash) -> bool {
        self.current().contains(hash)
    }

    /// The hashes in force, sorted.
    pub fn hashes(&self) -> Vec<SpkiHash> {
        let mut hashes: Vec<SpkiHash> = self.current().iter().copied().collect();
        hashes.sort();
        hashes
    }

    /// How many hashes are in force.
    pub fn len(&self) -> usize {
        self.current().len()
    }

    /// Whether no hash is in force (no file, or an empty one).
    pub fn is_empty(&self) -> bool {
        self.current().is_empty()
    }

    fn current(&self) -> Arc<HashSet<SpkiHash>> {
        // A poisoned lock still holds a whole list: the writer only swaps an `Arc`.
        Arc::clone(&self.hashes.read().unwrap_or_else(|e| e.into_inner()))
    }
}

fn read(path: &Path) -> Result<HashSet<SpkiHash>, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::internal("blocked keys file", &format!("{}: {e}", path.display())))?;
    parse(&text)
        .map_err(|e| Error::internal("blocked keys file", &format!("{}:{e}", path.display())))
}

/// The hashes of a blocked-keys file's text; an error is `line: what`.
pub fn parse(text: &str) -> Result<HashSet<SpkiHash>, String> {
    let mut hashes = HashSet::new();
    for (index, line) in text.lines().enumerate() {
        let content = line.split('#').next().unwrap_or_default().trim();
        if content.is_empty() {
            continue;
        }
        let hash = SpkiHash::parse(content).map_err(|e| format!("{}: {e}", index + 1))?;
        hashes.insert(hash);
    }
    Ok(hashes)
}

impl Ra {
    /// Refuses a key that is weak or blocked, as `what` it is about to become.
    pub(crate) async fn check_key(&self, key: &Jwk, what: KeyUse) -> Result<(), Error> {
        if let Err(weakness) = goodkey::check(key) {
            let reason = match weakness {
                Weakness::Exponent(_) => "exponent",
                Weakness::SmallPrimeFactor(_) => "small_prime",
                Weakness::Roca => "roca",
                Weakness::CloseFactors => "fermat",
            };
            count_refusal(what, reason);
            return Err(bad_key(what, weakness.to_string()));
        }
        let hash = SpkiHash::of(key);
        if self.inner.settings.blocked_keys.contains(&hash)
            || self.inner.storage.is_key_blocked(hash.as_bytes()).await?
        {
            tracing::info!(spki_sha256 = %hash, ?what, "blocked key refused");
            count_refusal(what, "blocked");
            return Err(bad_key(what, BLOCKED_DETAIL.to_owned()));
        }
        Ok(())
    }

    /// [`Ra::check_key`] for the SubjectPublicKeyInfo of a CSR.
    pub(crate) async fn check_csr_key(&self, spki_der: &[u8]) -> Result<(), Error> {
        let key = Jwk::from_spki_der(spki_der)
            .map_err(|e| bad_key(KeyUse::Certificate, format!("key is not supported: {e}")))?;
        self.check_key(&key, KeyUse::Certificate).await
    }

    /// Blocks a key from now on, for every instance (the operator's command), recorded as
    /// blocked by `requester`.
    pub async fn block_key(
        &self,
        hash: SpkiHash,
        reason: &str,
        requester: &Requester,
    ) -> Result<BlockedKey, Error> {
        let mut audit = requester.event(
            AuditKind::KeyBlocked,
            format!("key blocked by {}: {reason}", requester.who()),
        );
        audit.detail = serde_json::json!({ "spki_sha256": hash.to_hex(), "reason": reason });
        match self
            .inner
            .storage
            .block_key(hash.as_bytes(), reason, self.now(), &audit)
            .await
        {
            Ok(Some(blocked)) => {
                tracing::warn!(spki_sha256 = %hash, reason, "key blocked by the operator");
                Ok(blocked)
            }
            Ok(None) => Err(Refusal::Conflict(format!("key {hash} is already blocked")).into()),
            Err(e) => Err(e.into()),
        }
    }

    /// Lifts a block made with [`Ra::block_key`]; a key only the file names stays blocked.
    /// Recorded as unblocked by `requester`.
    pub async fn unblock_key(&self, hash: SpkiHash, requester: &Requester) -> Result<(), Error> {
        let mut audit = requester.event(
            AuditKind::KeyUnblocked,
            format!(
                "key unblocked in the database by {} (a block of the blocked-keys file stays)",
                requester.who()
            ),
        );
        audit.detail = serde_json::json!({ "spki_sha256": hash.to_hex() });
        if self
            .inner
            .storage
            .unblock_key(hash.as_bytes(), self.now(), &audit)
            .await?
        {
            tracing::warn!(spki_sha256 = %hash, "key unblocked by the operator");
            Ok(())
        } else {
            Err(Refusal::NotFound("blocked key").into())
        }
    }

    /// The keys blocked in the database, oldest first.
    pub async fn blocked_keys(&self) -> Result<Vec<BlockedKey>, Error> {
        Ok(self.inner.storage.blocked_keys().await?)
    }

    /// The hashes the blocked-keys file names, sorted (for listings that say where a block is).
    pub fn blocked_by_file(&self) -> Vec<SpkiHash> {
        self.inner.settings.blocked_keys.hashes()
    }
}

/// The key an operator names: the hash of [`SpkiHash::parse`], or a PEM public key
/// (`PUBLIC KEY`), certificate or certificate request, whose key is hashed. A private key is
/// refused: the operator names a key by its public half.
pub fn named_key(text: &str) -> Result<SpkiHash, String> {
    let text = text.trim();
    let Some(begin) = text.find("-----BEGIN ") else {
        return SpkiHash::parse(text).map_err(|e| e.to_string());
    };
    let rest = &text[begin + "-----BEGIN ".len()..];
    let (label, rest) = rest
        .split_once("-----")
        .ok_or("the PEM block has no complete BEGIN line")?;
    let end = format!("-----END {label}-----");
    let (body, _) = rest
        .split_once(end.as_str())
        .ok_or_else(|| format!("the PEM block has no {end} line"))?;
    let body: String = body.split_whitespace().collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(|e| format!("the PEM block is not valid base64: {e}"))?;
    let spki = match label {
        "PUBLIC KEY" => der,
        "CERTIFICATE" => X509Certificate::from_der(&der)
            .map_err(|e| format!("the certificate cannot be parsed: {e}"))?
            .1
            .tbs_certificate
            .subject_pki
            .raw
            .to_vec(),
        "CERTIFICATE REQUEST" | "NEW CERTIFICATE REQUEST" => {
            X509CertificationRequest::from_der(&der)
                .map_err(|e| format!("the certificate request cannot be parsed: {e}"))?
                .1
                .certification_request_info
                .subject_pki
                .raw
                .to_vec()
        }
        other if other.contains("PRIVATE KEY") => {
            return Err(
                "a private key was given: name the key by its public key (openssl pkey -pubout), \
                 a certificate, a CSR or the hash"
                    .to_owned(),
            );
        }
        other => {
            return Err(format!(
                "a PEM {other} holds no key this server can name; give a PUBLIC KEY, \
                 CERTIFICATE or CERTIFICATE REQUEST, or the hash"
            ));
        }
    };
    SpkiHash::of_spki_der(&spki).map_err(|e| format!("the key cannot be read: {e}"))
}

/// `certeasy_keys_refused_total{use, reason}`: keys refused, by what they were to become
/// (`account`, `certificate`) and why (`exponent`, `small_prime`, `roca`, `fermat`, `blocked`).
fn count_refusal(what: KeyUse, reason: &'static str) {
    let key_use = match what {
        KeyUse::Account => "account",
        KeyUse::Certificate => "certificate",
    };
    metrics::counter!("certeasy_keys_refused_total", "use" => key_use, "reason" => reason)
        .increment(1);
}

fn bad_key(what: KeyUse, detail: String) -> Error {
    let detail = match what {
        KeyUse::Account => detail,
        KeyUse::Certificate => format!("the CSR's public key: {detail}"),
    };
    Refusal::BadKey { key: what, detail }.into()
}

#[cfg(test)]
mod tests {
    use acme_jose::Algorithm;
    use acme_jose::SpkiHash;
    use acme_jose::sign::SigningKey;

    use super::BlockedKeysFile;
    use super::named_key;
    use super::parse;

    #[test]
    fn the_file_takes_hex_and_base64_and_comments() {
        let a = SpkiHash::of(&SigningKey::generate(Algorithm::Es256).unwrap().public_jwk());
        let b = SpkiHash::of(&SigningKey::generate(Algorithm::EdDsa).unwrap().public_jwk());
        let b64 = {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.encode(b.as_bytes())
        };
        let text = format!("# compromised keys\n\n{a}  # ticket 12\n   {b64}\n");
        let hashes = parse(&text).unwrap();
        assert_eq!(hashes.len(), 2);
        assert!(hashes.contains(&a) && hashes.contains(&b));
        let err = parse(&format!("{a}\nnot-a-hash\n")).unwrap_err();
        assert!(err.starts_with("2: "), "{err}");
    }

    #[test]
    fn keys_are_named_by_hash_or_public_key_and_never_by_private_key() {
        use base64::Engine;
        let key = SigningKey::generate(Algorithm::Es256).unwrap();
        let hash = SpkiHash::of(&key.public_jwk());
        let pem = |label: &str, der: &[u8]| {
            let b64 = base64::engine::general_purpose::STANDARD.encode(der);
            let lines: Vec<&str> = b64
                .as_bytes()
                .chunks(64)
                .map(|c| std::str::from_utf8(c).unwrap())
                .collect();
            format!(
                "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
                lines.join("\n")
            )
        };
        assert_eq!(named_key(&hash.to_hex()).unwrap(), hash);
        let public = pem("PUBLIC KEY", &key.public_key_spki_der().unwrap());
        assert_eq!(named_key(&public).unwrap(), hash);
        let private = pem("PRIVATE KEY", &key.to_pkcs8_der().unwrap());
        assert!(named_key(&private).unwrap_err().contains("private key"));
        assert!(named_key("nonsense").is_err());
    }

    #[test]
    fn a_reload_swaps_the_list_and_a_bad_file_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blocked");
        let a = SpkiHash::of(&SigningKey::generate(Algorithm::Es256).unwrap().public_jwk());
        let b = SpkiHash::of(&SigningKey::generate(Algorithm::Es256).unwrap().public_jwk());
        std::fs::write(&path, format!("{a}\n")).unwrap();
        let file = BlockedKeysFile::load(&path).unwrap();
        let clone = file.clone();
        assert!(clone.contains(&a) && !clone.contains(&b));
        std::fs::write(&path, format!("{b}\n")).unwrap();
        assert_eq!(file.reload().unwrap(), 1);
        assert!(
            !clone.contains(&a) && clone.contains(&b),
            "clones share the list"
        );
        std::fs::write(&path, "garbage\n").unwrap();
        assert!(file.reload().is_err());
        assert!(clone.contains(&b), "the previous list stays");
        assert!(BlockedKeysFile::default().is_empty());
        assert_eq!(BlockedKeysFile::default().reload().unwrap(), 0);
    }
}
