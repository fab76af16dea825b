//! The state of every rate-limit policy that applied to a request, as data. The HTTP front end
//! renders it as `RateLimit-Policy` and `RateLimit` headers; this crate only says what applied.

use ratelimits::limit::Limit;
use ratelimits::limit::LimitName;
use ratelimits::limiter::BindingLimit;

/// One policy and the state of the request's bucket under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyItem {
    /// The limit's name, as in errors, metrics and overrides (a plain ASCII token).
    pub name: &'static str,
    /// The identifier of a per-(account, identifier) policy.
    pub partition: Option<String>,
    /// The most the client can spend at once.
    pub quota: u64,
    /// Seconds to refill a whole quota.
    pub window_secs: u64,
    /// What is left.
    pub remaining: u64,
    /// Seconds until the quota is whole again.
    pub reset_secs: u64,
}

impl PolicyItem {
    /// A GCRA bucket. A denied bucket reports nothing left: the request did not fit.
    pub fn from_bucket(b: &BindingLimit) -> Self {
        Self {
            name: b.name.as_str(),
            partition: b.key.identifier().map(str::to_owned),
            quota: b.burst,
            window_secs: window_secs(b.period, b.burst, b.count),
            remaining: if b.allowed { b.remaining } else { 0 },
            reset_secs: ceil_secs_nanos(b.reset_in.as_nanos()),
        }
    }

    /// A GCRA limit that refuses outright for `reset_secs` (a paused pair), with nothing left.
    pub fn exhausted(
        name: LimitName,
        limit: &Limit,
        partition: Option<String>,
        reset_secs: u64,
    ) -> Self {
        Self {
            name: name.as_str(),
            partition,
            quota: limit.burst(),
            window_secs: window_secs(limit.period(), limit.burst(), limit.count()),
            remaining: 0,
            reset_secs,
        }
    }
}

/// Every policy that applied to a request, in the order they were checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateLimitInfo {
    items: Vec<PolicyItem>,
}

impl RateLimitInfo {
    /// One GCRA bucket.
    pub fn from_binding(b: &BindingLimit) -> Self {
        Self {
            items: vec![PolicyItem::from_bucket(b)],
        }
    }

    /// Every enforced bucket of a limiter verdict ([`ratelimits::limiter::Verdict::applied`]).
    pub fn from_applied(applied: &[BindingLimit]) -> Self {
        Self {
            items: applied.iter().map(PolicyItem::from_bucket).collect(),
        }
    }

    pub fn push(&mut self, item: PolicyItem) {
        self.items.push(item);
    }

    /// Puts `earlier` (a policy checked before this one) first.
    pub fn prepend(&mut self, earlier: Self) {
        self.items.splice(0..0, earlier.items);
    }

    /// The policies, in order.
    pub fn items(&self) -> &[PolicyItem] {
        &self.items
    }
}

/// GCRA admits `burst` requests per burst × emission interval: that is the window.
fn window_secs(period: std::time::Duration, burst: u64, count: u64) -> u64 {
    ceil_secs_nanos(period.as_nanos() * u128::from(burst) / u128::from(count.max(1))).max(1)
}

/// Whole seconds, rounded up.
pub fn ceil_secs_nanos(nanos: u128) -> u64 {
    u64::try_from(nanos.div_ceil(1_000_000_000)).unwrap_or(u64::MAX)
}

/// Whole seconds, rounded up, never 0: what `Retry-After` carries.
pub fn retry_after_secs(d: std::time::Duration) -> u64 {
    ceil_secs_nanos(d.as_nanos()).max(1)
}

/// [`retry_after_secs`] of the wait until `at`: rounded up, so a client that waits it arrives at
/// or after `at` (a database-backed limit frees its slot at exactly `at`), never a second early.
pub fn retry_after_until(now: time::OffsetDateTime, at: time::OffsetDateTime) -> u64 {
    retry_after_secs(std::time::Duration::try_from(at - now).unwrap_or_default())
}
