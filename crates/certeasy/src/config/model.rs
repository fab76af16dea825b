//! The typed configuration tree and its defaults.
//!
//! Every struct carries `#[serde(default)]` so that any key, or a whole section, may be left out,
//! and `deny_unknown_fields` so that a typo is an error rather than a silently ignored setting.
//! The `Default` impls are the documented defaults: `config/certeasy.yaml` spells out the same
//! values and a test keeps the two equal.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

use acme_api::settings::ApiSettings;
use acme_core::duration::ConfigDuration;
use acme_core::identifier::{IdentifierKind, IdentifierPolicy};
use ipnet::IpNet;
pub use issuance::KeyAlgorithm;
use issuance::Profiles;
use issuance::profiles::{self, ExtendedKeyUsage, KeyUsage, ProfileDefinition};
use ra::settings::PolicySettings;
use ratelimits::config::{RateLimitingConfig, RedisConfig as RateLimitRedis};
use serde::Deserialize;
use serde::Serialize;

use super::entries::{
    deserialize_cidrs, deserialize_names, deserialize_optional_duration, deserialize_optional_path,
    deserialize_resolvers, deserialize_strings, serialize_name, serialize_names,
};
use super::test_mode::TestModeConfig;

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    /// Where the SQLite database, CA keys and the generated TLS certificate live.
    pub data_dir: PathBuf,
    pub server: ServerConfig,
    pub database: DatabaseConfig,
    pub ca: CaConfig,
    pub issuance: IssuanceConfig,
    pub acme: AcmeConfig,
    pub identifiers: IdentifiersConfig,
    pub validation: ValidationConfig,
    pub logging: LoggingConfig,
    pub rate_limiting: RateLimitingConfig,
    pub redis: RedisConfig,
    /// Path of the per-ID overrides YAML file; `None` when the key is empty.
    #[serde(deserialize_with = "deserialize_optional_path")]
    pub rate_limit_overrides: Option<PathBuf>,
    pub zombie_pausing: ZombiePausingConfig,
    pub crl: CrlConfig,
    /// `test-mode:` an ephemeral instance for testing ACME clients; off by default.
    pub test_mode: TestModeConfig,
}

/// `crl:` certificate revocation lists for relying parties (docs/configuration.md).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct CrlConfig {
    /// Publish CRLs and name them in every new certificate.
    pub enabled: bool,
    /// The plain-HTTP listener the CRLs are served on (also at `/crl/` on the ACME listener).
    pub listen: SocketAddr,
    /// The URL certificates name, without the file name; empty = `http://<host of
    /// server.external-url>:<port of crl.listen>/crl`.
    pub base_url: String,
    /// New certificates are spread over this many CRLs.
    pub shards: u16,
    /// Every CRL is rebuilt at least this often (and within seconds of a revocation).
    pub update_interval: ConfigDuration,
    /// A CRL's `nextUpdate` is this long after its `thisUpdate`.
    pub lifetime: ConfigDuration,
}

impl Default for CrlConfig {
    fn default() -> Self {
        let publisher = workers::crl::CrlSettings::default();
        Self {
            enabled: true,
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 14002),
            base_url: String::new(),
            shards: publisher.shards,
            update_interval: ConfigDuration(publisher.update_interval),
            lifetime: ConfigDuration(publisher.lifetime),
        }
    }
}

/// `zombie-pausing:` pause (account, identifier) pairs that fail validation forever.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ZombiePausingConfig {
    pub enabled: bool,
    /// Consecutive failed validations of one pair before it is paused.
    pub max_consecutive_failures: u64,
    /// One failure is forgiven per this period (the bucket's refill).
    pub refill_per: ConfigDuration,
    /// How long an unpause link works.
    pub unpause_link_lifetime: ConfigDuration,
    /// A pair unpaused less than this long ago is not paused again.
    pub repause_grace: ConfigDuration,
    /// Base URL of the unpause page; empty = the ACME listener's external URL.
    pub unpause_base_url: String,
    /// HMAC key of unpause links; empty = `<data-dir>/unpause.key`, created on first start.
    #[serde(deserialize_with = "deserialize_optional_path")]
    pub unpause_key_file: Option<PathBuf>,
    /// Bump to invalidate every outstanding unpause link.
    pub unpause_key_version: u32,
}

