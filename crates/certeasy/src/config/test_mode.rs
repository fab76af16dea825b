//! `test-mode:` (and `certeasy serve --test-mode`): an ephemeral instance for testing ACME
//! clients, in the spirit of Pebble, NOT for production.
//!
//! The block only states what the operator (or the flags, which override it) asked for;
//! `Config::apply_test_mode` (`test_instance.rs`) turns it into ordinary settings of the other sections, so the rest
//! of the server has no test-mode branches except the two knobs that live where they act:
//! always-valid challenges in the job runner (`workers::settings::WorkerSettings::always_valid`)
//! and refused nonces in `acme_api::nonce::NonceRejection`.

use std::net::SocketAddr;
use std::path::PathBuf;

use acme_core::duration::ConfigDuration;
use ratelimits::config::{
    AccountCreationLimit, GlobalLimit, Mode, OrderCreationLimit, PendingAuthorizationsLimit,
    RateLimitingConfig, WindowLimit,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde::Serialize;

use super::entries::{
    deserialize_optional_duration, deserialize_optional_path, deserialize_resolvers,
};
use super::schema;

/// Port http-01 is validated on in test mode, the one Pebble uses, so clients' test set-ups for
/// Pebble work unchanged.
pub const TEST_HTTP_PORT: u16 = 5002;
/// Port tls-alpn-01 is validated on in test mode (Pebble's).
pub const TEST_TLS_ALPN_PORT: u16 = 5001;

/// `test-mode:` what an ephemeral test instance does differently. Off unless `enabled` (or
/// `--test-mode`): nothing here is ever applied by accident.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct TestModeConfig {
    /// Run as a test instance (`--test-mode`). The other keys are read only when it is on.
    pub enabled: bool,
    /// Where state lives (`--data-dir`); empty means a fresh temporary directory
    /// `certeasy-test-mode-*`, 0700, removed when the server exits (SIGTERM, Ctrl-C). The top-level
    /// `data-dir` is not used in test mode. A given directory must be new or empty, or one test
    /// mode created before: test mode writes a marker file, `.certeasy-test-mode`, in every state
    /// directory it creates, and refuses an existing directory without it (one holding a production
    /// CA, say). A given directory is kept on exit, and on the next start its test CA is loaded
    /// again.
    #[serde(deserialize_with = "deserialize_optional_path")]
    #[schemars(with = "Option<schema::Path>")]
    pub data_dir: Option<PathBuf>,
    /// Port http-01 challenges are validated on (`--http-port`); replaces `validation.http-port`.
    /// Pebble's port, so set-ups written for Pebble work unchanged.
    pub http_port: u16,
    /// Port tls-alpn-01 challenges are validated on (`--tls-alpn-port`); replaces
    /// `validation.tls-alpn-port`.
    pub tls_alpn_port: u16,
    /// Resolvers for validation (`--dns-server ADDR`, repeatable; a bare IP means port 53), like
    /// Pebble's `-dnsserver`; replace `validation.dns-servers` when non-empty.
    #[serde(deserialize_with = "deserialize_resolvers")]
    #[schemars(with = "Vec<schema::Resolver>")]
    pub dns_servers: Vec<SocketAddr>,
    /// Every challenge is valid as soon as the client says it is ready (`--always-valid`), without
    /// any network traffic: no HTTP, TLS or DNS query, and no CAA check either (as Pebble's
    /// `PEBBLE_VA_ALWAYS_VALID`), so a client needs no responder and names need not resolve.
    /// Implemented in the job runner (`workers`), not in the validator.
    pub always_valid: bool,
    /// Share (0 to 100) of otherwise valid nonces refused with `badNonce` (`--reject-nonces
    /// PERCENT`), as Pebble's `PEBBLE_WFE_NONCEREJECT`; the refusal carries a fresh nonce, so a
    /// correct client retries and succeeds. Refusals are counted in
    /// `certeasy_nonces_refused_total{reason="injected"}`. Pebble refuses 5 % by default; test mode
    /// refuses none unless asked, so a client's first run is not flaky.
    pub reject_nonces_percent: u8,
    /// Whether new orders reuse the account's valid authorizations
    /// (`acme.reuse-valid-authorizations`); `--no-authz-reuse` turns it off, like
    /// `PEBBLE_AUTHZREUSE=0`. On by default because production Certeasy (and Let's Encrypt) reuse
    /// them, so a client sees what it will meet; Pebble reuses at random (50 % by default).
    pub authz_reuse: bool,
    /// Lifetime of every certificate (`--cert-lifetime 1h`): it becomes the `validity` of every
    /// profile (and its `max-validity` when that is shorter); empty means the profiles' own. Useful
    /// to test renewal.
    #[serde(deserialize_with = "deserialize_optional_duration")]
    #[schemars(with = "Option<schema::Duration>")]
    pub cert_lifetime: Option<ConfigDuration>,
    /// Enforce the small test limits below (`--rate-limits`), so a client can test its 429 and
    /// `Retry-After` handling (Pebble has no rate limits). Off: no rate limit of any kind applies.
    /// Either way the file's `rate-limiting:` block is replaced, and zombie pausing is off.
    pub rate_limits: bool,
}

impl Default for TestModeConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            data_dir: None,
            http_port: TEST_HTTP_PORT,
            tls_alpn_port: TEST_TLS_ALPN_PORT,
            dns_servers: Vec::new(),
            always_valid: false,
            reject_nonces_percent: 0,
            authz_reuse: true,
            cert_lifetime: None,
            rate_limits: false,
        }
    }
}

/// The rate limits of `test-mode.rate-limits: true` (`--rate-limits`): real limits, enforced,
/// small enough that a client's test suite meets a 429 within a few requests and can check that
/// it honours `Retry-After` (which Pebble cannot do). `docs/configuration.md` states them.
pub fn test_rate_limits() -> RateLimitingConfig {
    RateLimitingConfig {
        whitelist: Vec::new(),
        global: GlobalLimit {
            enabled: true,
            mode: Mode::Enforce,
            requests_per_minute: 600,
            burst: 60,
        },
        account_creation: AccountCreationLimit {
            enabled: true,
            mode: Mode::Enforce,
            per_ip_per_hour: 30,
            burst: 5,
        },
        // Five orders per account per minute.
        order_creation: OrderCreationLimit {
            enabled: true,
            mode: Mode::Enforce,
            orders_per_account_per_hour: 300,
            order_burst: 5,
            san_budget_per_account_per_hour: 3_000,
        },
        duplicate_certificate: WindowLimit {
            enabled: true,
            mode: Mode::Enforce,
            max_per_window: 5,
            window: ConfigDuration::from_secs(3_600),
        },
        failed_validation: WindowLimit {
            enabled: true,
            mode: Mode::Enforce,
            max_per_window: 5,
            window: ConfigDuration::from_secs(600),
        },
        pending_authorizations: PendingAuthorizationsLimit {
            enabled: true,
            mode: Mode::Enforce,
            max: 30,
        },
        ..RateLimitingConfig::default()
    }
}

/// Every limit of the `rate-limiting:` block switched off (test mode without `rate-limits`).
pub(super) fn no_rate_limits() -> RateLimitingConfig {
    let mut limits = RateLimitingConfig::default();
    limits.global.enabled = false;
    limits.account_creation.enabled = false;
    limits.order_creation.enabled = false;
    limits.duplicate_certificate.enabled = false;
    limits.failed_validation.enabled = false;
    limits.pending_authorizations.enabled = false;
    limits
}
