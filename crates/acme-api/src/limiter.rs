//! The limiter as the API holds it: the GCRA limiter, the live limit configuration (swapped on
//! SIGHUP) and the proxies whose `X-Forwarded-For` is believed. A leaf, so that the state can
//! hold it while the limiter chain (`limits`), which reads the state, stays above both.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::RwLock;

use axum::http::HeaderMap;
use ipnet::IpNet;
use ratelimits::config::RateLimitingConfig;
use ratelimits::limiter::Limiter;
use ratelimits::overrides::Overrides;

/// The limiter, the database-backed limit parameters, and who may set `X-Forwarded-For`.
pub struct RateLimits {
    limiter: Arc<Limiter>,
    config: RwLock<Arc<RateLimitingConfig>>,
    trusted_proxies: Vec<IpNet>,
}

impl std::fmt::Debug for RateLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimits")
            .field("trusted_proxies", &self.trusted_proxies)
            .finish_non_exhaustive()
    }
}

impl RateLimits {
    /// Wraps a limiter built from `config`.
    pub fn new(
        limiter: Arc<Limiter>,
        config: RateLimitingConfig,
        trusted_proxies: Vec<IpNet>,
    ) -> Self {
        Self {
            limiter,
            config: RwLock::new(Arc::new(config)),
            trusted_proxies: crate::client_ip::canonical_nets(trusted_proxies),
        }
    }

    /// Swaps limits and overrides (SIGHUP); on error the old ones stay in force. Buckets of ids
    /// whose override was raised are refreshed at once.
    pub async fn reload(
        &self,
        config: RateLimitingConfig,
        overrides: &Overrides,
    ) -> Result<usize, ratelimits::error::Error> {
        let refreshed = self.limiter.reload_and_refresh(&config, overrides).await?;
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(config);
        Ok(refreshed)
    }

    /// The limiter, for the admin API and the workers' hook.
    pub fn limiter(&self) -> &Arc<Limiter> {
        &self.limiter
    }

    pub(crate) fn config(&self) -> Arc<RateLimitingConfig> {
        Arc::clone(&self.config.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// The client address: the peer, or the nearest untrusted hop of `X-Forwarded-For` when the
    /// peer is a trusted proxy (see [`crate::client_ip`]).
    pub(crate) fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        crate::client_ip::client_ip(peer, headers, &self.trusted_proxies)
    }
}
