//! One reload for SIGHUP and `certeasy admin reload`: the rate limits and overrides from the
//! configuration file, and the operator's listener certificate files. Each part that fails keeps
//! what is in force, and the error says which part failed.

use std::path::PathBuf;
use std::sync::Arc;

use acme_api::limits::RateLimits;

use crate::listener_cert::ListenerCert;

/// What a reload reads again.
#[derive(Debug, Clone)]
pub struct Reloader {
    limits: Arc<RateLimits>,
    listener_cert: Arc<ListenerCert>,
    config_path: Option<PathBuf>,
}

impl Reloader {
    pub fn new(
        limits: Arc<RateLimits>,
        listener_cert: Arc<ListenerCert>,
        config_path: Option<PathBuf>,
    ) -> Self {
        Self {
            limits,
            listener_cert,
            config_path,
        }
    }

    /// Reloads every part, even when an earlier one fails, so a broken limits file cannot hold
    /// back a renewed certificate (or the reverse).
    pub async fn reload(&self) -> anyhow::Result<()> {
        let limits = crate::serve::reload_limits(&self.limits, self.config_path.as_deref())
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
