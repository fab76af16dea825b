//! Replay nonces (RFC 8555 §6.5).
//!
//! A nonce is `issued-at || instance || mode || random || MAC`, so an instance can tell a nonce
//! it may accept from a forged one without a lookup, and a nonce older than the lifetime is
//! refused without remembering it.
//!
//! A nonce must never be accepted twice, by any instance, even while Redis is unreachable. So
//! every nonce says where it may be redeemed:
//! - *shared* nonces (mode 1, issued while the shared ledger answered) are redeemable at any
//!   instance, but only through the ledger's atomic record-once. When the ledger does not answer
//!   they are refused: no instance can know whether another one already accepted them.
//! - *local* nonces (mode 0, issued without a ledger, or while this instance's last contact with
//!   it failed) are redeemable only at the instance that issued them, through its memory.
//!
//! A refusal is a `badNonce` whose response carries a fresh nonce, issued after the failure was
//! seen and therefore local: clients retry and go on working at that instance during an outage.
//! Shared nonces are MACed with the key all instances read from the ledger; local ones with a key
//! that never leaves the instance.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::RwLock;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicI64;
use std::sync::atomic::Ordering;

use aws_lc_rs::hmac;
use aws_lc_rs::rand::SecureRandom;
use aws_lc_rs::rand::SystemRandom;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use time::Duration;
use time::OffsetDateTime;

/// The largest clock difference between instances that nonces tolerate: a nonce issued "in the
/// future" by up to this much is accepted, and a shared nonce's Redis record is kept this much
/// longer than the nonce lives, so no instance can accept it after the record is gone.
const MAX_CLOCK_SKEW_SECS: i64 = 60;

const TIME_LEN: usize = 8;
const INSTANCE_LEN: usize = 8;
const RANDOM_LEN: usize = 12;
const MAC_LEN: usize = 16;
const INSTANCE_AT: usize = TIME_LEN;
const MODE_AT: usize = INSTANCE_AT + INSTANCE_LEN;
const RANDOM_AT: usize = MODE_AT + 1;
const SIGNED_LEN: usize = RANDOM_AT + RANDOM_LEN;
const NONCE_LEN: usize = SIGNED_LEN + MAC_LEN;

const MODE_LOCAL: u8 = 0;
const MODE_SHARED: u8 = 1;

/// While the ledger is unreachable, it is asked again at most this often (milliseconds), so an
/// outage costs one failed call per second rather than one per request.
const PROBE_INTERVAL_MS: i64 = 1_000;

/// Why a nonce was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonceError {
    /// Not a nonce this server issued (or one under a shared key that has since changed).
    Unknown,
    /// Older than the nonce lifetime.
    Expired,
    /// Already used once.
    Reused,
    /// A local nonce of another instance: only the instance that issued it can tell whether it
    /// was used.
    OtherInstance,
    /// A shared nonce while the shared ledger does not answer: accepting it could accept it twice.
    LedgerUnavailable,
    /// A valid nonce refused on purpose by test mode ([`NonceRejection`]), so that clients
    /// under test prove they retry `badNonce`.
    Injected,
}

impl NonceError {
    /// The `reason` label of [`NONCES_REFUSED`].
    pub fn label(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Expired => "expired",
            Self::Reused => "reused",
            Self::OtherInstance => "other_instance",
            Self::LedgerUnavailable => "ledger_unavailable",
            Self::Injected => "injected",
        }
    }
}

/// Metric: refused nonces by reason; `ledger_unavailable` counts refusals during Redis outages.
pub const NONCES_REFUSED: &str = "certeasy_nonces_refused_total";

/// What the ledger answered to a redemption.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redemption {
    /// Recorded now: the first use.
    First,
    /// Already recorded.
    Again,
    /// The ledger no longer holds the key the nonce was checked under (it was restarted empty,
    /// or another instance replaced the key): what it remembered may be lost.
    KeyChanged,
}

/// A future returned by a [`NonceLedger`]; errors are for logs only.
pub type LedgerFuture<'a, T> =
    std::pin::Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;

/// Where several instances record redeemed nonces, so a shared nonce is single-use across all.
pub trait NonceLedger: Send + Sync {
    /// The key every instance shares: the stored one, or `proposal` when none is stored.
    fn shared_key<'a>(&'a self, proposal: &'a str) -> LedgerFuture<'a, String>;

