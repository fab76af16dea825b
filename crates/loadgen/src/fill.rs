//! `fill`: half a year of a CA's history in a fresh database, for benchmarks that must run on a
//! database of that size (issue 31).
//!
//! The data directory is initialised by starting Certeasy itself once (`certeasy::serve::start`,
//! with its clock at the first simulated day): the CA, the listener certificate, the admin
//! token, the migrated database and the CRL shards are exactly what `certeasy serve` makes. The
//! history is then written day by day through storage's own writes (`storage::bulk_fill`):
//! accounts by `create_account`, each issuance as finalization stores it, with a certificate
//! signed by that data directory's issuer (`issuance::Ca::prepare` and `issue`, in parallel over
//! the cores), revocations by the revocation write that counts them in their CRL shard. After
//! each day the real pruner runs at the day's end, so what is left after the last day is what
//! a server with the default retention (`database.prune-after`) leaves.
//!
//! The result is cached outside the clone, keyed by the parameters: the data directory (and
//! the SQLite file in it) under `${CERTEASY_BENCH_CACHE:-$HOME/.cache/certeasy-bench}/year-<key>/`,
//! and on PostgreSQL the template database `certeasy_year_<key>` beside it. `complete.json` is
//! written last; a dataset without it is rebuilt. A bench takes a fresh copy with
//! [`fresh_copy`] (a copied data directory, and on PostgreSQL `CREATE DATABASE .. TEMPLATE`).
//!
//! Deterministic: the same parameters and seed give the same accounts, names, times, challenge
//! choices, revocations and reasons. The serials are the CA's own random ones and ECDSA
//! signatures are randomised, so the bytes of the certificates differ between builds.

use std::net::IpAddr;
use std::net::Ipv4Addr;
use std::net::SocketAddr;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use acme_core::clock::FakeClock;
use acme_core::clock::SharedClock;
use acme_core::identifier::Identifier;
use acme_core::identifier::canonical_set_hash;
use acme_core::ids::AccountId;
use acme_core::ids::CertificateId;
use acme_core::status::ChallengeType;
use acme_core::status::RevocationReason;
use anyhow::Context as _;
use anyhow::bail;
use certeasy::config::Config;
use indicatif::ProgressBar;
use indicatif::ProgressStyle;
use issuance::Ca;
use issuance::CaSettings;
use issuance::CrlDistribution;
use issuance::Profile;
use rcgen::CertificateParams;
use rcgen::KeyPair;
use storage::Storage;
use storage::audit::Actor;
use storage::audit::AuditEvent;
use storage::audit::AuditKind;
use storage::bulk_fill::FillIssuance;
use storage::bulk_fill::FillRevocation;
use storage::evidence::Evidence;
use storage::model::NewAccount;
use storage::model::NewCertificate;
use time::Duration;
use time::OffsetDateTime;

use crate::cli::FillArgs;
use crate::cli::FillBackend;

/// Bumped when what a fill writes changes, so that an old cached dataset is not reused.
const FORMAT: u32 = 1;

/// Issuances per write transaction (on PostgreSQL at most: a smaller day is cut in
/// `POSTGRES_WRITERS` parts).
const SQLITE_BATCH: usize = 2_000;
const POSTGRES_BATCH: usize = 250;
/// PostgreSQL transactions written at once: each waits on round trips, not on the CPU.
const POSTGRES_WRITERS: usize = 6;

/// What is filled; the cache key is made of all of it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct FillParams {
    pub(crate) backend: FillBackend,
    pub(crate) certificates: u64,
    pub(crate) accounts: u64,
    pub(crate) revocations: u64,
    pub(crate) days: u32,
    pub(crate) seed: u64,
}

impl FillParams {
    /// The cache key: letters, digits and `_`, so that it also names a database.
    pub(crate) fn key(&self) -> String {
        let backend = match self.backend {
            FillBackend::Sqlite => "sqlite",
            FillBackend::Postgres => "postgres",
        };
        format!(
            "{backend}_c{}_a{}_r{}_d{}_s{}_v{FORMAT}",
            self.certificates, self.accounts, self.revocations, self.days, self.seed
        )
    }
}

/// What a fill took and left, as `complete.json` keeps it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct FillReport {
    pub(crate) params: FillParams,
    pub(crate) key: String,
    /// The cached dataset's directory (its data directory is `data/` in it).
    pub(crate) dir: PathBuf,
    /// The template database, on PostgreSQL.
    pub(crate) template_database: Option<String>,
    pub(crate) first_day: String,
    pub(crate) last_day: String,
    pub(crate) accounts: u64,
    pub(crate) certificates: u64,
    pub(crate) revocations: u64,
    /// Rows the pruner deleted or trimmed on the way (orders, links, authorizations, challenges).
    pub(crate) pruned_rows: u64,
    /// Rows written (accounts, orders, authorizations, challenges, links, reservations,
    /// certificates, evidence, audit records, revocations), deleted ones included.
    pub(crate) rows_written: u64,
    pub(crate) seconds: f64,
    pub(crate) rows_per_second: f64,
    /// CPU seconds the signing threads spent preparing, checking and signing (CSR and leaf).
    pub(crate) signing_cpu_seconds: f64,
    pub(crate) database_bytes: u64,
    pub(crate) bytes_per_certificate: f64,
    /// Whether this run reused a complete cached dataset instead of building it.
    #[serde(default)]
    pub(crate) reused: bool,
    /// Where the fill's wall time went, to see what to make faster.
    #[serde(default)]
    pub(crate) phases: Phases,
}

