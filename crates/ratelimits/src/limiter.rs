//! The limiter: the current limits and overrides, a store, and the batch a request spends.

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Duration;

use arc_swap::ArcSwap;
use ipnet::IpNet;
use metrics::Counter;
use metrics::Histogram;
use time::OffsetDateTime;

use crate::batch::Kind;
use crate::batch::Transaction;
use crate::batch::binding;
use crate::batch::check_unique;
use crate::batch::writes;
use crate::bucket::BucketId;
use crate::bucket::ip_bucket;
use crate::bucket_key::BucketKey;
use crate::config::Mode;
use crate::config::RateLimitingConfig;
use crate::error::Error;
use crate::error::Result;
use crate::gcra::Decision;
use crate::limit::Limit;
use crate::limit::LimitName;
use crate::limit::Limits;
use crate::nanos::duration;
use crate::nanos::from_unix_nanos;
use crate::nanos::unix_nanos;
use crate::overrides::Overrides;
use crate::overrides::ResolvedOverrides;
use crate::store::Store;

/// Metric: decisions per limit and outcome (`allowed`, `denied`, `shadow_denied`, `fail_open`).
pub const DECISIONS: &str = "certeasy_ratelimit_decisions_total";
/// Metric: seconds spent in the store per batch.
pub const LATENCY: &str = "certeasy_ratelimit_seconds";
pub use crate::store::REDIS_ERRORS;

/// One bucket a request wants to spend from (or check).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The limit family.
    pub limit: LimitName,
    /// Whom the bucket counts. For IP limits pass the client's full address
    /// ([`Request::ip`]): whitelisting looks at it, and the limiter keys IPv6 by prefix.
    pub id: BucketId,
    /// Tokens, 0..=burst.
    pub cost: u64,
    /// How it takes part in the batch.
    pub kind: Kind,
}

impl Request {
    /// A check-and-spend request.
    pub fn new(limit: LimitName, id: BucketId, cost: u64) -> Self {
        Self {
            limit,
            id,
            cost,
            kind: Kind::CheckAndSpend,
        }
    }

    /// A check-and-spend request on a client address's bucket.
    pub fn ip(limit: LimitName, ip: IpAddr, cost: u64) -> Self {
        Self::new(limit, BucketId::Ip(IpNet::from(ip)), cost)
    }

    /// The same request with another kind.
    pub fn with_kind(mut self, kind: Kind) -> Self {
        self.kind = kind;
        self
    }
}

/// A limit's numbers and one bucket's state, as reported to clients and operators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingLimit {
    /// The limit family.
    pub name: LimitName,
    /// The bucket (its textual key is its `Display`).
    pub key: BucketKey,
    /// The limit's burst (after overrides).
    pub burst: u64,
    /// The limit's count per period (after overrides).
    pub count: u64,
    /// The limit's period (after overrides).
    pub period: Duration,
    /// Whether this bucket allowed the request.
    pub allowed: bool,
    /// Tokens left.
    pub remaining: u64,
    /// Wait until a request of the same cost fits; the HTTP layer rounds up to seconds.
    pub retry_in: Duration,
    /// Wait until the bucket is full again.
    pub reset_in: Duration,
}

impl BindingLimit {
    /// `written`: whether the decision was stored. An allowed decision that was not (a check-only
    /// bucket, or any bucket of a denied batch) reports what the bucket holds, not what it would
    /// hold had the cost been spent: a fresh failed-validation pair is full. `remaining + cost`
    /// is exact: the decision's span is the bucket's minus cost × emission interval.
    fn new(tx: &Transaction, d: &Decision, written: bool) -> Self {
        let (remaining, reset_in) = if d.allowed && !written {
            let unspent = i64::try_from(tx.cost())
                .unwrap_or(i64::MAX)
                .saturating_mul(tx.limit().emission_interval());
            (
                d.remaining
                    .saturating_add(tx.cost())
                    .min(tx.limit().burst()),
                d.reset_in.saturating_sub(unspent).max(0),
            )
        } else {
            (d.remaining, d.reset_in)
        };
        Self {
            name: tx.name(),
            key: tx.key().clone(),
            burst: tx.limit().burst(),
            count: tx.limit().count(),
            period: tx.limit().period(),
            allowed: d.allowed,
            remaining,
            retry_in: duration(d.retry_in),
            reset_in: duration(reset_in),
        }
    }
}

