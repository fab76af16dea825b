//! One reload for SIGHUP and `certeasy admin reload`: the rate limits and overrides from the
//! configuration file, the operator's listener certificate files, and the issuers of
//! `ca.issuers` (`crate::issuer_reload`). Each part that fails keeps what is in force, and the
//! error says which part failed.
//!
//! Every reload is recorded in the audit log (`config_reloaded`, a refused one too, with why),
//! and one that changes the rate limits or overrides in force records them before and after
//! (`limits_changed`). The limits live in memory, not in the database, so the records follow
//! the swap in a transaction of their own; a record that cannot be written fails the reload's
//! answer, so the operator learns that the change went unrecorded.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;

use acme_core::clock::SharedClock;
use anyhow::Context;
use ra::audit::AuditKind;
use ra::audit::Requester;
use ra::keys::BlockedKeysFile;
use ra::limits::RateLimits;
use ratelimits::overrides::OverrideId;
use ratelimits::overrides::Overrides;
use storage::Storage;

use crate::config::Config;
use crate::config::TestModeConfig;

use crate::issuer_reload::IssuerChange;
use crate::issuer_reload::IssuerReload;
use crate::listener_cert::ListenerCert;

/// What a reload reads again.
#[derive(Clone)]
pub struct Reloader {
    limits: Arc<RateLimits>,
    listener_cert: Arc<ListenerCert>,
    config_path: Option<PathBuf>,
    /// In test mode, the `test-mode` settings in force (flags included): a reload keeps the
    /// test rate limits rather than taking the file's `rate-limiting:` block.
    test_mode: Option<TestModeConfig>,
    /// `acme.blocked-keys-file`, read again from the path it was loaded from.
    blocked_keys: BlockedKeysFile,
    /// The overrides in force (as last loaded), for the record of what a reload changed; `None`
    /// when they could not be read at start.
    overrides: Arc<Mutex<Option<Overrides>>>,
    /// Where reloads are recorded; none in tests that build a reloader without a database.
    audit: Option<(Storage, SharedClock)>,
    /// `ca.issuers`, read again from the configuration file; none without a file to read.
    issuers: Option<IssuerReload>,
}

// By hand: the clock of `audit` has no Debug.
impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("config_path", &self.config_path)
            .field("audit", &self.audit.is_some())
            .finish_non_exhaustive()
    }
}

impl Reloader {
    pub fn new(
        limits: Arc<RateLimits>,
        listener_cert: Arc<ListenerCert>,
        config_path: Option<PathBuf>,
        test_mode: Option<TestModeConfig>,
    ) -> Self {
        let overrides = load_overrides(&limits.config()).ok();
        Self {
            limits,
            listener_cert,
            config_path,
            test_mode,
            blocked_keys: BlockedKeysFile::default(),
            overrides: Arc::new(Mutex::new(overrides)),
            audit: None,
            issuers: None,
        }
    }

    /// The listener certificate in force (its expiry is exported on `/metrics`).
    pub fn listener_cert(&self) -> &ListenerCert {
        &self.listener_cert
    }

    /// Reloads `ca.issuers` too.
    #[must_use]
    pub fn with_issuers(mut self, issuers: IssuerReload) -> Self {
        self.issuers = Some(issuers);
        self
    }

    /// Records every reload in `storage`'s audit log, at `clock`'s time.
    #[must_use]
    pub fn with_audit(mut self, storage: Storage, clock: SharedClock) -> Self {
        self.audit = Some((storage, clock));
        self
    }

    /// Reloads `file` too (it shares its list with the policy layer's copy).
    #[must_use]
    pub fn with_blocked_keys(mut self, file: BlockedKeysFile) -> Self {
        self.blocked_keys = file;
        self
    }

    /// [`Reloader::reload_by`] for the server itself (SIGHUP).
    pub async fn reload(&self) -> anyhow::Result<()> {
        self.reload_by(&Requester::system()).await
    }

