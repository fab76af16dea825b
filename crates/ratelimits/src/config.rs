//! The `rate-limiting:` block of the configuration file: the operators' contract.
//!
//! Keys and defaults follow `docs/rate-limits.md` exactly. Omitting the block, a limit, or a key
//! gives the default; unknown keys are errors.

use acme_core::duration::ConfigDuration;
use ipnet::IpNet;
use serde::Deserialize;
use serde::Serialize;

/// `rate-limiting:`
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct RateLimitingConfig {
    /// IPs and CIDRs that bypass the IP-based limits (global, account creation). Empty by default.
    #[serde(deserialize_with = "deserialize_whitelist")]
    pub whitelist: Vec<IpNet>,
    pub global: GlobalLimit,
    pub account_creation: AccountCreationLimit,
    pub order_creation: OrderCreationLimit,
    #[serde(deserialize_with = "duplicate_certificate")]
    pub duplicate_certificate: WindowLimit,
    #[serde(deserialize_with = "failed_validation")]
    pub failed_validation: WindowLimit,
    pub pending_authorizations: PendingAuthorizationsLimit,
    /// How often each instance looks for changes of the overrides kept in the database
    /// (`certeasy admin overrides`) and for their expiries: a change applies everywhere within
    /// this long, without a reload.
    pub overrides_refresh: ConfigDuration,
    /// Consecutive validation failures per (account, identifier) before the pair is paused.
    /// Not a key of this block: the binary fills it from the top-level `zombie-pausing:` block.
    #[serde(skip)]
    pub zombie_pausing: ZombiePausingLimit,
    /// IPv6 clients are keyed by this prefix, because one subscriber usually holds a whole /64.
    /// Filled from `server.ipv6-prefix-length`.
    #[serde(skip)]
    pub ipv6_prefix_length: u8,
    /// Per-ID overrides file (YAML); none by default. Filled from `rate-limit-overrides`.
    #[serde(skip)]
    pub overrides_file: Option<std::path::PathBuf>,
    /// Where buckets live: absent means in memory (one instance only). Filled from `redis:`.
    #[serde(skip)]
    pub redis: Option<RedisConfig>,
}

impl Default for RateLimitingConfig {
    fn default() -> Self {
        Self {
            whitelist: Vec::new(),
            global: GlobalLimit::default(),
            account_creation: AccountCreationLimit::default(),
            order_creation: OrderCreationLimit::default(),
            duplicate_certificate: WindowLimit::DUPLICATE_CERTIFICATE,
            failed_validation: WindowLimit::FAILED_VALIDATION,
            pending_authorizations: PendingAuthorizationsLimit::default(),
            overrides_refresh: DEFAULT_OVERRIDES_REFRESH,
            zombie_pausing: ZombiePausingLimit::default(),
            ipv6_prefix_length: 64,
            overrides_file: None,
            redis: None,
        }
    }
}

/// Default of `rate-limiting.overrides-refresh`: an operator who adds an override while a
/// customer waits sees it applied in about the time the command takes, and one small query per
/// instance every two seconds costs the database nothing it would notice.
pub const DEFAULT_OVERRIDES_REFRESH: ConfigDuration =
    ConfigDuration(std::time::Duration::from_secs(2));

/// Whether a limit's decisions are enforced or only logged and counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Denials are answered with 429.
    #[default]
    Enforce,
    /// Denials are computed, logged and counted, never enforced.
    Shadow,
}

/// `global:` per-IP bucket on every ACME POST entry point.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct GlobalLimit {
    pub enabled: bool,
    pub mode: Mode,
    pub requests_per_minute: u64,
    pub burst: u64,
}

impl Default for GlobalLimit {
    fn default() -> Self {
        Self {
            enabled: true,
            mode: Mode::Enforce,
            requests_per_minute: 200,
            burst: 20,
        }
    }
}

/// `account-creation:` per-IP bucket on new-account.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct AccountCreationLimit {
    pub enabled: bool,
    pub mode: Mode,
    pub per_ip_per_hour: u64,
    pub burst: u64,
}

