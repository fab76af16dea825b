//! `certeasy serve`: builds every part from the configuration and runs the listeners.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use acme_api::ApiState;
use acme_api::crl::CrlState;
use acme_api::crl::PublishedCrls;
use acme_api::nonce::NonceRejection;
use acme_api::nonce::NonceService;
use acme_api::nonce::redis::RedisNonceLedger;
use acme_api::settings::ApiSettings;
use acme_core::account_uri::AccountUris;
use acme_core::clock::SharedClock;
use anyhow::Context;
use issuance::Ca;
use issuance::CaHandle;
use issuance::CaSettings;
use issuance::CrlDistribution;
use issuance::ExistingCa;
use issuance::Profiles;
use ra::Ra;
use ra::limits::RateLimits;
use ra::settings::PolicySettings;
use ra::verdicts::FailedValidationHook;
use ra::verdicts::HookChain;
use ra::verdicts::ValidationHook;
use ra::verdicts::ZombieHook;
use ratelimits::MemoryStore;
use ratelimits::RedisStore;
use ratelimits::Store;
use ratelimits::limiter::Limiter;
use storage::Storage;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use validation::ValidationSettings;
use validation::Validator;
use workers::Workers;
use workers::pruner::PrunerSettings;
use workers::settings::WorkerSettings;

use crate::config::Config;
use crate::listener::ListenerKind;
use crate::listener::ListenerLimits;
use crate::listener::Transport;
use crate::listener_cert::ListenerCert;
use crate::reload::Reloader;

/// A started server: where it listens and how to stop it.
pub struct RunningServer {
    /// The ACME (HTTPS) listener.
    pub acme_addr: SocketAddr,
    /// The admin (plain HTTP, loopback) listener.
    pub admin_addr: SocketAddr,
    /// The CRL (plain HTTP) listener, when CRLs are published.
    pub crl_addr: Option<SocketAddr>,
    /// The URL certificates name for their CRL, without the file name, when CRLs are published.
    pub crl_base_url: Option<String>,
    /// The root certificate clients must trust.
    pub root_pem: String,
    /// Where the root certificate is on disk, when the CA lives in the data directory.
    pub root_path: Option<PathBuf>,
    /// The directory URL.
    pub directory_url: String,
    /// The limiter chain, for reloads.
    pub limits: Arc<RateLimits>,
    reloader: Reloader,
    /// The database, for operators' tools and tests.
    pub storage: Storage,
    shutdown: CancellationToken,
    workers: Workers,
    tasks: JoinSet<()>,
}

impl RunningServer {
    /// Stops accepting, lets requests and jobs in flight finish, and returns.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        self.workers.shutdown().await;
        while self.tasks.join_next().await.is_some() {}
        self.seal_last().await;
    }

    /// Waits until the server stops (after `shutdown_token()` is cancelled).
    pub async fn wait(mut self) {
        while self.tasks.join_next().await.is_some() {}
        self.workers.shutdown().await;
        self.seal_last().await;
    }

    /// The audit sealer's last pass, once requests and workers have stopped committing, so that
    /// a stop leaves none of this instance's records pending (PostgreSQL; nothing on SQLite).
    async fn seal_last(&self) {
        match self.storage.seal_audit().await {
            Ok(0) => {}
            Ok(sealed) => tracing::info!(sealed, "chained the last pending audit records"),
            Err(e) => tracing::warn!(
                error = %e,
                "could not chain the last pending audit records; the next sealer of any instance will"
            ),
        }
    }

    /// Re-reads the rate limits and overrides from the configuration file, the operator's
    /// listener certificate files, and `ca.issuers` (SIGHUP). On any error what is in force
    /// stays, and the error is returned for logging.
    pub async fn reload(&self) -> anyhow::Result<()> {
        self.reloader.reload().await
    }

    /// What SIGHUP and `certeasy admin reload` run.
    pub fn reloader(&self) -> Reloader {
        self.reloader.clone()
    }

    /// Cancelling this token stops the server.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }
}