    /// Reloads every part, even when an earlier one fails, so a broken limits file cannot hold
    /// back a renewed certificate (or the reverse), and records the reload as asked by `who`.
    pub async fn reload_by(&self, who: &Requester) -> anyhow::Result<()> {
        let limits_before = self.limits.config();
        let keys_before = self.blocked_keys.len();
        let limits = reload_limits(
            &self.limits,
            self.config_path.as_deref(),
            self.test_mode.as_ref(),
        )
        .await
        .map_err(|e| e.context("rate limits: the previous limits stay in force"));
        let overrides_before = self.swap_overrides(&limits);
        let limits = limits.map(|_| ());
        let certificate = self.listener_cert.reload().map_err(|e| {
            tracing::error!(error = %format!("{e:#}"), "listener certificate reload refused; the previous certificate stays in use");
            e.context("listener certificate: the previous certificate stays in use")
        });
        let blocked_keys = match self.blocked_keys.reload() {
            Ok(count) => {
                tracing::info!(keys = count, "blocked keys file reloaded");
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "blocked keys file reload refused; the previous list stays in force");
                Err(anyhow::anyhow!(
                    "blocked keys: the previous list stays in force: {e}"
                ))
            }
        };
        let issuers = match (&self.issuers, self.config_path.as_deref()) {
            (Some(part), Some(path)) => Some(
                part.reload_from(path, self.test_mode.as_ref())
                    .await
                    .map_err(|e| {
                        tracing::error!(error = %format!("{e:#}"), "ca.issuers reload refused; the issuers in force stay");
                        e.context("ca.issuers: the issuers in force stay")
                    }),
            ),
            _ => None,
        };
        let issuer_change = issuers
            .as_ref()
            .and_then(|part| part.as_ref().ok())
            .cloned();
        let mut parts = serde_json::json!({
            "rate_limits": outcome(&limits),
            "listener_certificate": outcome(&certificate),
            "blocked_keys_file": outcome(&blocked_keys),
        });
        if let Some(part) = &issuers {
            parts["issuers"] = outcome(part).into();
        }
        let issuers = issuers.map_or(Ok(()), |part| part.map(|_| ()));
        let mut failures: Vec<String> = [limits, certificate, blocked_keys, issuers]
            .into_iter()
            .filter_map(|part| part.err().map(|e| format!("{e:#}")))
            .collect();
        let change = Change {
            limits_before: &limits_before,
            overrides_before: overrides_before.as_ref(),
            keys_before,
            issuers: issuer_change.as_ref(),
        };
        if let Err(e) = self.record(who, &change, parts, &failures).await {
            tracing::error!(error = %format!("{e:#}"), "the reload was not recorded in the audit log");
            failures.push(format!("{e:#}"));
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(anyhow::anyhow!(failures.join("\n")))
        }
    }

    /// Keeps the overrides a successful reload put in force; returns those in force before.
    fn swap_overrides(&self, reloaded: &anyhow::Result<Overrides>) -> Option<Overrides> {
        let mut current = self.overrides.lock().unwrap_or_else(|e| e.into_inner());
        match reloaded {
            Ok(new) => current.replace(new.clone()),
            Err(_) => current.clone(),
        }
    }

    /// The records of a reload: `limits_changed` when the limits or overrides in force differ
    /// from before, then `config_reloaded` with each part's outcome.
    async fn record(
        &self,
        who: &Requester,
        change: &Change<'_>,
        parts: serde_json::Value,
        failures: &[String],
    ) -> anyhow::Result<()> {
        let Some((storage, clock)) = &self.audit else {
            return Ok(());
        };
        let now = clock.now();
        let limits_after = self.limits.config();
        let overrides_after = self
            .overrides
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let overrides_changed = change.overrides_before != overrides_after.as_ref();
        if *change.limits_before != *limits_after || overrides_changed {
            let mut event = who.event(
                AuditKind::LimitsChanged,
                format!(
                    "rate limits{} changed by a configuration reload asked by {}",
                    if overrides_changed {
                        " and overrides"
                    } else {
                        ""
                    },
                    who.who()
                ),
            );
            event.detail = serde_json::json!({
                "before": { "limits": change.limits_before, "overrides": change.overrides_before.map(overrides_json) },
                "after": { "limits": limits_after, "overrides": overrides_after.as_ref().map(overrides_json) },
            });
            storage
                .append_audit(&event, now)
                .await
                .context("recording the changed rate limits")?;
        }
        let reason = if failures.is_empty() {
            format!("configuration reloaded, asked by {}", who.who())
        } else {
            format!(
                "configuration reload asked by {} refused in part: what failed stays as it was",
                who.who()
            )
        };
        let mut event = who.event(AuditKind::ConfigReloaded, reason);
        event.detail = serde_json::json!({
            "parts": parts,
            "failures": failures,
            "limits_changed": *change.limits_before != *limits_after,
            "overrides_changed": overrides_changed,
            "blocked_keys_file": { "before": change.keys_before, "after": self.blocked_keys.len() },
            "issuers": change.issuers.map(IssuerChange::json),
        });
        storage
            .append_audit(&event, now)
            .await
            .context("recording the reload")?;
        Ok(())
    }
}

