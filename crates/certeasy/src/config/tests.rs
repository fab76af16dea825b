use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use acme_core::duration::ConfigDuration;
use ipnet::IpNet;
use ratelimits::config::RateLimitingConfig;

use super::{Config, ConfigError, ConfigProblem, KeyAlgorithm, LogFormat, from_str, load};

const SHIPPED: &str = include_str!("../../../../config/certeasy.yaml");

/// The problems of a failed load, with a readable failure when it unexpectedly succeeded.
fn problems(text: &str) -> Vec<ConfigProblem> {
    match from_str(text, "certeasy.yaml") {
        Ok(config) => panic!("expected an error, got {config:?}"),
        Err(error) => error.problems().to_vec(),
    }
}

fn only_problem(text: &str) -> ConfigProblem {
    let mut all = problems(text);
    assert_eq!(all.len(), 1, "{all:#?}");
    all.remove(0)
}

fn days(n: u64) -> ConfigDuration {
    ConfigDuration::from_secs(n * 86_400)
}

#[test]
fn shipped_file_equals_defaults() {
    let config = from_str(SHIPPED, "config/certeasy.yaml").unwrap();
    assert_eq!(config, Config::default());
}

#[test]
fn defaults_are_the_documented_values() {
    let config = Config::default();
    assert_eq!(config.data_dir, PathBuf::from("./data"));
    assert_eq!(
        config.server.listen,
        "0.0.0.0:14000".parse::<SocketAddr>().unwrap()
    );
    assert_eq!(
        config.server.admin_listen,
        "127.0.0.1:14001".parse::<SocketAddr>().unwrap()
    );
    assert_eq!(config.server.tls_names, ["localhost", "127.0.0.1", "::1"]);
    assert_eq!(config.ca.key_algorithm, KeyAlgorithm::EcdsaP256);
    assert_eq!(config.issuance.max_validity, days(397));
    assert_eq!(config.issuance.backdate, ConfigDuration::from_secs(60));
    assert_eq!(config.redis.timeout.std().as_millis(), 50);
    assert_eq!(config.logging.format, LogFormat::Text);
    assert_eq!(config.rate_limiting, RateLimitingConfig::default());
    assert_eq!(
        config.database.sqlite_synchronous,
        super::SqliteSynchronous::Normal
    );
}

#[test]
fn sqlite_synchronous_takes_normal_or_full_only() {
    let full = from_str("database:\n  sqlite-synchronous: full\n", "c.yaml").unwrap();
    assert_eq!(
        storage::Synchronous::from(full.database.sqlite_synchronous),
        storage::Synchronous::Full
    );
    let problem = only_problem("database:\n  sqlite-synchronous: off\n");
    assert_eq!(problem.key_path, "database.sqlite-synchronous");
    assert!(problem.line.is_some(), "{problem}");
}

#[test]
fn empty_and_comment_only_files_give_defaults() {
    assert_eq!(from_str("", "empty.yaml").unwrap(), Config::default());
    assert_eq!(
        from_str("# nothing here\n", "c.yaml").unwrap(),
        Config::default()
    );
}

#[test]
fn load_reads_a_file_and_names_it_in_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("certeasy.yaml");
    std::fs::write(&path, "validation:\n  workers: 8\n").unwrap();
    assert_eq!(load(&path).unwrap().validation.workers, 8);

    std::fs::write(&path, "validation:\n  workers: 0\n").unwrap();
    let error = load(&path).unwrap_err();
    assert!(
        error
            .to_string()
            .contains(&format!("{}:2:3: validation.workers", path.display())),
        "{error}"
    );

    let missing = dir.path().join("absent.yaml");
    let error = load(&missing).unwrap_err();
    assert!(matches!(error, ConfigError::Read { .. }));
    assert!(error.to_string().contains("absent.yaml"), "{error}");
}

#[test]
fn unknown_key_names_file_line_and_parent_path() {
    let problem = only_problem("data-dir: /srv\nserver:\n  lissen: \"0.0.0.0:1\"\n");
    assert_eq!((problem.line, problem.column), (Some(3), Some(3)));
    assert_eq!(problem.key_path, "server");
    assert!(
        problem.message.contains("unknown field `lissen`"),
        "{}",
        problem.message
    );
    assert!(
        problem.message.contains("admin-listen"),
        "the expected keys are listed: {}",
        problem.message
    );
    assert!(
        problem
            .to_string()
            .starts_with("certeasy.yaml:3:3: server: unknown field"),
        "{problem}"
    );

    let nested = only_problem("rate-limiting:\n  global:\n    enabled: true\n    brust: 3\n");
    assert_eq!(nested.key_path, "rate-limiting.global");
    assert_eq!(nested.line, Some(4));

    let top = only_problem("data-dir: x\ndatadir: y\n");
    assert_eq!(top.key_path, "");
    assert_eq!(top.line, Some(2));
    assert!(
        top.to_string()
            .contains("certeasy.yaml:2:1: (document): unknown field `datadir`"),
        "{top}"
    );
}

