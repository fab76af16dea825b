//! The limiter: the current limits and overrides, a store, and the batch a request spends.

use std::borrow::Cow;
use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use arc_swap::ArcSwap;
use ipnet::IpNet;
use metrics::Counter;
use metrics::Gauge;
use metrics::Histogram;
use parking_lot::Mutex;
use time::OffsetDateTime;

use crate::batch::BatchOutcome;
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
use crate::store::Debt;
use crate::store::MemoryStore;
use crate::store::Store;

/// Metric: decisions per limit and outcome (`allowed`, `denied`, `shadow_denied`, `fail_open`).
pub const DECISIONS: &str = "certeasy_ratelimit_decisions_total";
/// Metric: seconds spent in the store per batch.
pub const LATENCY: &str = "certeasy_ratelimit_seconds";
/// Metric (gauge, only with Redis): 1 for the store mode in force, 0 for the other; `mode` is
/// `redis` or `memory_fallback`.
pub const STORE_MODE: &str = "certeasy_ratelimit_store_mode";
/// Metric: buckets the memory fallback handed to Redis when it answered again.
pub const HANDED_OVER: &str = "certeasy_ratelimit_fallback_handed_over_total";
/// Resets Redis could not be told during an outage, kept for the hand-over; beyond this many the
/// newest are dropped (a dropped reset only lets an old count survive a success).
const MAX_PENDING_RESETS: usize = 100_000;
/// While Redis is unreachable, it is asked again at most this often (by the next request); the
/// requests in between do not wait for it.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);
pub use crate::store::REDIS_ERRORS;
/// Metric (gauge): the (limit, id) pairs overridden, by `source`: `file` (the overrides file)
/// or `database` (`certeasy admin overrides`, those not expired).
pub const OVERRIDES_IN_EFFECT: &str = "certeasy_ratelimit_overrides";

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
    /// The store failed and some bucket of the batch was not counted: the request was allowed
    /// as far as those buckets go.
    pub fail_open: bool,
    /// Decided by this instance's memory because Redis was unreachable: the buckets of limits
    /// that fail safe ([`LimitName::fails_safe`]) were decided and counted there, and only those
    /// appear in `binding` and `applied`.
    pub fallback: bool,
}

