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
use serde::Deserialize;
use serde::Serialize;

use super::entries::{
    deserialize_optional_duration, deserialize_optional_path, deserialize_resolvers,
};

/// Port http-01 is validated on in test mode, the one Pebble uses, so clients' test set-ups for
/// Pebble work unchanged.
pub const TEST_HTTP_PORT: u16 = 5002;
/// Port tls-alpn-01 is validated on in test mode (Pebble's).
pub const TEST_TLS_ALPN_PORT: u16 = 5001;

/// `test-mode:` what an ephemeral test instance does differently. Off unless `enabled` (or
/// `--test-mode`): nothing here is ever applied by accident.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct TestModeConfig {
    /// Run as a test instance. Logged at warn level at start.
    pub enabled: bool,
    /// Where state lives; `None`: a fresh temporary directory, removed when the server exits.
    /// The top-level `data-dir` is not used in test mode.
    #[serde(deserialize_with = "deserialize_optional_path")]
    pub data_dir: Option<PathBuf>,
    /// Replaces `validation.http-port`.
    pub http_port: u16,
    /// Replaces `validation.tls-alpn-port`.
    pub tls_alpn_port: u16,
    /// Replaces `validation.dns-servers` when non-empty.
    #[serde(deserialize_with = "deserialize_resolvers")]
    pub dns_servers: Vec<SocketAddr>,
    /// Every challenge is valid at once, without any network traffic (no CAA check either).
    pub always_valid: bool,
    /// Share of valid nonces refused with `badNonce`, in percent.
    pub reject_nonces_percent: u8,
    /// Valid authorizations are reused by new orders (`acme.reuse-valid-authorizations`).
    pub authz_reuse: bool,
    /// Lifetime of every certificate; `None`: the profiles' own validity.
    #[serde(deserialize_with = "deserialize_optional_duration")]
    pub cert_lifetime: Option<ConfigDuration>,
    /// Enforce the small test rate limits of [`test_rate_limits`]; off: no rate limit at all.
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