impl Default for ZombiePausingConfig {
    fn default() -> Self {
        let limit = ratelimits::config::ZombiePausingLimit::default();
        Self {
            enabled: true,
            max_consecutive_failures: limit.max_consecutive_failures,
            refill_per: limit.forgive_one_per,
            unpause_link_lifetime: ConfigDuration::from_secs(14 * 86_400),
            repause_grace: ConfigDuration::from_secs(14 * 86_400),
            unpause_base_url: String::new(),
            unpause_key_file: None,
            unpause_key_version: 1,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./data"),
            server: ServerConfig::default(),
            database: DatabaseConfig::default(),
            ca: CaConfig::default(),
            issuance: IssuanceConfig::default(),
            acme: AcmeConfig::default(),
            identifiers: IdentifiersConfig::default(),
            validation: ValidationConfig::default(),
            logging: LoggingConfig::default(),
            rate_limiting: RateLimitingConfig::default(),
            redis: RedisConfig::default(),
            rate_limit_overrides: None,
            zombie_pausing: ZombiePausingConfig::default(),
            crl: CrlConfig::default(),
            test_mode: TestModeConfig::default(),
        }
    }
}

impl Config {
    /// The database URL to connect to: `database.url`, or a SQLite file under `data-dir` when it
    /// is empty, so that a bare configuration still keeps its state next to its CA keys.
    pub fn database_url(&self) -> String {
        let url = self.database.url.trim();
        if url.is_empty() {
            format!("sqlite://{}", self.data_dir.join("certeasy.db").display())
        } else {
            url.to_owned()
        }
    }

    /// The admin API's token file: `server.admin-token-file`, or `<data-dir>/admin.token`.
    pub fn admin_token_path(&self) -> PathBuf {
        self.server
            .admin_token_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join(crate::admin_token::DEFAULT_FILE_NAME))
    }

    /// The `ratelimits` settings with the keys this file keeps elsewhere filled in:
    /// `redis:` (shared with other users of Redis), `server.ipv6-prefix-length` and
    /// `rate-limit-overrides`. Redis buckets are kept under `<redis.key-prefix>rl:`.
    pub fn rate_limiting_settings(&self) -> RateLimitingConfig {
        let mut settings = self.rate_limiting.clone();
        settings.ipv6_prefix_length = self.server.ipv6_prefix_length;
        settings.overrides_file = self.rate_limit_overrides.clone();
        settings.zombie_pausing = ratelimits::config::ZombiePausingLimit {
            enabled: self.zombie_pausing.enabled,
            mode: ratelimits::config::Mode::Enforce,
            max_consecutive_failures: self.zombie_pausing.max_consecutive_failures,
            forgive_one_per: self.zombie_pausing.refill_per,
        };
        settings.redis = (!self.redis.shards.is_empty()).then(|| RateLimitRedis {
            shards: self.redis.shards.clone(),
            key_prefix: format!("{}rl:", self.redis.key_prefix),
            timeout: self.redis.timeout,
            ..RateLimitRedis::default()
        });
        settings
    }

    /// The URL certificates name for their CRL shard, without the file name and without a
    /// trailing slash: `crl.base-url`, or the CRL listener's port on the ACME listener's
    /// external host, over plain HTTP.
    pub fn crl_base_url(&self) -> String {
        let configured = self.crl.base_url.trim().trim_end_matches('/');
        if !configured.is_empty() {
            return configured.to_owned();
        }
        let external = self.external_url();
        let host = url::Url::parse(&external)
            .ok()
            .and_then(|u| {
                u.host().map(|h| match h {
                    url::Host::Ipv6(ip) => format!("[{ip}]"),
                    other => other.to_string(),
                })
            })
            .unwrap_or_else(|| "localhost".to_owned());
        format!("http://{host}:{}/crl", self.crl.listen.port())
    }

    /// The base URL clients reach the ACME listener at, without a trailing slash.
    ///
    /// Defaults to `https://localhost:<listen port>` because the self-issued listener
    /// certificate names `localhost` by default.
    pub fn external_url(&self) -> String {
        let url = self.server.external_url.trim().trim_end_matches('/');
        if url.is_empty() {
            format!("https://localhost:{}", self.server.listen.port())
        } else {
            url.to_owned()
        }
    }
}

