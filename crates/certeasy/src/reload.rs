//! One reload for SIGHUP and `certeasy admin reload`: the rate limits and overrides from the
//! configuration file, and the operator's listener certificate files. Each part that fails keeps
//! what is in force, and the error says which part failed.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
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
        }
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
        match (limits, certificate) {
            (Ok(()), Ok(())) => Ok(()),
            (Err(e), Ok(())) | (Ok(()), Err(e)) => Err(e),
            (Err(limits), Err(certificate)) => Err(anyhow::anyhow!("{limits:#}\n{certificate:#}")),
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