/// Starts Certeasy: storage (migrated), CA (created on first start), workers, listeners.
///
/// `config_path` is the file the configuration came from; reloads (SIGHUP, `certeasy admin
/// reload`) read it again.
pub async fn start(
    config: &Config,
    config_path: Option<&std::path::Path>,
    clock: SharedClock,
) -> anyhow::Result<RunningServer> {
    // Test mode's refusals come before anything is opened: `main.rs` has checked them already,
    // and a caller of this library function gets the same line.
    if let Some(refusal) = config.test_mode_refusals().into_iter().next() {
        anyhow::bail!("{}: {}", refusal.key, refusal.reason);
    }
    // The recorder goes in first: components take metric handles when they start, and a handle
    // taken before the recorder exists counts nowhere.
    crate::admin::prometheus();
    crate::admin_metrics::register();
    if config.test_mode.enabled {
        let t = &config.test_mode;
        tracing::warn!(
            data_dir = %config.data_dir.display(),
            http_port = t.http_port,
            tls_alpn_port = t.tls_alpn_port,
            always_valid = t.always_valid,
            reject_nonces_percent = t.reject_nonces_percent,
            authz_reuse = t.authz_reuse,
            cert_lifetime = %t.cert_lifetime.map_or_else(|| "profile".to_owned(), |d| d.to_string()),
            rate_limits = t.rate_limits,
            "TEST MODE: NOT FOR PRODUCTION. Throw-away CA, loopback validation allowed{}",
            if t.always_valid { ", every challenge valid without validation" } else { "" }
        );
    }
    let data_dir = PathBuf::from(&config.data_dir);
    crate::data_dir::create_private(&data_dir)?;
    let admin_token = crate::admin_token::load_or_create(&config.admin_token_path())?;

    let database_url = config.database_url();
    let pool = storage::PoolSettings {
        max_connections: config.database.max_connections,
        sqlite_synchronous: config.database.sqlite_synchronous.into(),
    };
    let storage = Storage::connect_with(&database_url, pool)
        .await
        .with_context(|| format!("opening the database {}", redact(&database_url)))?
        .with_evidence_retention(config.database.evidence_retention.time());

    let mut ca = load_ca(config, &data_dir, clock.now())?;
    if config.crl.enabled {
        ca = ca.with_crl_distribution(CrlDistribution {
            base_url: config.crl_base_url(),
            shards: config.crl.shards,
        });
    }
    // Every holder reads the set in force through the handle: a reload of `ca.issuers` swaps it
    // for all of them at once (`issuer_reload.rs`).
    let ca = CaHandle::from(ca);

    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let listener_cert = ListenerCert::load(
        &config.server,
        ca.clone(),
        Arc::clone(&clock),
        Arc::clone(&provider),
    )?;
    let certificates: Arc<dyn rustls::server::ResolvesServerCert> =
        Arc::<ListenerCert>::clone(&listener_cert);
    let tls = crate::tls::server_config(provider, certificates, listener_cert.sessions())?;

    let limits = Arc::new(build_limits(config, &clock)?);
    let profiles = config
        .issuance
        .profiles()
        .context("building the certificate profiles")?;

    let validator =
        Validator::new(validation_settings(config)).context("building the validator")?;
    let mut hooks: Vec<Arc<dyn ValidationHook>> = vec![Arc::new(FailedValidationHook::new(
        Arc::clone(limits.limiter()),
        Arc::clone(&clock),
    ))];
    if config.zombie_pausing.enabled {
        hooks.push(Arc::new(ZombieHook::new(
            Arc::clone(limits.limiter()),
            storage.clone(),
            Arc::clone(&clock),
            config.zombie_pausing.repause_grace.time(),
        )));
    }
    let hook = Arc::new(HookChain(hooks));
    // Issuer rotation: the active issuer is the database's, read by every instance before
    // signing; `ca.active-issuer` until an operator activates another.
    let active_issuer = Arc::new(ra::issuers::ActiveIssuer::new(
        storage.clone(),
        issuance::IssuerName::new(&config.ca.active_issuer).map_err(anyhow::Error::msg)?,
    ));
    let longest_validity = ra::issuers::longest_validity(&profiles);
    let workers = Workers::spawn(
        storage.clone(),
        validator,
        ca.clone(),
        Arc::clone(&clock),
        WorkerSettings {
            active_issuer: Some(Arc::clone(&active_issuer)),
            ..worker_settings(config, profiles.clone())
        },
        hook,
    );

    let blocked_keys = blocked_keys_file(config)?;
    let ra = Ra::new(
        policy_settings(config, profiles, blocked_keys.clone()),
        storage.clone(),
        Arc::clone(&clock),
        Arc::clone(&limits),
        Arc::new(workers.clone()),
    );
    // The database's rate-limit overrides are in force before the first request; then every
    // `rate-limiting.overrides-refresh` (`ra::overrides::run_refresh`, started below).
    ra.reload_overrides()
        .await
        .context("loading the rate-limit overrides of the database")?;
    let mut settings = api_settings(config);
    settings.unpause = Some(unpause_settings(config, &data_dir, &settings.base_url)?);
    let directory_url = format!("{}/directory", settings.base_url);
    let nonces = nonce_service(config).await;
    let state = ApiState::new(settings, ra.clone(), ca.clone(), Arc::clone(&clock), nonces);
    let published_crls = Arc::new(PublishedCrls::default());
    let crl_router = acme_api::crl::router(CrlState::new(
        Arc::clone(&published_crls),
        Arc::clone(&clock),
    ));
    let mut router = acme_api::router(state);
    if config.crl.enabled {
        router = router.merge(crl_router.clone());
    }

    let acme_listener = TcpListener::bind(config.server.listen)
        .await
        .with_context(|| format!("binding the ACME listener on {}", config.server.listen))?;
    let admin_listener = TcpListener::bind(config.server.admin_listen)
        .await
        .with_context(|| {
            format!(
                "binding the admin listener on {}",
                config.server.admin_listen
            )
        })?;
    let crl_listener = if config.crl.enabled {
        Some(
            TcpListener::bind(config.crl.listen)
                .await
                .with_context(|| format!("binding the CRL listener on {}", config.crl.listen))?,
        )
    } else {
        None
    };
    let acme_addr = acme_listener.local_addr()?;
    let crl_addr = crl_listener
        .as_ref()
        .map(TcpListener::local_addr)
        .transpose()?;
    let admin_addr = admin_listener.local_addr()?;

    let shutdown = CancellationToken::new();
    let mut tasks = JoinSet::new();
    // One builder, one set of bounds, for all three listeners (see `listener.rs`).
    let limits_of_listeners = ListenerLimits::from_config(&config.server);
    tasks.spawn(crate::listener::serve(
        ListenerKind::Acme,
        acme_listener,
        Transport::Tls(tls),
        router,
        limits_of_listeners.clone(),
        shutdown.clone(),
    ));
    tasks.spawn(Arc::clone(&listener_cert).renew_until(shutdown.clone()));
    tasks.spawn(ra::overrides::run_refresh(
        ra.clone(),
        shutdown.clone().cancelled_owned(),
    ));
    // Chains the audit records of PostgreSQL transactions (returns at once on SQLite).
    tasks.spawn(workers::audit_sealer::run(
        storage.clone(),
        Arc::clone(&clock),
        shutdown.clone(),
    ));
    if config.database.prune {
        // Stops between batches on shutdown: a batch under way commits first.
        tasks.spawn(workers::pruner::run(
            storage.clone(),
            Arc::clone(&clock),
            pruner_settings(config),
            shutdown.clone(),
        ));
    }
    if let Some(crl_listener) = crl_listener {
        tasks.spawn(workers::crl::run(
            storage.clone(),
            ca.clone(),
            Arc::clone(&clock),
            crl_settings(config),
            shutdown.clone(),
        ));
        // GETs are answered from memory; this loads each CRL once, when its number grows.
        let (crl_storage, crl_shutdown) = (storage.clone(), shutdown.clone());
        tasks.spawn(async move {
            published_crls
                .keep_fresh(&crl_storage, crl_shutdown.cancelled())
                .await;
        });
        tasks.spawn(crate::listener::serve(
            ListenerKind::Crl,
            crl_listener,
            Transport::PlainHttp,
            crl_router,
            limits_of_listeners.clone(),
            shutdown.clone(),
        ));
    }
    let reloader = Reloader::new(
        Arc::clone(&limits),
        listener_cert,
        config_path.map(PathBuf::from),
        config.test_mode.enabled.then(|| config.test_mode.clone()),
    )
    .with_blocked_keys(blocked_keys)
    .with_audit(storage.clone(), Arc::clone(&clock))
    .with_issuers(
        crate::issuer_reload::IssuerReload::new(
            ca.clone(),
            Arc::clone(&active_issuer),
            storage.clone(),
            Arc::clone(&clock),
        )
        .with_profile_issuers(&ra.settings().profiles),
    );
    let admin_router = crate::admin::router(crate::admin::AdminContext {
        storage: storage.clone(),
        ra,
        clock: Arc::clone(&clock),
        reloader: reloader.clone(),
        token: admin_token,
        backups: data_dir.join("backups"),
        issuers: crate::admin_issuers::IssuersAdmin {
            storage: storage.clone(),
            ca: ca.clone(),
            active: Arc::clone(&active_issuer),
            longest_validity,
            clock: Arc::clone(&clock),
        },
    });
    if let Some(handle) = crate::admin::prometheus() {
        // Histogram samples wait in the recorder until upkeep folds them into buckets. A scrape
        // runs it, but a server nobody scrapes must not grow without bound.
        let upkeep_shutdown = shutdown.clone();
        tasks.spawn(async move {
            let mut ticker = tokio::time::interval(std::time::Duration::from_secs(5));
            loop {
                tokio::select! {
                    _ = ticker.tick() => handle.run_upkeep(),
                    () = upkeep_shutdown.cancelled() => return,
                }
            }
        });
    }
    // No request timeout here: the open routes answer at once, and an authenticated operator
    // action (a backup of a large database, a bulk revocation) may rightly take longer.
    tasks.spawn(crate::listener::serve(
        ListenerKind::Admin,
        admin_listener,
        Transport::PlainHttp,
        admin_router,
        limits_of_listeners.without_request_timeout(),
        shutdown.clone(),
    ));

    let ca = ca.current();
    Ok(RunningServer {
        acme_addr,
        admin_addr,
        crl_addr,
        crl_base_url: config.crl.enabled.then(|| config.crl_base_url()),
        root_pem: ca.root_pem().to_owned(),
        root_path: ca.root_path().map(PathBuf::from),
        directory_url,
        limits,
        reloader,
        storage,
        shutdown,
        workers,
        tasks,
    })
}

fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_owned(),
    }
}

fn load_ca(
    config: &Config,
    data_dir: &std::path::Path,
    now: time::OffsetDateTime,
) -> anyhow::Result<Ca> {
    let c = &config.ca;
    let existing = match &c.existing.certificate {
        Some(certificate) => Some(ExistingCa {
            certificate: certificate.clone(),
            private_key: crate::config::pkcs11::key_source(
                "ca.existing",
                c.existing.private_key.as_ref(),
                c.existing.pkcs11.as_ref(),
            )
            .map_err(|(path, why)| anyhow::anyhow!("{path} {why}"))?,
            chain: c.existing.chain.clone(),
        }),
        None => None,
    };
    let settings = CaSettings {
        dir: data_dir.join("ca"),
        key_algorithm: c.key_algorithm,
        organization: c.organization.clone(),
        root_common_name: c.root_common_name.clone(),
        intermediate_common_name: c.intermediate_common_name.clone(),
        root_validity: c.root_validity.time(),
        intermediate_validity: c.intermediate_validity.time(),
        existing,
        alternate_chains: c.existing.alternate_chains.clone(),
        // Never in the data directory (issuance::ceremony); test mode's CA is thrown away.
        generated_root_key: if config.test_mode.enabled {
            issuance::GeneratedRootKey::Discard
        } else {
            issuance::GeneratedRootKey::beside(data_dir)
        },
    };
    let issuers = crate::config::issuers::settings(&c.issuers)?;
    Ca::load_or_create(&settings, now)
        .and_then(|ca| ca.with_issuers(&issuers, now))
        .context("loading or creating the CA")
}