/// Wall seconds of each part of a fill, summed over the days. A part missing from a report
/// cached by an earlier version reads as 0, so that its data set is still reused.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub(crate) struct Phases {
    pub(crate) accounts: f64,
    /// Planning and signing the issuances (over the cores).
    pub(crate) signing: f64,
    /// Writing the issuances.
    pub(crate) writing: f64,
    pub(crate) revoking: f64,
    pub(crate) pruning: f64,
    /// Chaining the audit records (PostgreSQL's sealer).
    pub(crate) sealing: f64,
    /// Gathering PostgreSQL's planner statistics.
    pub(crate) analyzing: f64,
}

/// A copy of a dataset for one bench run: a data directory and its database of its own.
#[derive(Debug)]
pub(crate) struct FreshCopy {
    pub(crate) data_dir: PathBuf,
    /// A configuration that serves the copy (`certeasy serve --config`).
    pub(crate) config_path: PathBuf,
    /// Empty for SQLite (the file in the data directory).
    pub(crate) database_url: String,
    /// The PostgreSQL database to drop with [`drop_copy`].
    pub(crate) database: Option<String>,
}

/// `certeasy-loadgen fill`.
pub(crate) fn fill(args: FillArgs) -> anyhow::Result<()> {
    let params = FillParams {
        backend: args.backend,
        certificates: args.certificates,
        accounts: args.accounts,
        revocations: args.revocations,
        days: args.days,
        seed: args.seed,
    };
    let cache = args.cache_dir.clone().unwrap_or_else(cache_dir);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let report = runtime.block_on(dataset(
        &params,
        &cache,
        &args.postgres_url,
        args.force,
        !args.json,
    ))?;
    if let Some(dest) = &args.copy_to {
        let copy = fresh_copy(&report, &args.postgres_url, dest, &args.copy_name)?;
        eprintln!(
            "fresh copy: certeasy serve --config {} (data directory {}{})",
            copy.config_path.display(),
            copy.data_dir.display(),
            copy.database
                .as_deref()
                .map(|db| format!(", database {db} at {}", copy.database_url))
                .unwrap_or_default()
        );
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(())
}

fn print_report(r: &FillReport) {
    println!(
        "{} dataset {} ({}){}",
        match r.params.backend {
            FillBackend::Sqlite => "SQLite",
            FillBackend::Postgres => "PostgreSQL",
        },
        r.key,
        r.dir.display(),
        if r.reused { ", reused" } else { "" }
    );
    if let Some(db) = &r.template_database {
        println!("  template database: {db}");
    }
    println!(
        "  {} to {}: {} accounts, {} certificates, {} revocations",
        r.first_day, r.last_day, r.accounts, r.certificates, r.revocations
    );
    println!(
        "  filled in {:.1} s: {} rows written ({:.0} rows/s), {} pruned on the way; signing {:.1} CPU s",
        r.seconds, r.rows_written, r.rows_per_second, r.pruned_rows, r.signing_cpu_seconds
    );
    let p = &r.phases;
    println!(
        "  wall s: accounts {:.1}, signing {:.1}, writing {:.1}, revoking {:.1}, pruning {:.1}, \
         sealing {:.1}, analyzing {:.1}",
        p.accounts, p.signing, p.writing, p.revoking, p.pruning, p.sealing, p.analyzing
    );
    println!(
        "  database: {} bytes, {:.0} bytes per certificate",
        r.database_bytes, r.bytes_per_certificate
    );
}

/// `${CERTEASY_BENCH_CACHE:-$HOME/.cache/certeasy-bench}`.
pub(crate) fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CERTEASY_BENCH_CACHE") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache/certeasy-bench")
}

/// The template database of a PostgreSQL dataset.
fn template_name(key: &str) -> String {
    format!("certeasy_year_{key}")
}

/// The complete dataset for `params` under `cache`: reused when its `complete.json` is there
/// (and, on PostgreSQL, its template database), built otherwise or when `force`.
pub(crate) async fn dataset(
    params: &FillParams,
    cache: &Path,
    postgres_url: &str,
    force: bool,
    progress: bool,
) -> anyhow::Result<FillReport> {
    let key = params.key();
    let dir = cache.join(format!("year-{key}"));
    let marker = dir.join("complete.json");
    if !force && let Ok(text) = std::fs::read_to_string(&marker) {
        let mut report: FillReport =
            serde_json::from_str(&text).with_context(|| format!("reading {}", marker.display()))?;
        let present = match &report.template_database {
            Some(db) => database_exists(postgres_url, db)?,
            None => true,
        };
        if present && report.params == *params {
            report.reused = true;
            return Ok(report);
        }
    }
    build(params, &dir, postgres_url, progress).await
}