/// The answer for a request's batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the request may proceed.
    pub allowed: bool,
    /// The strictest enforced bucket: the denying one, or when allowed the one closest to denying
    /// (for `RateLimit` headers). None when no enforced bucket applied.
    pub binding: Option<BindingLimit>,
    /// Shadow-mode buckets that would have denied.
    pub shadow_denials: Vec<BindingLimit>,
    /// Every enforced bucket of the batch, in the batch's order, so a client can watch each of
    /// its quotas (`RateLimit` headers list them all, not only the binding one). Empty when the
    /// store failed.
    pub applied: Vec<BindingLimit>,
    /// The store failed and the request was allowed without counting.
    pub fail_open: bool,
}

impl Verdict {
    fn allow_all(fail_open: bool) -> Self {
        Self {
            allowed: true,
            binding: None,
            shadow_denials: Vec::new(),
            applied: Vec::new(),
            fail_open,
        }
    }
}

/// A bucket's state for `certeasy admin ratelimit show`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketState {
    /// The bucket key.
    pub key: String,
    /// The limit in force for it (after overrides).
    pub limit: Limit,
    /// Tokens available now.
    pub remaining: u64,
    /// When the bucket is full again (now if it is full).
    pub reset_at: OffsetDateTime,
}

/// A request's transactions.
type Batch = Vec<Transaction>;

/// Everything a reload replaces at once.
#[derive(Debug)]
struct Policy {
    limits: Limits,
    overrides: ResolvedOverrides,
    whitelist: Vec<IpNet>,
    ipv6_prefix: u8,
}

impl Policy {
    fn build(config: &RateLimitingConfig, overrides: &Overrides) -> Result<Self> {
        if !(1..=128).contains(&config.ipv6_prefix_length) {
            return Err(Error::InvalidLimit {
                limit: "ipv6-prefix-length".to_owned(),
                reason: format!("{} is not between 1 and 128", config.ipv6_prefix_length),
            });
        }
        Ok(Self {
            limits: Limits::from_config(config)?,
            overrides: ResolvedOverrides::build(overrides, config)?,
            whitelist: config.whitelist.clone(),
            ipv6_prefix: config.ipv6_prefix_length,
        })
    }

    /// The limit for a bucket, or None if the limit is disabled or the client whitelisted.
    /// Also returns the id as keyed (IPv6 addresses reduced to their prefix); other ids are
    /// borrowed, as they are keyed as given.
    fn resolve<'a>(&self, name: LimitName, id: &'a BucketId) -> Option<(Limit, Cow<'a, BucketId>)> {
        let (limit, keyed) = self.resolve_lean(name, id)?;
        Some(match keyed {
            Some(net) => (limit, Cow::Owned(BucketId::Ip(net))),
            None => (limit, Cow::Borrowed(id)),
        })
    }

    /// The network a bucket is keyed by: IPv6 addresses (and longer prefixes) reduced to the
    /// configured prefix, everything else as given.
    fn key_net(&self, net: IpNet) -> IpNet {
        match net {
            IpNet::V6(v6) if v6.prefix_len() > self.ipv6_prefix => {
                ip_bucket(IpAddr::V6(v6.addr()), self.ipv6_prefix)
            }
            _ => net,
        }
    }

    /// [`Policy::resolve`] for the request path: the keyed network only for address ids (other
    /// ids are keyed as given), so nothing is copied or wrapped.
    fn resolve_lean(&self, name: LimitName, id: &BucketId) -> Option<(Limit, Option<IpNet>)> {
        let default = self.limits.get(name)?;
        match id {
            BucketId::Ip(net) => {
                if self.whitelist.iter().any(|w| w.contains(net)) {
                    return None;
                }
                let keyed = self.key_net(*net);
                let limit = self
                    .overrides
                    .for_net(name, keyed)
                    .copied()
                    .unwrap_or(*default);
                Some((limit, Some(keyed)))
            }
            BucketId::Account(account) | BucketId::AccountIdentifier { account, .. } => {
                let limit = self
                    .overrides
                    .for_account(name, *account)
                    .copied()
                    .unwrap_or(*default);
                Some((limit, None))
            }
        }
    }
}