impl Default for AccountCreationLimit {
    fn default() -> Self {
        Self {
            enabled: true,
            mode: Mode::Enforce,
            per_ip_per_hour: 5,
            burst: 2,
        }
    }
}

/// `order-creation:` per-account order count and SAN budget.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct OrderCreationLimit {
    pub enabled: bool,
    pub mode: Mode,
    pub orders_per_account_per_hour: u64,
    pub order_burst: u64,
    pub san_budget_per_account_per_hour: u64,
}

impl Default for OrderCreationLimit {
    fn default() -> Self {
        Self {
            enabled: true,
            mode: Mode::Enforce,
            orders_per_account_per_hour: 20,
            order_burst: 5,
            san_budget_per_account_per_hour: 100,
        }
    }
}

/// A count inside a rolling window (`duplicate-certificate:`, `failed-validation:`). Every key
/// has a default, so `enabled: false` alone is a complete block.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct WindowLimit {
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default)]
    pub mode: Mode,
    pub max_per_window: u64,
    pub window: ConfigDuration,
}

impl WindowLimit {
    /// `duplicate-certificate:`'s defaults (seed 004): 5 certificates for one identifier set
    /// per 168 hours.
    pub const DUPLICATE_CERTIFICATE: Self = Self {
        enabled: true,
        mode: Mode::Enforce,
        max_per_window: 5,
        window: ConfigDuration::from_secs(168 * 3600),
    };
    /// `failed-validation:`'s defaults (seed 004): 5 failures per account and name per hour.
    pub const FAILED_VALIDATION: Self = Self {
        enabled: true,
        mode: Mode::Enforce,
        max_per_window: 5,
        window: ConfigDuration::from_secs(3600),
    };
}

/// Reads a [`WindowLimit`] whose missing keys take `defaults`' values.
fn window_limit<'de, D: serde::Deserializer<'de>>(
    d: D,
    defaults: WindowLimit,
) -> Result<WindowLimit, D::Error> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "kebab-case")]
    struct Partial {
        enabled: Option<bool>,
        mode: Option<Mode>,
        max_per_window: Option<u64>,
        window: Option<ConfigDuration>,
    }
    let p = Partial::deserialize(d)?;
    Ok(WindowLimit {
        enabled: p.enabled.unwrap_or(defaults.enabled),
        mode: p.mode.unwrap_or(defaults.mode),
        max_per_window: p.max_per_window.unwrap_or(defaults.max_per_window),
        window: p.window.unwrap_or(defaults.window),
    })
}

fn duplicate_certificate<'de, D: serde::Deserializer<'de>>(d: D) -> Result<WindowLimit, D::Error> {
    window_limit(d, WindowLimit::DUPLICATE_CERTIFICATE)
}

fn failed_validation<'de, D: serde::Deserializer<'de>>(d: D) -> Result<WindowLimit, D::Error> {
    window_limit(d, WindowLimit::FAILED_VALIDATION)
}

/// `pending-authorizations:` cap on in-flight authorizations per account.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct PendingAuthorizationsLimit {
    pub enabled: bool,
    pub mode: Mode,
    pub max: u64,
}

impl Default for PendingAuthorizationsLimit {
    fn default() -> Self {
        Self {
            enabled: true,
            mode: Mode::Enforce,
            max: 30,
        }
    }
}

/// `zombie-pausing:` a per-(account, identifier) bucket of consecutive failures, reset on success.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ZombiePausingLimit {
    pub enabled: bool,
    pub mode: Mode,
    pub max_consecutive_failures: u64,
    /// One failure is forgiven per this period.
    pub forgive_one_per: ConfigDuration,
}

impl Default for ZombiePausingLimit {
    fn default() -> Self {
        Self {
            enabled: false,
            mode: Mode::Enforce,
            max_consecutive_failures: 1152,
            forgive_one_per: ConfigDuration::from_secs(86_400),
        }
    }
}