/// Builds the dataset in `dir` (emptied first) and writes its `complete.json` last.
async fn build(
    params: &FillParams,
    dir: &Path,
    postgres_url: &str,
    progress: bool,
) -> anyhow::Result<FillReport> {
    if params.certificates == 0 || params.accounts == 0 || params.days == 0 {
        bail!("--certificates, --accounts and --days must be at least 1");
    }
    if params.revocations > params.certificates {
        bail!("--revocations cannot exceed --certificates");
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = dir.canonicalize()?;
    let key = params.key();
    let template = match params.backend {
        FillBackend::Sqlite => None,
        FillBackend::Postgres => {
            let name = template_name(&key);
            psql(
                postgres_url,
                &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            )?;
            psql(postgres_url, &format!("CREATE DATABASE {name}"))?;
            Some(name)
        }
    };
    let database_url = template
        .as_deref()
        .map(|name| testkit::postgres::database_url(postgres_url, name))
        .unwrap_or_default();
    let config = config_for(&dir.join("data"), &database_url)?;
    let config_path = crate::servers::write_certeasy_config(&dir, &config)?;
    std::fs::rename(&config_path, dir.join("certeasy.yaml"))?;

    let end = day_start(OffsetDateTime::now_utc());
    let start = end - Duration::days(i64::from(params.days));
    initialise(&config, start).await?;

    let started = Instant::now();
    let mut history = History::new(params, &config, start).await?;
    let bar = if progress {
        let bar = ProgressBar::new(params.certificates);
        bar.set_style(
            ProgressStyle::with_template(
                "{msg} [{elapsed_precise}] {wide_bar} {pos}/{len} certificates (eta {eta})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    for day in 0..params.days {
        bar.set_message(format!("day {}/{}", day + 1, params.days));
        let written = history.day(day).await?;
        bar.inc(written);
    }
    bar.finish_and_clear();
    // The dataset is kept with its statistics: a bench's server starts on a copy of it.
    let analyzing = Instant::now();
    history.storage.fill_analyze().await?;
    history.phases.analyzing += analyzing.elapsed().as_secs_f64();
    let seconds = started.elapsed().as_secs_f64();
    history.storage.close().await;
    let database_bytes = match &template {
        Some(name) => {
            testkit::postgres::psql(postgres_url, &format!("SELECT pg_database_size('{name}')"))?
                .parse()
                .context("pg_database_size")?
        }
        None => dir_size(&dir.join("data"), "certeasy.db")?,
    };
    let rows_written = history.rows;
    let report = FillReport {
        params: params.clone(),
        key,
        dir: dir.clone(),
        template_database: template.clone(),
        first_day: date(start),
        last_day: date(end - Duration::days(1)),
        accounts: history.account_ids.len() as u64,
        certificates: history.certificates.len() as u64,
        revocations: history.revoked,
        pruned_rows: history.pruned,
        rows_written,
        seconds,
        rows_per_second: rows_written as f64 / seconds.max(1e-9),
        signing_cpu_seconds: history.signing_cpu,
        database_bytes,
        bytes_per_certificate: database_bytes as f64 / history.certificates.len().max(1) as f64,
        reused: false,
        phases: history.phases.clone(),
    };
    if let Some(name) = &template {
        // A template is only copied while nobody is connected: none is left but this comment's.
        psql(
            postgres_url,
            &format!("COMMENT ON DATABASE {name} IS 'certeasy-loadgen fill, complete'"),
        )?;
    }
    std::fs::write(
        dir.join("complete.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    Ok(report)
}

/// A fresh copy of the complete dataset `report` under `dest/<name>`, for one bench run: its
/// data directory copied, and on PostgreSQL a database cloned from the template
/// (`CREATE DATABASE <name> TEMPLATE certeasy_year_<key>`, named `certeasy_copy_<name>`), with a
/// configuration file that serves it. What the run writes never reaches the cache.
pub(crate) fn fresh_copy(
    report: &FillReport,
    postgres_url: &str,
    dest: &Path,
    name: &str,
) -> anyhow::Result<FreshCopy> {
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') || name.is_empty() {
        bail!("a copy's name is letters, digits and _ ({name:?})");
    }
    let root = dest.join(name);
    if root.exists() {
        std::fs::remove_dir_all(&root)?;
    }
    std::fs::create_dir_all(&root)?;
    let root = root.canonicalize()?;
    let data_dir = root.join("data");
    copy_dir(&report.dir.join("data"), &data_dir)?;
    let (database_url, database) = match &report.template_database {
        Some(template) => {
            let copy = format!("certeasy_copy_{name}");
            psql(
                postgres_url,
                &format!("DROP DATABASE IF EXISTS {copy} WITH (FORCE)"),
            )?;
            // PostgreSQL 15's default strategy writes every page of the template through the
            // WAL: gigabytes of a half year twice over. FILE_COPY checkpoints once and copies
            // the files, the way earlier versions always did.
            let version: u32 = testkit::postgres::psql(postgres_url, "SHOW server_version_num")?
                .parse()
                .context("PostgreSQL's server_version_num")?;
            let strategy = if version >= 150_000 {
                " STRATEGY FILE_COPY"
            } else {
                ""
            };
            psql(
                postgres_url,
                &format!("CREATE DATABASE {copy} TEMPLATE {template}{strategy}"),
            )?;
            (
                testkit::postgres::database_url(postgres_url, &copy),
                Some(copy),
            )
        }
        None => (String::new(), None),
    };
    let config = config_for(&data_dir, &database_url)?;
    let written = crate::servers::write_certeasy_config(&root, &config)?;
    let config_path = root.join("certeasy.yaml");
    std::fs::rename(written, &config_path)?;
    Ok(FreshCopy {
        data_dir,
        config_path,
        database_url,
        database,
    })
}

/// Drops a copy's PostgreSQL database and removes its directory.
// The bench's `year` part (bench.rs) releases its copies with it; until then only the tests do.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn drop_copy(copy: FreshCopy, postgres_url: &str) -> anyhow::Result<()> {
    if let Some(db) = &copy.database {
        psql(
            postgres_url,
            &format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"),
        )?;
    }
    if let Some(root) = copy.data_dir.parent() {
        std::fs::remove_dir_all(root)?;
    }
    Ok(())
}

/// The configuration of a dataset: Certeasy's defaults (the retention, the profiles, the CRL
/// shards a bench's server uses), listeners on free loopback ports, the data directory and
/// database given.
fn config_for(data_dir: &Path, database_url: &str) -> anyhow::Result<Config> {
    let mut config = Config {
        data_dir: data_dir.to_path_buf(),
        ..Config::default()
    };
    let listen = free_port()?;
    config.server.listen = loopback(listen);
    config.server.admin_listen = loopback(free_port()?);
    config.server.external_url = format!("https://localhost:{listen}");
    config.server.tls_names = vec!["localhost".to_owned(), Ipv4Addr::LOCALHOST.to_string()];
    config.crl.listen = loopback(free_port()?);
    config.logging.level = "warn".to_owned();
    config.database.url = database_url.to_owned();
    Ok(config)
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// A port free on loopback now (the kernel's choice).
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind(loopback(0))?
        .local_addr()?
        .port())
}

/// Starts Certeasy once on the dataset's configuration with its clock at `at`, and stops it:
/// whatever `certeasy serve` makes of a new data directory is there, made as it makes it.
async fn initialise(config: &Config, at: OffsetDateTime) -> anyhow::Result<()> {
    let clock: SharedClock = Arc::new(FakeClock::new(at));
    let server = certeasy::serve::start(config, None, clock)
        .await
        .context("starting Certeasy once to initialise the data directory")?;
    server.shutdown().await;
    Ok(())
}

/// The CA `certeasy serve` loads from `config`'s data directory, with its CRL distribution.
fn load_ca(config: &Config, now: OffsetDateTime) -> anyhow::Result<Ca> {
    let c = &config.ca;
    let settings = CaSettings {
        dir: config.data_dir.join("ca"),
        key_algorithm: c.key_algorithm,
        organization: c.organization.clone(),
        root_common_name: c.root_common_name.clone(),
        intermediate_common_name: c.intermediate_common_name.clone(),
        root_validity: c.root_validity.time(),
        intermediate_validity: c.intermediate_validity.time(),
        existing: None,
        alternate_chains: c.existing.alternate_chains.clone(),
        generated_root_key: issuance::GeneratedRootKey::beside(&config.data_dir),
    };
    let issuers = certeasy::config::issuers::settings(&c.issuers)?;
    let mut ca = Ca::load_or_create(&settings, now)
        .and_then(|ca| ca.with_issuers(&issuers, now))
        .context("loading the data directory's CA")?;
    if config.crl.enabled {
        ca = ca.with_crl_distribution(CrlDistribution {
            base_url: config.crl_base_url(),
            shards: config.crl.shards,
        });
    }
    Ok(ca)
}

/// splitmix64: a small deterministic generator, so that the same seed gives the same history.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64, stream: u64) -> Self {
        let mut rng = Self(seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        rng.next();
        rng
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n.max(1))) >> 64) as u64
    }

    fn token(&mut self) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        (0..43)
            .map(|_| char::from(ALPHABET[(self.next() % 64) as usize]))
            .collect()
    }
}