#[test]
fn wrong_type_names_the_key_and_the_value() {
    let problem = only_problem("validation:\n  dns-servers: []\n  http-port: 700000\n");
    assert_eq!(problem.key_path, "validation.http-port");
    assert_eq!(problem.line, Some(3));
    assert!(
        problem.message.contains("u16") && problem.message.contains("700000"),
        "{}",
        problem.message
    );

    let seq = only_problem("server:\n  tls-names: localhost\n");
    assert_eq!(seq.key_path, "server.tls-names");

    let mapping = only_problem("server: [1, 2]\n");
    assert_eq!(mapping.key_path, "server");

    let boolean = only_problem("acme:\n  reuse-valid-authorizations: yes\n");
    assert_eq!(boolean.key_path, "acme.reuse-valid-authorizations");

    let enumeration = only_problem("ca:\n  key-algorithm: rsa-1024\n");
    assert_eq!(enumeration.key_path, "ca.key-algorithm");
    assert!(
        enumeration.message.contains("ecdsa-p256"),
        "{}",
        enumeration.message
    );

    let duration = only_problem("issuance:\n  backdate: 5 minutes\n");
    assert_eq!(duration.key_path, "issuance.backdate");
    assert!(
        duration.message.contains("invalid duration"),
        "{}",
        duration.message
    );
}

#[test]
fn duplicate_keys_are_rejected() {
    let problem = only_problem("server:\n  listen: \"0.0.0.0:1\"\n  listen: \"0.0.0.0:2\"\n");
    assert_eq!(problem.line, Some(3));
    assert_eq!(problem.key_path, "server");
    assert!(
        problem.message.contains("duplicate") && problem.message.contains("listen"),
        "{}",
        problem.message
    );

    let sections = only_problem("redis:\n  timeout: 1s\nredis:\n  timeout: 2s\n");
    assert_eq!(sections.line, Some(3));
}

#[test]
fn bad_list_entries_point_at_the_entry() {
    let problem = only_problem("server:\n  trusted-proxies:\n    - 10.0.0.0/8\n    - not-a-net\n");
    assert_eq!(problem.key_path, "server.trusted-proxies[1]");
    assert_eq!(problem.line, Some(4));
    assert!(problem.message.contains("not-a-net"), "{}", problem.message);

    let resolver =
        only_problem("validation:\n  dns-servers: [\"192.0.2.1:53\", \"resolver.example\"]\n");
    assert_eq!(resolver.key_path, "validation.dns-servers[1]");
}

