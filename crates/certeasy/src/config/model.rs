//! The typed configuration tree and its defaults.
//!
//! Every struct carries `#[serde(default)]` so that any key, or a whole section, may be left out,
//! and `deny_unknown_fields` so that a typo is an error rather than a silently ignored setting.
//! The `Default` impls are the defaults, each taken from the crate whose setting it is where one
//! owns it; the doc comments of the fields are the operators' reference: `docs/configuration.md`
//! and `config/certeasy.yaml` are generated from them and from the defaults (`reference.rs`).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

use acme_api::settings::ApiSettings;
use acme_core::duration::ConfigDuration;
use acme_core::identifier::{IdentifierKind, IdentifierPolicy};
use acme_core::ids::AccountId;
use acme_core::status::ChallengeType;
use ipnet::IpNet;
use issuance::IssuerName;
pub use issuance::KeyAlgorithm;
use issuance::Profiles;
use issuance::profiles::{self, ExtendedKeyUsage, KeyUsage, ProfileDefinition, ValidationPolicy};
use ra::settings::PolicySettings;
use ratelimits::config::{RateLimitingConfig, RedisConfig as RateLimitRedis};
use schemars::JsonSchema;
use serde::Deserialize;
use serde::Serialize;

use super::entries::{
    deserialize_cidrs, deserialize_names, deserialize_optional_duration, deserialize_optional_path,
    deserialize_resolvers, deserialize_strings, serialize_name, serialize_names,
};
use super::schema;
use super::test_mode::TestModeConfig;

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    /// Directory of the SQLite database, the CA keys, the unpause key and the admin token. Must not
    /// be empty. Created with mode 0700 (an existing directory is left alone, with a warning if
    /// other users can enter it); the SQLite database and its `-wal`/`-shm` files are kept at 0600.
    #[schemars(with = "schema::Path")]
    pub data_dir: PathBuf,
    pub server: ServerConfig,
    pub database: DatabaseConfig,
    pub ca: CaConfig,
    pub issuance: IssuanceConfig,
    pub acme: AcmeConfig,
    pub identifiers: IdentifiersConfig,
    pub validation: ValidationConfig,
    pub logging: LoggingConfig,
    #[schemars(with = "schema::RateLimiting")]
    pub rate_limiting: RateLimitingConfig,
    pub redis: RedisConfig,
    /// Path of the per-account/per-IP overrides YAML file; empty means none.
    #[serde(deserialize_with = "deserialize_optional_path")]
    #[schemars(with = "Option<schema::Path>")]
    pub rate_limit_overrides: Option<PathBuf>,
    pub zombie_pausing: ZombiePausingConfig,
    pub crl: CrlConfig,
    /// `test-mode:` an ephemeral instance for testing ACME clients; off by default.
    pub test_mode: TestModeConfig,
}