/// One issuance as planned (deterministic), before it is signed.
struct Planned {
    account: usize,
    names: Vec<String>,
    ordered_at: OffsetDateTime,
    challenges: Vec<Vec<(ChallengeType, String)>>,
    client: Ipv4Addr,
}

/// A certificate stored, as revocations pick them.
#[derive(Clone, Copy)]
struct Stored {
    id: CertificateId,
    account: AccountId,
    issued_at: OffsetDateTime,
    not_after: OffsetDateTime,
}

/// The simulation: what has been written so far.
struct History {
    params: FillParams,
    storage: Storage,
    ca: Arc<Ca>,
    profile: Profile,
    issuer: String,
    start: OffsetDateTime,
    order_lifetime: Duration,
    pending_lifetime: Duration,
    valid_lifetime: Duration,
    retention: Duration,
    prune_batch: u32,
    /// One key per account, its CSRs' key.
    keys: Vec<Option<Arc<KeyPair>>>,
    account_ids: Vec<AccountId>,
    certificates: Vec<Stored>,
    revoked_set: std::collections::HashSet<u32>,
    revoked: u64,
    pruned: u64,
    rows: u64,
    signing_cpu: f64,
    phases: Phases,
    /// Certificates stored when the tables were last analyzed.
    analyzed_at: usize,
}

impl History {
    async fn new(
        params: &FillParams,
        config: &Config,
        start: OffsetDateTime,
    ) -> anyhow::Result<Self> {
        let pool = storage::PoolSettings {
            max_connections: match params.backend {
                FillBackend::Sqlite => config.database.max_connections,
                FillBackend::Postgres => u32::try_from(POSTGRES_WRITERS + 2).unwrap_or(8),
            },
            sqlite_synchronous: config.database.sqlite_synchronous.into(),
        };
        let storage = Storage::connect_with(&config.database_url(), pool)
            .await
            .context("opening the dataset's database")?
            .with_evidence_retention(config.database.evidence_retention.time());
        let ca = load_ca(config, start)?;
        let profiles = config.issuance.profiles()?;
        let profile = profiles.default_profile().clone();
        let acme = &config.acme;
        let policy = profile.validation();
        let order_lifetime = policy.order_lifetime.unwrap_or(acme.order_lifetime.time());
        let pending_lifetime = policy
            .pending_authorization_lifetime
            .unwrap_or(acme.authorization_lifetime.time());
        let valid_lifetime = policy
            .valid_authorization_lifetime
            .unwrap_or(acme.valid_authorization_lifetime.time())
            .min(acme.valid_authorization_lifetime.time());
        Ok(Self {
            params: params.clone(),
            storage,
            ca: Arc::new(ca),
            profile,
            issuer: config.ca.active_issuer.clone(),
            start,
            order_lifetime,
            pending_lifetime,
            valid_lifetime,
            retention: config.database.prune_after.time(),
            prune_batch: storage::MAX_PRUNE_BATCH.min(config.database.prune_batch.max(1) * 20),
            keys: vec![None; usize::try_from(params.accounts)?],
            account_ids: Vec::new(),
            certificates: Vec::new(),
            revoked_set: std::collections::HashSet::new(),
            revoked: 0,
            pruned: 0,
            rows: 0,
            signing_cpu: 0.0,
            phases: Phases::default(),
            analyzed_at: 0,
        })
    }

    /// Seconds of the simulated period.
    fn period(&self) -> i64 {
        i64::from(self.params.days) * 86_400
    }

    /// When account `a` registers: spread over the first quarter of the period, so that later
    /// months issue for accounts that exist (renewals) and early ones see accounts arrive.
    fn account_created(&self, a: u64) -> OffsetDateTime {
        let quarter = self.period() / 4;
        let offset = i64::try_from(a).unwrap_or(i64::MAX).saturating_mul(quarter)
            / i64::try_from(self.params.accounts).unwrap_or(1).max(1);
        self.start + Duration::seconds(offset)
    }