fn crl_settings(config: &Config) -> workers::crl::CrlSettings {
    workers::crl::CrlSettings {
        shards: config.crl.shards,
        update_interval: config.crl.update_interval.std(),
        lifetime: config.crl.lifetime.std(),
    }
}

fn validation_settings(config: &Config) -> ValidationSettings {
    let v = &config.validation;
    ValidationSettings {
        dns_servers: v.dns_servers.clone(),
        http_port: v.http_port,
        tls_alpn_port: v.tls_alpn_port,
        allow_loopback: v.allow_loopback,
        deny_target_cidrs: v.deny_target_cidrs.clone(),
        allow_private_redirects: v.allow_private_redirects,
        timeout: v.timeout.std(),
        caa_identities: config.acme.caa_identities.clone(),
        dns_persist_issuer_domain_names: v.dns_persist_issuers(&config.acme.caa_identities),
        account_hash_prefix: AccountUris::new(&config.external_url()).hash_prefix(),
        // Redirects and body size are not configurable: the validator's own limits.
        ..ValidationSettings::default()
    }
}

fn worker_settings(config: &Config, profiles: Profiles) -> WorkerSettings {
    WorkerSettings {
        concurrency: config.validation.workers,
        max_attempts: config.validation.max_attempts,
        profiles,
        backdate: config.issuance.backdate.time(),
        lease: config.validation.job_lease.time(),
        account_uris: AccountUris::new(&config.external_url()),
        caa_recheck_after: config.validation.caa_recheck_after.time(),
        validation_retries: config.validation.retries,
        retry_backoff: config.validation.retry_backoff.time(),
        retry_window: config.validation.retry_window.time(),
        always_valid: config.test_mode.enabled && config.test_mode.always_valid,
        valid_authorization_lifetime: config.acme.valid_authorization_lifetime.time(),
        ..WorkerSettings::default()
    }
}