#[test]
fn semantic_errors_are_all_reported_with_lines() {
    let text = "\
data-dir: \"\"
server:
  external-url: http://acme.internal
  ipv6-prefix-length: 0
issuance:
  default-validity: 90d
  max-validity: 30d
validation:
  workers: 0
  http-port: 0
rate-limiting:
  global:
    burst: 0
  duplicate-certificate:
    max-per-window: 5
    window: 0s
redis:
  shards: [\"http://cache:6379\"]
";
    let all = problems(text);
    let found: Vec<(&str, Option<u64>)> =
        all.iter().map(|p| (p.key_path.as_str(), p.line)).collect();
    assert_eq!(
        found,
        [
            ("data-dir", Some(1)),
            ("server.external-url", Some(3)),
            ("server.ipv6-prefix-length", Some(4)),
            ("issuance.max-validity", Some(7)),
            ("validation.http-port", Some(10)),
            ("validation.workers", Some(9)),
            ("rate-limiting.global.burst", Some(13)),
            ("rate-limiting.duplicate-certificate.window", Some(16)),
            ("redis.shards[0]", Some(18)),
        ],
        "{all:#?}"
    );
    assert!(all[1].message.contains("https"), "{}", all[1].message);

    let report = from_str(text, "config/certeasy.yaml")
        .unwrap_err()
        .to_string();
    assert!(
        report.starts_with("invalid configuration config/certeasy.yaml (9 problems):"),
        "{report}"
    );
    assert!(
        report.contains("\n  config/certeasy.yaml:9:3: validation.workers: must be at least 1"),
        "{report}"
    );
    assert!(report.contains("      9 |   workers: 0"), "{report}");
}

#[test]
fn semantic_checks_cover_relations_and_formats() {
    let cases: &[(&str, &str)] = &[
        (
            "server:\n  admin-listen: \"0.0.0.0:14000\"\n",
            "server.admin-listen",
        ),
        (
            "server:\n  tls-certificate: /etc/cert.pem\n",
            "server.tls-certificate",
        ),
        (
            "server:\n  tls-names: [\"bad name\"]\n",
            "server.tls-names[0]",
        ),
        (
            "server:\n  external-url: \"::nope\"\n",
            "server.external-url",
        ),
        ("database:\n  url: mysql://db\n", "database.url"),
        (
            "database:\n  max-connections: 0\n",
            "database.max-connections",
        ),
        (
            "database:\n  prune-interval: 0s\n",
            "database.prune-interval",
        ),
        ("database:\n  prune-batch: 0\n", "database.prune-batch"),
        ("database:\n  prune-batch: 10001\n", "database.prune-batch"),
        (
            "ca:\n  intermediate-validity: 4000d\n",
            "ca.intermediate-validity",
        ),
        (
            "ca:\n  existing:\n    private-key: /k.pem\n",
            "ca.existing.private-key",
        ),
        (
            "ca:\n  existing:\n    alternate-chains: [/cross.pem]\n",
            "ca.existing.alternate-chains",
        ),
        (
            "acme:\n  terms-of-service: not a url\n",
            "acme.terms-of-service",
        ),
        (
            "acme:\n  caa-identities: [\"*.example.com\"]\n",
            "acme.caa-identities[0]",
        ),
        ("acme:\n  order-lifetime: 0s\n", "acme.order-lifetime"),
        (
            "identifiers:\n  deny-domains: [\"exa mple.com\"]\n",
            "identifiers.deny-domains[0]",
        ),
        ("logging:\n  level: \"info,[[\"\n", "logging.level"),
        (
            "rate-limiting:\n  order-creation:\n    order-burst: 0\n",
            "rate-limiting.order-creation.order-burst",
        ),
        (
            "rate-limiting:\n  pending-authorizations:\n    max: 0\n",
            "rate-limiting.pending-authorizations.max",
        ),
        (
            "redis:\n  shards: [\"redis://a:1\", \"redis://a:1\"]\n",
            "redis.shards[1]",
        ),
    ];
    for (text, path) in cases {
        let problem = only_problem(text);
        assert_eq!(problem.key_path, *path, "{text}");
        assert!(problem.line.is_some(), "{problem}");
    }
}

#[test]
fn disabled_limits_may_have_zero_counts() {
    let config = from_str(
        "rate-limiting:\n  global:\n    enabled: false\n    burst: 0\n",
        "c.yaml",
    )
    .unwrap();
    assert!(!config.rate_limiting.global.enabled);
}

#[test]
fn a_check_on_a_default_points_at_the_conflicting_key() {
    // max-validity stays at its default 397d and conflicts with the value written here.
    let problem = only_problem("issuance:\n  default-validity: 400d\n");
    assert_eq!(problem.key_path, "issuance.max-validity");
    assert_eq!(problem.line, Some(2));
    assert!(
        problem.message.contains("not set in the file"),
        "{}",
        problem.message
    );
}

#[test]
fn seed_rate_limiting_block_equals_defaults() {
    let text = "\
rate-limiting:
  whitelist: # Empty — no bypass by default

  global:
    enabled: true
    requests-per-minute: 200
    burst: 20

  account-creation:
    enabled: true
    per-ip-per-hour: 5
    burst: 2

  order-creation:
    enabled: true
    orders-per-account-per-hour: 20
    order-burst: 5
    san-budget-per-account-per-hour: 100

  duplicate-certificate:
    enabled: true
    max-per-window: 5
    window: 168h

  failed-validation:
    enabled: true
    max-per-window: 5
    window: 1h

  pending-authorizations:
    enabled: true
    max: 30
";
    assert_eq!(from_str(text, "seed.yaml").unwrap(), Config::default());

    let whitelisted = "rate-limiting:\n  whitelist:\n    - \"127.0.0.1\"\n    - \"10.0.0.0/8\"\n    - \"2001:db8::/32\"\n";
    let config = from_str(whitelisted, "w.yaml").unwrap();
    let expected: Vec<IpNet> = ["127.0.0.1/32", "10.0.0.0/8", "2001:db8::/32"]
        .iter()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(config.rate_limiting.whitelist, expected);
}

#[test]
fn partial_sections_keep_other_defaults() {
    let config = from_str(
        "server:\n  listen: \"127.0.0.1:8443\"\nrate-limiting:\n  global:\n    burst: 50\n",
        "p.yaml",
    )
    .unwrap();
    let mut expected = Config::default();
    expected.server.listen = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8443);
    expected.rate_limiting.global.burst = 50;
    assert_eq!(config, expected);
}

