//! One reload for SIGHUP and `certeasy admin reload`: the rate limits and overrides from the
//! configuration file, and the operator's listener certificate files. Each part that fails keeps
//! what is in force, and the error says which part failed.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use ra::keys::BlockedKeysFile;
use ra::limits::RateLimits;
use ratelimits::overrides::Overrides;

use crate::config::Config;
use crate::config::TestModeConfig;

use crate::listener_cert::ListenerCert;

/// What a reload reads again.
#[derive(Debug, Clone)]
pub struct Reloader {
    limits: Arc<RateLimits>,
    listener_cert: Arc<ListenerCert>,
    config_path: Option<PathBuf>,
    /// In test mode, the `test-mode` settings in force (flags included): a reload keeps the
    /// test rate limits rather than taking the file's `rate-limiting:` block.
    test_mode: Option<TestModeConfig>,
    /// `acme.blocked-keys-file`, read again from the path it was loaded from.
    blocked_keys: BlockedKeysFile,
}

impl Reloader {
    pub fn new(
        limits: Arc<RateLimits>,
        listener_cert: Arc<ListenerCert>,
        config_path: Option<PathBuf>,
        test_mode: Option<TestModeConfig>,
    ) -> Self {
        Self {
            limits,
            listener_cert,
            config_path,
            test_mode,
            blocked_keys: BlockedKeysFile::default(),
        }
    }

    /// Reloads `file` too (it shares its list with the policy layer's copy).
    #[must_use]
    pub fn with_blocked_keys(mut self, file: BlockedKeysFile) -> Self {
        self.blocked_keys = file;
        self
    }

    /// Reloads every part, even when an earlier one fails, so a broken limits file cannot hold
    /// back a renewed certificate (or the reverse).
    pub async fn reload(&self) -> anyhow::Result<()> {
        let limits = reload_limits(
            &self.limits,
            self.config_path.as_deref(),
            self.test_mode.as_ref(),
        )
        .await
        .map_err(|e| e.context("rate limits: the previous limits stay in force"));
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
        let failures: Vec<String> = [limits, certificate, blocked_keys]
            .into_iter()
            .filter_map(|part| part.err().map(|e| format!("{e:#}")))
            .collect();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(anyhow::anyhow!(failures.join("\n")))
        }
    }
}

/// Reads the configuration file and the overrides file again and swaps the limits in.
async fn reload_limits(
    limits: &RateLimits,
    config_path: Option<&std::path::Path>,
    test_mode: Option<&TestModeConfig>,
) -> anyhow::Result<()> {
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
    Ok(())
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