    /// Certificate `i`'s order time: evenly over the period.
    fn ordered(&self, i: u64) -> OffsetDateTime {
        let offset = (i128::from(i) * i128::from(self.period())
            / i128::from(self.params.certificates.max(1))) as i64;
        self.start + Duration::seconds(offset)
    }

    /// Writes day `day`: its new accounts, its issuances, its revocations, then prunes at the
    /// day's end. Returns the certificates written.
    async fn day(&mut self, day: u32) -> anyhow::Result<u64> {
        let day_start = self.start + Duration::days(i64::from(day));
        let day_end = day_start + Duration::days(1);
        let mut clock = Instant::now();
        // Accounts registering today.
        let mut created = Vec::new();
        while (self.account_ids.len() as u64) < self.params.accounts {
            let a = self.account_ids.len() as u64 + created.len() as u64;
            if a >= self.params.accounts {
                break;
            }
            let at = self.account_created(a);
            if at >= day_end {
                break;
            }
            created.push((a, at));
            if created.len() >= 1_000 {
                self.create_accounts(&created).await?;
                created.clear();
            }
        }
        self.create_accounts(&created).await?;
        self.phases.accounts += lap(&mut clock);
        // Issuances ordered today.
        let first = self.first_ordered_at_or_after(day_start);
        let last = self.first_ordered_at_or_after(day_end);
        let plans: Vec<Planned> = (first..last).map(|i| self.plan(i)).collect();
        let count = plans.len() as u64;
        let mut issuances = self.sign(plans)?;
        self.phases.signing += lap(&mut clock);
        // Analyzed whenever the history has doubled, within a day too: a cost of about twice the
        // last ANALYZE's in all, and the plans stay those of tables of about their size
        // (`Storage::fill_analyze`). A first day of 11,000 issuances (the default history)
        // written on the plans of empty tables would scan them all again for each issuance.
        while !issuances.is_empty() {
            let until_doubled =
                (self.analyzed_at.max(1) * 2).saturating_sub(self.certificates.len());
            let part = match self.params.backend {
                // Nothing to analyze (`Storage::fill_analyze`): the day in one go.
                FillBackend::Sqlite => issuances.len(),
                FillBackend::Postgres => until_doubled
                    .max(POSTGRES_BATCH * POSTGRES_WRITERS)
                    .min(issuances.len()),
            };
            let rest = issuances.split_off(part);
            self.write(issuances).await?;
            issuances = rest;
            self.phases.writing += lap(&mut clock);
            if self.certificates.len() >= self.analyzed_at.max(1) * 2 {
                self.storage.fill_analyze().await?;
                self.analyzed_at = self.certificates.len();
                self.phases.analyzing += lap(&mut clock);
            }
        }
        // Revocations of the day, among the certificates in force.
        self.revoke_on(day, day_start).await?;
        self.phases.revoking += lap(&mut clock);
        let report = self
            .storage
            .prune(day_end, self.retention, self.prune_batch)
            .await?;
        self.pruned += report.orders
            + report.orders_trimmed
            + report.order_links
            + report.authorizations
            + report.challenges
            + report.evidence;
        self.phases.pruning += lap(&mut clock);
        if self.params.backend == FillBackend::Postgres {
            // The sealer chains what was recorded, as a running server's does.
            self.storage.seal_audit().await?;
        }
        self.phases.sealing += lap(&mut clock);
        Ok(count)
    }

    fn first_ordered_at_or_after(&self, at: OffsetDateTime) -> u64 {
        let offset = (at - self.start).whole_seconds().max(0);
        let n = i128::from(self.params.certificates);
        let period = i128::from(self.period());
        // The least i with i * period / n >= offset.
        let i = (i128::from(offset) * n + period - 1) / period;
        u64::try_from(i.clamp(0, n)).unwrap_or(self.params.certificates)
    }

    async fn create_accounts(&mut self, accounts: &[(u64, OffsetDateTime)]) -> anyhow::Result<()> {
        for &(a, at) in accounts {
            let key = Arc::new(KeyPair::generate()?);
            let (jwk_json, thumbprint) = jwk(&key)?;
            let new = NewAccount {
                jwk_json,
                thumbprint,
                contacts: vec![format!("mailto:admin@a{a}.fill.example")],
                tos_agreed: true,
            };
            let client = client_ip(a);
            let mut audit = AuditEvent::new(
                AuditKind::AccountCreated,
                Actor::Account(AccountId(0)),
                "registered",
            );
            audit.client_ip = Some(IpAddr::V4(client));
            let account = self.storage.create_account(new, at, &audit).await?;
            self.account_ids.push(account.id);
            self.keys[usize::try_from(a)?] = Some(key);
            self.rows += 2;
        }
        Ok(())
    }

    /// Issuance `i` as planned from the seed alone: which account, which names, which
    /// challenges.
    fn plan(&self, i: u64) -> Planned {
        let mut rng = Rng::new(self.params.seed, i + 1);
        let ordered_at = self.ordered(i) + Duration::seconds(rng.below(60) as i64);
        let registered = self.account_ids.len().max(1) as u64;
        let account = rng.below(registered) as usize;
        // A site of the account: renewals ask for the same names again.
        let sites = (self.params.certificates / self.params.accounts.max(1) / 3).max(1);
        let site = rng.below(sites);
        let names = match rng.below(100) {
            0..60 => 1,
            60..90 => 2,
            90..98 => 3,
            _ => 4,
        };
        let base = format!("s{site}.a{account}.fill.example");
        let names: Vec<String> = (0..names)
            .map(|n| match n {
                0 => base.clone(),
                1 => format!("www.{base}"),
                n => format!("h{n}.{base}"),
            })
            .collect();
        let challenges = names
            .iter()
            .map(|_| {
                let validated = if rng.below(10) < 7 {
                    ChallengeType::Http01
                } else {
                    ChallengeType::Dns01
                };
                let mut offered = vec![(validated, rng.token())];
                for other in [
                    ChallengeType::Http01,
                    ChallengeType::Dns01,
                    ChallengeType::TlsAlpn01,
                ] {
                    if other != validated {
                        offered.push((other, rng.token()));
                    }
                }
                offered
            })
            .collect();
        Planned {
            account,
            names,
            ordered_at,
            challenges,
            client: client_ip(account as u64),
        }
    }