/// `crl:` certificate revocation lists for relying parties (docs/configuration.md).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct CrlConfig {
    /// Publish CRLs and name them in new certificates.
    pub enabled: bool,
    /// The plain-HTTP listener the CRLs are served on. Relying parties fetch CRLs over HTTP (RFC
    /// 5280 §4.2.1.13).
    #[schemars(with = "schema::SocketAddress")]
    pub listen: SocketAddr,
    /// The URL certificates name, without the file name (`<base-url>/<shard>.crl`); empty means
    /// `http://<host of server.external-url>:<port of listen>/crl`.
    pub base_url: String,
    /// New certificates are spread over this many CRLs (1 to 1024).
    pub shards: u16,
    /// Every CRL is rebuilt at least this often.
    #[schemars(with = "schema::Duration")]
    pub update_interval: ConfigDuration,
    /// A CRL's `nextUpdate` is this long after its `thisUpdate`; must be longer than
    /// `update-interval`.
    #[schemars(with = "schema::Duration")]
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
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ZombiePausingConfig {
    /// Count consecutive failures and pause pairs that reach the limit.
    pub enabled: bool,
    /// Failures in a row before the pair is paused (the bucket's burst). A successful validation
    /// resets the count to zero.
    pub max_consecutive_failures: u64,
    /// One failure is forgiven per this period.
    #[schemars(with = "schema::Duration")]
    pub refill_per: ConfigDuration,
    /// How long the unpause link in a refusal works.
    #[schemars(with = "schema::Duration")]
    pub unpause_link_lifetime: ConfigDuration,
    /// A pair unpaused less than this long ago is not paused again; after it, counting starts
    /// fresh.
    #[schemars(with = "schema::Duration")]
    pub repause_grace: ConfigDuration,
    /// Base URL of the unpause page; empty means `server.external-url`.
    pub unpause_base_url: String,
    /// HMAC-SHA256 key of unpause links; empty means `<data-dir>/unpause.key`, created with mode
    /// 0600 on first start. Instances behind one load balancer must share it.
    #[serde(deserialize_with = "deserialize_optional_path")]
    #[schemars(with = "Option<schema::Path>")]
    pub unpause_key_file: Option<PathBuf>,
    /// Bump it to invalidate every outstanding unpause link.
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
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ServerConfig {
    /// HTTPS ACME listener, `address:port` (IPv6 as `"[::]:14000"`). Port 0 picks a free port
    /// (tests).
    #[schemars(with = "schema::SocketAddress")]
    pub listen: SocketAddr,
    /// Plain-HTTP admin listener: `/metrics`, `/healthz`, `/readyz`, admin API. Never served on the
    /// ACME listener; must not overlap `listen`.
    #[schemars(with = "schema::SocketAddress")]
    pub admin_listen: SocketAddr,
    /// Base URL clients use, e.g. `https://acme.internal:14000`. Must be `https://` with a host and
    /// no query. Empty means `https://localhost:<listen port>`.
    pub external_url: String,
    /// DNS names and IP addresses on the listener certificate issued by our own CA. Must not be
    /// empty unless `tls-certificate` is set.
    pub tls_names: Vec<String>,
    /// PEM file with the listener's certificate chain, used instead of a self-issued one. Needs
    /// `tls-private-key`.
    #[serde(deserialize_with = "deserialize_optional_path")]
    #[schemars(with = "Option<schema::Path>")]
    pub tls_certificate: Option<PathBuf>,
    /// PEM file with the private key of `tls-certificate`.
    #[serde(deserialize_with = "deserialize_optional_path")]
    #[schemars(with = "Option<schema::Path>")]
    pub tls_private_key: Option<PathBuf>,
    /// CIDRs/IPs of reverse proxies whose `X-Forwarded-For` header is believed. List only the
    /// proxies' own addresses, never a whole network clients can reach you from. See [client
    /// addresses](#client-addresses).
    #[serde(deserialize_with = "deserialize_cidrs")]
    #[schemars(with = "Vec<schema::Cidr>")]
    pub trusted_proxies: Vec<IpNet>,
    /// Largest accepted request body; at least 1024.
    pub max_body_bytes: usize,
    /// Deadline for one request; longer than zero.
    #[schemars(with = "schema::Duration")]
    pub request_timeout: ConfigDuration,
    /// IPv6 clients are keyed by this prefix in per-IP rate limits and in `max-connections-per-ip`
    /// (1 to 128).
    pub ipv6_prefix_length: u8,
    /// Lifetime of the self-issued listener certificate (when `tls-certificate` is not set). It is
    /// renewed after two thirds of its lifetime and swapped in without a restart; connections
    /// already open keep the certificate they started with.
    #[schemars(with = "schema::Duration")]
    pub tls_certificate_lifetime: ConfigDuration,
    /// A client that has not completed its TLS handshake by then is disconnected.
    #[schemars(with = "schema::Duration")]
    pub tls_handshake_timeout: ConfigDuration,
    /// An HTTP/1.1 client must send a complete request head within this time, counted from when the
    /// connection starts waiting for a request. This ends slow-header ("slowloris") clients, and it
    /// is also how long an idle HTTP/1.1 keep-alive connection stays open.
    #[schemars(with = "schema::Duration")]
    pub header_read_timeout: ConfigDuration,
    /// A connection with no request in flight for this long is closed gracefully. This is the
    /// keep-alive limit of HTTP/2 connections, which have no header timer, and it also ends
    /// connections that never send enough to tell which protocol they speak.
    #[schemars(with = "schema::Duration")]
    pub idle_timeout: ConfigDuration,
    /// Connections served at once (at least 1). When all slots are taken, Certeasy stops accepting
    /// and new clients wait in the kernel's accept queue until a slot frees; they are not refused.
    /// The timeouts above bound how long a slot can be held without doing work, so slow or silent
    /// clients cannot starve the others.
    pub max_connections: usize,
    /// Connections one client address may hold at once on each listener (at least 1); an IPv6
    /// client is counted by its `ipv6-prefix-length` prefix. A further connection is closed as soon
    /// as it is accepted, so one address cannot hold every slot of `max-connections`. The
    /// `trusted-proxies` are exempt: every client behind a proxy shares its address.
    pub max_connections_per_ip: usize,
    /// Streams one HTTP/2 connection may have open at once (at least 1).
    pub http2_max_concurrent_streams: u32,
    /// Interval of HTTP/2 PINGs, so dead peers are noticed.
    #[schemars(with = "schema::Duration")]
    pub http2_keep_alive_interval: ConfigDuration,
    /// An HTTP/2 connection that does not answer a PING within this time is closed.
    #[schemars(with = "schema::Duration")]
    pub http2_keep_alive_timeout: ConfigDuration,
    /// Largest decoded header list of one HTTP/2 request, in bytes (at least 1024).
    pub http2_max_header_list_size: u32,
    /// File holding the bearer token that `/admin/*` requires (see [Admin API
    /// authentication](#admin-api-authentication)). Empty means `<data-dir>/admin.token`. A missing
    /// file is created on first start with a random 32-byte token (hex) and mode 0600; instances
    /// that share an admin client can point this at one shared file.
    #[serde(deserialize_with = "deserialize_optional_path")]
    #[schemars(with = "Option<schema::Path>")]
    pub admin_token_file: Option<PathBuf>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::new(
                IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                workers::settings::DEFAULT_ACME_PORT,
            ),
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
            ipv6_prefix_length: RateLimitingConfig::default().ipv6_prefix_length,
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

/// `database:` where the CA keeps its state, and how long expired objects are kept.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct DatabaseConfig {
    /// `sqlite://path`, `postgres://user@host/db` or `postgresql://...`. Empty means
    /// `sqlite://<data-dir>/certeasy.db` (the file is created if missing).
    pub url: String,
    /// A file holding the URL instead, e.g. a Docker secret (`/run/secrets/database-url`) or a
    /// systemd credential, so the configuration file holds no password (see [Secrets in
    /// files](#secrets-in-files)). Not with `url`.
    #[serde(deserialize_with = "deserialize_optional_path")]
    #[schemars(with = "Option<schema::Path>")]
    pub url_file: Option<PathBuf>,
    /// Connection pool size; at least 1. PostgreSQL: every instance opens up to this many
    /// connections, so PostgreSQL's `max_connections` must cover instances × this. SQLite: one
    /// writer connection plus readers, as many as this less one but no more than the CPUs
    /// (statements run on the server's own threads, so more readers would only idle).
    pub max_connections: u32,
    /// When a SQLite commit is durable. `normal` (WAL, `synchronous=NORMAL`): every commit reaches
    /// the WAL file before the client hears of it, so it survives the server process being killed;
    /// the file is synced at checkpoints, so a power loss or kernel crash may roll back the last
    /// commits before the most recent checkpoint, leaving an older but consistent database. `full`:
    /// each commit is synced to the disk before the response, and survives a power loss too, at the
    /// price of an fsync per write. Ignored on PostgreSQL. See
    /// [docs/performance.md](performance.md#durability-of-sqlite-commits).
    pub sqlite_synchronous: SqliteSynchronous,
    /// Run the background pruner: orders that never issued, authorizations and their challenges are
    /// deleted once they have been expired for `prune-after`; the order of an issued certificate is
    /// kept but trimmed (CSR and authorization links dropped). Certificates, their revocation
    /// state, accounts and paused pairs are never pruned; jobs delete themselves when settled, and
    /// used nonces are not in the database (memory forgets them after the nonce lifetime; Redis
    /// keys carry it as TTL). With `false` nothing is ever deleted and the database grows with
    /// every request (docs/performance.md, "Database size and pruning").
    pub prune: bool,
    /// Retention, counted from each row's expiry (an order's `expires`, an authorization's
    /// `expires`). A client polls an object at most until it expires, after which it only answers
    /// `invalid`, so any value is safe for clients, including `0s` (prune as soon as expired); the
    /// week is for operators looking into a failed order. Expired objects are answered as "not
    /// found" once pruned.
    #[schemars(with = "schema::Duration")]
    pub prune_after: ConfigDuration,
    /// Pause between two pruning passes; more than zero. A pass runs batches until none is full,
    /// resting between two batches as long as the last one took, and stops between batches on
    /// shutdown. Several instances may prune one PostgreSQL database at once: batches skip rows
    /// another transaction holds.
    #[schemars(with = "schema::Duration")]
    pub prune_interval: ConfigDuration,
    /// Most rows per table per pruning transaction, 1 to 10000. Each batch is one short
    /// transaction whose size the pruner steers (from 100 rows, doubling while batches are quick,
    /// shrinking at once when one takes long) so that no batch holds the SQLite write lock or
    /// PostgreSQL's row locks much beyond 25 ms; the histogram
    /// `certeasy_prune_writer_hold_seconds` shows what they took.
    pub prune_batch: u32,
    /// How long the validation evidence of a certificate is kept after the certificate expires:
    /// per identifier, the method, the time, the addresses the validator reached, what it saw
    /// there and the CAA records that allowed issuance (`certeasy admin audit show --serial`).
    /// Copied when the certificate is stored, so it outlives the pruning of authorizations and
    /// challenges (`prune-after`); the pruner deletes it only past the certificate's notAfter plus
    /// this. Two years by default, as the CA/Browser Forum's Baseline Requirements (§5.5.2) keep
    /// validation records.
    #[schemars(with = "schema::Duration")]
    pub evidence_retention: ConfigDuration,
}

/// `database.sqlite-synchronous`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
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
            evidence_retention: ConfigDuration(
                storage::evidence::DEFAULT_EVIDENCE_RETENTION.unsigned_abs(),
            ),
        }
    }
}