    /// Records `id` for `ttl`, atomically with a check that `key` is still the shared key.
    fn redeem_once<'a>(
        &'a self,
        key: &'a str,
        id: &'a str,
        ttl: std::time::Duration,
    ) -> LedgerFuture<'a, Redemption>;
}

/// Test mode only (`certeasy serve --test-mode --reject-nonces PERCENT`): refuses a share of
/// otherwise valid nonces, as Pebble's `PEBBLE_WFE_NONCEREJECT` does, so ACME clients under test
/// prove they retry `badNonce` with the nonce of the refusal. The dice are injected, so tests
/// decide exactly which nonces are refused; nothing here is process-global.
pub struct NonceRejection {
    percent: u8,
    roll: Box<dyn Fn() -> u8 + Send + Sync>,
}

impl NonceRejection {
    /// Refuses `percent` % (capped at 100) of valid nonces, drawn from the system's random
    /// number generator.
    pub fn random(percent: u8) -> Self {
        let rng = SystemRandom::new();
        // From 32 bits, so the modulo's bias (under 1e-7) does not skew the share.
        Self::with_roll(percent, move || {
            u8::try_from(u32::from_be_bytes(random_bytes::<4>(&rng)) % 100).unwrap_or(0)
        })
    }

    /// Refuses a nonce when `roll()` (a number in 0..100) is below `percent`.
    pub fn with_roll(percent: u8, roll: impl Fn() -> u8 + Send + Sync + 'static) -> Self {
        Self {
            percent: percent.min(100),
            roll: Box::new(roll),
        }
    }

    /// Whether this (valid) nonce is refused.
    fn rejects(&self) -> bool {
        self.percent > 0 && (self.roll)() < self.percent
    }
}

impl std::fmt::Debug for NonceRejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NonceRejection")
            .field("percent", &self.percent)
            .finish_non_exhaustive()
    }
}

/// Issues and redeems nonces.
pub struct NonceService {
    instance: [u8; INSTANCE_LEN],
    local_key: hmac::Key,
    rng: SystemRandom,
    lifetime: Duration,
    used: Mutex<UsedSet>,
    shared: Option<Arc<Shared>>,
    /// Test mode's injected refusals; `None` in production.
    rejection: Option<NonceRejection>,
}

/// The ledger and what this instance knows of it.
struct Shared {
    ledger: Arc<dyn NonceLedger>,
    key: RwLock<Option<SharedKey>>,
    /// False from a failed contact until the next successful one: shared nonces are not issued.
    reachable: AtomicBool,
    probing: AtomicBool,
    last_probe_ms: AtomicI64,
}

#[derive(Clone)]
struct SharedKey {
    text: Arc<str>,
    mac: hmac::Key,
}

impl SharedKey {
    fn new(text: &str) -> Self {
        Self {
            text: Arc::from(text),
            mac: hmac::Key::new(hmac::HMAC_SHA256, text.as_bytes()),
        }
    }
}

impl Shared {
    fn key(&self) -> Option<SharedKey> {
        self.key.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_key(&self, text: &str) {
        let mut key = self.key.write().unwrap_or_else(|p| p.into_inner());
        if key.as_ref().is_some_and(|k| &*k.text == text) {
            return;
        }
        if key.is_some() {
            tracing::warn!(
                "the shared nonce key changed (Redis lost its data, or another instance replaced it); shared nonces issued before are refused"
            );
        }
        *key = Some(SharedKey::new(text));
    }

    /// Asks the ledger for the shared key in the background, at most once per interval, so a
    /// forged nonce cannot make an instance hammer Redis.
    fn maybe_probe(self: &Arc<Self>, now_ms: i64) {
        let last = self.last_probe_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(last) < PROBE_INTERVAL_MS
            || self.probing.swap(true, Ordering::AcqRel)
        {
            return;
        }
        self.last_probe_ms.store(now_ms, Ordering::Relaxed);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.probing.store(false, Ordering::Release);
            return;
        };
        let shared = Arc::clone(self);
        runtime.spawn(async move {
            let proposal = random_key_text(&SystemRandom::new());
            match shared.ledger.shared_key(&proposal).await {
                Ok(text) => {
                    shared.set_key(&text);
                    shared.reachable.store(true, Ordering::Release);
                    tracing::info!("the shared nonce ledger answers again; nonces are shared");
                }
                Err(e) => {
                    tracing::debug!(error = %e, "the shared nonce ledger is still unreachable")
                }
            }
            shared.probing.store(false, Ordering::Release);
        });
    }
}

