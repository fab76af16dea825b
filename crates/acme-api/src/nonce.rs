//! Replay nonces (RFC 8555 §6.5).
//!
//! A nonce is `issued-at || random || MAC`, so any instance holding the key can tell a nonce it
//! issued from a forged one without a lookup, and a nonce older than the lifetime is refused
//! without remembering it. Only redeemed nonces younger than the lifetime are remembered, which
//! bounds the memory used: at most (nonces redeemed per lifetime) entries.

use std::collections::HashMap;
use std::sync::Mutex;

use aws_lc_rs::hmac;
use aws_lc_rs::rand::SecureRandom;
use aws_lc_rs::rand::SystemRandom;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use time::Duration;
use time::OffsetDateTime;

const RANDOM_LEN: usize = 12;
const MAC_LEN: usize = 16;
const NONCE_LEN: usize = 8 + RANDOM_LEN + MAC_LEN;

/// Why a nonce was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonceError {
    /// Not a nonce this server issued.
    Unknown,
    /// Older than the nonce lifetime.
    Expired,
    /// Already used once.
    Reused,
}

/// Where several instances record redeemed nonces, so a nonce is single-use across all of them.
pub trait NonceLedger: Send + Sync {
    /// Records `id` for `ttl`: `Ok(true)` the first time, `Ok(false)` when already recorded.
    fn redeem_once<'a>(
        &'a self,
        id: &'a str,
        ttl: std::time::Duration,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<bool, String>> + Send + 'a>>;
}

/// Issues and redeems nonces.
pub struct NonceService {
    key: hmac::Key,
    rng: SystemRandom,
    lifetime: Duration,
    used: Mutex<UsedSet>,
    ledger: Option<std::sync::Arc<dyn NonceLedger>>,
}

struct UsedSet {
    entries: HashMap<[u8; RANDOM_LEN], i64>,
    next_prune: i64,
}

impl std::fmt::Debug for NonceService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NonceService")
            .field("lifetime", &self.lifetime)
            .finish_non_exhaustive()
    }
}

impl NonceService {
    /// A service with a fresh random key (single instance) and the given lifetime.
    pub fn new(lifetime: Duration) -> Self {
        let rng = SystemRandom::new();
        let mut key = [0_u8; 32];
        // SystemRandom only fails when the OS has no entropy source, which aws-lc treats as fatal.
        if rng.fill(&mut key).is_err() {
            tracing::error!("the system random number generator failed");
        }
        Self::with_key(&key, lifetime)
    }

    /// A service whose nonces any instance sharing `key` accepts.
    pub fn with_key(key: &[u8], lifetime: Duration) -> Self {
        Self {
            key: hmac::Key::new(hmac::HMAC_SHA256, key),
            rng: SystemRandom::new(),
            lifetime,
            used: Mutex::new(UsedSet {
                entries: HashMap::new(),
                next_prune: 0,
            }),
            ledger: None,
        }
    }

    /// Records redemptions in a ledger shared by every instance (Redis). When the ledger fails,
    /// this instance's own memory still makes the nonce single-use here.
    pub fn with_ledger(mut self, ledger: std::sync::Arc<dyn NonceLedger>) -> Self {
        self.ledger = Some(ledger);
        self
    }

    /// A fresh nonce.
    pub fn issue(&self, now: OffsetDateTime) -> String {
        let mut raw = [0_u8; NONCE_LEN];
        raw[..8].copy_from_slice(&now.unix_timestamp().to_be_bytes());
        if self.rng.fill(&mut raw[8..8 + RANDOM_LEN]).is_err() {
            tracing::error!("the system random number generator failed");
        }
        let tag = hmac::sign(&self.key, &raw[..8 + RANDOM_LEN]);
        raw[8 + RANDOM_LEN..].copy_from_slice(&tag.as_ref()[..MAC_LEN]);
        URL_SAFE_NO_PAD.encode(raw)
    }

    /// Accepts a nonce once, across every instance sharing the ledger.
    pub async fn redeem(&self, nonce: &str, now: OffsetDateTime) -> Result<(), NonceError> {
        let (id, expires) = self.redeem_locally(nonce, now)?;
        if let Some(ledger) = &self.ledger {
            let ttl = std::time::Duration::from_secs(
                u64::try_from(expires - now.unix_timestamp())
                    .unwrap_or(0)
                    .max(1),
            );
            match ledger.redeem_once(&hex::encode(id), ttl).await {
                Ok(true) => {}
                Ok(false) => return Err(NonceError::Reused),
                Err(e) => {
                    tracing::warn!(error = %e, "shared nonce ledger unavailable; nonce checked on this instance only")
                }
            }
        }
        Ok(())
    }

    fn redeem_locally(
        &self,
        nonce: &str,
        now: OffsetDateTime,
    ) -> Result<([u8; RANDOM_LEN], i64), NonceError> {
        let raw = URL_SAFE_NO_PAD
            .decode(nonce)
            .map_err(|_| NonceError::Unknown)?;
        if raw.len() != NONCE_LEN {
            return Err(NonceError::Unknown);
        }
        let (signed, tag) = raw.split_at(8 + RANDOM_LEN);
        let expected = hmac::sign(&self.key, signed);
        if !constant_time_eq(&expected.as_ref()[..MAC_LEN], tag) {
            return Err(NonceError::Unknown);
        }
        let mut ts = [0_u8; 8];
        ts.copy_from_slice(&signed[..8]);
        let issued = i64::from_be_bytes(ts);
        let now_s = now.unix_timestamp();
        let expires = issued.saturating_add(self.lifetime.whole_seconds());
        if now_s > expires || issued > now_s + 60 {
            return Err(NonceError::Expired);
        }
        let mut id = [0_u8; RANDOM_LEN];
        id.copy_from_slice(&signed[8..]);
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        if now_s >= used.next_prune {
            used.entries.retain(|_, exp| *exp >= now_s);
            used.next_prune = now_s + 60;
        }
        if used.entries.insert(id, expires).is_some() {
            return Err(NonceError::Reused);
        }
        Ok((id, expires))
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0_u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn nonces_are_single_use_and_bounded_in_time() {
        let svc = NonceService::new(Duration::minutes(10));
        let t0 = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let n = svc.issue(t0);
        assert_eq!(svc.redeem(&n, t0).await, Ok(()));
        assert_eq!(svc.redeem(&n, t0).await, Err(NonceError::Reused));
        let old = svc.issue(t0);
        assert_eq!(
            svc.redeem(&old, t0 + Duration::minutes(11)).await,
            Err(NonceError::Expired)
        );
        assert_eq!(svc.redeem("bm9wZQ", t0).await, Err(NonceError::Unknown));
        let mut forged = svc.issue(t0).into_bytes();
        let last = forged.len() - 1;
        forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
        assert_eq!(
            svc.redeem(std::str::from_utf8(&forged).unwrap(), t0).await,
            Err(NonceError::Unknown)
        );
        let other = NonceService::new(Duration::minutes(10));
        assert_eq!(
            other.redeem(&svc.issue(t0), t0).await,
            Err(NonceError::Unknown)
        );
    }

    #[tokio::test]
    async fn shared_key_nonces_work_across_instances() {
        let a = NonceService::with_key(b"0123456789abcdef0123456789abcdef", Duration::minutes(5));
        let b = NonceService::with_key(b"0123456789abcdef0123456789abcdef", Duration::minutes(5));
        let t0 = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        assert_eq!(b.redeem(&a.issue(t0), t0).await, Ok(()));
    }
}