/// `server:` the ACME and admin listeners, how requests reach them, and the connection limits
/// every listener (the CRL listener too) is held to.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ServerConfig {
    /// The HTTPS ACME listener. Port 0 binds an ephemeral port (tests).
    pub listen: SocketAddr,
    /// The plain-HTTP admin listener (`/metrics`, `/healthz`, `/readyz`, admin API); it is never
    /// served on the ACME listener, so it can stay on loopback.
    pub admin_listen: SocketAddr,
    /// Base URL clients use; empty means `https://localhost:<listen port>`.
    pub external_url: String,
    /// DNS names and IP addresses on the self-issued listener certificate.
    pub tls_names: Vec<String>,
    /// PEM certificate chain for the listener instead of a self-issued one.
    #[serde(deserialize_with = "deserialize_optional_path")]
    pub tls_certificate: Option<PathBuf>,
    /// The PEM private key of `tls-certificate`.
    #[serde(deserialize_with = "deserialize_optional_path")]
    pub tls_private_key: Option<PathBuf>,
    /// Peers whose `X-Forwarded-For` header is believed.
    #[serde(deserialize_with = "deserialize_cidrs")]
    pub trusted_proxies: Vec<IpNet>,
    pub max_body_bytes: usize,
    pub request_timeout: ConfigDuration,
    /// IPv6 clients are keyed by this prefix in per-IP limits, since one host usually owns a
    /// whole /64 and could otherwise rotate addresses to escape its bucket.
    pub ipv6_prefix_length: u8,
    /// Lifetime of the self-issued listener certificate; it is renewed after two thirds of it,
    /// so a server that runs for years never serves an expired certificate.
    pub tls_certificate_lifetime: ConfigDuration,
    /// A client that has not finished its TLS handshake by then is dropped, so silent
    /// connections cannot hold connection slots.
    pub tls_handshake_timeout: ConfigDuration,
    /// An HTTP/1.1 client must send a complete request head within this time, counted from when
    /// the connection waits for a request; this is what ends slow-header ("slowloris") clients
    /// and idle HTTP/1.1 keep-alive connections.
    pub header_read_timeout: ConfigDuration,
    /// A connection with no request in flight for this long is closed gracefully (mostly for
    /// HTTP/2, whose connections have no header timer).
    pub idle_timeout: ConfigDuration,
    /// Connections served at once; further clients wait in the kernel's accept queue until a
    /// slot frees, which the timeouts above guarantee happens.
    pub max_connections: usize,
    /// Connections one client address (IPv6: its `ipv6-prefix-length` prefix) may hold at once
    /// on each listener, so one address cannot take every slot; further connections are closed
    /// as soon as they are accepted. Trusted proxies are exempt.
    pub max_connections_per_ip: usize,
    /// Streams one HTTP/2 connection may have open at once.
    pub http2_max_concurrent_streams: u32,
    /// HTTP/2 PING interval, so dead peers are noticed and their slots freed.
    pub http2_keep_alive_interval: ConfigDuration,
    /// An HTTP/2 connection whose PING is not answered within this time is closed.
    pub http2_keep_alive_timeout: ConfigDuration,
    /// Largest decoded header list of one HTTP/2 request, in bytes.
    pub http2_max_header_list_size: u32,
    /// Bearer token of `/admin/*`; empty = `<data-dir>/admin.token`, created on first start.
    #[serde(deserialize_with = "deserialize_optional_path")]
    pub admin_token_file: Option<PathBuf>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 14000),
            admin_listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 14001),
            external_url: String::new(),
            tls_names: vec![
                "localhost".to_owned(),
                Ipv4Addr::LOCALHOST.to_string(),
                Ipv6Addr::LOCALHOST.to_string(),
            ],
            tls_certificate: None,
            tls_private_key: None,
            trusted_proxies: Vec::new(),
            max_body_bytes: ApiSettings::defaults().max_body_bytes,
            request_timeout: ConfigDuration::from_secs(30),
            ipv6_prefix_length: 64,
            tls_certificate_lifetime: ConfigDuration::from_secs(30 * 86_400),
            tls_handshake_timeout: ConfigDuration::from_secs(10),
            header_read_timeout: ConfigDuration::from_secs(10),
            idle_timeout: ConfigDuration::from_secs(60),
            max_connections: 4096,
            max_connections_per_ip: 64,
            http2_max_concurrent_streams: 100,
            http2_keep_alive_interval: ConfigDuration::from_secs(30),
            http2_keep_alive_timeout: ConfigDuration::from_secs(20),
            http2_max_header_list_size: 16_384,
            admin_token_file: None,
        }
    }
}