/// The rate limiter shared by every request handler.
pub struct Limiter {
    policy: ArcSwap<Policy>,
    store: Arc<dyn Store>,
    instruments: OnceLock<Instruments>,
}

/// What a decision counts as in [`DECISIONS`].
#[derive(Debug, Clone, Copy)]
enum Outcome {
    Allowed,
    Denied,
    ShadowDenied,
    FailOpen,
}

impl Outcome {
    const ALL: [Outcome; 4] = [
        Self::Allowed,
        Self::Denied,
        Self::ShadowDenied,
        Self::FailOpen,
    ];

    const fn label(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Denied => "denied",
            Self::ShadowDenied => "shadow_denied",
            Self::FailOpen => "fail_open",
        }
    }
}

/// Metric handles, registered once instead of looked up by name and labels for every bucket of
/// every request. Registered on the first decision: the process installs its recorder before it
/// serves (`certeasy serve` does so first thing), and handles taken before that would count
/// nowhere.
struct Instruments {
    decisions: [[Counter; Outcome::ALL.len()]; LimitName::ALL.len()],
    latency: Histogram,
}

impl Instruments {
    fn register() -> Self {
        Self {
            decisions: LimitName::ALL.map(|name| {
                Outcome::ALL.map(|outcome| {
                    metrics::counter!(DECISIONS, "limit" => name.as_str(), "outcome" => outcome.label())
                })
            }),
            latency: metrics::histogram!(LATENCY),
        }
    }

    fn count(&self, name: LimitName, outcome: Outcome) {
        self.decisions[name.index()][outcome as usize].increment(1);
    }
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("policy", &self.policy.load())
            .finish_non_exhaustive()
    }
}

impl Limiter {
    /// Validates the configuration and overrides (all of it, before serving anything).
    pub fn new(
        config: &RateLimitingConfig,
        overrides: &Overrides,
        store: Arc<dyn Store>,
    ) -> Result<Self> {
        Ok(Self {
            policy: ArcSwap::from_pointee(Policy::build(config, overrides)?),
            store,
            instruments: OnceLock::new(),
        })
    }

    /// Replaces limits and overrides atomically (SIGHUP). On error the old ones stay in force.
    /// Buckets are kept: a raised limit applies to them at once (see [`crate::gcra::effective_tat`]).
    pub fn reload(&self, config: &RateLimitingConfig, overrides: &Overrides) -> Result<()> {
        self.policy
            .store(Arc::new(Policy::build(config, overrides)?));
        Ok(())
    }