/// `redis:` shared bucket storage for several instances.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct RedisConfig {
    /// One URL per primary; keys are spread over them by consistent hashing.
    pub shards: Vec<String>,
    /// Prepended to every bucket key, so several deployments can share a server.
    pub key_prefix: String,
    /// Per call; a slower answer counts as an error and the request is allowed (fail open).
    pub timeout: ConfigDuration,
    /// Keys live this long past the moment their bucket is full again, to absorb clock skew.
    pub expiry_margin: ConfigDuration,
}

/// Default of `redis.timeout`: Redis answers in well under a millisecond on a local network, so
/// a call still unanswered after 50 ms means trouble, and failing open then costs a request less
/// than waiting would.
pub const DEFAULT_REDIS_TIMEOUT: ConfigDuration =
    ConfigDuration(std::time::Duration::from_millis(50));

/// Default of `redis.key-prefix`: every key Certeasy writes starts with it; each user of Redis
/// adds its own part (`rl:` for buckets, `nonce:` for the nonce ledger).
pub const DEFAULT_REDIS_KEY_PREFIX: &str = "certeasy:";

/// The defaults of the configuration file's `redis:` section (no shards: limits in memory), the
/// one source of them.
impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            shards: Vec::new(),
            key_prefix: DEFAULT_REDIS_KEY_PREFIX.to_owned(),
            timeout: DEFAULT_REDIS_TIMEOUT,
            expiry_margin: ConfigDuration::from_secs(60),
        }
    }
}

fn yes() -> bool {
    true
}

/// Accepts single addresses (`127.0.0.1`) as well as CIDRs; a null list is empty.
fn deserialize_whitelist<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<IpNet>, D::Error> {
    let raw: Option<Vec<String>> = Option::deserialize(d)?;
    raw.unwrap_or_default()
        .into_iter()
        .map(|entry| parse_ip_or_cidr(&entry).map_err(serde::de::Error::custom))
        .collect()
}

/// Parses `10.0.0.1` (as a /32 or /128) or `10.0.0.0/8`. An IPv4-mapped entry
/// (`::ffff:10.0.0.0/104`) is read in its IPv4 form, because client addresses are compared in
/// their canonical (IPv4) form: written mapped, it would never match.
pub fn parse_ip_or_cidr(entry: &str) -> Result<IpNet, String> {
    let entry = entry.trim();
    if let Ok(net) = entry.parse::<IpNet>() {
        return Ok(canonical_net(net.trunc()));
    }
    entry
        .parse::<std::net::IpAddr>()
        .map(|ip| canonical_net(IpNet::from(ip)))
        .map_err(|_| format!("{entry:?} is neither an IP address nor a CIDR range"))
}

/// The IPv4 form of an IPv4-mapped IPv6 range (prefix 96 or longer); any other range unchanged.
pub fn canonical_net(net: IpNet) -> IpNet {
    match net {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.network().to_ipv4_mapped() {
            Some(v4) => IpNet::new(std::net::IpAddr::V4(v4), v6.prefix_len() - 96).unwrap_or(net),
            None => net,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::parse_ip_or_cidr;

    #[test]
    fn mapped_entries_are_read_in_their_ipv4_form() {
        let net = |s: &str| parse_ip_or_cidr(s).unwrap().to_string();
        assert_eq!(net("::ffff:10.0.0.0/104"), "10.0.0.0/8");
        assert_eq!(net("::ffff:192.0.2.7"), "192.0.2.7/32");
        assert_eq!(net("192.0.2.0/24"), "192.0.2.0/24");
        assert_eq!(net("2001:db8::/32"), "2001:db8::/32");
        // Shorter than /96 it is not a set of IPv4 addresses, so it stays IPv6.
        assert_eq!(net("::ffff:0:0/95"), "::fffe:0:0/95");
        assert!(parse_ip_or_cidr("10.0.0.0/33").is_err());
    }
}