    /// Signs `plans` over the cores: a CSR with the account's key, checked as finalization
    /// checks it, then `Ca::prepare` and `Ca::issue`.
    fn sign(&mut self, plans: Vec<Planned>) -> anyhow::Result<Vec<FillIssuance>> {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        let chunk = plans.len().div_ceil(threads).max(1);
        let ca = &self.ca;
        let profile = &self.profile;
        let keys = &self.keys;
        let account_ids = &self.account_ids;
        let this = &*self;
        let results = std::thread::scope(|scope| {
            let handles: Vec<_> = plans
                .chunks(chunk)
                .map(|part| {
                    scope.spawn(move || {
                        let cpu = thread_cpu();
                        let signed = part
                            .iter()
                            .map(|plan| this.sign_one(ca, profile, keys, account_ids, plan))
                            .collect::<anyhow::Result<Vec<_>>>();
                        (signed, thread_cpu() - cpu)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .map_err(|_| anyhow::anyhow!("a signing thread panicked"))
                })
                .collect::<anyhow::Result<Vec<_>>>()
        })?;
        let mut out = Vec::new();
        for (signed, cpu) in results {
            self.signing_cpu += cpu;
            out.extend(signed?);
        }
        Ok(out)
    }

    fn sign_one(
        &self,
        ca: &Ca,
        profile: &Profile,
        keys: &[Option<Arc<KeyPair>>],
        account_ids: &[AccountId],
        plan: &Planned,
    ) -> anyhow::Result<FillIssuance> {
        let key = keys
            .get(plan.account)
            .and_then(Option::as_ref)
            .context("an issuance for an account not registered yet")?;
        let account = *account_ids
            .get(plan.account)
            .context("an issuance for an account not registered yet")?;
        let identifiers = plan
            .names
            .iter()
            .map(|n| Identifier::dns(n))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut params = CertificateParams::new(plan.names.clone())?;
        // No subject: the names are in the SANs, as ACME clients ask.
        params.distinguished_name = rcgen::DistinguishedName::new();
        let csr_der = params.serialize_request(key.as_ref())?.der().to_vec();
        let checked = issuance::check_csr(&csr_der, &identifiers)?;
        let validated_at = plan.ordered_at + Duration::seconds(3);
        let finalized_at = validated_at + Duration::seconds(2);
        let issued_at = finalized_at + Duration::seconds(1);
        let not_after = issued_at + profile.validity();
        let intent = ca.prepare(&checked, &identifiers, profile, issued_at, not_after)?;
        let issued = ca.issue(&checked, &identifiers, profile, &intent)?;
        let certificate = NewCertificate {
            serial: issued.serial,
            der: issued.der,
            issuer_chain_pem: issued.issuer_chain_pem.to_string(),
            not_before: issued.not_before,
            not_after: issued.not_after,
            crl_shard: issued.crl_shard,
        };
        let mut audit = AuditEvent::new(
            AuditKind::CertificateIssued,
            Actor::Account(account),
            "issued to the order's account: valid account, every identifier authorized by a valid \
             authorization, CSR and key checked, CAA allowed at issuance",
        );
        audit.client_ip = Some(IpAddr::V4(plan.client));
        audit.account = Some(account);
        audit.serial = Some(certificate.serial.clone());
        audit.names.clone_from(&plan.names);
        audit.detail = serde_json::json!({
            "profile": profile.name(),
            "not_before": rfc3339(certificate.not_before),
            "not_after": rfc3339(certificate.not_after),
        });
        let name = &plan.names[0];
        let evidence = Evidence {
            addresses: vec![format!("{}:80", plan.client)],
            observed: format!(
                "key authorization matched at http://{name}/.well-known/acme-challenge/ (HTTP 200)"
            ),
            caa: vec!["no CAA records (climbed to the root)".to_owned()],
        };
        Ok(FillIssuance {
            account,
            set_hash: canonical_set_hash(&identifiers),
            identifiers,
            profile: profile.name().to_owned(),
            challenges: plan.challenges.clone(),
            evidence,
            ordered_at: plan.ordered_at,
            order_expires_at: plan.ordered_at + self.order_lifetime,
            pending_authz_expires_at: plan.ordered_at + self.pending_lifetime,
            validated_at,
            valid_authz_expires_at: validated_at + self.valid_lifetime,
            finalized_at,
            csr_der,
            client_ip: Some(IpAddr::V4(plan.client)),
            issued_at,
            issuer: self.issuer.clone(),
            certificate,
            audit,
        })
    }

    /// Writes the day's issuances: one writer on SQLite, several transactions at once on
    /// PostgreSQL.
    async fn write(&mut self, issuances: Vec<FillIssuance>) -> anyhow::Result<()> {
        let rows: u64 = issuances
            .iter()
            .map(|i| {
                let n = i.identifiers.len() as u64;
                // order, reservation, certificate, audit; per identifier: authorization,
                // challenges, link, evidence.
                4 + n * (3 + 3)
            })
            .sum();
        let meta: Vec<(AccountId, OffsetDateTime, OffsetDateTime)> = issuances
            .iter()
            .map(|i| (i.account, i.issued_at, i.certificate.not_after))
            .collect();
        let mut ids = Vec::with_capacity(issuances.len());
        match self.params.backend {
            FillBackend::Sqlite => {
                for batch in issuances.chunks(SQLITE_BATCH) {
                    ids.extend(self.storage.fill_issuances(batch).await?);
                }
            }
            FillBackend::Postgres => {
                // A day of fewer than POSTGRES_WRITERS full batches is still spread over all
                // the writers (a fill of 20,000 certificates over 180 days wrote each day's
                // 111 in one transaction, with one writer).
                let batch = issuances
                    .len()
                    .div_ceil(POSTGRES_WRITERS)
                    .clamp(1, POSTGRES_BATCH);
                let batches: Vec<Vec<FillIssuance>> = issuances
                    .chunks(batch)
                    .map(<[FillIssuance]>::to_vec)
                    .collect();
                let mut results = vec![None; batches.len()];
                let mut tasks = tokio::task::JoinSet::new();
                let mut next = batches.into_iter().enumerate();
                loop {
                    while tasks.len() < POSTGRES_WRITERS
                        && let Some((n, batch)) = next.next()
                    {
                        let storage = self.storage.clone();
                        tasks.spawn(async move { (n, storage.fill_issuances(&batch).await) });
                    }
                    let Some(done) = tasks.join_next().await else {
                        break;
                    };
                    let (n, stored) = done?;
                    results[n] = Some(stored?);
                }
                for stored in results.into_iter().flatten() {
                    ids.extend(stored);
                }
            }
        }
        if ids.len() != meta.len() {
            bail!("{} issuances written, {} stored", meta.len(), ids.len());
        }
        for (stored, (account, issued_at, not_after)) in ids.into_iter().zip(meta) {
            self.certificates.push(Stored {
                id: stored.id,
                account,
                issued_at,
                not_after,
            });
        }
        self.rows += rows;
        Ok(())
    }

    /// The day's share of the revocations: certificates picked among those issued and not
    /// expired, each revoked once, at a time of the day, for a reason in the proportions a
    /// subscriber gives them.
    async fn revoke_on(&mut self, day: u32, day_start: OffsetDateTime) -> anyhow::Result<()> {
        let due = self.params.revocations * u64::from(day + 1) / u64::from(self.params.days);
        let today = due.saturating_sub(self.revoked);
        if today == 0 || self.certificates.is_empty() {
            return Ok(());
        }
        let mut rng = Rng::new(self.params.seed ^ 0x5245_564f_4b45, u64::from(day));
        let mut batch = Vec::new();
        let mut tries = 0;
        while (batch.len() as u64) < today && tries < today * 50 {
            tries += 1;
            let at = day_start + Duration::seconds(rng.below(86_400) as i64);
            let n = rng.below(self.certificates.len() as u64) as usize;
            let cert = self.certificates[n];
            let index = u32::try_from(n)?;
            if cert.issued_at >= at || cert.not_after <= at || self.revoked_set.contains(&index) {
                continue;
            }
            self.revoked_set.insert(index);
            let reason = match rng.below(100) {
                0..45 => RevocationReason::Superseded,
                45..75 => RevocationReason::CessationOfOperation,
                75..88 => RevocationReason::Unspecified,
                88..96 => RevocationReason::KeyCompromise,
                _ => RevocationReason::AffiliationChanged,
            };
            let mut audit = AuditEvent::new(
                AuditKind::CertificateRevoked,
                Actor::Account(cert.account),
                format!(
                    "revoked by the account holding it, reason {}",
                    reason.as_str()
                ),
            );
            audit.account = Some(cert.account);
            audit.detail = serde_json::json!({
                "certificate_id": cert.id.0,
                "reason_code": reason.code(),
            });
            batch.push(FillRevocation {
                certificate: cert.id,
                reason,
                at,
                audit,
            });
        }
        batch.sort_by_key(|r| r.at);
        let revoked = self.storage.fill_revocations(&batch).await?;
        self.revoked += revoked;
        self.rows += revoked * 2;
        Ok(())
    }
}

/// The account key's JWK and its RFC 7638 thumbprint: the members in lexicographic order, no
/// whitespace, SHA-256, base64url.
fn jwk(key: &KeyPair) -> anyhow::Result<(String, String)> {
    use base64::Engine as _;
    let raw = key.public_key_raw();
    if raw.len() != 65 || raw[0] != 4 {
        bail!("an account key is not an uncompressed P-256 point");
    }
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let (x, y) = (b64.encode(&raw[1..33]), b64.encode(&raw[33..]));
    let canonical = format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#);
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, canonical.as_bytes());
    Ok((canonical, b64.encode(digest.as_ref())))
}

/// A client address per account (TEST-NET-3 and beyond, never routed).
fn client_ip(account: u64) -> Ipv4Addr {
    let [_, _, b, c, ..] = account.to_le_bytes();
    Ipv4Addr::new(198, 18, b, c)
}

/// Seconds since `clock`, which moves on to now.
fn lap(clock: &mut Instant) -> f64 {
    let now = Instant::now();
    let seconds = (now - *clock).as_secs_f64();
    *clock = now;
    seconds
}

fn day_start(t: OffsetDateTime) -> OffsetDateTime {
    t.replace_time(time::Time::MIDNIGHT)
}

fn date(t: OffsetDateTime) -> String {
    t.date().to_string()
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// CPU seconds of the calling thread (utime + stime).
fn thread_cpu() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/thread-self/stat") else {
        return 0.0;
    };
    // Fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// Bytes of the SQLite database `name` in `dir` with its WAL and shared-memory files.
fn dir_size(dir: &Path, name: &str) -> anyhow::Result<u64> {
    let mut total = 0;
    for suffix in ["", "-wal", "-shm"] {
        if let Ok(meta) = std::fs::metadata(dir.join(format!("{name}{suffix}"))) {
            total += meta.len();
        }
    }
    if total == 0 {
        bail!("no database {name} in {}", dir.display());
    }
    Ok(total)
}

/// Copies a directory tree, keeping file permissions (the CA keys stay private).
fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    std::fs::set_permissions(to, std::fs::metadata(from)?.permissions())?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)
                .with_context(|| format!("copying {}", entry.path().display()))?;
            // On the disk before the copy is served: otherwise the kernel writes gigabytes of
            // a half year back while the first runs measure, and their commits' syncs wait
            // behind it (PostgreSQL's FILE_COPY syncs its copy too).
            std::fs::File::open(&target)
                .and_then(|file| file.sync_all())
                .with_context(|| format!("syncing {}", target.display()))?;
        }
    }
    Ok(())
}