/// `database:`
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct DatabaseConfig {
    /// `sqlite://...` or `postgres://...`; empty means a SQLite file under `data-dir`
    /// (see [`Config::database_url`]).
    pub url: String,
    /// A file holding `url` (a Docker or systemd secret), so that this file holds no password;
    /// read at load, its trailing newline trimmed (`config/secrets.rs`). Never set with `url`.
    #[serde(deserialize_with = "deserialize_optional_path")]
    pub url_file: Option<PathBuf>,
    /// Size of the connection pool (both backends).
    pub max_connections: u32,
    /// When a SQLite commit is durable: `normal` survives a crash of the process, `full` also
    /// a power loss (docs/performance.md).
    pub sqlite_synchronous: SqliteSynchronous,
    /// Run the background pruner (expired orders, authorizations and challenges; certificates
    /// and revocations are kept).
    pub prune: bool,
    /// How long after its expiry an order or authorization is pruned.
    pub prune_after: ConfigDuration,
    /// Pause between two pruning passes.
    pub prune_interval: ConfigDuration,
    /// Rows per table per pruning transaction.
    pub prune_batch: u32,
}

/// `database.sqlite-synchronous`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SqliteSynchronous {
    Normal,
    Full,
}

impl From<storage::Synchronous> for SqliteSynchronous {
    fn from(value: storage::Synchronous) -> Self {
        match value {
            storage::Synchronous::Normal => Self::Normal,
            storage::Synchronous::Full => Self::Full,
        }
    }
}

impl From<SqliteSynchronous> for storage::Synchronous {
    fn from(value: SqliteSynchronous) -> Self {
        match value {
            SqliteSynchronous::Normal => Self::Normal,
            SqliteSynchronous::Full => Self::Full,
        }
    }
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        let pruner = workers::pruner::PrunerSettings::default();
        Self {
            url: String::new(),
            url_file: None,
            max_connections: storage::PoolSettings::default().max_connections,
            sqlite_synchronous: storage::PoolSettings::default().sqlite_synchronous.into(),
            prune: true,
            prune_after: ConfigDuration(pruner.retention.unsigned_abs()),
            prune_interval: ConfigDuration(pruner.interval),
            prune_batch: pruner.batch,
        }
    }
}

/// `ca:` the certificate authority that signs everything.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct CaConfig {
    #[serde(deserialize_with = "key_algorithm", serialize_with = "serialize_name")]
    pub key_algorithm: KeyAlgorithm,
    pub organization: String,
    pub root_common_name: String,
    pub intermediate_common_name: String,
    pub root_validity: ConfigDuration,
    pub intermediate_validity: ConfigDuration,
    /// An existing CA to load instead of creating one.
    pub existing: ExistingCaConfig,
}

impl Default for CaConfig {
    fn default() -> Self {
        Self {
            key_algorithm: KeyAlgorithm::EcdsaP256,
            organization: "Certeasy".to_owned(),
            root_common_name: "Certeasy Root CA".to_owned(),
            intermediate_common_name: "Certeasy Intermediate CA".to_owned(),
            root_validity: ConfigDuration::from_secs(3650 * 86_400),
            intermediate_validity: ConfigDuration::from_secs(1825 * 86_400),
            existing: ExistingCaConfig::default(),
        }
    }
}

/// `ca.key-algorithm`: read with issuance's own parser, so the configuration accepts exactly
/// the algorithms the CA can generate, under the names the error message lists.
fn key_algorithm<'de, D: serde::Deserializer<'de>>(d: D) -> Result<KeyAlgorithm, D::Error> {
    let name = String::deserialize(d)?;
    name.parse().map_err(serde::de::Error::custom)
}

/// `ca.existing:` paths of PEM files of a CA created elsewhere; all `None` means "create one".
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ExistingCaConfig {
    /// The issuing CA certificate.
    #[serde(deserialize_with = "deserialize_optional_path")]
    pub certificate: Option<PathBuf>,
    /// Its private key (PKCS#8).
    #[serde(deserialize_with = "deserialize_optional_path")]
    pub private_key: Option<PathBuf>,
    /// Further CA certificates up to the root.
    #[serde(deserialize_with = "deserialize_optional_path")]
    pub chain: Option<PathBuf>,
}