/// `ca:` the certificate authority that signs everything.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct CaConfig {
    /// Key of a generated root and intermediate: `ecdsa-p256`, `ecdsa-p384`, `rsa-2048`, `rsa-3072`
    /// or `rsa-4096`.
    #[serde(deserialize_with = "key_algorithm", serialize_with = "serialize_name")]
    #[schemars(with = "schema::Name")]
    pub key_algorithm: KeyAlgorithm,
    /// `O=` of the generated CA certificates; not empty.
    pub organization: String,
    /// `CN=` of the generated root; not empty.
    pub root_common_name: String,
    /// `CN=` of the generated intermediate; not empty.
    pub intermediate_common_name: String,
    /// Lifetime of a generated root.
    #[schemars(with = "schema::Duration")]
    pub root_validity: ConfigDuration,
    /// Lifetime of a generated intermediate (the issuing one and the listener's, `ca/listener.pem`,
    /// which signs only Certeasy's own HTTPS certificate); not longer than `root-validity`.
    #[schemars(with = "schema::Duration")]
    pub intermediate_validity: ConfigDuration,
    /// An existing CA to load instead of creating one.
    pub existing: ExistingCaConfig,
    /// Further issuing CAs (issuer rotation), each publishing its own CRLs; see
    /// docs/operations.md, "Rotating the issuing intermediate".
    pub issuers: Vec<super::issuers::IssuerConfig>,
    /// The issuer of new certificates until `certeasy admin ca activate` names another (stored
    /// in the database, for every instance): `default` (the generated intermediate or
    /// `ca.existing`) or a name of `ca.issuers`.
    pub active_issuer: String,
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
            issuers: Vec::new(),
            active_issuer: super::issuers::default_active_issuer(),
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
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ExistingCaConfig {
    /// PEM file of an existing issuing CA certificate to load instead of creating a CA. Needs
    /// `existing.private-key`. It signs only certificates the database records, never the
    /// listener's own: a self-issued listener certificate needs `listener.pem` and `listener.key`
    /// (PKCS#8) in the same directory, a second intermediate under the same root
    /// (docs/operations.md), or else `server.tls-certificate`.
    #[serde(deserialize_with = "deserialize_optional_path")]
    #[schemars(with = "Option<schema::Path>")]
    pub certificate: Option<PathBuf>,
    /// Its private key, PEM (PKCS#8). Exactly one of `private-key` and `pkcs11`.
    #[serde(deserialize_with = "deserialize_optional_path")]
    #[schemars(with = "Option<schema::Path>")]
    pub private_key: Option<PathBuf>,
    /// Its private key on a PKCS#11 token (an HSM): module, token-label or slot, key-label,
    /// pin-file. Exactly one of `private-key` and `pkcs11`.
    pub pkcs11: Option<super::pkcs11::Pkcs11Config>,
    /// Optional PEM file of further CA certificates up to the root. Needs `existing.certificate`.
    #[serde(deserialize_with = "deserialize_optional_path")]
    #[schemars(with = "Option<schema::Path>")]
    pub chain: Option<PathBuf>,
    /// Alternate chains offered with every certificate download (RFC 8555 §7.4.2), for clients
    /// that trust another root (`--preferred-chain`): PEM files, each first a certificate with
    /// exactly the issuing certificate's subject and public key (a cross-signed copy), then its
    /// issuers up to the root. Needs `existing.certificate`.
    #[schemars(with = "Vec<schema::Path>")]
    pub alternate_chains: Vec<PathBuf>,
}