impl Verdict {
    fn allow_all(fail_open: bool) -> Self {
        Self {
            allowed: true,
            binding: None,
            shadow_denials: Vec::new(),
            applied: Vec::new(),
            fail_open,
            fallback: false,
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
    /// What it was built from, so that a change of one source rebuilds it with the others.
    config: RateLimitingConfig,
    file: Overrides,
    database: Overrides,
}

impl Policy {
    fn build(config: &RateLimitingConfig, file: &Overrides, database: &Overrides) -> Result<Self> {
        if !(1..=128).contains(&config.ipv6_prefix_length) {
            return Err(Error::InvalidLimit {
                limit: "ipv6-prefix-length".to_owned(),
                reason: format!("{} is not between 1 and 128", config.ipv6_prefix_length),
            });
        }
        Ok(Self {
            limits: Limits::from_config(config)?,
            overrides: ResolvedOverrides::build_merged(file, database, config)?,
            whitelist: config.whitelist.clone(),
            ipv6_prefix: config.ipv6_prefix_length,
            config: config.clone(),
            file: file.clone(),
            database: database.clone(),
        })
    }

    /// Sets [`OVERRIDES_IN_EFFECT`] to what this policy holds.
    fn publish(&self) {
        metrics::gauge!(OVERRIDES_IN_EFFECT, "source" => "file").set(self.file.pairs() as f64);
        metrics::gauge!(OVERRIDES_IN_EFFECT, "source" => "database")
            .set(self.database.pairs() as f64);
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
    /// Held while a new policy is built from the one in force, so that a reload (the file) and
    /// a refresh of the database's overrides never build from the same old policy and lose one
    /// another's change.
    rebuilding: Mutex<()>,
    store: Arc<dyn Store>,
    /// Only for a remote store (Redis).
    fallback: Option<Fallback>,
    instruments: OnceLock<Instruments>,
}

/// Where the limits that fail safe are counted while Redis is unreachable: this instance's
/// memory, with the same GCRA as every store.
///
/// The limiter switches to it on the first store failure (one warning) and asks Redis again at
/// most once per [`PROBE_INTERVAL`]; requests in between are decided at once, without waiting
/// for a dead server. The first probe that reaches Redis hands over what memory counted: each
/// bucket's debt is added to its Redis bucket (capped at the burst), so the failures seen during
/// the outage keep counting, now for every instance, and memory is emptied. Then Redis is used
/// again (one info line). Resets Redis missed (a success resetting a zombie count) are applied
/// first, so a count a success ended does not come back with Redis.
struct Fallback {
    memory: MemoryStore,
    pending_resets: Mutex<HashSet<BucketKey>>,
    active: AtomicBool,
    /// When the next request may ask Redis while `active`.
    next_probe: Mutex<Instant>,
    /// Held for writing while memory's buckets are handed over, for reading while a request is
    /// decided in memory, so no failure counted in memory is left behind by a hand-over.
    gate: tokio::sync::RwLock<()>,
}

impl Fallback {
    fn new() -> Self {
        Self {
            memory: MemoryStore::default(),
            pending_resets: Mutex::new(HashSet::new()),
            active: AtomicBool::new(false),
            next_probe: Mutex::new(Instant::now()),
            gate: tokio::sync::RwLock::new(()),
        }
    }

    fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// Whether this request is the one to ask Redis now. Another request holding the lock is
    /// asking, or about to.
    fn claim_probe(&self) -> bool {
        let Some(mut next) = self.next_probe.try_lock() else {
            return false;
        };
        let now = Instant::now();
        if now < *next {
            return false;
        }
        *next = now + PROBE_INTERVAL;
        true
    }

    /// A store call failed: switch to memory, warning once per outage.
    fn lost(&self, err: &Error, instruments: &Instruments) {
        *self.next_probe.lock() = Instant::now() + PROBE_INTERVAL;
        if !self.active.swap(true, Ordering::AcqRel) {
            instruments.mode(true);
            tracing::warn!(
                error = %err,
                "rate-limit store unreachable: failed-validation and zombie-pausing limits are counted in this instance's memory, the other limits allow requests uncounted until it answers"
            );
        }
    }

    /// A store call succeeded: back to Redis if memory was in use.
    fn reached(&self, instruments: &Instruments) {
        if self.is_active() && self.active.swap(false, Ordering::AcqRel) {
            instruments.mode(false);
            tracing::info!("rate-limit store reachable again: every limit is counted in it");
        }
    }
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
    /// `[redis, memory_fallback]`, with a remote store only.
    modes: Option<[Gauge; 2]>,
    handed_over: Counter,
}

impl Instruments {
    fn register(remote: bool) -> Self {
        let instruments = Self {
            decisions: LimitName::ALL.map(|name| {
                Outcome::ALL.map(|outcome| {
                    metrics::counter!(DECISIONS, "limit" => name.as_str(), "outcome" => outcome.label())
                })
            }),
            latency: metrics::histogram!(LATENCY),
            modes: remote.then(|| {
                [
                    metrics::gauge!(STORE_MODE, "mode" => "redis"),
                    metrics::gauge!(STORE_MODE, "mode" => "memory_fallback"),
                ]
            }),
            handed_over: metrics::counter!(HANDED_OVER),
        };
        instruments.mode(false);
        instruments
    }

    fn count(&self, name: LimitName, outcome: Outcome) {
        self.decisions[name.index()][outcome as usize].increment(1);
    }

    fn mode(&self, fallback: bool) {
        if let Some([redis, memory]) = &self.modes {
            redis.set(if fallback { 0.0 } else { 1.0 });
            memory.set(if fallback { 1.0 } else { 0.0 });
        }
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
        let policy = Policy::build(config, overrides, &Overrides::empty())?;
        policy.publish();
        Ok(Self {
            policy: ArcSwap::from_pointee(policy),
            rebuilding: Mutex::new(()),
            fallback: store.is_remote().then(Fallback::new),
            store,
            instruments: OnceLock::new(),
        })
    }

    /// Replaces limits and the file's overrides atomically (SIGHUP); the database's overrides
    /// in force stay. On error the old ones stay in force. Buckets are kept: a raised limit
    /// applies to them at once (see [`crate::gcra::effective_tat`]).
    pub fn reload(&self, config: &RateLimitingConfig, overrides: &Overrides) -> Result<()> {
        self.rebuild(|current| Policy::build(config, overrides, &current.database))
            .map(|_| ())
    }

    /// Builds a policy from the one in force and swaps it in, under [`Limiter::rebuilding`];
    /// returns the old and the new one.
    fn rebuild(
        &self,
        build: impl FnOnce(&Policy) -> Result<Policy>,
    ) -> Result<(Arc<Policy>, Arc<Policy>)> {
        let _rebuilding = self.rebuilding.lock();
        let current = self.policy.load_full();
        let new = Arc::new(build(&current)?);
        new.publish();
        self.policy.store(Arc::clone(&new));
        Ok((current, new))
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
        let (old, new) =
            self.rebuild(|current| Policy::build(config, overrides, &current.database))?;
        self.refresh_raised(&old, &new, [overrides, &new.database])
            .await
    }

    /// Puts `database` in force as the overrides kept in the database (those not expired),
    /// beside the file's, which it wins over for a bucket both name; refreshes the buckets it
    /// raised as [`Limiter::reload_and_refresh`] does, and returns how many. Nothing changes
    /// when `database` is what is in force already.
    pub async fn set_database_overrides(&self, database: &Overrides) -> Result<usize> {
        if self.policy.load().database == *database {
            return Ok(0);
        }
        let (old, new) =
            self.rebuild(|current| Policy::build(&current.config, &current.file, database))?;
        self.refresh_raised(&old, &new, [database, &old.database])
            .await
    }

    /// The overrides of the file and of the database in force now.
    pub fn overrides_in_force(&self) -> (Overrides, Overrides) {
        let policy = self.policy.load();
        (policy.file.clone(), policy.database.clone())
    }

    /// Resets the buckets of the ids listed explicitly in `sources` whose limit is more
    /// generous under `new` than under `old`.
    async fn refresh_raised(
        &self,
        old: &Policy,
        new: &Policy,
        sources: [&Overrides; 2],
    ) -> Result<usize> {
        let mut keys = Vec::new();
        for entry in sources.iter().flat_map(|o| o.entries()) {
            // Per (account, identifier) buckets cannot be enumerated from the account alone.
            if entry.limit.id_kind() == crate::limit::IdKind::AccountIdentifier {
                continue;
            }
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
            if let Some(fallback) = &self.fallback {
                fallback.memory.reset(&keys).await?;
            }
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
    /// outage of the limiter should never become an outage of issuance. With Redis, the limits
    /// that fail safe are decided in this instance's memory instead ([`Fallback`]).
    pub async fn check(&self, now: OffsetDateTime, requests: &[Request]) -> Result<Verdict> {
        let mut batch = Batch::with_capacity(requests.len());
        self.transactions(requests, &mut batch)?;
        if batch.is_empty() {
            return Ok(Verdict::allow_all(false));
        }
        let instruments = self
            .instruments
            .get_or_init(|| Instruments::register(self.fallback.is_some()));
        // The TSC clock: two reads per request, where the system clock would cost a syscall's
        // worth on some virtual machines.
        let started = quanta::Instant::now();
        let now = unix_nanos(now);
        if let Some(fallback) = &self.fallback
            && fallback.is_active()
            && !self.probe(fallback, now, instruments).await
        {
            let verdict = self
                .decide_in_memory(fallback, now, &batch, instruments)
                .await;
            instruments.latency.record(started.elapsed().as_secs_f64());
            return verdict;
        }
        let result = match self.store.spend_batch_ready(now, &batch) {
            Some(ready) => ready,
            None => self.store.spend_batch(now, &batch).await,
        };
        let outcome = match result {
            Ok(outcome) => {
                if let Some(fallback) = &self.fallback {
                    fallback.reached(instruments);
                }
                outcome
            }
            Err(err) if err.is_store_failure() => {
                if let Some(fallback) = &self.fallback {
                    fallback.lost(&err, instruments);
                    let verdict = self
                        .decide_in_memory(fallback, now, &batch, instruments)
                        .await;
                    instruments.latency.record(started.elapsed().as_secs_f64());
                    return verdict;
                }
                instruments.latency.record(started.elapsed().as_secs_f64());
                tracing::warn!(error = %err, "rate-limit store failed; allowing the request");
                for tx in &batch {
                    instruments.count(tx.name(), Outcome::FailOpen);
                }
                return Ok(Verdict::allow_all(true));
            }
            Err(err) => return Err(err),
        };
        instruments.latency.record(started.elapsed().as_secs_f64());
        Ok(self.verdict(&batch, &outcome, instruments))
    }

    /// While memory is in use: true when this request should ask Redis. At most one request
    /// per [`PROBE_INTERVAL`] does; before it asks, it hands memory's buckets over, and a
    /// failed hand-over puts them back and answers false.
    async fn probe(&self, fallback: &Fallback, now: i64, instruments: &Instruments) -> bool {
        if !fallback.claim_probe() {
            return false;
        }
        let _handing_over = fallback.gate.write().await;
        let resets: Vec<BucketKey> = fallback.pending_resets.lock().drain().collect();
        let debts = self.debts(fallback, now);
        if resets.is_empty() && debts.is_empty() {
            // Nothing to hand over: this request's own batch is the probe.
            return true;
        }
        let handed = async {
            if !resets.is_empty() {
                self.store.reset(&resets).await?;
            }
            if !debts.is_empty() {
                self.store.absorb(now, &debts).await?;
            }
            Ok::<(), Error>(())
        };
        match handed.await {
            Ok(()) => {
                instruments
                    .handed_over
                    .increment(u64::try_from(debts.len()).unwrap_or(u64::MAX));
                tracing::info!(
                    buckets = debts.len(),
                    "rate-limit buckets counted in memory during the outage handed over to the store"
                );
                fallback.reached(instruments);
                true
            }
            Err(err) => {
                tracing::debug!(error = %err, "rate-limit store still unreachable");
                fallback.pending_resets.lock().extend(resets);
                fallback.memory.absorb_now(now, &debts);
                false
            }
        }
    }

    /// Empties memory into debts, each with the limit in force for its bucket now. A bucket
    /// whose limit was disabled since is dropped.
    fn debts(&self, fallback: &Fallback, now: i64) -> Vec<Debt> {
        let policy = self.policy.load();
        fallback
            .memory
            .drain(now)
            .into_iter()
            .filter_map(|(key, nanos)| {
                let name = key.limit_name()?;
                let text = key.to_string();
                let (_, id) = text.split_once(':')?;
                let id = BucketId::parse(name, id).ok()?;
                let (limit, _) = policy.resolve_lean(name, &id)?;
                Some(Debt { key, limit, nanos })
            })
            .collect()
    }

    /// Decides the batch's buckets of limits that fail safe in memory; the others are allowed
    /// uncounted (fail open), as without a fallback.
    async fn decide_in_memory(
        &self,
        fallback: &Fallback,
        now: i64,
        batch: &[Transaction],
        instruments: &Instruments,
    ) -> Result<Verdict> {
        let safe: Batch = batch
            .iter()
            .filter(|tx| tx.name().fails_safe())
            .cloned()
            .collect();
        for tx in batch.iter().filter(|tx| !tx.name().fails_safe()) {
            instruments.count(tx.name(), Outcome::FailOpen);
        }
        let fail_open = safe.len() < batch.len();
        if safe.is_empty() {
            return Ok(Verdict::allow_all(fail_open));
        }
        let _deciding = fallback.gate.read().await;
        let outcome = fallback.memory.spend_batch_now(now, &safe)?;
        let mut verdict = self.verdict(&safe, &outcome, instruments);
        verdict.fail_open = fail_open;
        verdict.fallback = true;
        Ok(verdict)
    }

    /// The verdict for a batch the store decided, counted in [`DECISIONS`].
    fn verdict(
        &self,
        batch: &[Transaction],
        outcome: &BatchOutcome,
        instruments: &Instruments,
    ) -> Verdict {
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
            binding(batch, &outcome.decisions).map(|i| report(&batch[i], &outcome.decisions[i]));
        let applied = batch
            .iter()
            .zip(&outcome.decisions)
            .filter(|(tx, _)| tx.enforced())
            .map(|(tx, d)| report(tx, d))
            .collect();
        Verdict {
            allowed: outcome.allowed,
            binding,
            shadow_denials,
            applied,
            fail_open: false,
            fallback: false,
        }
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
        if let Some(fallback) = &self.fallback
            && fallback.is_active()
        {
            // What memory counted goes back to memory; nothing else was counted anywhere.
            batch.retain(|tx| tx.name().fails_safe());
            let _refunding = fallback.gate.read().await;
            return fallback.memory.refund(unix_nanos(now), &batch).await;
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
    /// The memory fallback's bucket is emptied too, whatever Redis answers, so a success resets
    /// the zombie count during an outage as well; a reset Redis could not be told is still
    /// returned as an error, and is applied to Redis when it answers again.
    pub async fn reset(&self, limit: LimitName, id: &BucketId) -> Result<()> {
        let key = match id {
            BucketId::Ip(net) => {
                BucketKey::new(limit, &BucketId::Ip(self.policy.load().key_net(*net)))?
            }
            _ => BucketKey::new(limit, id)?,
        };
        let keys = [key];
        let Some(fallback) = &self.fallback else {
            return self.store.reset(&keys).await;
        };
        let _resetting = fallback.gate.read().await;
        fallback.memory.reset(&keys).await?;
        let result = self.store.reset(&keys).await;
        if let Err(err) = &result
            && err.is_store_failure()
        {
            {
                let mut pending = fallback.pending_resets.lock();
                if pending.len() < MAX_PENDING_RESETS {
                    let [key] = keys;
                    pending.insert(key);
                }
            }
            // Like any store failure: memory is used until a probe gets through, and that probe
            // applies the reset.
            let instruments = self.instruments.get_or_init(|| Instruments::register(true));
            fallback.lost(err, instruments);
        }
        result
    }

    /// Whether the limits that fail safe are counted in this instance's memory now, because
    /// Redis is unreachable.
    pub fn in_fallback(&self) -> bool {
        self.fallback.as_ref().is_some_and(Fallback::is_active)
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
        let d = match &self.fallback {
            Some(fallback) if fallback.is_active() && limit.fails_safe() => {
                fallback.memory.peek(now_ns, &key, &resolved).await?
            }
            _ => self.store.peek(now_ns, &key, &resolved).await?,
        };
        Ok(Some(BucketState {
            key: key.to_string(),
            limit: resolved,
            remaining: d.remaining,
            reset_at: from_unix_nanos(now_ns.saturating_add(d.reset_in)),
        }))
    }
}