impl ExistingCaConfig {
    /// True when an existing CA is to be loaded rather than one created.
    pub fn is_configured(&self) -> bool {
        self.certificate.is_some()
    }
}

/// `issuance:` the certificate profiles and the validity of end-entity certificates.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct IssuanceConfig {
    /// Lifetime for profiles that set no `validity`.
    pub default_validity: ConfigDuration,
    /// Longest lifetime for profiles that set no `max-validity`.
    pub max_validity: ConfigDuration,
    /// `notBefore` is set this far in the past to tolerate clients with slow clocks.
    pub backdate: ConfigDuration,
    /// The profile of orders that name none.
    pub default_profile: String,
    /// The profiles offered, by name. Written in the file, the map replaces the shipped one.
    pub profiles: BTreeMap<String, ProfileConfig>,
}

impl Default for IssuanceConfig {
    fn default() -> Self {
        Self {
            default_validity: config_duration(profiles::DEFAULT_VALIDITY),
            max_validity: config_duration(profiles::DEFAULT_MAX_VALIDITY),
            backdate: config_duration(PolicySettings::default().backdate),
            default_profile: profiles::SHIPPED_DEFAULT.to_owned(),
            profiles: ProfileDefinition::shipped()
                .into_iter()
                .map(|(name, definition)| (name, ProfileConfig::from(definition)))
                .collect(),
        }
    }
}

impl IssuanceConfig {
    /// The checked profiles; `validate` has already run the same checks, so this fails only
    /// for a configuration that was never validated.
    pub fn profiles(&self) -> Result<Profiles, issuance::Error> {
        let definitions = self
            .profiles
            .iter()
            .map(|(name, profile)| (name.clone(), profile.definition()))
            .collect();
        Profiles::new(
            &self.default_profile,
            &definitions,
            self.default_validity.time(),
            self.max_validity.time(),
        )
    }
}

/// `issuance.profiles.<name>:` one certificate profile (draft-ietf-acme-profiles). A key left
/// out takes the value of `ProfileDefinition::default()`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ProfileConfig {
    /// Shown to clients in the directory's `meta.profiles`.
    pub description: String,
    /// Lifetime when the order does not ask; `None`: `issuance.default-validity`.
    #[serde(deserialize_with = "deserialize_optional_duration")]
    pub validity: Option<ConfigDuration>,
    /// Longest lifetime an order may ask for; `None`: `issuance.max-validity`.
    #[serde(deserialize_with = "deserialize_optional_duration")]
    pub max_validity: Option<ConfigDuration>,
    #[serde(
        deserialize_with = "deserialize_names",
        serialize_with = "serialize_names"
    )]
    pub key_usages: Vec<KeyUsage>,
    #[serde(
        deserialize_with = "deserialize_names",
        serialize_with = "serialize_names"
    )]
    pub extended_key_usages: Vec<ExtendedKeyUsage>,
    #[serde(
        deserialize_with = "deserialize_names",
        serialize_with = "serialize_names"
    )]
    pub identifier_types: Vec<IdentifierKind>,
    #[serde(
        deserialize_with = "deserialize_names",
        serialize_with = "serialize_names"
    )]
    pub key_types: Vec<KeyAlgorithm>,
}

impl Default for ProfileConfig {
    fn default() -> Self {
        ProfileDefinition::default().into()
    }
}

impl From<ProfileDefinition> for ProfileConfig {
    fn from(d: ProfileDefinition) -> Self {
        Self {
            description: d.description,
            validity: d.validity.map(config_duration),
            max_validity: d.max_validity.map(config_duration),
            key_usages: d.key_usages,
            extended_key_usages: d.extended_key_usages,
            identifier_types: d.identifier_types,
            key_types: d.key_types,
        }
    }
}

impl ProfileConfig {
    fn definition(&self) -> ProfileDefinition {
        ProfileDefinition {
            description: self.description.clone(),
            validity: self.validity.map(ConfigDuration::time),
            max_validity: self.max_validity.map(ConfigDuration::time),
            key_usages: self.key_usages.clone(),
            extended_key_usages: self.extended_key_usages.clone(),
            identifier_types: self.identifier_types.clone(),
            key_types: self.key_types.clone(),
        }
    }
}