    /// Like [`Limiter::reload`], then gives a fresh bucket to every id listed explicitly in an
    /// override (an account id or a single address) whose limit became more generous: a larger
    /// burst or a faster rate. A stored TAT measures debt in the *old* emission interval, so
    /// without this an exhausted bucket would stay refused after its override was raised
    /// (Boulder's open bug #8785). Returns how many buckets were refreshed.
    ///
    /// Buckets reached only through CIDR overrides or changed defaults cannot be enumerated; for
    /// them a larger burst applies at once (the TAT is clamped on every decision) and a faster
    /// rate applies as the existing debt drains.
    pub async fn reload_and_refresh(
        &self,
        config: &RateLimitingConfig,
        overrides: &Overrides,
    ) -> Result<usize> {
        let new = Arc::new(Policy::build(config, overrides)?);
        let old = self.policy.swap(Arc::clone(&new));
        let mut keys = Vec::new();
        for entry in overrides.entries() {
            for id in &entry.ids {
                let bucket = match id {
                    crate::overrides::OverrideId::Account(account) => BucketId::Account(*account),
                    crate::overrides::OverrideId::Net(net)
                        if net.prefix_len() == net.max_prefix_len() =>
                    {
                        BucketId::Ip(*net)
                    }
                    crate::overrides::OverrideId::Net(_) => continue,
                };
                let Some((now_limit, keyed)) = new.resolve(entry.limit, &bucket) else {
                    continue;
                };
                let raised = old
                    .resolve(entry.limit, &bucket)
                    .is_some_and(|(before, _)| {
                        now_limit.burst() > before.burst()
                            || now_limit.emission_interval() < before.emission_interval()
                    });
                let key = BucketKey::new(entry.limit, &keyed)?;
                if raised && !keys.contains(&key) {
                    keys.push(key);
                }
            }
        }
        if !keys.is_empty() {
            self.store.reset(&keys).await?;
        }
        Ok(keys.len())
    }

    /// The bucket id of a client address: IPv4 as is, IPv6 by the configured prefix.
    pub fn ip_id(&self, ip: IpAddr) -> BucketId {
        BucketId::Ip(self.policy.load().key_net(IpNet::from(ip)))
    }

    /// Whether a client address bypasses the IP-based limits.
    pub fn is_whitelisted(&self, ip: IpAddr) -> bool {
        let net = IpNet::from(ip);
        self.policy
            .load()
            .whitelist
            .iter()
            .any(|w| w.contains(&net))
    }

    /// The limit in force for a bucket, if any (disabled limits and whitelisted clients: none).
    pub fn limit_for(&self, name: LimitName, id: &BucketId) -> Option<Limit> {
        self.policy.load().resolve(name, id).map(|(limit, _)| limit)
    }

    /// Fills `batch` (in place: it is large enough that moving it shows in profiles). Duplicate
    /// keys are refused by the stores when spending and by [`Limiter::refund`].
    fn transactions(&self, requests: &[Request], batch: &mut Batch) -> Result<()> {
        let policy = self.policy.load();
        let mut last_account = None;
        for request in requests {
            // Checked even for disabled limits, so a wrong id is found in tests with defaults.
            // The constructors below rely on it.
            request.id.check_kind(request.limit)?;
            let Some((limit, keyed_net)) = policy.resolve_lean(request.limit, &request.id) else {
                continue;
            };
            Transaction::check_cost(request.limit, &limit, request.cost)?;
            let account = request.id.account();
            let key = match (keyed_net, batch.last()) {
                (Some(net), _) => BucketKey::of_net(request.limit, net),
                (None, Some(last)) if account == last_account => {
                    last.key().sibling_of(request.limit, &request.id)
                }
                (None, _) => BucketKey::of_checked(request.limit, &request.id),
            };
            last_account = account;
            batch.push(Transaction::checked(
                request.limit,
                key,
                limit,
                request.cost,
                request.kind,
            ));
        }
        Ok(())
    }