struct UsedSet {
    entries: HashMap<[u8; RANDOM_LEN], i64>,
    next_prune: i64,
}

impl std::fmt::Debug for NonceService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NonceService")
            .field("lifetime", &self.lifetime)
            .field("shared", &self.shared.is_some())
            .finish_non_exhaustive()
    }
}

fn random_bytes<const N: usize>(rng: &SystemRandom) -> [u8; N] {
    let mut bytes = [0_u8; N];
    // SystemRandom only fails when the OS has no entropy source, which aws-lc treats as fatal.
    if rng.fill(&mut bytes).is_err() {
        tracing::error!("the system random number generator failed");
    }
    bytes
}

fn random_key_text(rng: &SystemRandom) -> String {
    hex::encode(random_bytes::<32>(rng))
}

impl NonceService {
    /// A single instance: every nonce is local, under a fresh random key.
    pub fn new(lifetime: Duration) -> Self {
        let rng = SystemRandom::new();
        Self {
            instance: random_bytes(&rng),
            local_key: hmac::Key::new(hmac::HMAC_SHA256, &random_bytes::<32>(&rng)),
            rng,
            lifetime,
            used: Mutex::new(UsedSet {
                entries: HashMap::new(),
                next_prune: 0,
            }),
            shared: None,
            rejection: None,
        }
    }

    /// This service, refusing a share of valid nonces as `rejection` says (test mode only).
    /// The nonce is redeemed first, so a refused nonce is spent like an accepted one.
    #[must_use]
    pub fn with_rejection(mut self, rejection: NonceRejection) -> Self {
        self.rejection = Some(rejection);
        self
    }

    /// One of several instances sharing `ledger`. The shared key is read (or proposed) now; if
    /// the ledger does not answer, the instance starts with local nonces and keeps asking.
    pub async fn with_ledger(lifetime: Duration, ledger: Arc<dyn NonceLedger>) -> Self {
        let mut service = Self::new(lifetime);
        let proposal = random_key_text(&service.rng);
        let (key, reachable) = match ledger.shared_key(&proposal).await {
            Ok(text) => (Some(SharedKey::new(&text)), true),
            Err(e) => {
                tracing::warn!(error = %e, "the shared nonce ledger did not answer at start-up; nonces stay local until it does");
                (None, false)
            }
        };
        service.shared = Some(Arc::new(Shared {
            ledger,
            key: RwLock::new(key),
            reachable: AtomicBool::new(reachable),
            probing: AtomicBool::new(false),
            last_probe_ms: AtomicI64::new(i64::MIN),
        }));
        service
    }

    /// A fresh nonce: shared while the ledger answers, local otherwise.
    pub fn issue(&self, now: OffsetDateTime) -> String {
        let shared_key = self.shared.as_ref().and_then(|shared| {
            if shared.reachable.load(Ordering::Acquire) {
                shared.key()
            } else {
                shared.maybe_probe(unix_ms(now));
                None
            }
        });
        let mut raw = [0_u8; NONCE_LEN];
        raw[..TIME_LEN].copy_from_slice(&now.unix_timestamp().to_be_bytes());
        raw[INSTANCE_AT..MODE_AT].copy_from_slice(&self.instance);
        raw[MODE_AT] = if shared_key.is_some() {
            MODE_SHARED
        } else {
            MODE_LOCAL
        };
        raw[RANDOM_AT..SIGNED_LEN].copy_from_slice(&random_bytes::<RANDOM_LEN>(&self.rng));
        let key = shared_key.as_ref().map_or(&self.local_key, |k| &k.mac);
        let tag = hmac::sign(key, &raw[..SIGNED_LEN]);
        raw[SIGNED_LEN..].copy_from_slice(&tag.as_ref()[..MAC_LEN]);
        URL_SAFE_NO_PAD.encode(raw)
    }

    /// Accepts a nonce once, across every instance.
    pub async fn redeem(&self, nonce: &str, now: OffsetDateTime) -> Result<(), NonceError> {
        let mut verdict = self.check(nonce, now).await;
        if verdict.is_ok() && self.rejection.as_ref().is_some_and(NonceRejection::rejects) {
            verdict = Err(NonceError::Injected);
        }
        if let Err(e) = verdict {
            metrics::counter!(NONCES_REFUSED, "reason" => e.label()).increment(1);
        }
        verdict
    }

