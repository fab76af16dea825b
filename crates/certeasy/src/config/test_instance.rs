//! Turning a configuration into a test instance's (`test-mode:`, `certeasy serve --test-mode`):
//! kept apart from the block's definition (`test_mode.rs`) so that the configuration model can
//! hold the block without the two modules importing each other.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use super::model::Config;
use super::test_mode::{no_rate_limits, test_rate_limits};
impl Config {
    /// Rewrites this configuration into a test instance's, as `test_mode` says, with its state
    /// in `data_dir` (the caller's temporary directory, or `test-mode.data-dir`):
    /// - the ACME listener on loopback (`127.0.0.1:14000`) when `server.listen` is the default
    ///   `0.0.0.0:14000`, and the CRL listener (`127.0.0.1:14002`) when `crl.listen` is its
    ///   default: a test CA is not for the network;
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
        let default_crl_listen = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 14002);
        if self.crl.listen == default_crl_listen {
            self.crl.listen = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 14002);
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
    use acme_core::duration::ConfigDuration;

    use super::super::test_mode::TestModeConfig;
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