/// `acme:` protocol-level settings.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct AcmeConfig {
    /// URL of the terms of service; when set, newAccount must agree to them.
    pub terms_of_service: String,
    pub website: String,
    /// Issuer domains for CAA; when non-empty CAA checking is enabled.
    pub caa_identities: Vec<String>,
    /// newAccount must carry an external account binding (keys from `certeasy admin eab`).
    pub external_account_required: bool,
    pub order_lifetime: ConfigDuration,
    /// Pending authorizations expire after this.
    pub authorization_lifetime: ConfigDuration,
    /// A valid authorization may be reused for this long.
    pub valid_authorization_lifetime: ConfigDuration,
    pub reuse_valid_authorizations: bool,
    pub nonce_lifetime: ConfigDuration,
    pub orders_per_page: usize,
    pub max_identifiers_per_order: usize,
    /// `Retry-After` on pending authorizations and processing orders.
    pub retry_after: ConfigDuration,
    pub max_contacts: usize,
    /// ARI (RFC 9773): the suggested renewal window, in percent of a certificate's lifetime.
    pub renewal_window_start_percent: u8,
    pub renewal_window_end_percent: u8,
    /// ARI: each certificate's window moves later by up to this percent of its lifetime.
    pub renewal_jitter_percent: u8,
    /// ARI: `Retry-After` of renewal information.
    pub renewal_info_retry_after: ConfigDuration,
    /// SHA-256 hashes of public keys that may be neither an account's nor a certificate's, one
    /// per line (`ra::keys`); `None` when the key is empty. Read again on SIGHUP.
    #[serde(deserialize_with = "deserialize_optional_path")]
    pub blocked_keys_file: Option<PathBuf>,
}

impl Default for AcmeConfig {
    fn default() -> Self {
        let api = ApiSettings::defaults();
        let policy = PolicySettings::default();
        Self {
            terms_of_service: String::new(),
            website: String::new(),
            caa_identities: Vec::new(),
            external_account_required: policy.external_account_required,
            order_lifetime: config_duration(policy.order_lifetime),
            authorization_lifetime: config_duration(policy.authorization_lifetime),
            valid_authorization_lifetime: ConfigDuration::from_secs(
                storage::DEFAULT_VALID_AUTHORIZATION_LIFETIME
                    .whole_seconds()
                    .unsigned_abs(),
            ),
            reuse_valid_authorizations: policy.reuse_valid_authorizations,
            nonce_lifetime: ConfigDuration::from_secs(3600),
            orders_per_page: usize::try_from(api.orders_per_page).unwrap_or(usize::MAX),
            max_identifiers_per_order: policy.max_identifiers_per_order,
            retry_after: config_duration(api.retry_after),
            max_contacts: policy.max_contacts,
            renewal_window_start_percent: percent(policy.renewal.window_start),
            renewal_window_end_percent: percent(policy.renewal.window_end),
            renewal_jitter_percent: percent(policy.renewal.jitter),
            renewal_info_retry_after: config_duration(policy.renewal.retry_after),
            blocked_keys_file: None,
        }
    }
}

/// A fraction of the policy layer's defaults as the whole percent the file states.
fn percent(fraction: f64) -> u8 {
    // The defaults are fractions between 0 and 1, so the rounded value fits a u8.
    (fraction * 100.0).round().clamp(0.0, 100.0) as u8
}

/// `identifiers:` which names and addresses this CA issues for.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct IdentifiersConfig {
    /// When non-empty, only these domains and their subdomains.
    #[serde(deserialize_with = "deserialize_strings")]
    pub allow_domains: Vec<String>,
    #[serde(deserialize_with = "deserialize_strings")]
    pub deny_domains: Vec<String>,
    /// When non-empty, only addresses inside these networks.
    #[serde(deserialize_with = "deserialize_cidrs")]
    pub allow_cidrs: Vec<IpNet>,
    #[serde(deserialize_with = "deserialize_cidrs")]
    pub deny_cidrs: Vec<IpNet>,
}