/// What was in force before a reload.
struct Change<'a> {
    limits_before: &'a ratelimits::config::RateLimitingConfig,
    overrides_before: Option<&'a Overrides>,
    keys_before: usize,
    /// What the issuer part changed; `None` when it was refused or not reloaded.
    issuers: Option<&'a IssuerChange>,
}

fn outcome<T>(part: &anyhow::Result<T>) -> &'static str {
    if part.is_ok() { "reloaded" } else { "refused" }
}

/// The overrides as the records show them: one object per entry of the file.
fn overrides_json(overrides: &Overrides) -> serde_json::Value {
    overrides
        .entries()
        .iter()
        .map(|e| {
            serde_json::json!({
                "limit": e.limit.to_string(),
                "burst": e.burst,
                "count": e.count,
                "period_secs": e.period.map(|p| p.as_secs()),
                "ids": e.ids.iter().map(|id| match id {
                    OverrideId::Net(net) => net.to_string(),
                    OverrideId::Account(account) => format!("account {account}"),
                }).collect::<Vec<_>>(),
            })
        })
        .collect()
}

/// Reads the configuration file and the overrides file again and swaps the limits in; returns
/// the overrides now in force.
async fn reload_limits(
    limits: &RateLimits,
    config_path: Option<&std::path::Path>,
    test_mode: Option<&TestModeConfig>,
) -> anyhow::Result<Overrides> {
    let mut config = match config_path {
        Some(path) => crate::config::load(path).map_err(|e| anyhow::anyhow!("{e}"))?,
        None => Config::default(),
    };
    if let Some(test_mode) = test_mode {
        config.test_mode = test_mode.clone();
        let data_dir = config.data_dir.clone();
        config.apply_test_mode(data_dir);
    }
    let settings = config.rate_limiting_settings();
    let overrides = load_overrides(&settings)?;
    let refreshed = limits
        .reload(settings, &overrides)
        .await
        .context("applying the new rate limits")?;
    tracing::info!(
        refreshed,
        "rate limits reloaded; buckets of raised overrides refreshed"
    );
    Ok(overrides)
}

/// The per-ID overrides file named by `rate-limit-overrides`, or none.
pub(crate) fn load_overrides(
    settings: &ratelimits::config::RateLimitingConfig,
) -> anyhow::Result<Overrides> {
    match &settings.overrides_file {
        Some(path) => Overrides::load(path)
            .with_context(|| format!("loading rate-limit overrides {}", path.display())),
        None => Ok(Overrides::empty()),
    }
}