fn pruner_settings(config: &Config) -> PrunerSettings {
    let d = &config.database;
    PrunerSettings {
        retention: d.prune_after.time(),
        interval: d.prune_interval.std(),
        batch: d.prune_batch,
    }
}

fn api_settings(config: &Config) -> ApiSettings {
    let a = &config.acme;
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    ApiSettings {
        base_url: config.external_url().trim_end_matches('/').to_owned(),
        website: non_empty(&a.website),
        caa_identities: a.caa_identities.clone(),
        dns_persist_issuer_domain_names: config.validation.dns_persist_issuers(&a.caa_identities),
        orders_per_page: u32::try_from(a.orders_per_page).unwrap_or(u32::MAX),
        retry_after: a.retry_after.time(),
        max_body_bytes: config.server.max_body_bytes,
        trusted_proxies: config.server.trusted_proxies.clone(),
        unpause: None,
    }
}

fn policy_settings(
    config: &Config,
    profiles: Profiles,
    blocked_keys: ra::keys::BlockedKeysFile,
) -> PolicySettings {
    let a = &config.acme;
    PolicySettings {
        terms_of_service: (!a.terms_of_service.is_empty()).then(|| a.terms_of_service.clone()),
        external_account_required: a.external_account_required,
        order_lifetime: a.order_lifetime.time(),
        authorization_lifetime: a.authorization_lifetime.time(),
        valid_authorization_lifetime: a.valid_authorization_lifetime.time(),
        reuse_valid_authorizations: a.reuse_valid_authorizations,
        pre_authorization: a.pre_authorization,
        max_identifiers_per_order: a.max_identifiers_per_order,
        max_contacts: a.max_contacts,
        identifier_policy: config.identifiers.policy(),
        profiles,
        backdate: config.issuance.backdate.time(),
        renewal: ra::settings::RenewalSettings {
            window_start: f64::from(a.renewal_window_start_percent) / 100.0,
            window_end: f64::from(a.renewal_window_end_percent) / 100.0,
            jitter: f64::from(a.renewal_jitter_percent) / 100.0,
            retry_after: a.renewal_info_retry_after.time(),
        },
        blocked_keys,
        optional_challenges: ra::settings::OptionalChallenges {
            dns_account_01: config.validation.dns_account_01,
            dns_persist_01: config.validation.dns_persist_01,
        },
    }
}

