//! Per-ID overrides: a YAML list of entries that give some buckets other numbers.
//!
//! ```yaml
//! - limit: global
//!   requests-per-minute: 1200
//!   burst: 100
//!   ids: ["10.0.0.1", "10.0.0.0/24", "2001:db8::/48"]
//!   comment: the office NAT
//! - limit: order-creation
//!   count: 100
//!   period: 1h
//!   ids: ["12345"]
//! ```
//!
//! Each entry may use the generic `burst`/`count`/`period` or the limit's own configuration keys
//! (e.g. `requests-per-minute`); unset numbers come from the configured default. Parsing is
//! strict, and every error names the entry, its limit and its line, because an operator who
//! mistypes an override should learn it at reload, not by a customer hitting the default.
//!
//! Overrides kept in the database (`certeasy admin overrides add`) are parsed by the same
//! [`validate`] through [`OverrideEntry::single`], one limit and one id each, and merged with the
//! file's by [`ResolvedOverrides::build_merged`]: where both name the same bucket (the same limit
//! and the same address, range or account), the database's wins, because it is the operator's
//! change of the moment and the file is what was deployed. A range and an address inside it are
//! different buckets: the most specific one applies, whichever source holds it.

use std::collections::HashMap;
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use acme_core::duration::ConfigDuration;
use ipnet::IpNet;
use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::bucket::parse_account;
use crate::config::RateLimitingConfig;
use crate::config::parse_ip_or_cidr;
use crate::error::Error;
use crate::error::Result;
use crate::limit::IdKind;
use crate::limit::Limit;
use crate::limit::LimitName;
use crate::limit::config_numbers;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawEntry {
    limit: String,
    burst: Option<u64>,
    count: Option<u64>,
    period: Option<ConfigDuration>,
    requests_per_minute: Option<u64>,
    per_ip_per_hour: Option<u64>,
    orders_per_account_per_hour: Option<u64>,
    order_burst: Option<u64>,
    san_budget_per_account_per_hour: Option<u64>,
    max_per_window: Option<u64>,
    window: Option<ConfigDuration>,
    max_consecutive_failures: Option<u64>,
    forgive_one_per: Option<ConfigDuration>,
    ids: Vec<String>,
    #[serde(default)]
    #[allow(
        dead_code,
        reason = "documentation for operators, parsed so it is allowed"
    )]
    comment: Option<String>,
}

/// Whom an override applies to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum OverrideId {
    /// An address (as a /32 or /128) or a range.
    Net(IpNet),
    /// An account id.
    Account(i64),
}

impl OverrideId {
    /// Parses an id of `limit`'s kind as the overrides file does: an address or range for the
    /// per-IP limits (IPv4-mapped forms read as IPv4), a decimal account id for the others. The
    /// error says what the limit wants.
    pub fn parse(limit: LimitName, text: &str) -> Result<Self, String> {
        parse_id(limit, text)
    }
}

/// The canonical text, the same for every way of writing one id: an address alone for a /32 or
/// /128, a range in CIDR form with its host bits cleared, an account in decimal. Stored as the
/// database's bucket column, so that `10.0.0.1` and `10.0.0.1/32` are one override.
impl std::fmt::Display for OverrideId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Net(net) if net.prefix_len() == net.max_prefix_len() => {
                write!(f, "{}", net.addr())
            }
            Self::Net(net) => write!(f, "{net}"),
            Self::Account(account) => write!(f, "{account}"),
        }
    }
}

/// One validated entry, not yet combined with the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverrideEntry {
    /// Position in the file, from 0.
    pub index: usize,
    /// Line in the file, if known.
    pub line: Option<u64>,
    /// The limit it overrides.
    pub limit: LimitName,
    /// Explicit burst, if any.
    pub burst: Option<u64>,
    /// Explicit count, if any.
    pub count: Option<u64>,
    /// Explicit period, if any.
    pub period: Option<Duration>,
    /// Whom it applies to.
    pub ids: Vec<OverrideId>,
}

