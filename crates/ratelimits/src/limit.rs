//! Limit names, the numbers of one limit, and the default limits built from the configuration.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::config::Mode;
use crate::config::RateLimitingConfig;
use crate::error::Error;
use crate::error::Result;

/// The bucket families. The string names appear in bucket keys, overrides files, metrics and
/// the admin CLI, so they never change once released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LimitName {
    /// Every entry point, per client IP (IPv6: per prefix).
    GlobalPerIp,
    /// Account creation, per client IP.
    NewAccountPerIp,
    /// Orders, per account.
    NewOrdersPerAccount,
    /// Identifiers across orders, per account.
    SanBudgetPerAccount,
    /// Failed validations, per (account, identifier).
    FailedValidationPerAccountIdentifier,
    /// Consecutive failed validations, per (account, identifier), reset on success.
    ConsecutiveFailuresPerAccountIdentifier,
}

/// What a bucket of a limit is keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    /// A client IP address (IPv6 clients by prefix).
    Ip,
    /// An account id.
    Account,
    /// An account id and an identifier value.
    AccountIdentifier,
}

impl LimitName {
    /// Every limit, in a fixed order.
    pub const ALL: [LimitName; 6] = [
        Self::GlobalPerIp,
        Self::NewAccountPerIp,
        Self::NewOrdersPerAccount,
        Self::SanBudgetPerAccount,
        Self::FailedValidationPerAccountIdentifier,
        Self::ConsecutiveFailuresPerAccountIdentifier,
    ];

    /// The position in [`LimitName::ALL`], for tables indexed by limit.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The stable kebab-case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::GlobalPerIp => "global",
            Self::NewAccountPerIp => "account-creation",
            Self::NewOrdersPerAccount => "order-creation",
            Self::SanBudgetPerAccount => "san-budget",
            Self::FailedValidationPerAccountIdentifier => "failed-validation",
            Self::ConsecutiveFailuresPerAccountIdentifier => "zombie-pausing",
        }
    }

    /// Whether the limit's buckets fall back to the instance's memory while a shared store
    /// (Redis) is unreachable, instead of failing open with the others.
    ///
    /// These two exist to stop clients that fail validation over and over from costing
    /// validation work without end; failing open would switch that protection off exactly when
    /// an outage makes such clients most likely, and counting per instance is still a bound (at
    /// most the limit per instance). The global, account-creation and order limits protect
    /// capacity and fairness, where refusing every client or counting per instance during an
    /// outage would do more harm than letting requests through.
    pub const fn fails_safe(self) -> bool {
        matches!(
            self,
            Self::FailedValidationPerAccountIdentifier
                | Self::ConsecutiveFailuresPerAccountIdentifier
        )
    }

    /// What the limit's buckets are keyed by.
    pub const fn id_kind(self) -> IdKind {
        match self {
            Self::GlobalPerIp | Self::NewAccountPerIp => IdKind::Ip,
            Self::NewOrdersPerAccount | Self::SanBudgetPerAccount => IdKind::Account,
            Self::FailedValidationPerAccountIdentifier
            | Self::ConsecutiveFailuresPerAccountIdentifier => IdKind::AccountIdentifier,
        }
    }
}

impl fmt::Display for LimitName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for LimitName {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|name| name.as_str() == s)
            .ok_or_else(|| Error::UnknownLimit(s.to_owned()))
    }
}

/// One limit's numbers: `count` tokens per `period`, holding at most `burst`.
///
/// The derived GCRA quantities are computed once here, and construction refuses any limit whose
/// emission interval would round to zero nanoseconds or whose burst offset would overflow, so the
/// arithmetic in [`crate::gcra`] never has to handle them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    burst: u64,
    count: u64,
    period_ns: i64,
    mode: Mode,
    emission_interval: i64,
    burst_offset: i64,
}