    /// Decides a request's buckets as one batch and spends them if allowed.
    ///
    /// Errors are programming errors only (an id of the wrong kind, a cost above the burst, a
    /// bucket twice). A store failure allows the request (fail open), is logged and counted: an
    /// outage of the limiter should never become an outage of issuance.
    pub async fn check(&self, now: OffsetDateTime, requests: &[Request]) -> Result<Verdict> {
        let mut batch = Batch::with_capacity(requests.len());
        self.transactions(requests, &mut batch)?;
        if batch.is_empty() {
            return Ok(Verdict::allow_all(false));
        }
        let instruments = self.instruments.get_or_init(Instruments::register);
        // The TSC clock: two reads per request, where the system clock would cost a syscall's
        // worth on some virtual machines.
        let started = quanta::Instant::now();
        let now = unix_nanos(now);
        let result = match self.store.spend_batch_ready(now, &batch) {
            Some(ready) => ready,
            None => self.store.spend_batch(now, &batch).await,
        };
        instruments.latency.record(started.elapsed().as_secs_f64());
        let outcome = match result {
            Ok(outcome) => outcome,
            Err(err) if err.is_store_failure() => {
                tracing::warn!(error = %err, "rate-limit store failed; allowing the request");
                for tx in &batch {
                    instruments.count(tx.name(), Outcome::FailOpen);
                }
                return Ok(Verdict::allow_all(true));
            }
            Err(err) => return Err(err),
        };
        let mut shadow_denials = Vec::new();
        for (tx, d) in batch.iter().zip(&outcome.decisions) {
            let counted = if d.allowed {
                Outcome::Allowed
            } else if tx.limit().mode() == Mode::Shadow && tx.kind() != Kind::SpendOnly {
                shadow_denials.push(BindingLimit::new(tx, d, false));
                tracing::info!(limit = %tx.name(), key = %tx.key(), "shadow-mode rate limit would have denied");
                Outcome::ShadowDenied
            } else {
                Outcome::Denied
            };
            instruments.count(tx.name(), counted);
        }
        let report = |tx: &Transaction, d: &Decision| {
            BindingLimit::new(tx, d, writes(tx, d, outcome.allowed))
        };
        let binding =
            binding(&batch, &outcome.decisions).map(|i| report(&batch[i], &outcome.decisions[i]));
        let applied = batch
            .iter()
            .zip(&outcome.decisions)
            .filter(|(tx, _)| tx.enforced())
            .map(|(tx, d)| report(tx, d))
            .collect();
        Ok(Verdict {
            allowed: outcome.allowed,
            binding,
            shadow_denials,
            applied,
            fail_open: false,
        })
    }

    /// Gives back what [`check`](Self::check) spent when the request failed afterwards. Best
    /// effort: a store failure is logged and counted, not returned.
    pub async fn refund(&self, now: OffsetDateTime, requests: &[Request]) -> Result<()> {
        let mut batch = Batch::with_capacity(requests.len());
        self.transactions(requests, &mut batch)?;
        check_unique(&batch)?;
        if batch.is_empty() {
            return Ok(());
        }
        if let Err(err) = self.store.refund(unix_nanos(now), &batch).await {
            if !err.is_store_failure() {
                return Err(err);
            }
            tracing::warn!(error = %err, "rate-limit refund failed");
        }
        Ok(())
    }

    /// Makes a bucket full (`certeasy admin ratelimit reset`, a successful validation resetting
    /// the zombie counter). Store errors are returned: an operator must know it did not happen.
    pub async fn reset(&self, limit: LimitName, id: &BucketId) -> Result<()> {
        let key = match id {
            BucketId::Ip(net) => {
                BucketKey::new(limit, &BucketId::Ip(self.policy.load().key_net(*net)))?
            }
            _ => BucketKey::new(limit, id)?,
        };
        self.store.reset(&[key]).await
    }

    /// A bucket's state without spending (`certeasy admin ratelimit show`). None when the limit is
    /// disabled or the client whitelisted.
    pub async fn show(
        &self,
        now: OffsetDateTime,
        limit: LimitName,
        id: &BucketId,
    ) -> Result<Option<BucketState>> {
        id.check_kind(limit)?;
        let Some((resolved, keyed)) = self.policy.load().resolve(limit, id) else {
            return Ok(None);
        };
        let key = BucketKey::new(limit, &keyed)?;
        let now_ns = unix_nanos(now);
        let d = self.store.peek(now_ns, &key, &resolved).await?;
        Ok(Some(BucketState {
            key: key.to_string(),
            limit: resolved,
            remaining: d.remaining,
            reset_at: from_unix_nanos(now_ns.saturating_add(d.reset_in)),
        }))
    }
}