/// The blocked-keys file of `acme.blocked-keys-file`, read now: a file that cannot be read or
/// holds a line that is not a hash stops the start, naming the line.
fn blocked_keys_file(config: &Config) -> anyhow::Result<ra::keys::BlockedKeysFile> {
    match &config.acme.blocked_keys_file {
        Some(path) => {
            let file = ra::keys::BlockedKeysFile::load(path)
                .with_context(|| format!("acme.blocked-keys-file {}", path.display()))?;
            tracing::info!(path = %path.display(), keys = file.len(), "blocked keys file loaded");
            Ok(file)
        }
        None => Ok(ra::keys::BlockedKeysFile::default()),
    }
}

fn build_limits(config: &Config, clock: &SharedClock) -> anyhow::Result<RateLimits> {
    let settings = config.rate_limiting_settings();
    let overrides = crate::reload::load_overrides(&settings)?;
    let store: Arc<dyn Store> = match &settings.redis {
        Some(redis) => {
            Arc::new(RedisStore::new(redis).context("configuring the Redis rate-limit store")?)
        }
        None => {
            let memory = Arc::new(MemoryStore::default());
            memory.spawn_sweeper(Arc::clone(clock), std::time::Duration::from_secs(30));
            memory
        }
    };
    let limiter = Limiter::new(&settings, &overrides, store).context("building the rate limits")?;
    Ok(RateLimits::new(Arc::new(limiter), settings))
}

fn unpause_settings(
    config: &Config,
    data_dir: &std::path::Path,
    base_url: &str,
) -> anyhow::Result<acme_api::unpause::UnpauseSettings> {
    let z = &config.zombie_pausing;
    let key_path = z
        .unpause_key_file
        .clone()
        .unwrap_or_else(|| data_dir.join("unpause.key"));
    let key = acme_api::unpause::token::load_or_create_key(&key_path)
        .with_context(|| format!("loading the unpause key {}", key_path.display()))?;
    let base = z.unpause_base_url.trim().trim_end_matches('/');
    Ok(acme_api::unpause::UnpauseSettings {
        key,
        version: z.unpause_key_version,
        link_lifetime: z.unpause_link_lifetime.time(),
        base_url: if base.is_empty() {
            base_url.to_owned()
        } else {
            base.to_owned()
        },
    })
}

/// The nonce service, refusing `test-mode.reject-nonces-percent` of valid nonces in test mode
/// (and never otherwise).
async fn nonce_service(config: &Config) -> NonceService {
    let service = shared_or_local_nonces(config).await;
    let percent = config.test_mode.reject_nonces_percent;
    if config.test_mode.enabled && percent > 0 {
        service.with_rejection(NonceRejection::random(percent))
    } else {
        service
    }
}

/// Nonces: local to this instance without Redis. With Redis, nonces are shared (any instance
/// accepts one, once, through Redis) while Redis answers, and local to their issuer while it
/// does not (see `acme_api::nonce`).
async fn shared_or_local_nonces(config: &Config) -> NonceService {
    let lifetime = config.acme.nonce_lifetime.time();
    if config.redis.shards.is_empty() {
        return NonceService::new(lifetime);
    }
    let redis = ratelimits::config::RedisConfig {
        shards: config.redis.shards.clone(),
        key_prefix: format!("{}nonce:", config.redis.key_prefix),
        timeout: config.redis.timeout,
        ..ratelimits::config::RedisConfig::default()
    };
    match RedisStore::new(&redis) {
        Ok(store) => {
            NonceService::with_ledger(lifetime, Arc::new(RedisNonceLedger::new(store))).await
        }
        Err(e) => {
            tracing::warn!(error = %e, "nonces stay local to this instance: Redis is not usable");
            NonceService::new(lifetime)
        }
    }
}