impl Limit {
    /// A validated limit.
    pub fn new(name: &str, burst: u64, count: u64, period: Duration, mode: Mode) -> Result<Self> {
        let invalid = |reason: &str| Error::InvalidLimit {
            limit: name.to_owned(),
            reason: reason.to_owned(),
        };
        if burst == 0 {
            return Err(invalid("burst must be at least 1"));
        }
        if count == 0 {
            return Err(invalid("count must be at least 1"));
        }
        let period_ns =
            i64::try_from(period.as_nanos()).map_err(|_| invalid("period is too long"))?;
        if period_ns <= 0 {
            return Err(invalid("period must be longer than zero"));
        }
        let count_i = i64::try_from(count).map_err(|_| invalid("count is too large"))?;
        let emission_interval = period_ns / count_i;
        if emission_interval < 1 {
            return Err(invalid("count per period is finer than one per nanosecond"));
        }
        let burst_offset = i64::try_from(burst)
            .ok()
            .and_then(|b| b.checked_mul(emission_interval))
            .ok_or_else(|| invalid("burst times period/count does not fit in 292 years"))?;
        Ok(Self {
            burst,
            count,
            period_ns,
            mode,
            emission_interval,
            burst_offset,
        })
    }

    /// The bucket's capacity.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// Tokens added per period.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The refill period.
    pub fn period(&self) -> Duration {
        Duration::from_nanos(self.period_ns.unsigned_abs())
    }

    /// Enforced or shadow.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Nanoseconds per token: period / count.
    pub fn emission_interval(&self) -> i64 {
        self.emission_interval
    }

    /// Nanoseconds to refill an empty bucket: emission interval × burst.
    pub fn burst_offset(&self) -> i64 {
        self.burst_offset
    }

    /// The same numbers in another mode.
    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }
}

/// The default limit of each enabled bucket family. A disabled limit has no entry: its buckets do
/// not exist.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Limits {
    /// Indexed by [`LimitName::index`]: a lookup per bucket on the hot path, so no hashing.
    defaults: [Option<Limit>; LimitName::ALL.len()],
}

const HOUR: Duration = Duration::from_secs(3600);

impl Limits {
    /// Maps the `rate-limiting:` block onto GCRA limits. The database-backed limits
    /// (duplicate-certificate, pending-authorizations) are not buckets and are not mapped.
    pub fn from_config(config: &RateLimitingConfig) -> Result<Self> {
        let mut defaults = [None; LimitName::ALL.len()];
        for name in LimitName::ALL {
            let numbers = config_numbers(config, name);
            if numbers.enabled {
                defaults[name.index()] = Some(Limit::new(
                    name.as_str(),
                    numbers.burst,
                    numbers.count,
                    numbers.period,
                    numbers.mode,
                )?);
            }
        }
        Ok(Self { defaults })
    }

    /// An explicit set of defaults, for tests and tools.
    pub fn from_defaults(defaults: impl IntoIterator<Item = (LimitName, Limit)>) -> Self {
        let mut table = [None; LimitName::ALL.len()];
        for (name, limit) in defaults {
            table[name.index()] = Some(limit);
        }
        Self { defaults: table }
    }

    /// The default of an enabled limit.
    pub fn get(&self, name: LimitName) -> Option<&Limit> {
        self.defaults[name.index()].as_ref()
    }
}

/// A limit's numbers straight from the configuration, enabled or not: overrides fill their
/// unset fields from these.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConfigNumbers {
    pub(crate) enabled: bool,
    pub(crate) burst: u64,
    pub(crate) count: u64,
    pub(crate) period: Duration,
    pub(crate) mode: Mode,
}