impl IdentifiersConfig {
    /// The policy `acme-core` checks identifiers against.
    pub fn policy(&self) -> IdentifierPolicy {
        IdentifierPolicy {
            allow_domains: self.allow_domains.clone(),
            deny_domains: self.deny_domains.clone(),
            allow_cidrs: self.allow_cidrs.clone(),
            deny_cidrs: self.deny_cidrs.clone(),
        }
    }
}

/// `validation:` how challenges are checked.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ValidationConfig {
    /// Resolvers to query; empty means the host's resolver configuration. A bare IP means port 53.
    #[serde(deserialize_with = "deserialize_resolvers")]
    pub dns_servers: Vec<SocketAddr>,
    /// Port http-01 connects to; only tests change it.
    pub http_port: u16,
    /// Port tls-alpn-01 connects to; only tests change it.
    pub tls_alpn_port: u16,
    /// Whether challenge targets may resolve to loopback addresses (tests and labs only).
    pub allow_loopback: bool,
    /// Networks the validator never connects to, on top of the built-in refusals.
    #[serde(deserialize_with = "deserialize_cidrs")]
    pub deny_target_cidrs: Vec<IpNet>,
    /// Whether http-01 redirects may lead into private networks from a public identifier.
    pub allow_private_redirects: bool,
    pub timeout: ConfigDuration,
    pub workers: usize,
    /// Attempts per job before giving up.
    pub max_attempts: u32,
    /// How long a claimed job stays reserved without a heartbeat (renewed every third of it while
    /// the attempt runs); after a crash, the job is retried once it expires.
    pub job_lease: ConfigDuration,
    /// CAA is checked again before signing for authorizations validated longer ago than this.
    pub caa_recheck_after: ConfigDuration,
    /// Attempts after the first for a challenge whose dns-01 record may still be propagating
    /// (nothing else is retried).
    pub retries: u32,
    /// Wait before the first retry of a challenge; doubled for each further one (capped).
    pub retry_backoff: ConfigDuration,
    /// The latest a retry may start after the challenge's first attempt failed.
    pub retry_window: ConfigDuration,
}

impl Default for ValidationConfig {
    fn default() -> Self {
        Self {
            dns_servers: Vec::new(),
            http_port: 80,
            tls_alpn_port: 443,
            allow_loopback: false,
            deny_target_cidrs: Vec::new(),
            allow_private_redirects: validation::DEFAULT_ALLOW_PRIVATE_REDIRECTS,
            timeout: ConfigDuration::from_secs(10),
            workers: workers::settings::DEFAULT_CONCURRENCY,
            max_attempts: 3,
            job_lease: ConfigDuration::from_secs(
                workers::settings::DEFAULT_JOB_LEASE
                    .whole_seconds()
                    .unsigned_abs(),
            ),
            caa_recheck_after: config_duration(ra::caa::DEFAULT_RECHECK_AFTER),
            retries: workers::settings::DEFAULT_VALIDATION_RETRIES,
            retry_backoff: config_duration(workers::settings::DEFAULT_RETRY_BACKOFF),
            retry_window: config_duration(workers::settings::DEFAULT_RETRY_WINDOW),
        }
    }
}

/// `logging:`
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct LoggingConfig {
    /// A `tracing` filter directive such as `info,certeasy=debug`.
    pub level: String,
    pub format: LogFormat,
}

impl Default for LoggingConfig {
    fn default() -> Self {
        Self {
            level: "info".to_owned(),
            format: LogFormat::Text,
        }
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// `redis:` shared rate-limit state for several instances.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct RedisConfig {
    /// `redis://host:port` URLs; empty means limits are kept in memory.
    #[serde(deserialize_with = "deserialize_strings")]
    pub shards: Vec<String>,
    /// A file holding the `shards` URLs, one per line (a Docker or systemd secret: the URLs
    /// carry the Redis password); read at load (`config/secrets.rs`). Never set with `shards`.
    #[serde(deserialize_with = "deserialize_optional_path")]
    pub shards_file: Option<PathBuf>,
    pub timeout: ConfigDuration,
    pub key_prefix: String,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            shards: Vec::new(),
            shards_file: None,
            timeout: ConfigDuration(std::time::Duration::from_millis(50)),
            key_prefix: "certeasy:".to_owned(),
        }
    }
}

/// A default kept by its owner as a `time::Duration` (never negative), as the file writes it.
fn config_duration(d: time::Duration) -> ConfigDuration {
    ConfigDuration(d.unsigned_abs())
}