    async fn check(&self, nonce: &str, now: OffsetDateTime) -> Result<(), NonceError> {
        let raw = URL_SAFE_NO_PAD
            .decode(nonce)
            .map_err(|_| NonceError::Unknown)?;
        if raw.len() != NONCE_LEN {
            return Err(NonceError::Unknown);
        }
        let (signed, tag) = raw.split_at(SIGNED_LEN);
        match signed[MODE_AT] {
            MODE_LOCAL => {
                if signed[INSTANCE_AT..MODE_AT] != self.instance {
                    return Err(NonceError::OtherInstance);
                }
                check_mac(&self.local_key, signed, tag)?;
                let expires = self.expiry(signed, now)?;
                self.redeem_locally(signed, expires, now)
            }
            MODE_SHARED => {
                let shared = self.shared.as_ref().ok_or(NonceError::Unknown)?;
                let Some(key) = shared.key() else {
                    shared.maybe_probe(unix_ms(now));
                    return Err(NonceError::Unknown);
                };
                if let Err(e) = check_mac(&key.mac, signed, tag) {
                    // Another instance may have agreed on a new key after Redis lost its data.
                    shared.maybe_probe(unix_ms(now));
                    return Err(e);
                }
                let expires = self.expiry(signed, now)?;
                // The record must outlive the nonce on every instance's clock, not only on ours:
                // an instance whose clock is behind still accepts the nonce after it expired here.
                let ttl = std::time::Duration::from_secs(
                    u64::try_from(expires - now.unix_timestamp() + MAX_CLOCK_SKEW_SECS)
                        .unwrap_or(0)
                        .max(1),
                );
                let id = hex::encode(&signed[INSTANCE_AT..]);
                match shared.ledger.redeem_once(&key.text, &id, ttl).await {
                    Ok(answer) => {
                        let reachable = answer != Redemption::KeyChanged;
                        shared.reachable.store(reachable, Ordering::Release);
                        match answer {
                            Redemption::First => Ok(()),
                            Redemption::Again => Err(NonceError::Reused),
                            Redemption::KeyChanged => {
                                shared.maybe_probe(unix_ms(now));
                                Err(NonceError::LedgerUnavailable)
                            }
                        }
                    }
                    Err(e) => {
                        shared.reachable.store(false, Ordering::Release);
                        tracing::warn!(error = %e, "shared nonce ledger unreachable: shared nonces are refused and new nonces are local until it answers");
                        Err(NonceError::LedgerUnavailable)
                    }
                }
            }
            _ => Err(NonceError::Unknown),
        }
    }

    /// When the nonce stops being valid (Unix seconds), or why it already has.
    fn expiry(&self, signed: &[u8], now: OffsetDateTime) -> Result<i64, NonceError> {
        let mut ts = [0_u8; TIME_LEN];
        ts.copy_from_slice(&signed[..TIME_LEN]);
        let issued = i64::from_be_bytes(ts);
        let now_s = now.unix_timestamp();
        let expires = issued.saturating_add(self.lifetime.whole_seconds());
        if now_s > expires || issued > now_s + MAX_CLOCK_SKEW_SECS {
            return Err(NonceError::Expired);
        }
        Ok(expires)
    }

    fn redeem_locally(
        &self,
        signed: &[u8],
        expires: i64,
        now: OffsetDateTime,
    ) -> Result<(), NonceError> {
        let mut id = [0_u8; RANDOM_LEN];
        id.copy_from_slice(&signed[RANDOM_AT..]);
        let now_s = now.unix_timestamp();
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        if now_s >= used.next_prune {
            used.entries.retain(|_, exp| *exp >= now_s);
            used.next_prune = now_s + 60;
        }
        if used.entries.insert(id, expires).is_some() {
            return Err(NonceError::Reused);
        }
        Ok(())
    }
}

fn unix_ms(now: OffsetDateTime) -> i64 {
    i64::try_from(now.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
}

fn check_mac(key: &hmac::Key, signed: &[u8], tag: &[u8]) -> Result<(), NonceError> {
    let expected = hmac::sign(key, signed);
    aws_lc_rs::constant_time::verify_slices_are_equal(&expected.as_ref()[..MAC_LEN], tag)
        .map_err(|_| NonceError::Unknown)
}

pub mod redis;
#[cfg(test)]
mod tests;
