//! `test-mode:` (and `certeasy serve --test-mode`): an ephemeral instance for testing ACME
//! clients, in the spirit of Pebble, NOT for production.
//!
//! The block only states what the operator (or the flags, which override it) asked for;
//! [`Config::apply_test_mode`] turns it into ordinary settings of the other sections, so the rest
//! of the server has no test-mode branches except the two knobs that live where they act:
//! always-valid challenges in the job runner (`workers::settings::WorkerSettings::always_valid`)
//! and refused nonces in `acme_api::nonce::NonceRejection`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use acme_core::duration::ConfigDuration;
use ratelimits::config::{
    AccountCreationLimit, GlobalLimit, Mode, OrderCreationLimit, PendingAuthorizationsLimit,
    RateLimitingConfig, WindowLimit,
};
use serde::Deserialize;

use super::entries::{
    deserialize_optional_duration, deserialize_optional_path, deserialize_resolvers,
};
use super::model::Config;

/// Port http-01 is validated on in test mode, the one Pebble uses, so clients' test set-ups for
/// Pebble work unchanged.
pub const TEST_HTTP_PORT: u16 = 5002;
/// Port tls-alpn-01 is validated on in test mode (Pebble's).
pub const TEST_TLS_ALPN_PORT: u16 = 5001;

/// `test-mode:` what an ephemeral test instance does differently. Off unless `enabled` (or
/// `--test-mode`): nothing here is ever applied by accident.
#[derive(Debug, Clone, PartialEq, Deserialize)]
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
fn no_rate_limits() -> RateLimitingConfig {
    let mut limits = RateLimitingConfig::default();
    limits.global.enabled = false;
    limits.account_creation.enabled = false;
    limits.order_creation.enabled = false;
    limits.duplicate_certificate.enabled = false;
    limits.failed_validation.enabled = false;
    limits.pending_authorizations.enabled = false;
    limits
}

impl Config {
    /// Rewrites this configuration into a test instance's, as `test_mode` says, with its state
    /// in `data_dir` (the caller's temporary directory, or `test-mode.data-dir`):
    /// - the ACME listener on loopback (`127.0.0.1:14000`) when `server.listen` is the default
    ///   `0.0.0.0:14000`: a test CA is not for the network;
    /// - validation on `test-mode.http-port`/`tls-alpn-port`, loopback targets allowed, and the
    ///   DNS servers of `test-mode.dns-servers` when given;
    /// - authorization reuse as `test-mode.authz-reuse`;
    /// - every profile's validity set to `test-mode.cert-lifetime` when given (its maximum raised
    ///   to it when lower);
    /// - the test rate limits, or none; zombie pausing off (test clients fail on purpose).
    ///
    /// `always-valid` and `reject-nonces-percent` are read where they act (`serve.rs`).
    pub fn apply_test_mode(&mut self, data_dir: PathBuf) {
        let t = self.test_mode.clone();
        self.data_dir = data_dir;
        let default_listen = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 14000);
        if self.server.listen == default_listen {
            self.server.listen = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 14000);
        }
        self.validation.http_port = t.http_port;
        self.validation.tls_alpn_port = t.tls_alpn_port;
        self.validation.allow_loopback = true;
        if !t.dns_servers.is_empty() {
            self.validation.dns_servers = t.dns_servers.clone();
        }
        self.acme.reuse_valid_authorizations = t.authz_reuse;
        if let Some(lifetime) = t.cert_lifetime {
            let default_max = self.issuance.max_validity;
            self.issuance.default_validity = lifetime;
            for profile in self.issuance.profiles.values_mut() {
                profile.validity = Some(lifetime);
                if profile.max_validity.unwrap_or(default_max).std() < lifetime.std() {
                    profile.max_validity = Some(lifetime);
                }
            }
            if default_max.std() < lifetime.std() {
                self.issuance.max_validity = lifetime;
            }
        }
        self.rate_limiting = if t.rate_limits {
            test_rate_limits()
        } else {
            no_rate_limits()
        };
        self.zombie_pausing.enabled = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applying_test_mode_rewrites_the_sections_it_names() {
        let mut config = Config {
            test_mode: TestModeConfig {
                enabled: true,
                dns_servers: vec!["127.0.0.1:8053".parse().unwrap()],
                authz_reuse: false,
                cert_lifetime: Some(ConfigDuration::from_secs(500 * 86_400)),
                ..TestModeConfig::default()
            },
            ..Config::default()
        };
        config.apply_test_mode(PathBuf::from("/tmp/x"));
        assert_eq!(config.data_dir, PathBuf::from("/tmp/x"));
        assert_eq!(config.server.listen, "127.0.0.1:14000".parse().unwrap());
        assert_eq!(
            (config.validation.http_port, config.validation.tls_alpn_port),
            (5002, 5001)
        );
        assert!(config.validation.allow_loopback);
        assert_eq!(
            config.validation.dns_servers,
            vec!["127.0.0.1:8053".parse::<SocketAddr>().unwrap()]
        );
        assert!(!config.acme.reuse_valid_authorizations);
        let profiles = config.issuance.profiles().unwrap();
        for profile in profiles.iter() {
            assert_eq!(profile.validity(), time::Duration::days(500));
            assert!(profile.max_validity() >= time::Duration::days(500));
        }
        assert!(!config.rate_limiting.global.enabled);
        assert!(!config.rate_limiting.order_creation.enabled);
        assert!(!config.zombie_pausing.enabled);
        assert!(super::super::validate::check(&config).is_empty());
    }

    #[test]
    fn a_listen_address_that_was_set_is_kept_and_limits_can_be_on() {
        let mut config = Config::default();
        config.server.listen = "127.0.0.1:4000".parse().unwrap();
        config.test_mode.rate_limits = true;
        config.apply_test_mode(PathBuf::from("/tmp/x"));
        assert_eq!(config.server.listen, "127.0.0.1:4000".parse().unwrap());
        assert_eq!(config.rate_limiting, test_rate_limits());
        assert!(config.rate_limiting.whitelist.is_empty());
    }

    #[test]
    fn a_bad_test_mode_block_is_reported_with_line_and_key() {
        let text = "\
test-mode:
  enabled: true
  http-port: 0
  reject-nonces-percent: 150
  cert-lifetime: 0s
ca:
  existing:
    certificate: /etc/ca.pem
    private-key: /etc/ca.key
";
        let Err(super::super::ConfigError::Invalid { problems, .. }) =
            super::super::from_str(text, "t.yaml")
        else {
            panic!("accepted");
        };
        let found: Vec<(&str, Option<u64>)> = problems
            .iter()
            .map(|p| (p.key_path.as_str(), p.line))
            .collect();
        assert_eq!(
            found,
            [
                ("test-mode.http-port", Some(3)),
                ("test-mode.reject-nonces-percent", Some(4)),
                ("test-mode.cert-lifetime", Some(5)),
                ("test-mode.enabled", Some(2)),
            ]
        );
        let ok = super::super::from_str(
            "test-mode:\n  enabled: true\n  dns-servers: [\"127.0.0.1:8053\"]\n  cert-lifetime: 1h\n",
            "t.yaml",
        )
        .unwrap();
        assert_eq!(
            ok.test_mode.cert_lifetime,
            Some(ConfigDuration::from_secs(3600))
        );
    }
}