#[test]
fn durations_cidrs_and_resolvers_parse() {
    let text = "\
server:
  trusted-proxies: [\"10.1.2.3\", \"192.168.0.0/16\", \"::1\"]
  request-timeout: 1m30s
identifiers:
  allow-cidrs: [\"10.9.9.9/8\"]
validation:
  dns-servers: [\"127.0.0.1:5353\", \"192.0.2.53\", \"[::1]:53\"]
  timeout: 500ms
acme:
  nonce-lifetime: 2h
";
    let config = from_str(text, "d.yaml").unwrap();
    let nets: Vec<IpNet> = ["10.1.2.3/32", "192.168.0.0/16", "::1/128"]
        .iter()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(config.server.trusted_proxies, nets);
    // A CIDR with host bits set is truncated to its network.
    assert_eq!(
        config.identifiers.allow_cidrs,
        vec!["10.0.0.0/8".parse::<IpNet>().unwrap()]
    );
    assert_eq!(config.server.request_timeout, ConfigDuration::from_secs(90));
    assert_eq!(config.validation.timeout.std().as_millis(), 500);
    assert_eq!(config.acme.nonce_lifetime, ConfigDuration::from_secs(7200));
    let resolvers: Vec<SocketAddr> = ["127.0.0.1:5353", "192.0.2.53:53", "[::1]:53"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    assert_eq!(config.validation.dns_servers, resolvers);
    assert!(
        config.identifiers.policy().allow_cidrs[0]
            .contains(&"10.200.0.1".parse::<IpAddr>().unwrap())
    );
}

#[test]
fn database_url_defaults_under_data_dir() {
    assert_eq!(
        Config::default().database_url(),
        "sqlite://./data/certeasy.db"
    );
    let config = from_str("data-dir: /var/lib/certeasy\n", "d.yaml").unwrap();
    assert_eq!(
        config.database_url(),
        "sqlite:///var/lib/certeasy/certeasy.db"
    );
    let config = from_str(
        "database:\n  url: postgres://postgres@127.0.0.1/certeasy\n",
        "d.yaml",
    )
    .unwrap();
    assert_eq!(
        config.database_url(),
        "postgres://postgres@127.0.0.1/certeasy"
    );
}

#[test]
fn external_url_defaults_to_localhost_and_listen_port() {
    assert_eq!(Config::default().external_url(), "https://localhost:14000");
    let config = from_str(
        "server:\n  external-url: https://acme.internal:8443/\n",
        "e.yaml",
    )
    .unwrap();
    assert_eq!(config.external_url(), "https://acme.internal:8443");
}

#[test]
fn empty_paths_mean_unset() {
    let config = from_str("server:\n  tls-certificate: /c.pem\n  tls-private-key: /k.pem\nrate-limit-overrides: o.yaml\n", "t.yaml")
        .unwrap();
    assert_eq!(config.server.tls_certificate, Some(PathBuf::from("/c.pem")));
    assert_eq!(config.rate_limit_overrides, Some(PathBuf::from("o.yaml")));
    assert!(!config.ca.existing.is_configured());
}

#[test]
fn syntax_errors_are_located() {
    let problem = only_problem("server:\n  listen: [\n");
    assert!(problem.line.is_some(), "{problem}");
    assert!(
        problem.to_string().starts_with("certeasy.yaml:"),
        "{problem}"
    );
}

#[test]
fn rate_limiting_settings_take_the_top_level_keys() {
    assert_eq!(Config::default().rate_limiting_settings().redis, None);
    let text = "\
server:
  ipv6-prefix-length: 56
redis:
  shards: [\"redis://127.0.0.1:6379\"]
  key-prefix: \"test:\"
rate-limit-overrides: overrides.yaml
";
    let settings = from_str(text, "r.yaml").unwrap().rate_limiting_settings();
    assert_eq!(settings.ipv6_prefix_length, 56);
    assert_eq!(
        settings.overrides_file,
        Some(PathBuf::from("overrides.yaml"))
    );
    let redis = settings.redis.unwrap();
    assert_eq!(redis.shards, ["redis://127.0.0.1:6379"]);
    assert_eq!(redis.key_prefix, "test:rl:");
}

#[test]
fn rate_limiting_copies_of_top_level_keys_are_refused() {
    let problem = only_problem("rate-limiting:\n  redis:\n    shards: []\n");
    assert_eq!(problem.key_path, "rate-limiting");
    assert_eq!(problem.line, Some(2));
    assert!(
        problem.message.contains("unknown field `redis`"),
        "{}",
        problem.message
    );
}

#[test]
fn window_limits_accept_partial_blocks() {
    let text = "rate-limiting:\n  failed-validation:\n    enabled: false\n  duplicate-certificate:\n    window: 24h\n";
    let config = from_str(text, "w.yaml").unwrap();
    assert!(!config.rate_limiting.failed_validation.enabled);
    assert_eq!(config.rate_limiting.failed_validation.max_per_window, 5);
    assert_eq!(config.rate_limiting.duplicate_certificate.max_per_window, 5);
    assert_eq!(
        config.rate_limiting.duplicate_certificate.window,
        ConfigDuration::from_secs(24 * 3600)
    );
}

#[test]
fn private_redirects_are_refused_by_default_and_the_key_opens_them() {
    assert!(!Config::default().validation.allow_private_redirects);
    assert_eq!(
        Config::default().validation.allow_private_redirects,
        validation::ValidationSettings::default().allow_private_redirects
    );
    let config = from_str("validation:\n  allow-private-redirects: true\n", "v.yaml").unwrap();
    assert!(config.validation.allow_private_redirects);
}

#[test]
fn deny_target_cidrs_parse_strictly_and_reach_the_validator() {
    let config = from_str(
        "validation:\n  deny-target-cidrs: [\"10.0.0.0/8\", \"2001:db8::/32\", \"192.0.2.7\"]\n",
        "v.yaml",
    )
    .unwrap();
    let expected: Vec<IpNet> = ["10.0.0.0/8", "2001:db8::/32", "192.0.2.7/32"]
        .iter()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(config.validation.deny_target_cidrs, expected);
    assert!(Config::default().validation.deny_target_cidrs.is_empty());

    let problem =
        only_problem("validation:\n  deny-target-cidrs:\n    - 10.0.0.0/8\n    - 10.0.0.0/33\n");
    assert_eq!(problem.key_path, "validation.deny-target-cidrs[1]");
    assert_eq!(problem.line, Some(4));
    assert!(
        problem.message.contains("10.0.0.0/33"),
        "{}",
        problem.message
    );
}

#[test]
fn listener_limits_are_checked() {
    let cases: &[(&str, &str)] = &[
        (
            "server:\n  tls-certificate-lifetime: 0s\n",
            "server.tls-certificate-lifetime",
        ),
        (
            "server:\n  tls-handshake-timeout: 0s\n",
            "server.tls-handshake-timeout",
        ),
        (
            "server:\n  header-read-timeout: 0s\n",
            "server.header-read-timeout",
        ),
        ("server:\n  idle-timeout: 0s\n", "server.idle-timeout"),
        ("server:\n  max-connections: 0\n", "server.max-connections"),
        (
            "server:\n  http2-max-concurrent-streams: 0\n",
            "server.http2-max-concurrent-streams",
        ),
        (
            "server:\n  http2-keep-alive-interval: 0s\n",
            "server.http2-keep-alive-interval",
        ),
        (
            "server:\n  http2-keep-alive-timeout: 0s\n",
            "server.http2-keep-alive-timeout",
        ),
        (
            "server:\n  http2-max-header-list-size: 100\n",
            "server.http2-max-header-list-size",
        ),
    ];
    for (text, path) in cases {
        let problem = only_problem(text);
        assert_eq!(problem.key_path, *path, "{text}");
        assert!(problem.line.is_some(), "{problem}");
    }
    let config = from_str(
        "server:\n  tls-certificate-lifetime: 5s\n  max-connections: 1\n",
        "certeasy.yaml",
    )
    .unwrap();
    assert_eq!(
        config.server.tls_certificate_lifetime,
        ConfigDuration::from_secs(5)
    );
    assert_eq!(config.server.max_connections, 1);
}

const SCALE: &str = include_str!("../../../../config/scale.yaml");
const COMPOSE: &str = include_str!("../../../../docker-compose.yml");
/// Where Docker mounts secrets, which config/scale.yaml reads its URLs from.
const DOCKER_SECRETS: &str = "/run/secrets/";

/// config/scale.yaml as an instance of docker-compose.yml loads it, with made-up secrets in
/// place of `/run/secrets`; the directory lives as long as the guard.
fn scale_config() -> (tempfile::TempDir, Config) {
    let secrets = tempfile::tempdir().unwrap();
    std::fs::write(
        secrets.path().join("database-url"),
        "postgres://certeasy:0123abcd@postgres/certeasy\n",
    )
    .unwrap();
    std::fs::write(
        secrets.path().join("redis-url"),
        "redis://certeasy:4567ef@redis:6379\n",
    )
    .unwrap();
    let text = SCALE.replace(DOCKER_SECRETS, &format!("{}/", secrets.path().display()));
    let config = from_str(&text, "config/scale.yaml").unwrap();
    (secrets, config)
}

#[test]
fn scale_config_shares_the_unpause_key_and_admin_token_it_mounts() {
    let (_secrets, scale) = scale_config();
    let compose = COMPOSE;
    let shared = [
        scale.zombie_pausing.unpause_key_file.clone(),
        scale.server.admin_token_file.clone(),
    ];
    for file in shared {
        // Outside the per-instance data directory, in a directory every instance mounts.
        let file = file.expect("set in config/scale.yaml");
        assert!(!file.starts_with(&scale.data_dir), "{}", file.display());
        let dir = file.parent().unwrap().display().to_string();
        assert!(compose.contains(&format!(":{dir}:ro")), "{dir} not mounted");
    }
}

#[test]
fn evidence_retention_parses_and_defaults_to_two_years() {
    assert_eq!(
        Config::default().database.evidence_retention,
        ConfigDuration::from_secs(730 * 86_400)
    );
    let config = from_str("database:\n  evidence-retention: 1095d\n", "certeasy.yaml").unwrap();
    assert_eq!(
        config.database.evidence_retention,
        ConfigDuration::from_secs(1095 * 86_400)
    );
}

#[test]
fn pruning_keys_parse_and_default_to_a_week_a_minute_and_500_rows() {
    let defaults = Config::default().database;
    assert!(defaults.prune);
    assert_eq!(defaults.prune_after, ConfigDuration::from_secs(7 * 86_400));
    assert_eq!(defaults.prune_interval, ConfigDuration::from_secs(60));
    assert_eq!(defaults.prune_batch, 500);
    let config = from_str(
        "database:\n  prune: false\n  prune-after: 0s\n  prune-interval: 10s\n  prune-batch: 2\n",
        "certeasy.yaml",
    )
    .unwrap();
    assert!(!config.database.prune);
    assert_eq!(config.database.prune_after, ConfigDuration::from_secs(0));
    assert_eq!(
        config.database.prune_interval,
        ConfigDuration::from_secs(10)
    );
    assert_eq!(config.database.prune_batch, 2);
}

#[test]
fn profile_errors_name_line_and_key() {
    let unknown_eku = only_problem(
        "issuance:\n  default-profile: p\n  profiles:\n    p:\n      description: d\n      extended-key-usages: [server-auth, code-signing]\n",
    );
    assert_eq!(
        unknown_eku.key_path,
        "issuance.profiles.p.extended-key-usages[1]"
    );
    assert_eq!(unknown_eku.line, Some(6));
    assert!(
        unknown_eku.message.contains("server-auth, client-auth"),
        "{}",
        unknown_eku.message
    );

    let unknown_key = only_problem(
        "issuance:\n  default-profile: p\n  profiles:\n    p:\n      description: d\n      key-types: [ed25519]\n",
    );
    assert_eq!(unknown_key.key_path, "issuance.profiles.p.key-types[0]");

    let missing_default = only_problem("issuance:\n  default-profile: gold\n");
    assert_eq!(missing_default.key_path, "issuance.default-profile");
    assert_eq!(missing_default.line, Some(2));
    assert!(
        missing_default
            .message
            .contains("short-lived, tls-server, tls-server-client"),
        "{}",
        missing_default.message
    );

    let text = "\
issuance:
  default-profile: p
  profiles:
    p:
      description: \"\"
      validity: 30d
      max-validity: 10d
      key-usages: []
";
    let found: Vec<(String, Option<u64>)> = problems(text)
        .into_iter()
        .map(|p| (p.key_path, p.line))
        .collect();
    assert_eq!(
        found,
        [
            ("issuance.profiles.p.description".to_owned(), Some(5)),
            ("issuance.profiles.p.max-validity".to_owned(), Some(7)),
            ("issuance.profiles.p.key-usages".to_owned(), Some(8)),
        ]
    );
}

#[test]
fn a_profile_inherits_the_ca_wide_validities() {
    let config = from_str(
        "issuance:\n  default-validity: 30d\n  max-validity: 60d\n",
        "c.yaml",
    )
    .unwrap();
    let profiles = config.issuance.profiles().unwrap();
    let default = profiles.default_profile();
    assert_eq!(default.name(), "tls-server");
    assert_eq!(default.validity(), time::Duration::days(30));
    assert_eq!(default.max_validity(), time::Duration::days(60));
    let short = profiles.select(Some("short-lived")).unwrap();
    assert_eq!(short.validity(), time::Duration::days(7));
}

#[test]
fn retry_keys_parse_default_from_the_workers_and_are_checked() {
    let defaults = Config::default().validation;
    assert_eq!(
        defaults.retries,
        workers::settings::DEFAULT_VALIDATION_RETRIES
    );
    assert_eq!(defaults.retry_backoff, ConfigDuration::from_secs(3));
    assert_eq!(defaults.retry_window, ConfigDuration::from_secs(10));
    let config = from_str(
        "validation:\n  retries: 0\n  retry-backoff: 2m\n  retry-window: 1m\n",
        "certeasy.yaml",
    )
    .unwrap();
    assert_eq!(config.validation.retries, 0);
    assert_eq!(
        config.validation.retry_backoff,
        ConfigDuration::from_secs(120)
    );
    assert_eq!(
        config.validation.retry_window,
        ConfigDuration::from_secs(60)
    );
    // With retries on, a first retry later than the window could never start.
    let never = only_problem("validation:\n  retries: 1\n  retry-backoff: 20s\n");
    assert_eq!(never.key_path, "validation.retry-backoff");
    let zero = only_problem("validation:\n  retry-window: 0s\n  retries: 0\n");
    assert_eq!(zero.key_path, "validation.retry-window");

    let short = only_problem("validation:\n  retry-backoff: 0s\n");
    assert_eq!(short.key_path, "validation.retry-backoff");
    assert_eq!(short.line, Some(2));
    let negative = only_problem("validation:\n  timeout: 5s\n  retries: -1\n");
    assert_eq!(negative.key_path, "validation.retries");
    assert_eq!(negative.line, Some(3));
}

#[test]
fn caa_recheck_after_is_capped_at_the_baseline_requirements_8_hours() {
    let config = from_str("validation:\n  caa-recheck-after: 8h\n", "certeasy.yaml").unwrap();
    assert_eq!(
        config.validation.caa_recheck_after,
        ConfigDuration::from_secs(8 * 3600)
    );
    let problem = only_problem("validation:\n  timeout: 5s\n  caa-recheck-after: 481m\n");
    assert_eq!(problem.key_path, "validation.caa-recheck-after");
    assert_eq!(problem.line, Some(3));
    assert_eq!(problem.source_name, "certeasy.yaml");
    assert!(problem.message.contains("8h"), "{}", problem.message);
}

/// A file holding `text`, in a directory removed with the returned guard.
fn secret_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

#[test]
fn database_url_and_redis_shards_can_come_from_files() {
    let (_db_dir, db) = secret_file("postgres://certeasy:s3cret@db/certeasy\n");
    let (_redis_dir, redis) =
        secret_file("redis://certeasy:r3dis@redis-a:6379\n\nredis://certeasy:r3dis@redis-b:6379\n");
    let text = format!(
        "database:\n  url-file: {}\nredis:\n  shards-file: {}\n",
        db.display(),
        redis.display()
    );
    assert!(!text.contains("s3cret") && !text.contains("r3dis"));
    let config = from_str(&text, "certeasy.yaml").unwrap();
    assert_eq!(
        config.database.url, "postgres://certeasy:s3cret@db/certeasy",
        "the trailing newline is trimmed"
    );
    assert_eq!(
        config.redis.shards,
        [
            "redis://certeasy:r3dis@redis-a:6379",
            "redis://certeasy:r3dis@redis-b:6379"
        ]
    );
    // Read once: what the rest of the server (and a second check) sees is a plain value.
    assert_eq!(config.database.url_file, None);
    assert_eq!(config.redis.shards_file, None);
    assert!(super::check(&config).is_ok());
    assert_eq!(
        config.rate_limiting_settings().redis.unwrap().shards,
        config.redis.shards
    );
    assert!(Config::default().database.url_file.is_none());
    assert!(Config::default().redis.shards_file.is_none());
}

#[test]
fn a_key_and_its_file_both_set_is_an_error_naming_both() {
    let (_dir, path) = secret_file("postgres://db/certeasy\n");
    let problem = only_problem(&format!(
        "database:\n  url: postgres://db/other\n  url-file: {}\n",
        path.display()
    ));
    assert_eq!(problem.key_path, "database.url-file");
    assert_eq!(problem.line, Some(3));
    assert!(
        problem
            .message
            .contains("database.url and database.url-file"),
        "{}",
        problem.message
    );
    let problem = only_problem(&format!(
        "redis:\n  shards: [\"redis://a:1\"]\n  shards-file: {}\n",
        path.display()
    ));
    assert_eq!(problem.key_path, "redis.shards-file");
    assert!(
        problem
            .message
            .contains("redis.shards and redis.shards-file"),
        "{}",
        problem.message
    );
}

#[test]
fn an_unreadable_or_empty_secret_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-secret");
    let problem = only_problem(&format!(
        "server:\n  listen: 127.0.0.1:1\ndatabase:\n  url-file: {}\n",
        missing.display()
    ));
    assert_eq!(problem.key_path, "database.url-file");
    assert_eq!(problem.line, Some(4));
    assert!(
        problem.message.contains(&missing.display().to_string()),
        "{}",
        problem.message
    );
    let (_empty_dir, empty) = secret_file("\n");
    let problem = only_problem(&format!("redis:\n  shards-file: {}\n", empty.display()));
    assert_eq!(problem.key_path, "redis.shards-file");
    assert!(problem.message.contains("is empty"), "{}", problem.message);
}

#[test]
fn a_bad_value_in_a_secret_file_is_reported_at_its_key_without_the_password() {
    let (_dir, path) = secret_file("mysql://certeasy:s3cret@db/certeasy\n");
    let problem = only_problem(&format!("database:\n  url-file: {}\n", path.display()));
    assert_eq!(problem.key_path, "database.url-file");
    assert_eq!(problem.line, Some(2));
    assert!(
        problem.message.contains(&path.display().to_string())
            && problem.message.contains("must start with sqlite:"),
        "{}",
        problem.message
    );
    assert!(!problem.message.contains("s3cret"), "{}", problem.message);

    let (_redis_dir, redis) = secret_file("redis://a:1\nhttp://:r3dis@b:1\n");
    let problem = only_problem(&format!("redis:\n  shards-file: {}\n", redis.display()));
    assert_eq!(problem.key_path, "redis.shards-file");
    assert!(
        problem.message.starts_with("URL 2 in "),
        "{}",
        problem.message
    );
    assert!(!problem.message.contains("r3dis"), "{}", problem.message);
}

/// The build context's exclusions, read as Docker reads `.dockerignore`: for each path, the last
/// pattern matching it or one of its parent directories decides, and `!` lets a path back in.
fn docker_ignored(dockerignore: &str, path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    let mut ignored = false;
    for line in dockerignore.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (negated, pattern) = match line.strip_prefix('!') {
            Some(pattern) => (true, pattern),
            None => (false, line),
        };
        let segments: Vec<&str> = pattern.trim_matches('/').split('/').collect();
        if (1..=parts.len()).any(|n| glob_path(&segments, &parts[..n])) {
            ignored = !negated;
        }
    }
    ignored
}

/// `**` is any number of directories; within a name, `*` is any characters and `?` one.
fn glob_path(pattern: &[&str], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((&"**", rest)) => (0..=path.len()).any(|skip| glob_path(rest, &path[skip..])),
        Some((name, rest)) => {
            let pattern: Vec<char> = name.chars().collect();
            path.first()
                .is_some_and(|first| glob_name(&pattern, &first.chars().collect::<Vec<_>>()))
                && glob_path(rest, &path[1..])
        }
    }
}

fn glob_name(pattern: &[char], name: &[char]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some(('*', rest)) => (0..=name.len()).any(|skip| glob_name(rest, &name[skip..])),
        Some(('?', rest)) => !name.is_empty() && glob_name(rest, &name[1..]),
        Some((c, rest)) => name.first() == Some(c) && glob_name(rest, &name[1..]),
    }
}

/// Every file under `dir`, relative to `root`, `/`-separated.
fn files_under(root: &std::path::Path, dir: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![root.join(dir)];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let relative = path.strip_prefix(root).unwrap();
                found.push(relative.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    found
}

#[test]
fn dockerignore_keeps_keys_tokens_secrets_and_state_out_of_the_build_context() {
    let dockerignore = include_str!("../../../../.dockerignore");
    for secret in [
        "ca/intermediate.key",
        "ca/intermediate.pem",
        "ca/root.pem",
        "secrets/admin.token",
        "secrets/unpause.key",
        "secrets/database-url",
        "secrets/redis-users.acl",
        "secrets/tls/nginx.key",
        "deploy/secrets/postgres-password",
        "data/certeasy.db",
        "data/ca/root.key",
        "data/admin.token",
        "backup/certeasy.db",
        "old/intermediate.key",
        "keys/listener-key.pem",
        "admin.token",
        ".env",
        "target/release/certeasy",
        "crates/certeasy/target/debug/certeasy",
        "cluster/a/ca/intermediate.key",
        ".git/config",
    ] {
        assert!(
            docker_ignored(dockerignore, secret),
            "{secret} would be sent to the builder"
        );
    }
    // What `cargo build --release --locked -p certeasy` in the Dockerfile reads stays in.
    for needed in [
        "Cargo.toml",
        "Cargo.lock",
        ".cargo/config.toml",
        "docs/rate-limits.md",
    ] {
        assert!(
            !docker_ignored(dockerignore, needed),
            "{needed} is left out"
        );
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let sources: Vec<String> = ["crates", "migrations"]
        .iter()
        .flat_map(|dir| files_under(&root, dir))
        .filter(|path| !path.contains("/target/"))
        .collect();
    assert!(sources.len() > 100, "{} files", sources.len());
    let left_out: Vec<&String> = sources
        .iter()
        .filter(|path| docker_ignored(dockerignore, path))
        .collect();
    assert!(left_out.is_empty(), "sources left out: {left_out:?}");
}

#[test]
fn compose_and_scale_config_hold_no_password_and_pass_them_as_docker_secrets() {
    let compose: serde_json::Value = serde_saphyr::from_str(COMPOSE).unwrap();
    let services = &compose["services"];
    let names = |value: &serde_json::Value| -> Vec<String> {
        value
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|i| i.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    // Every secret is a file under secrets/, which .dockerignore keeps out of the image.
    let declared = compose["secrets"].as_object().expect("top-level secrets");
    for (name, secret) in declared {
        let file = secret["file"].as_str().unwrap();
        assert!(file.starts_with("./secrets/"), "{name}: {file}");
    }

    // PostgreSQL: the password from a file, none in the environment.
    let postgres = &services["postgres"];
    let environment = postgres["environment"].as_object().unwrap();
    assert!(!environment.contains_key("POSTGRES_PASSWORD"));
    assert_eq!(
        environment["POSTGRES_PASSWORD_FILE"],
        format!("{DOCKER_SECRETS}postgres-password")
    );
    assert!(names(&postgres["secrets"]).contains(&"postgres-password".to_owned()));

    // Redis: users from an ACL file passed as a secret.
    let redis = &services["redis"];
    let command = names(&redis["command"]);
    let at = command
        .iter()
        .position(|a| a == "--aclfile")
        .expect("--aclfile");
    let acl = command[at + 1].strip_prefix(DOCKER_SECRETS).unwrap();
    assert!(names(&redis["secrets"]).contains(&acl.to_owned()));
    assert!(declared.contains_key(acl));

    // Certeasy reads both URLs from the secrets scale.yaml names, in both instances.
    let scale: serde_json::Value = serde_saphyr::from_str(SCALE).unwrap();
    let database = scale["database"]["url-file"].as_str().unwrap();
    let redis_urls = scale["redis"]["shards-file"].as_str().unwrap();
    assert!(scale["database"].get("url").is_none());
    assert!(scale["redis"].get("shards").is_none());
    for instance in ["certeasy-a", "certeasy-b"] {
        let mounted = names(&services[instance]["secrets"]);
        for file in [database, redis_urls] {
            let name = file.strip_prefix(DOCKER_SECRETS).unwrap();
            assert!(mounted.contains(&name.to_owned()), "{instance}: {name}");
            assert!(declared.contains_key(name), "{name}");
        }
    }
    let (_secrets, config) = scale_config();
    assert_eq!(
        config.database.url,
        "postgres://certeasy:0123abcd@postgres/certeasy"
    );
    assert_eq!(config.redis.shards, ["redis://certeasy:4567ef@redis:6379"]);
    assert!(
        !SCALE.contains("postgres://") && !SCALE.contains("redis://"),
        "no URL (nor its password) in config/scale.yaml"
    );
}

#[test]
fn a_profiles_validation_policy_is_checked_where_it_is_written() {
    let text = "\
acme:
  max-identifiers-per-order: 10
issuance:
  default-profile: p
  profiles:
    p:
      description: partners
      order-lifetime: 0s
      max-identifiers-per-order: 11
      challenge-types: [http-01]
      accounts: [0]
      eab-key-ids: [\"\"]
      issuer: int-2
";
    let found: Vec<(String, Option<u64>)> = problems(text)
        .into_iter()
        .map(|p| (p.key_path, p.line))
        .collect();
    assert_eq!(
        found,
        [
            ("issuance.profiles.p.order-lifetime".to_owned(), Some(8)),
            (
                "issuance.profiles.p.max-identifiers-per-order".to_owned(),
                Some(9)
            ),
            ("issuance.profiles.p.accounts[0]".to_owned(), Some(11)),
            ("issuance.profiles.p.eab-key-ids[0]".to_owned(), Some(12)),
            ("issuance.profiles.p.issuer".to_owned(), Some(13)),
        ]
    );
    let issuer = problems(text)
        .into_iter()
        .find(|p| p.key_path.ends_with(".issuer"))
        .unwrap();
    assert!(
        issuer.message.contains("add it to ca.issuers"),
        "{issuer:?}"
    );
}

#[test]
fn a_profiles_validation_policy_reaches_its_profile() {
    let config = from_str(
        "issuance:
  default-profile: p
  profiles:
    p:
      description: partners
      pending-authorization-lifetime: 1h
      valid-authorization-lifetime: 7h
      challenge-types: [dns-01]
      accounts: [4]
      eab-key-ids: [kid-1]
      issuer: default
",
        "c.yaml",
    )
    .unwrap();
    let profiles = config.issuance.profiles().unwrap();
    let p = profiles.default_profile();
    let v = p.validation();
    assert_eq!(
        v.pending_authorization_lifetime,
        Some(time::Duration::hours(1))
    );
    assert_eq!(
        v.valid_authorization_lifetime,
        Some(time::Duration::hours(7))
    );
    assert_eq!(v.order_lifetime, None);
    assert_eq!(v.max_identifiers, None);
    assert_eq!(v.challenge_types, [acme_core::status::ChallengeType::Dns01]);
    assert_eq!(v.accounts, [acme_core::ids::AccountId(4)]);
    assert_eq!(v.eab_key_ids, ["kid-1"]);
    assert_eq!(p.issuer().map(|i| i.as_str()), Some("default"));
}