pub(crate) fn config_numbers(config: &RateLimitingConfig, name: LimitName) -> ConfigNumbers {
    let numbers = |enabled, burst, count, period, mode| ConfigNumbers {
        enabled,
        burst,
        count,
        period,
        mode,
    };
    match name {
        LimitName::GlobalPerIp => {
            let c = &config.global;
            numbers(
                c.enabled,
                c.burst,
                c.requests_per_minute,
                Duration::from_secs(60),
                c.mode,
            )
        }
        LimitName::NewAccountPerIp => {
            let c = &config.account_creation;
            numbers(c.enabled, c.burst, c.per_ip_per_hour, HOUR, c.mode)
        }
        LimitName::NewOrdersPerAccount => {
            let c = &config.order_creation;
            numbers(
                c.enabled,
                c.order_burst,
                c.orders_per_account_per_hour,
                HOUR,
                c.mode,
            )
        }
        LimitName::SanBudgetPerAccount => {
            let c = &config.order_creation;
            let n = c.san_budget_per_account_per_hour;
            numbers(c.enabled, n, n, HOUR, c.mode)
        }
        LimitName::FailedValidationPerAccountIdentifier => {
            let c = &config.failed_validation;
            numbers(
                c.enabled,
                c.max_per_window,
                c.max_per_window,
                c.window.std(),
                c.mode,
            )
        }
        LimitName::ConsecutiveFailuresPerAccountIdentifier => {
            let c = &config.zombie_pausing;
            numbers(
                c.enabled,
                c.max_consecutive_failures,
                1,
                c.forgive_one_per.std(),
                c.mode,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::HOUR;
    use super::Limit;
    use super::LimitName;
    use super::Limits;
    use crate::config::Mode;
    use crate::config::RateLimitingConfig;
    use crate::error::Error;

    #[test]
    fn names_round_trip() {
        for (i, name) in LimitName::ALL.into_iter().enumerate() {
            assert_eq!(name.as_str().parse::<LimitName>().unwrap(), name);
            assert_eq!(name.index(), i, "tables indexed by limit rely on it");
        }
        assert!(matches!(
            "nope".parse::<LimitName>(),
            Err(Error::UnknownLimit(_))
        ));
    }

    #[test]
    fn validation_refuses_impossible_limits() {
        let second = Duration::from_secs(1);
        assert!(Limit::new("x", 0, 1, second, Mode::Enforce).is_err());
        assert!(Limit::new("x", 1, 0, second, Mode::Enforce).is_err());
        assert!(Limit::new("x", 1, 1, Duration::ZERO, Mode::Enforce).is_err());
        let err = Limit::new("x", 1, 2, Duration::from_nanos(1), Mode::Enforce).unwrap_err();
        assert!(
            err.to_string().contains("finer than one per nanosecond"),
            "{err}"
        );
        assert!(Limit::new("x", u64::MAX, 1, second, Mode::Enforce).is_err());
        let ok = Limit::new("x", 20, 20, second, Mode::Enforce).unwrap();
        assert_eq!(ok.emission_interval(), 50_000_000);
        assert_eq!(ok.burst_offset(), 1_000_000_000);
    }

    #[test]
    fn defaults_follow_the_config_contract() {
        let limits = Limits::from_config(&RateLimitingConfig::default()).unwrap();
        let global = limits.get(LimitName::GlobalPerIp).unwrap();
        assert_eq!(
            (global.burst(), global.count(), global.period()),
            (20, 200, Duration::from_secs(60))
        );
        let account = limits.get(LimitName::NewAccountPerIp).unwrap();
        assert_eq!(
            (account.burst(), account.count(), account.period()),
            (2, 5, HOUR)
        );
        let orders = limits.get(LimitName::NewOrdersPerAccount).unwrap();
        assert_eq!(
            (orders.burst(), orders.count(), orders.period()),
            (5, 20, HOUR)
        );
        let sans = limits.get(LimitName::SanBudgetPerAccount).unwrap();
        assert_eq!(
            (sans.burst(), sans.count(), sans.period()),
            (100, 100, HOUR)
        );
        let failed = limits
            .get(LimitName::FailedValidationPerAccountIdentifier)
            .unwrap();
        assert_eq!(
            (failed.burst(), failed.count(), failed.period()),
            (5, 5, HOUR)
        );
        assert!(
            limits
                .get(LimitName::ConsecutiveFailuresPerAccountIdentifier)
                .is_none()
        );

        let mut config = RateLimitingConfig::default();
        config.global.enabled = false;
        config.order_creation.enabled = false;
        let limits = Limits::from_config(&config).unwrap();
        assert!(limits.get(LimitName::GlobalPerIp).is_none());
        assert!(limits.get(LimitName::NewOrdersPerAccount).is_none());
        assert!(limits.get(LimitName::SanBudgetPerAccount).is_none());

        config.account_creation.burst = 0;
        let err = Limits::from_config(&config).unwrap_err();
        assert!(err.to_string().contains("account-creation"), "{err}");
    }
}