impl OverrideEntry {
    /// One override of one bucket, as `certeasy admin overrides add` gives it: the generic
    /// `burst`, `count` and `period`, checked by the parser of the file (the limit's name, the
    /// id's kind and form, at least one number, none zero). Unset numbers come from the
    /// configured default, as in the file.
    pub fn single(
        limit: &str,
        id: &str,
        burst: Option<u64>,
        count: Option<u64>,
        period: Option<Duration>,
    ) -> Result<Self> {
        let raw = RawEntry {
            limit: limit.to_owned(),
            burst,
            count,
            period: period.map(ConfigDuration),
            requests_per_minute: None,
            per_ip_per_hour: None,
            orders_per_account_per_hour: None,
            order_burst: None,
            san_budget_per_account_per_hour: None,
            max_per_window: None,
            window: None,
            max_consecutive_failures: None,
            forgive_one_per: None,
            ids: vec![id.to_owned()],
            comment: None,
        };
        validate(0, None, raw).map_err(|e| match e {
            Error::OverrideEntry { limit, reason, .. } => Error::InvalidLimit { limit, reason },
            other => other,
        })
    }

    /// The numbers this entry puts in force under `config`: its own, and the default's for those
    /// it leaves unset. An error when they describe no bucket (finer than one per nanosecond).
    pub fn resolve(&self, config: &RateLimitingConfig) -> Result<Limit> {
        let base = config_numbers(config, self.limit);
        Limit::new(
            self.limit.as_str(),
            self.burst.unwrap_or(base.burst),
            self.count.unwrap_or(base.count),
            self.period.unwrap_or(base.period),
            base.mode,
        )
    }
}

/// A limit's configured numbers, without overrides; `None` when they describe no bucket.
pub fn default_limit(config: &RateLimitingConfig, limit: LimitName) -> Option<Limit> {
    let base = config_numbers(config, limit);
    Limit::new(
        limit.as_str(),
        base.burst,
        base.count,
        base.period,
        base.mode,
    )
    .ok()
}

/// A parsed overrides file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Overrides {
    entries: Vec<OverrideEntry>,
}

impl Overrides {
    /// No overrides.
    pub fn empty() -> Self {
        Self::default()
    }

    /// Overrides from entries validated one by one ([`OverrideEntry::single`]): those of the
    /// database, whose (limit, id) pairs are unique by the table's key.
    pub fn from_entries(entries: Vec<OverrideEntry>) -> Self {
        Self { entries }
    }

    /// How many (limit, id) pairs the entries name.
    pub fn pairs(&self) -> usize {
        self.entries.iter().map(|e| e.ids.len()).sum()
    }

    /// The validated entries.
    pub fn entries(&self) -> &[OverrideEntry] {
        &self.entries
    }

    /// Reads and parses a file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::OverridesIo {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text)
    }

    /// Parses and validates the YAML text. An empty document is an empty list.
    pub fn parse(text: &str) -> Result<Self> {
        if text.trim().is_empty() {
            return Ok(Self::empty());
        }
        let raw: Option<Vec<Spanned<RawEntry>>> =
            serde_saphyr::from_str(text).map_err(|e| Error::OverridesSyntax(e.to_string()))?;
        let mut entries = Vec::new();
        let mut seen: HashSet<(LimitName, OverrideId)> = HashSet::new();
        for (index, spanned) in raw.unwrap_or_default().into_iter().enumerate() {
            let line = Some(spanned.referenced.line()).filter(|l| *l > 0);
            let entry = validate(index, line, spanned.value)?;
            for id in &entry.ids {
                if !seen.insert((entry.limit, id.clone())) {
                    return Err(Error::OverrideEntry {
                        index,
                        limit: entry.limit.to_string(),
                        line,
                        reason: format!("id {id:?} is already overridden by an earlier entry"),
                    });
                }
            }
            entries.push(entry);
        }
        Ok(Self { entries })
    }
}