/// Runs `statement` with `psql` (the benches' databases are made and dropped with it).
pub(crate) fn psql(url: &str, statement: &str) -> anyhow::Result<()> {
    testkit::postgres::psql(url, statement).map(drop)
}

fn database_exists(url: &str, name: &str) -> anyhow::Result<bool> {
    Ok(testkit::postgres::psql(
        url,
        &format!("SELECT 1 FROM pg_database WHERE datname = '{name}'"),
    )? == "1")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use storage::model::CertificateFilter;
    use storage::model::Page;

    use super::*;

    /// The PostgreSQL databases a test makes (the template and its copy), dropped when it ends
    /// whether it passed or not: the shared server keeps nothing of a failed run.
    struct DropDatabases {
        admin: String,
        names: Vec<String>,
    }

    impl Drop for DropDatabases {
        fn drop(&mut self) {
            for name in &self.names {
                if let Err(e) = psql(
                    &self.admin,
                    &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
                ) {
                    eprintln!("dropping {name}: {e:#}");
                }
            }
        }
    }

    /// A small fill, reused on the second call, served from a fresh copy by Certeasy itself:
    /// the counts, a certificate by serial signed by the data directory's CA, every revocation
    /// on its CRL shard's list and counter.
    async fn small_fill(backend: FillBackend) {
        let cache = tempfile::tempdir().unwrap();
        let admin = testkit::postgres::admin_url();
        let params = FillParams {
            backend,
            certificates: 2_000,
            accounts: 50,
            revocations: 100,
            days: 30,
            // A seed of this process, so that concurrent runs fill templates of their own.
            seed: u64::from(std::process::id()),
        };
        let name = format!("t{}_{}", std::process::id(), backend as usize);
        let databases = DropDatabases {
            admin: admin.clone(),
            names: match backend {
                FillBackend::Sqlite => Vec::new(),
                FillBackend::Postgres => vec![
                    format!("certeasy_copy_{name}"),
                    template_name(&params.key()),
                ],
            },
        };
        let report = dataset(&params, cache.path(), &admin, false, false)
            .await
            .unwrap();
        assert!(!report.reused);
        assert_eq!(
            (report.accounts, report.certificates, report.revocations),
            (50, 2_000, 100)
        );
        assert!(
            report.database_bytes > 0 && report.pruned_rows > 0,
            "{report:?}"
        );
        let again = dataset(&params, cache.path(), &admin, false, false)
            .await
            .unwrap();
        assert!(again.reused);

        let copies = tempfile::tempdir().unwrap();
        assert_eq!(
            report.template_database.as_deref(),
            databases.names.get(1).map(String::as_str)
        );
        let copy = fresh_copy(&report, &admin, copies.path(), &name).unwrap();
        let text = std::fs::read_to_string(&copy.config_path).unwrap();
        let config = certeasy::config::from_str(&text, "copy").unwrap();
        let clock: SharedClock = Arc::new(acme_core::clock::SystemClock);
        let server = certeasy::serve::start(&config, Some(&copy.config_path), clock)
            .await
            .unwrap();
        let s = server.storage.clone();
        let all = CertificateFilter::default();
        assert_eq!(s.count_certificates(&all).await.unwrap(), 2_000);
        let revoked = CertificateFilter {
            revoked: Some(true),
            ..CertificateFilter::default()
        };
        assert_eq!(s.count_certificates(&revoked).await.unwrap(), 100);
        let newest = s
            .list_certificates(
                &all,
                Page {
                    before: None,
                    limit: 5,
                },
            )
            .await
            .unwrap();
        assert_eq!(newest.len(), 5);
        let cert = s
            .certificate_by_serial(&newest[0].serial)
            .await
            .unwrap()
            .unwrap();
        let ca = load_ca(&config, OffsetDateTime::now_utc()).unwrap();
        let (_, parsed) = x509_parser::parse_x509_certificate(&cert.der).unwrap();
        let issuer_der = pem::parse(ca.chain_pem()).unwrap().into_contents();
        let (_, issuer) = x509_parser::parse_x509_certificate(&issuer_der).unwrap();
        parsed.verify_signature(Some(issuer.public_key())).unwrap();
        assert_eq!(parsed.raw_serial(), cert.serial.as_bytes());
        let states = s.crl_shard_states().await.unwrap();
        assert_eq!(
            states.iter().map(|st| st.revocations).sum::<u64>(),
            100,
            "{states:?}"
        );
        let now = OffsetDateTime::now_utc();
        let mut listed = 0;
        for st in &states {
            listed += s
                .revoked_in_crl_shard(&st.issuer, st.shard, ca.chain_pem(), now)
                .await
                .unwrap()
                .len();
        }
        // Revoked certificates that expired since are off the lists: none, 30 days of 90-day
        // certificates.
        assert_eq!(listed, 100);
        server.shutdown().await;
        drop_copy(copy, &admin).unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_small_fill_on_sqlite_serves() {
        small_fill(FillBackend::Sqlite).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_small_fill_on_postgres_serves() {
        small_fill(FillBackend::Postgres).await;
    }
}
