//! Turning a configuration into a test instance's (`test-mode:`, `certeasy serve --test-mode`):
//! kept apart from the block's definition (`test_mode.rs`) so that the configuration model can
//! hold the block without the two modules importing each other.
//!
//! A test instance can never touch production: [`Config::test_mode_refusals`] (run by the
//! semantic checks, so `config check` refuses alike) refuses a configured database URL (on
//! PostgreSQL its workers would claim the shared job queue), Redis shards, a data directory without
//! the marker file test mode writes, and an ACME listener off loopback. `main.rs` checks before it
//! creates, opens or binds anything, and `serve::start` refuses again for library callers. Only two
//! knobs act outside the configuration, each where it belongs: always-valid challenges in the job
//! runner (`WorkerSettings::always_valid`, no network at all) and refused nonces in
//! `acme_api::nonce::NonceRejection`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use super::model::{Config, CrlConfig, ServerConfig};
use super::test_mode::{no_rate_limits, test_rate_limits};

/// Why a test instance may not run with a configuration: the key to change and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestModeRefusal {
    /// The key path the refusal is reported under (`database.url`, `server.listen`,
    /// `test-mode.data-dir`).
    pub key: &'static str,
    pub reason: String,
}

impl Config {
    /// What stops this configuration from running as a test instance; empty when test mode is
    /// off or may run. A test instance marks challenges valid without looking (`always-valid`)
    /// and validates loopback targets, so it must never reach production state or the network:
    /// - a configured `database.url` is refused: on PostgreSQL its workers would claim jobs from
    ///   the queue production instances share and validate their orders unchecked, and a
    ///   `sqlite:` file given by URL may be a production database too; test mode keeps its
    ///   SQLite file in its state directory;
    /// - configured Redis shards are refused: the test instance would write its buckets and
    ///   nonces under the key prefix production instances share;
    /// - `test-mode.data-dir` must be new, empty, or one test mode created (it holds
    ///   [`crate::data_dir::TEST_MODE_MARKER`]), so a production CA is never loaded and signed
    ///   with;
    /// - the ACME listener must be on loopback (127.0.0.0/8 or ::1).
    ///
    /// `validate.rs` reports these with every other check, so `config check` and `serve` refuse
    /// alike, and `main.rs` checks before it creates, opens or binds anything. Reads the file
    /// system (the data directory) and writes nothing.
    pub fn test_mode_refusals(&self) -> Vec<TestModeRefusal> {
        let t = &self.test_mode;
        if !t.enabled {
            return Vec::new();
        }
        let mut refusals = Vec::new();
        let url = self.database.url.trim();
        // The URL itself is never quoted: it may carry a password.
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            refusals.push(TestModeRefusal {
                key: "database.url",
                reason: "test mode refuses a PostgreSQL database: its workers, which validate \
                         loopback targets or none at all (always-valid), would claim jobs from the \
                         queue production instances share and validate their orders unchecked; \
                         leave database.url empty (a SQLite file in the test state directory)"
                    .to_owned(),
            });
        } else if !url.is_empty() {
            refusals.push(TestModeRefusal {
                key: "database.url",
                reason: "test mode keeps its SQLite database in its own state directory, and a \
                         configured file may be a production database: leave database.url empty"
                    .to_owned(),
            });
        }
        if !self.redis.shards.is_empty() {
            refusals.push(TestModeRefusal {
                key: "redis.shards",
                reason: "test mode keeps its rate-limit buckets and nonces in its own memory: \
                         shared Redis shards are production state; leave redis.shards empty"
                    .to_owned(),
            });
        }
        let listen = self.test_mode_listen();
        if !listen.ip().to_canonical().is_loopback() {
            refusals.push(TestModeRefusal {
                key: "server.listen",
                reason: format!(
                    "{listen} is not a loopback address: a test instance validates loopback \
                     targets{} and may only listen on 127.0.0.0/8 or ::1",
                    if t.always_valid {
                        " and marks every challenge valid without validating it"
                    } else {
                        ""
                    }
                ),
            });
        }
        if let Some(dir) = &t.data_dir
            && let Err(reason) = crate::data_dir::test_mode_refusal(dir)
        {
            refusals.push(TestModeRefusal {
                key: "test-mode.data-dir",
                reason,
            });
        }
        refusals
    }

    /// The ACME listener of a test instance: `server.listen`, or its loopback twin when it is
    /// left at the default (all addresses).
    pub fn test_mode_listen(&self) -> SocketAddr {
        let default = ServerConfig::default().listen;
        if self.server.listen == default {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), default.port())
        } else {
            self.server.listen
        }
    }

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
        self.server.listen = self.test_mode_listen();
        let default_crl_listen = CrlConfig::default().listen;
        if self.crl.listen == default_crl_listen {
            self.crl.listen =
                SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), default_crl_listen.port());
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

    fn refused_keys(config: &Config) -> Vec<&'static str> {
        config.test_mode_refusals().iter().map(|r| r.key).collect()
    }

    fn test_mode_on() -> Config {
        let mut config = Config::default();
        config.test_mode.enabled = true;
        config
    }

    #[test]
    fn test_mode_refuses_a_configured_database_and_nothing_is_refused_when_off() {
        let mut config = test_mode_on();
        assert!(refused_keys(&config).is_empty());
        config.database.url = "postgres://certeasy:secret@db.internal/certeasy".to_owned();
        let refusals = config.test_mode_refusals();
        assert_eq!(refusals.len(), 1);
        assert_eq!(refusals[0].key, "database.url");
        assert!(refusals[0].reason.contains("PostgreSQL"), "{refusals:?}");
        assert!(
            !refusals[0].reason.contains("secret"),
            "the URL (and its password) is never quoted"
        );
        config.database.url = "postgresql://db/certeasy".to_owned();
        assert_eq!(refused_keys(&config), ["database.url"]);
        config.database.url = "sqlite:///var/lib/certeasy/certeasy.db".to_owned();
        assert_eq!(refused_keys(&config), ["database.url"]);
        config.test_mode.enabled = false;
        assert!(refused_keys(&config).is_empty(), "production may use it");
    }

    #[test]
    fn test_mode_refuses_shared_redis_shards() {
        let mut config = test_mode_on();
        config.redis.shards = vec!["redis://redis.internal:6379".to_owned()];
        assert_eq!(refused_keys(&config), ["redis.shards"]);
    }

    #[test]
    fn test_mode_listens_on_loopback_only() {
        let mut config = test_mode_on();
        // The default (all addresses) becomes loopback; nothing to refuse.
        assert_eq!(
            config.test_mode_listen(),
            "127.0.0.1:14000".parse::<SocketAddr>().unwrap()
        );
        for ok in [
            "127.0.0.1:4000",
            "127.8.9.10:4000",
            "[::1]:4000",
            "[::ffff:127.0.0.1]:4000",
        ] {
            config.server.listen = ok.parse().unwrap();
            assert!(refused_keys(&config).is_empty(), "{ok}");
        }
        for public in [
            "0.0.0.0:4000",
            "[::]:14000",
            "192.0.2.7:14000",
            "[2001:db8::1]:443",
        ] {
            config.server.listen = public.parse().unwrap();
            config.test_mode.always_valid = false;
            assert_eq!(refused_keys(&config), ["server.listen"], "{public}");
            config.test_mode.always_valid = true;
            let refusals = config.test_mode_refusals();
            assert!(refusals[0].reason.contains("valid without"), "{refusals:?}");
        }
    }

    #[test]
    fn test_mode_takes_only_a_new_empty_or_marked_data_directory() {
        let parent = tempfile::tempdir().unwrap();
        let mut config = test_mode_on();
        let dir = parent.path().join("state");
        config.test_mode.data_dir = Some(dir.clone());
        assert!(refused_keys(&config).is_empty(), "a new directory");
        std::fs::create_dir(&dir).unwrap();
        assert!(refused_keys(&config).is_empty(), "an empty directory");

        // A production data directory: a CA, no marker.
        std::fs::create_dir(dir.join("ca")).unwrap();
        std::fs::write(dir.join("ca/intermediate.key"), "key").unwrap();
        let refusals = config.test_mode_refusals();
        assert_eq!(refusals.len(), 1);
        assert_eq!(refusals[0].key, "test-mode.data-dir");
        assert!(
            refusals[0].reason.contains(&dir.display().to_string())
                && refusals[0]
                    .reason
                    .contains(crate::data_dir::TEST_MODE_MARKER),
            "{refusals:?}"
        );
        assert!(
            !dir.join(crate::data_dir::TEST_MODE_MARKER).exists(),
            "checking writes nothing"
        );

        // One test mode made (and marked) is taken again.
        let own = parent.path().join("own");
        crate::data_dir::create_test_mode(&own).unwrap();
        std::fs::create_dir(own.join("ca")).unwrap();
        config.test_mode.data_dir = Some(own);
        assert!(refused_keys(&config).is_empty());

        let file = parent.path().join("file");
        std::fs::write(&file, "").unwrap();
        config.test_mode.data_dir = Some(file);
        assert_eq!(refused_keys(&config), ["test-mode.data-dir"]);
    }

    /// The problems `text`, read as the file `name`, is refused with.
    fn refused(text: &str, name: &str) -> Vec<super::super::ConfigProblem> {
        let Err(super::super::ConfigError::Invalid { problems, .. }) =
            super::super::from_str(text, name)
        else {
            panic!("accepted");
        };
        problems
    }

    /// Each problem's key and line.
    fn keys_and_lines(problems: &[super::super::ConfigProblem]) -> Vec<(&str, Option<u64>)> {
        problems
            .iter()
            .map(|p| (p.key_path.as_str(), p.line))
            .collect()
    }

    #[test]
    fn the_file_reports_test_mode_refusals_at_their_keys() {
        let text = "\
test-mode:
  enabled: true
  always-valid: true
database:
  url: postgres://certeasy@db/certeasy
server:
  listen: 0.0.0.0:443
";
        let problems = refused(text, "prod.yaml");
        assert_eq!(
            keys_and_lines(&problems),
            [("database.url", Some(5)), ("server.listen", Some(7))]
        );
        let shown = problems[0].to_string();
        assert!(shown.starts_with("prod.yaml:5:"), "{shown}");
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
        let problems = refused(text, "t.yaml");
        assert_eq!(
            keys_and_lines(&problems),
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
