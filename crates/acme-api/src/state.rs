//! Everything a handler needs, shared by all requests.

use std::sync::Arc;

use acme_core::clock::SharedClock;
use issuance::Ca;
use storage::Storage;
use workers::Workers;

use crate::limiter::RateLimits;
use crate::nonce::NonceService;
use crate::settings::ApiSettings;
use crate::unpause::link::UnpauseHook;
use crate::urls::Urls;

/// Shared state of the ACME endpoint; cheap to clone.
#[derive(Clone)]
pub struct ApiState {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) settings: ApiSettings,
    pub(crate) urls: Urls,
    pub(crate) storage: Storage,
    pub(crate) ca: Arc<Ca>,
    pub(crate) workers: Workers,
    pub(crate) clock: SharedClock,
    pub(crate) nonces: NonceService,
    pub(crate) limits: Arc<RateLimits>,
    pub(crate) unpause_hook: Option<Arc<dyn UnpauseHook>>,
}

impl ApiState {
    /// Assembles the state; `nonces` decides whether nonces are shared between instances.
    // Each argument is a separately built part of the server; a builder would add ceremony only.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        settings: ApiSettings,
        storage: Storage,
        ca: Arc<Ca>,
        workers: Workers,
        clock: SharedClock,
        nonces: NonceService,
        limits: Arc<RateLimits>,
        unpause_hook: Option<Arc<dyn UnpauseHook>>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                urls: Urls::new(&settings.base_url),
                settings,
                storage,
                ca,
                workers,
                clock,
                nonces,
                limits,
                unpause_hook,
            }),
        }
    }

    /// The URLs handed to clients.
    pub(crate) fn urls(&self) -> &Urls {
        &self.inner.urls
    }
}