fn validate(index: usize, line: Option<u64>, raw: RawEntry) -> Result<OverrideEntry> {
    let limit_text = raw.limit.clone();
    let fail = |reason: String| Error::OverrideEntry {
        index,
        limit: limit_text.clone(),
        line,
        reason,
    };
    let limit: LimitName = raw.limit.parse().map_err(|_| {
        let known: Vec<&str> = LimitName::ALL.iter().map(|n| n.as_str()).collect();
        fail(format!(
            "unknown limit name; known limits: {}",
            known.join(", ")
        ))
    })?;

    // (key, value, applies to this limit, what it sets)
    let hour = Some(Duration::from_secs(3600));
    let own: [(&str, Option<u64>, bool, Setting); 7] = [
        (
            "requests-per-minute",
            raw.requests_per_minute,
            limit == LimitName::GlobalPerIp,
            Setting::Count(Some(Duration::from_secs(60))),
        ),
        (
            "per-ip-per-hour",
            raw.per_ip_per_hour,
            limit == LimitName::NewAccountPerIp,
            Setting::Count(hour),
        ),
        (
            "orders-per-account-per-hour",
            raw.orders_per_account_per_hour,
            limit == LimitName::NewOrdersPerAccount,
            Setting::Count(hour),
        ),
        (
            "order-burst",
            raw.order_burst,
            limit == LimitName::NewOrdersPerAccount,
            Setting::Burst,
        ),
        (
            "san-budget-per-account-per-hour",
            raw.san_budget_per_account_per_hour,
            limit == LimitName::SanBudgetPerAccount,
            Setting::CountAndBurst(hour),
        ),
        (
            "max-per-window",
            raw.max_per_window,
            limit == LimitName::FailedValidationPerAccountIdentifier,
            Setting::CountAndBurst(None),
        ),
        (
            "max-consecutive-failures",
            raw.max_consecutive_failures,
            limit == LimitName::ConsecutiveFailuresPerAccountIdentifier,
            Setting::Burst,
        ),
    ];
    let own_periods: [(&str, Option<ConfigDuration>, bool); 2] = [
        (
            "window",
            raw.window,
            limit == LimitName::FailedValidationPerAccountIdentifier,
        ),
        (
            "forgive-one-per",
            raw.forgive_one_per,
            limit == LimitName::ConsecutiveFailuresPerAccountIdentifier,
        ),
    ];

    let mut burst = raw.burst.map(|b| ("burst", b));
    let mut count = raw.count.map(|c| ("count", c));
    let mut period = raw.period.map(|p| ("period", p.std()));
    let set =
        |slot: &mut Option<(&'static str, u64)>, key: &'static str, value: u64| -> Result<()> {
            if let Some((other, _)) = slot {
                return Err(fail(format!(
                    "{key} and {other} set the same number; use one"
                )));
            }
            *slot = Some((key, value));
            Ok(())
        };
    for (key, value, applies, setting) in own {
        let Some(value) = value else { continue };
        if !applies {
            return Err(fail(format!("{key} does not apply to this limit")));
        }
        match setting {
            Setting::Burst => set(&mut burst, key, value)?,
            Setting::Count(implied_period) => {
                set(&mut count, key, value)?;
                if let Some(p) = implied_period {
                    set_period(&mut period, key, p).map_err(&fail)?;
                }
            }
            Setting::CountAndBurst(implied_period) => {
                set(&mut count, key, value)?;
                if burst.is_none() {
                    burst = Some((key, value));
                }
                if let Some(p) = implied_period {
                    set_period(&mut period, key, p).map_err(&fail)?;
                }
            }
        }
    }
    for (key, value, applies) in own_periods {
        let Some(value) = value else { continue };
        if !applies {
            return Err(fail(format!("{key} does not apply to this limit")));
        }
        set_period(&mut period, key, value.std()).map_err(&fail)?;
    }
    if burst.is_none() && count.is_none() && period.is_none() {
        return Err(fail(
            "sets neither a burst, a count nor a period".to_owned(),
        ));
    }
    for (key, value) in [burst, count].into_iter().flatten() {
        if value == 0 {
            return Err(fail(format!("{key} must be at least 1")));
        }
    }
    if let Some((key, p)) = period
        && p.is_zero()
    {
        return Err(fail(format!("{key} must be longer than zero")));
    }
    if raw.ids.is_empty() {
        return Err(fail("ids is empty".to_owned()));
    }
    let ids = raw
        .ids
        .iter()
        .map(|id| parse_id(limit, id).map_err(|reason| fail(format!("id {id:?}: {reason}"))))
        .collect::<Result<Vec<_>>>()?;
    Ok(OverrideEntry {
        index,
        line,
        limit,
        burst: burst.map(|(_, b)| b),
        count: count.map(|(_, c)| c),
        period: period.map(|(_, p)| p),
        ids,
    })
}

#[derive(Debug, Clone, Copy)]
enum Setting {
    Burst,
    Count(Option<Duration>),
    CountAndBurst(Option<Duration>),
}

fn set_period(
    slot: &mut Option<(&'static str, Duration)>,
    key: &'static str,
    value: Duration,
) -> Result<(), String> {
    if let Some((other, _)) = slot {
        return Err(format!("{key} and {other} both set the period; use one"));
    }
    *slot = Some((key, value));
    Ok(())
}

fn parse_id(limit: LimitName, id: &str) -> Result<OverrideId, String> {
    match limit.id_kind() {
        IdKind::Ip => parse_ip_or_cidr(id)
            .map(OverrideId::Net)
            .map_err(|e| format!("{e} (this limit is per IP)")),
        IdKind::Account | IdKind::AccountIdentifier => {
            parse_account(id).map(OverrideId::Account).ok_or_else(|| {
                "not an account id (this limit is per account; write the decimal id)".to_owned()
            })
        }
    }
}

/// Overrides combined with the defaults, ready for lookups.
#[derive(Debug, Clone, Default)]
pub(crate) struct ResolvedOverrides {
    nets: HashMap<LimitName, NetOverrides, FastHash>,
    accounts: HashMap<(LimitName, i64), Limit, FastHash>,
}

/// Looked up for every bucket of every request; the keys are ours, not the client's.
type FastHash = foldhash::fast::RandomState;

#[derive(Debug, Clone, Default)]
struct NetOverrides {
    exact: HashMap<IpNet, Limit, FastHash>,
    /// Prefix lengths present, most specific first, per family.
    v4_lengths: Vec<u8>,
    v6_lengths: Vec<u8>,
}

impl ResolvedOverrides {
    /// Fills each entry's unset numbers from the configuration and validates the result.
    /// Entries for a disabled limit are kept valid but unused: a disabled limit has no buckets.
    #[cfg(test)]
    pub(crate) fn build(overrides: &Overrides, config: &RateLimitingConfig) -> Result<Self> {
        Self::build_merged(overrides, &Overrides::empty(), config)
    }

    /// The file's overrides, then the database's over them (a bucket both name takes the
    /// database's numbers). An entry of the file that describes no bucket is an error, as at
    /// reload; one of the database is left out with a warning, because it was valid when it was
    /// added and only a changed default can make it invalid, which must not refuse the reload.
    pub(crate) fn build_merged(
        file: &Overrides,
        database: &Overrides,
        config: &RateLimitingConfig,
    ) -> Result<Self> {
        let mut resolved = Self::default();
        for entry in file.entries() {
            let limit = entry.resolve(config).map_err(|e| Error::OverrideEntry {
                index: entry.index,
                limit: entry.limit.to_string(),
                line: entry.line,
                reason: match e {
                    Error::InvalidLimit { reason, .. } => reason,
                    other => other.to_string(),
                },
            })?;
            resolved.insert(entry, limit);
        }
        for entry in database.entries() {
            match entry.resolve(config) {
                Ok(limit) => resolved.insert(entry, limit),
                Err(e) => tracing::warn!(
                    limit = %entry.limit,
                    error = %e,
                    "a rate-limit override of the database describes no bucket under the limits in force; it does not apply"
                ),
            }
        }
        Ok(resolved)
    }

    fn insert(&mut self, entry: &OverrideEntry, limit: Limit) {
        for id in &entry.ids {
            match id {
                OverrideId::Net(net) => {
                    let nets = self.nets.entry(entry.limit).or_default();
                    nets.exact.insert(*net, limit);
                    let lengths = if matches!(net, IpNet::V4(_)) {
                        &mut nets.v4_lengths
                    } else {
                        &mut nets.v6_lengths
                    };
                    if !lengths.contains(&net.prefix_len()) {
                        lengths.push(net.prefix_len());
                        lengths.sort_unstable_by(|a, b| b.cmp(a));
                    }
                }
                OverrideId::Account(account) => {
                    self.accounts.insert((entry.limit, *account), limit);
                }
            }
        }
    }

    /// The override for a bucket network: the exact network first, then the most specific range
    /// containing it.
    pub(crate) fn for_net(&self, limit: LimitName, bucket: IpNet) -> Option<&Limit> {
        if self.nets.is_empty() {
            return None;
        }
        let nets = self.nets.get(&limit)?;
        let lengths = if matches!(bucket, IpNet::V4(_)) {
            &nets.v4_lengths
        } else {
            &nets.v6_lengths
        };
        lengths
            .iter()
            .filter(|len| **len <= bucket.prefix_len())
            .find_map(|len| {
                IpNet::new(bucket.addr(), *len)
                    .ok()
                    .and_then(|n| nets.exact.get(&n.trunc()))
            })
    }

    /// The override for an account.
    pub(crate) fn for_account(&self, limit: LimitName, account: i64) -> Option<&Limit> {
        if self.accounts.is_empty() {
            return None;
        }
        self.accounts.get(&(limit, account))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Overrides;
    use super::ResolvedOverrides;
    use crate::config::RateLimitingConfig;
    use crate::config::parse_ip_or_cidr;
    use crate::limit::LimitName;

    const GOOD: &str = r#"
- limit: global
  requests-per-minute: 1200
  burst: 100
  ids: ["10.0.0.1", "10.0.0.0/24", "2001:db8::/48"]
  comment: the office
- limit: global
  burst: 7
  ids: ["10.0.0.0/16"]
- limit: order-creation
  orders-per-account-per-hour: 100
  order-burst: 10
  ids: ["12345"]
- limit: san-budget
  san-budget-per-account-per-hour: 1000
  ids: ["12345"]
- limit: failed-validation
  max-per-window: 50
  window: 2h
  ids: ["12345"]
- limit: account-creation
  count: 10
  period: 30m
  ids: ["192.0.2.0/24"]
"#;

    #[test]
    fn good_file_resolves_with_most_specific_match() {
        let overrides = Overrides::parse(GOOD).unwrap();
        assert_eq!(overrides.entries().len(), 6);
        assert_eq!(overrides.entries()[1].line, Some(7));
        let resolved =
            ResolvedOverrides::build(&overrides, &RateLimitingConfig::default()).unwrap();
        let net = |s: &str| parse_ip_or_cidr(s).unwrap();
        let exact = resolved
            .for_net(LimitName::GlobalPerIp, net("10.0.0.1"))
            .unwrap();
        assert_eq!(
            (exact.burst(), exact.count(), exact.period()),
            (100, 1200, Duration::from_secs(60))
        );
        let wide = resolved
            .for_net(LimitName::GlobalPerIp, net("10.0.9.9"))
            .unwrap();
        assert_eq!(
            (wide.burst(), wide.count()),
            (7, 200),
            "unset numbers come from the default"
        );
        assert_eq!(
            resolved
                .for_net(LimitName::GlobalPerIp, net("10.0.0.2"))
                .unwrap()
                .burst(),
            100
        );
        assert!(
            resolved
                .for_net(LimitName::GlobalPerIp, net("10.1.0.1"))
                .is_none()
        );
        assert_eq!(
            resolved
                .for_net(LimitName::GlobalPerIp, net("2001:db8:0:5::/64"))
                .unwrap()
                .burst(),
            100
        );
        assert!(
            resolved
                .for_net(LimitName::NewAccountPerIp, net("10.0.0.1"))
                .is_none()
        );
        let orders = resolved
            .for_account(LimitName::NewOrdersPerAccount, 12345)
            .unwrap();
        assert_eq!((orders.burst(), orders.count()), (10, 100));
        let sans = resolved
            .for_account(LimitName::SanBudgetPerAccount, 12345)
            .unwrap();
        assert_eq!((sans.burst(), sans.count()), (1000, 1000));
        let failed = resolved
            .for_account(LimitName::FailedValidationPerAccountIdentifier, 12345)
            .unwrap();
        assert_eq!(
            (failed.burst(), failed.count(), failed.period()),
            (50, 50, Duration::from_secs(7200))
        );
        let accounts = resolved
            .for_net(LimitName::NewAccountPerIp, net("192.0.2.9"))
            .unwrap();
        assert_eq!(
            (accounts.burst(), accounts.count(), accounts.period()),
            (2, 10, Duration::from_secs(1800))
        );
        assert!(Overrides::parse("").unwrap().entries().is_empty());
    }

    fn error_of(text: &str) -> String {
        Overrides::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn bad_files_name_the_entry_and_the_problem() {
        let e = error_of(
            "- limit: global\n  burst: 5\n  ids: [\"1.2.3.4\"]\n- limit: nonsense\n  burst: 5\n  ids: [\"1\"]\n",
        );
        assert!(
            e.contains("entry #1 (limit nonsense) at line 4") && e.contains("unknown limit name"),
            "{e}"
        );
        let e = error_of("- limit: global\n  burst: 5\n  ids: [\"12345\"]\n");
        assert!(
            e.contains("entry #0 (limit global)")
                && e.contains("\"12345\"")
                && e.contains("per IP"),
            "{e}"
        );
        let e = error_of("- limit: order-creation\n  burst: 5\n  ids: [\"10.0.0.1\"]\n");
        assert!(
            e.contains("limit order-creation") && e.contains("not an account id"),
            "{e}"
        );
        let e = error_of("- limit: global\n  burst: 0\n  ids: [\"10.0.0.1\"]\n");
        assert!(e.contains("burst must be at least 1"), "{e}");
        let e = error_of("- limit: global\n  period: 0s\n  ids: [\"10.0.0.1\"]\n");
        assert!(e.contains("period must be longer than zero"), "{e}");
        let e = error_of("- limit: global\n  per-ip-per-hour: 5\n  ids: [\"10.0.0.1\"]\n");
        assert!(e.contains("per-ip-per-hour does not apply"), "{e}");
        let e = error_of(
            "- limit: global\n  count: 5\n  requests-per-minute: 6\n  ids: [\"10.0.0.1\"]\n",
        );
        assert!(e.contains("set the same number"), "{e}");
        let e = error_of("- limit: global\n  ids: [\"10.0.0.1\"]\n");
        assert!(e.contains("sets neither"), "{e}");
        let e = error_of("- limit: global\n  burst: 3\n  ids: []\n");
        assert!(e.contains("ids is empty"), "{e}");
        let e = error_of("- limit: global\n  burst: 3\n  bogus: 1\n  ids: [\"10.0.0.1\"]\n");
        assert!(e.contains("bogus") && e.contains("line 3"), "{e}");
        let e = error_of(
            "- limit: global\n  burst: 3\n  ids: [\"10.0.0.1\"]\n- limit: global\n  burst: 4\n  ids: [\"10.0.0.1/32\"]\n",
        );
        assert!(
            e.contains("entry #1") && e.contains("already overridden"),
            "{e}"
        );
        let resolve = Overrides::parse(
            "- limit: global\n  count: 1000000000\n  period: 1ms\n  ids: [\"10.0.0.1\"]\n",
        )
        .unwrap();
        let e = ResolvedOverrides::build(&resolve, &RateLimitingConfig::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("entry #0 (limit global) at line 1")
                && e.contains("finer than one per nanosecond"),
            "{e}"
        );
        let e = error_of("- limit: global\n  burst: [\n");
        assert!(e.starts_with("overrides file:"), "{e}");
    }
}