impl ExistingCaConfig {
    /// True when an existing CA is to be loaded rather than one created.
    pub fn is_configured(&self) -> bool {
        self.certificate.is_some()
    }
}

/// `issuance:` the certificate profiles and the validity of end-entity certificates.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct IssuanceConfig {
    /// Certificate lifetime when the order does not ask for one, for every profile that sets no
    /// `validity` of its own; longer than zero.
    #[schemars(with = "schema::Duration")]
    pub default_validity: ConfigDuration,
    /// Longest lifetime an order may ask for, for every profile that sets no `max-validity` of its
    /// own: at least `default-validity`, and, for a generated CA, not longer than
    /// `ca.intermediate-validity`.
    #[schemars(with = "schema::Duration")]
    pub max_validity: ConfigDuration,
    /// `notBefore` is set this far in the past to tolerate client clock skew; shorter than
    /// `default-validity` and than every profile's `validity`.
    #[schemars(with = "schema::Duration")]
    pub backdate: ConfigDuration,
    /// The profile of orders that name none; one of `profiles`.
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
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ProfileConfig {
    /// Shown to clients in the directory's `meta.profiles`; must not be empty.
    pub description: String,
    /// Certificate lifetime when the order does not ask for one (`notAfter`); empty means
    /// `issuance.default-validity`. Longer than zero and than `issuance.backdate`.
    #[serde(deserialize_with = "deserialize_optional_duration")]
    #[schemars(with = "Option<schema::Duration>")]
    pub validity: Option<ConfigDuration>,
    /// Longest lifetime an order may ask for with `notBefore`/`notAfter`, which must also start no
    /// earlier than `issuance.backdate` before now; empty means `issuance.max-validity`. At least
    /// `validity`, and, for a generated CA, not longer than `ca.intermediate-validity`. A window
    /// outside these limits is refused with `malformed`.
    #[serde(deserialize_with = "deserialize_optional_duration")]
    #[schemars(with = "Option<schema::Duration>")]
    pub max_validity: Option<ConfigDuration>,
    /// Key usages of the certificate: `digital-signature`, `key-encipherment`. `key-encipherment`
    /// is given to RSA keys only (an ECDSA key cannot encipher). At least one.
    #[serde(
        deserialize_with = "deserialize_names",
        serialize_with = "serialize_names"
    )]
    #[schemars(with = "Vec<schema::Name>")]
    pub key_usages: Vec<KeyUsage>,
    /// Extended key usages: `server-auth` (TLS server), `client-auth` (TLS client). At least one.
    #[serde(
        deserialize_with = "deserialize_names",
        serialize_with = "serialize_names"
    )]
    #[schemars(with = "Vec<schema::Name>")]
    pub extended_key_usages: Vec<ExtendedKeyUsage>,
    /// Identifier types an order under this profile may hold; an order with another type is refused
    /// with `rejectedIdentifier`, one subproblem per identifier. At least one.
    #[serde(
        deserialize_with = "deserialize_names",
        serialize_with = "serialize_names"
    )]
    #[schemars(with = "Vec<schema::Name>")]
    pub identifier_types: Vec<IdentifierKind>,
    /// CSR key types certified (the keys the CA accepts at all: ECDSA P-256 and P-384, RSA of 2048,
    /// 3072 or 4096 bits); a CSR with another key is refused at finalize with `badCSR` and the
    /// order stays `ready`. At least one.
    #[serde(
        deserialize_with = "deserialize_names",
        serialize_with = "serialize_names"
    )]
    #[schemars(with = "Vec<schema::Name>")]
    pub key_types: Vec<KeyAlgorithm>,
    /// How long an authorization created for an order of this profile stays pending; empty means
    /// `acme.authorization-lifetime`.
    #[serde(deserialize_with = "deserialize_optional_duration")]
    #[schemars(with = "Option<schema::Duration>")]
    pub pending_authorization_lifetime: Option<ConfigDuration>,
    /// How long after its validation an authorization serves orders of this profile; empty means
    /// `acme.valid-authorization-lifetime`, which also bounds it (a longer one is cut to it, so
    /// shortening the CA-wide lifetime shortens every profile's), and a dns-persist-01 record's
    /// `persistUntil` may cut it shorter. An authorization validated for an order of this
    /// profile expires then; any valid authorization of the account (whichever profile it was
    /// validated for) is reused by an order of this profile only while it is valid by both its
    /// own expiry and this lifetime counted from its validation, with the reuse margin of
    /// `acme.valid-authorization-lifetime` left, and the order expires no later.
    #[serde(deserialize_with = "deserialize_optional_duration")]
    #[schemars(with = "Option<schema::Duration>")]
    pub valid_authorization_lifetime: Option<ConfigDuration>,
    /// How long a new order of this profile lives; empty means `acme.order-lifetime`.
    #[serde(deserialize_with = "deserialize_optional_duration")]
    #[schemars(with = "Option<schema::Duration>")]
    pub order_lifetime: Option<ConfigDuration>,
    /// Most identifiers one order of this profile may name (more is `rejectedIdentifier`); 0
    /// means `acme.max-identifiers-per-order`, and more than that is refused.
    pub max_identifiers_per_order: usize,
    /// Challenge types offered to orders of this profile, among those each identifier allows
    /// (`http-01`, `dns-01`, `tls-alpn-01`, ...); empty offers them all. An identifier left with
    /// no type (a wildcard under a profile without `dns-01`) is refused with
    /// `rejectedIdentifier`.
    #[serde(
        deserialize_with = "deserialize_names",
        serialize_with = "serialize_names"
    )]
    #[schemars(with = "Vec<schema::Name>")]
    pub challenge_types: Vec<ChallengeType>,
    /// Ids of the accounts that may use this profile (the number at the end of the account URL).
    /// With `eab-key-ids` also empty, every account may; otherwise an order of another account is
    /// refused with `unauthorized`.
    pub accounts: Vec<i64>,
    /// Accounts bound with one of these external account binding key ids (`certeasy admin eab
    /// create`) may use this profile, besides those of `accounts`.
    #[serde(deserialize_with = "deserialize_strings")]
    pub eab_key_ids: Vec<String>,
    /// The issuer that signs this profile's certificates: `default` or a name of `ca.issuers`,
    /// which must be loaded (a reload that would drop it is refused). Empty means the active
    /// issuer (`ca.active-issuer`, `certeasy admin ca activate`).
    pub issuer: String,
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
            pending_authorization_lifetime: d
                .validation
                .pending_authorization_lifetime
                .map(config_duration),
            valid_authorization_lifetime: d
                .validation
                .valid_authorization_lifetime
                .map(config_duration),
            order_lifetime: d.validation.order_lifetime.map(config_duration),
            max_identifiers_per_order: d.validation.max_identifiers.unwrap_or(0),
            challenge_types: d.validation.challenge_types,
            accounts: d.validation.accounts.iter().map(|a| a.0).collect(),
            eab_key_ids: d.validation.eab_key_ids,
            issuer: d.issuer.map(|i| i.as_str().to_owned()).unwrap_or_default(),
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
            validation: ValidationPolicy {
                pending_authorization_lifetime: self
                    .pending_authorization_lifetime
                    .map(ConfigDuration::time),
                valid_authorization_lifetime: self
                    .valid_authorization_lifetime
                    .map(ConfigDuration::time),
                order_lifetime: self.order_lifetime.map(ConfigDuration::time),
                max_identifiers: (self.max_identifiers_per_order > 0)
                    .then_some(self.max_identifiers_per_order),
                challenge_types: self.challenge_types.clone(),
                accounts: self.accounts.iter().copied().map(AccountId).collect(),
                eab_key_ids: self.eab_key_ids.clone(),
            },
            // `validate` refuses a name that is not one; a configuration never validated gets
            // the active issuer rather than a panic.
            issuer: (!self.issuer.is_empty())
                .then(|| IssuerName::new(&self.issuer).ok())
                .flatten(),
        }
    }
}

/// `acme:` protocol-level settings.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct AcmeConfig {
    /// URL (`http`/`https`). When set, it is announced in the directory and newAccount must send
    /// `termsOfServiceAgreed: true`.
    pub terms_of_service: String,
    /// URL announced in the directory metadata.
    pub website: String,
    /// Issuer domain names this CA answers to in CAA records (no `*.`). When set, CAA (RFC 8659) is
    /// checked at every validation, and again at issuance for authorizations validated longer ago
    /// than `validation.caa-recheck-after`; `issuewild` properties govern wildcard names. A
    /// property naming this CA may narrow it with the RFC 8657 parameters `accounturi`, the
    /// account's URL exactly as the server hands it out (`<external-url>/acme/acct/<id>`, the
    /// `Location` of new-account; a property with two `accounturi` is satisfied by nobody), and
    /// `validationmethods`, challenge types separated by commas (`dns-01,http-01`). A refusal, or a
    /// CAA lookup that fails, is a `caa` problem.
    pub caa_identities: Vec<String>,
    /// When `true`, newAccount must carry an external account binding (RFC 8555 §7.3.4) made with a
    /// key from `certeasy admin eab create`, and the directory announces `externalAccountRequired:
    /// true`; a request without one gets `externalAccountRequired`. A valid binding is honoured
    /// either way, and the account then keeps the key's policy (README, [External account
    /// binding](../README.md#external-account-binding)).
    pub external_account_required: bool,
    /// Orders expire after this.
    #[schemars(with = "schema::Duration")]
    pub order_lifetime: ConfigDuration,
    /// Pending authorizations expire after this.
    #[schemars(with = "schema::Duration")]
    pub authorization_lifetime: ConfigDuration,
    /// A validated authorization expires this long after its validation; orders holding it expire
    /// no later. It is reused by new orders only while at least a day (or half this lifetime, when
    /// shorter) remains.
    #[schemars(with = "schema::Duration")]
    pub valid_authorization_lifetime: ConfigDuration,
    /// Whether new orders reuse the account's still-valid authorizations.
    pub reuse_valid_authorizations: bool,
    /// Whether an account may validate an identifier before ordering it (RFC 8555 §7.4.1
    /// pre-authorization): the directory then announces `newAuthz`. A pre-authorization meets the
    /// identifier policy, the account's external-account key, pausing and the order limits
    /// (new-orders, failed validations, pending authorizations) as a one-name order does, and an
    /// order reuses it like any valid authorization (`reuse-valid-authorizations`). Wildcard names
    /// cannot be pre-authorized (RFC 8555 §7.4.1). `false` takes `newAuthz` out of the directory,
    /// and requests to it are refused with `unauthorized`.
    pub pre_authorization: bool,
    /// Replay nonces are accepted for this long.
    #[schemars(with = "schema::Duration")]
    pub nonce_lifetime: ConfigDuration,
    /// Page size of an account's orders list; at least 1.
    pub orders_per_page: usize,
    /// Most identifiers one order may name; at least 1.
    pub max_identifiers_per_order: usize,
    /// `Retry-After` on pending authorizations and processing orders.
    #[schemars(with = "schema::Duration")]
    pub retry_after: ConfigDuration,
    /// Most contact URLs an account may register (0 refuses all contacts).
    pub max_contacts: usize,
    /// ARI (RFC 9773, the directory's `renewalInfo`): the suggested renewal window starts this far
    /// into a certificate's lifetime, in percent.
    pub renewal_window_start_percent: u8,
    /// … and ends this far in; more than the start. A revoked certificate, or one marked with
    /// `certeasy admin certificates renew-early`, gets a window in the past instead.
    pub renewal_window_end_percent: u8,
    /// Each certificate's window moves later by up to this percent of its lifetime, by an amount
    /// fixed by its serial, so certificates issued together are not renewed together. End plus
    /// jitter is at most 100.
    pub renewal_jitter_percent: u8,
    /// `Retry-After` of renewal information: how long clients wait before asking again.
    #[schemars(with = "schema::Duration")]
    pub renewal_info_retry_after: ConfigDuration,
    /// Path of the operator's blocked-keys file; empty means none. One key per line, named by the
    /// SHA-256 of its SubjectPublicKeyInfo DER as 64 hex digits (`openssl pkey -pubin -in key.pem
    /// -outform DER | sha256sum`) or base64; blank lines and `#` comments are ignored. A blocked
    /// key gets `badPublicKey` at new-account and key change and `badCSR` at finalize. A line that
    /// is not a hash stops the start (naming the line); SIGHUP and `certeasy admin reload` read the
    /// file again and keep the previous list if it is invalid. Keys can also be blocked in the
    /// database with `certeasy admin keys block` ([Blocked and weak
    /// keys](operations.md#blocked-and-weak-keys)).
    #[serde(deserialize_with = "deserialize_optional_path")]
    #[schemars(with = "Option<schema::Path>")]
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
            valid_authorization_lifetime: config_duration(policy.valid_authorization_lifetime),
            reuse_valid_authorizations: policy.reuse_valid_authorizations,
            pre_authorization: policy.pre_authorization,
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
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct IdentifiersConfig {
    /// When non-empty, only these domains and their subdomains may be issued for. Plain names
    /// without `*.`; single labels such as `internal` are accepted.
    #[serde(deserialize_with = "deserialize_strings")]
    pub allow_domains: Vec<String>,
    /// Never these domains and their subdomains; a deny entry always wins. A wildcard
    /// `*.example.com` is also refused when any denied domain lies below `example.com` (it would
    /// cover it).
    #[serde(deserialize_with = "deserialize_strings")]
    pub deny_domains: Vec<String>,
    /// When non-empty, only IP addresses inside these networks.
    #[serde(deserialize_with = "deserialize_cidrs")]
    #[schemars(with = "Vec<schema::Cidr>")]
    pub allow_cidrs: Vec<IpNet>,
    /// Never IP addresses inside these networks; deny wins.
    #[serde(deserialize_with = "deserialize_cidrs")]
    #[schemars(with = "Vec<schema::Cidr>")]
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
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ValidationConfig {
    /// Resolvers, `ip:port` (`192.0.2.53:53`, `[2001:db8::53]:53`; a bare IP means port 53). Empty
    /// means the host's resolver configuration.
    #[serde(deserialize_with = "deserialize_resolvers")]
    #[schemars(with = "Vec<schema::Resolver>")]
    pub dns_servers: Vec<SocketAddr>,
    /// Port http-01 connects to (change only for tests); not 0.
    pub http_port: u16,
    /// Port tls-alpn-01 connects to (change only for tests); not 0.
    pub tls_alpn_port: u16,
    /// Allow challenge targets that resolve to loopback addresses (tests and labs only).
    pub allow_loopback: bool,
    /// Networks (CIDRs; a bare address is a /32 or /128) the validator never connects to, on top of
    /// what it always refuses: the unspecified address, `0.0.0.0/8`, link-local (`169.254.0.0/16`,
    /// `fe80::/10`), cloud metadata (`169.254.169.254`, `fd00:ec2::254`), multicast,
    /// `255.255.255.255`, and loopback unless `allow-loopback`. Applies to resolved challenge
    /// names, every redirect target and IP identifiers (not to `dns-servers`). An IPv6 address
    /// carrying an IPv4 one (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`, NAT64
    /// `64:ff9b::/96`, 6to4 `2002::/16`) is also judged as that IPv4 address. Private ranges are
    /// allowed unless listed here. A malformed entry is a configuration error naming the entry.
    #[serde(deserialize_with = "deserialize_cidrs")]
    #[schemars(with = "Vec<schema::Cidr>")]
    pub deny_target_cidrs: Vec<IpNet>,
    /// Whether an http-01 redirect may lead to a private address (RFC 1918 `10.0.0.0/8`,
    /// `172.16.0.0/12`, `192.168.0.0/16`; RFC 6598 `100.64.0.0/10`; IPv6 unique local `fc00::/7`,
    /// also in the IPv6 forms that carry an IPv4 address) although the identifier did not resolve
    /// to one. Off, such a redirect is refused before anything is connected to: a `connection`
    /// problem naming the private network for an IP address in the Location, and for a name the
    /// same report as any failure at another host (below). A private identifier (an IP identifier
    /// in those ranges, or a name that resolved to one) may always be redirected into private
    /// networks, so a CA validating internal names needs no change. Whatever the setting, once a
    /// redirect leaves the identifier's host nothing about the other host is reported: its status,
    /// error, DNS answer or content all give one `incorrectResponse` ("a redirect led to another
    /// host, which did not serve the key authorization"), never retried, so a redirect cannot be
    /// used to probe hosts.
    pub allow_private_redirects: bool,
    /// Deadline of one whole validation attempt: every DNS query, address, redirect and the CAA
    /// check. Connecting to a name gets half of it, shared by its (at most two) addresses. A call
    /// to the validator returns within `timeout` plus 2 s; longer than zero.
    #[schemars(with = "schema::Duration")]
    pub timeout: ConfigDuration,
    /// Jobs (validations and finalizations) one instance runs at once; at least 1. A validation
    /// mostly waits on the network, up to `timeout` for a silent target, so a few slow targets must
    /// not hold up everyone else's orders. A challenge or finalize request that finds a place free
    /// runs its job at once and waits up to 1 s (validation) or 2 s (signing) to answer with the
    /// outcome; otherwise the job is queued and one idle worker woken. Idle workers cost a parked
    /// task each.
    pub workers: usize,
    /// Attempts per job before giving up; at least 1. These are claims that ended without a verdict
    /// (a crash, a database error, the backstop); an attempt that failed and was rescheduled by
    /// `retries` does not count.
    pub max_attempts: u32,
    /// How long a claimed job stays reserved without a heartbeat. The worker running it renews the
    /// lease every third of it, so a slow attempt keeps its job; after a crash the job is retried
    /// by any instance once the lease expires; at least 1s. A job whose worker died on its last
    /// attempt (`max-attempts`) is not run again: its challenge or order fails with
    /// `serverInternal`. As a backstop, the workers also cut an attempt off after twice the
    /// validator's worst case (`timeout` plus 2 s) plus 5 s, and retry it.
    #[schemars(with = "schema::Duration")]
    pub job_lease: ConfigDuration,
    /// CAA checked at validation vouches for issuance this long (the CA/Browser Forum Baseline
    /// Requirements allow 8 hours). When a finalization runs, just before signing, every
    /// authorization of the order validated longer ago than this (a reused one,
    /// `acme.reuse-valid-authorizations`) has CAA checked again, with the challenge type that
    /// validated it and the order's account; a refusal, or a lookup that fails, makes the order
    /// `invalid` with a `caa` error whose detail names every refusing identifier. Only when
    /// `acme.caa-identities` is set. `0s` rechecks every authorization not validated in the same
    /// second. At most `8h`: a longer value is refused at load (`config check` names the file, line
    /// and key), since it would let a CAA lookup vouch for issuance longer than the Baseline
    /// Requirements (§3.2.2.8) allow.
    #[schemars(with = "schema::Duration")]
    pub caa_recheck_after: ConfigDuration,
    /// Attempts after the first for a challenge whose dns-01 TXT record may still be propagating:
    /// NXDOMAIN at `_acme-challenge.<name>`, no TXT record there, or none with the expected value.
    /// Nothing else is retried, as at Let's Encrypt and Pebble: a refused or silent connection, an
    /// http-01 answer 5xx, a name without addresses, a DNS SERVFAIL or timeout, a wrong key
    /// authorization, a 404, a TLS alert or a CAA refusal is the verdict at once, so the client
    /// reports the real problem (`connection`, `dns`, `incorrectResponse`, `unauthorized`, ...)
    /// while it still polls. A subscriber who fixes a web server asks again with a new order; a
    /// retried attempt would contact their hosts again unasked. Propagation is the exception
    /// because the subscriber cannot see it finish: a client's DNS hook returns once the provider
    /// took the record, and the authoritative servers may serve the previous set a few seconds
    /// longer. A retry is scheduled only within `retry-window`, only if it ends before the
    /// authorization expires, and only for an (account, identifier) pair that has not failed
    /// lately: its failed-validation bucket is full, and (with zombie pausing) its
    /// consecutive-failure bucket is full and it is neither paused nor in its re-pause grace. So a
    /// failing client costs one attempt per challenge, and its failures meet in the
    /// failed-validation window as promptly as without retries (with both limits disabled, every
    /// failing dns-01 challenge may cost its retries). While retrying, the challenge stays
    /// `processing` with the last failed attempt's problem as its `error` (RFC 8555 §8.2 with
    /// erratum 5732; a later success removes it), its authorization `pending`, and its Retry-After
    /// says when the next attempt is due; a retry is a job due later in the database, so it
    /// survives a restart. When the last attempt fails, the challenge's `error` has that attempt's
    /// type, and its detail lists every attempt with its time, type and detail. The
    /// failed-validation limit and zombie pausing count one failure per challenge, at that final
    /// verdict. `0` disables retries.
    pub retries: u32,
    /// Wait before the first retry; each further retry waits twice as long as the one before, at
    /// most 10 minutes. With the defaults the one retry starts 3 s after the first attempt failed,
    /// and the client sees the verdict within about 4 s. At least 1s, and with `retries` above 0 at
    /// most `retry-window`.
    #[schemars(with = "schema::Duration")]
    pub retry_backoff: ConfigDuration,
    /// The latest a retry may start, counted from the end of the challenge's first attempt: however
    /// `retries` and `retry-backoff` are set, a challenge stays `processing` for retries at most
    /// this long plus one attempt. Clients poll for a bounded time (certbot 2.1 gives up after
    /// about 30 s with "All authorizations were not finalized by the CA", lego's backoff starts
    /// from the Retry-After the server gives), so a window much above 15 s makes them report a
    /// timeout instead of the problem. Longer than zero.
    #[schemars(with = "schema::Duration")]
    pub retry_window: ConfigDuration,
    /// Offer dns-account-01 (draft-ietf-acme-dns-account-label-02) for DNS names, wildcards
    /// included: dns-01's TXT value at `_<label>._acme-challenge.<name>`, where `<label>` is the
    /// lower-case base32 of the first 10 octets of SHA-256 of the account URL, so several accounts
    /// (an HA pair, several regions) can validate one name at once without overwriting each
    /// other's record. Retried while it may be propagating, as dns-01 (`retries`). Off by
    /// default: the draft may still change. With it on, every profile offers it unless the
    /// profile's challenge list leaves it out.
    pub dns_account_01: bool,
    /// Offer dns-persist-01 (draft-ietf-acme-dns-persist-02, CA/Browser Forum ballot SC-088) for
    /// DNS names, wildcards included: a standing TXT record at `_validation-persist.<name>`,
    /// `<issuer-domain-name>; accounturi=<accountHashPrefix>sha-256/<hash>[; policy=wildcard]
    /// [; persistUntil=<unix seconds>]`, validates the name for that account again and again with
    /// no DNS change per order. The directory's `meta` announces `issuerDomainNames` and
    /// `accountHashPrefix` (`<external-url>/acme/account-hash/`); the hash is over the name (or
    /// `*`), the account key's thumbprint and the account URL, and records made with the account's
    /// earlier keys keep validating after a key change. A wildcard needs `policy=wildcard`; a
    /// record past its `persistUntil` is refused, and an authorization it validates expires no
    /// later than that time. A CAA `validationmethods` list may name `dns-persist-01`. Off by
    /// default; with it on, every profile offers it unless the profile's challenge list leaves it
    /// out.
    pub dns_persist_01: bool,
    /// The issuer domain names a dns-persist-01 record may name (lower-case domain names without
    /// a trailing dot, at most 10). Empty means `acme.caa-identities`, which is what a domain
    /// owner already names this CA by; with `caa-identities` set, each must be one of them
    /// (draft §3.2). Required (here or through `caa-identities`) when `dns-persist-01` is on.
    #[serde(deserialize_with = "deserialize_strings")]
    pub dns_persist_issuer_domain_names: Vec<String>,
}

impl ValidationConfig {
    /// The issuer domain names dns-persist-01 uses, lower case without trailing dots: empty when
    /// it is off, `dns-persist-issuer-domain-names` when given, else `caa_identities`.
    pub fn dns_persist_issuers(&self, caa_identities: &[String]) -> Vec<String> {
        if !self.dns_persist_01 {
            return Vec::new();
        }
        let names = if self.dns_persist_issuer_domain_names.is_empty() {
            caa_identities
        } else {
            &self.dns_persist_issuer_domain_names
        };
        names
            .iter()
            .map(|n| n.trim().trim_end_matches('.').to_ascii_lowercase())
            .collect()
    }
}

impl Default for ValidationConfig {
    fn default() -> Self {
        let validator = validation::ValidationSettings::default();
        Self {
            dns_servers: validator.dns_servers,
            http_port: validator.http_port,
            tls_alpn_port: validator.tls_alpn_port,
            allow_loopback: validator.allow_loopback,
            deny_target_cidrs: validator.deny_target_cidrs,
            allow_private_redirects: validator.allow_private_redirects,
            timeout: ConfigDuration(validator.timeout),
            workers: workers::settings::DEFAULT_CONCURRENCY,
            max_attempts: workers::settings::DEFAULT_MAX_ATTEMPTS,
            job_lease: ConfigDuration::from_secs(
                workers::settings::DEFAULT_JOB_LEASE
                    .whole_seconds()
                    .unsigned_abs(),
            ),
            caa_recheck_after: config_duration(ra::caa::DEFAULT_RECHECK_AFTER),
            retries: workers::settings::DEFAULT_VALIDATION_RETRIES,
            retry_backoff: config_duration(workers::settings::DEFAULT_RETRY_BACKOFF),
            retry_window: config_duration(workers::settings::DEFAULT_RETRY_WINDOW),
            dns_account_01: false,
            dns_persist_01: false,
            dns_persist_issuer_domain_names: Vec::new(),
        }
    }
}

/// `logging:` what the server logs, and how.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct LoggingConfig {
    /// A `tracing` filter, e.g. `info,certeasy=debug`; checked when the file is loaded.
    pub level: String,
    /// `text` (human-readable lines) or `json` (one object per line).
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// `redis:` state several instances share: rate-limit buckets and the nonce ledger.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct RedisConfig {
    /// `redis://host:port` (or `rediss://`) URLs, each once; `redis://user:password@host:port` for
    /// a Redis with ACL users. Empty means rate-limit buckets are kept in memory (one instance
    /// only).
    #[serde(deserialize_with = "deserialize_strings")]
    pub shards: Vec<String>,
    /// A file holding the shard URLs instead, one per line (blank lines and `#` comments skipped),
    /// e.g. a Docker secret, so the configuration file holds no Redis password (see [Secrets in
    /// files](#secrets-in-files)). Not with `shards`.
    #[serde(deserialize_with = "deserialize_optional_path")]
    #[schemars(with = "Option<schema::Path>")]
    pub shards_file: Option<PathBuf>,
    /// Deadline of one Redis call; longer than zero.
    #[schemars(with = "schema::Duration")]
    pub timeout: ConfigDuration,
    /// Prefix of every key Certeasy writes; rate-limit buckets live under `<key-prefix>rl:`, the
    /// nonce ledger under `<key-prefix>nonce:`.
    pub key_prefix: String,
}

impl Default for RedisConfig {
    fn default() -> Self {
        let store = RateLimitRedis::default();
        Self {
            shards: store.shards,
            shards_file: None,
            timeout: store.timeout,
            key_prefix: store.key_prefix,
        }
    }
}

/// A default kept by its owner as a `time::Duration` (never negative), as the file writes it.
fn config_duration(d: time::Duration) -> ConfigDuration {
    ConfigDuration(d.unsigned_abs())
}
