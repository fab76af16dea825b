//! Everything a handler needs, shared by all requests.

use std::sync::Arc;

use acme_core::clock::SharedClock;
use axum::body::Bytes;
use axum::http::HeaderValue;
use ipnet::IpNet;
use issuance::CaHandle;
use ra::Ra;

use crate::account_keys::AccountKeys;
use crate::nonce::NonceService;
use crate::settings::ApiSettings;
use crate::urls::Urls;

/// Shared state of the ACME endpoint; cheap to clone.
#[derive(Clone)]
pub struct ApiState {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) settings: ApiSettings,
    pub(crate) urls: Urls,
    /// Every decision and every read: the handlers parse and authenticate, then ask. Storage is
    /// reached only through it, so only its outcomes are ever rendered.
    pub(crate) ra: Ra,
    /// The issuer set in force (swapped by a reload of `ca.issuers`): a certificate download
    /// offers the alternate chains of whichever issuer signed the leaf.
    pub(crate) ca: CaHandle,
    pub(crate) clock: SharedClock,
    pub(crate) nonces: NonceService,
    /// Account keys parsed for verification, checked against the stored key on every use.
    pub(crate) account_keys: AccountKeys,
    /// `Link: <directory>;rel="index"`, which every response carries, built once (`None` only if
    /// the base URL cannot be a header value).
    pub(crate) index_link: Option<HeaderValue>,
    /// `settings.trusted_proxies`, normalised once.
    pub(crate) trusted_proxies: Vec<IpNet>,
    /// The directory object, serialised once (`directory_object.rs`).
    pub(crate) directory: Bytes,
}

impl ApiState {
    /// Assembles the state; `nonces` decides whether nonces are shared between instances.
    pub fn new(
        settings: ApiSettings,
        ra: Ra,
        ca: impl Into<CaHandle>,
        clock: SharedClock,
        nonces: NonceService,
    ) -> Self {
        let urls = Urls::new(&settings.base_url)
            .with_issuer_domain_names(&settings.dns_persist_issuer_domain_names);
        let index_link =
            HeaderValue::from_str(&format!("<{}>;rel=\"index\"", urls.directory())).ok();
        let directory = crate::directory_object::render(&settings, ra.settings(), &urls);
        Self {
            inner: Arc::new(Inner {
                urls,
                index_link,
                trusted_proxies: crate::client_ip::canonical_nets(settings.trusted_proxies.clone()),
                directory,
                settings,
                ra,
                ca: ca.into(),
                clock,
                nonces,
                account_keys: AccountKeys::default(),
            }),
        }
    }

    /// The URLs handed to clients.
    pub(crate) fn urls(&self) -> &Urls {
        &self.inner.urls
    }

    /// The policy layer.
    pub(crate) fn ra(&self) -> &Ra {
        &self.inner.ra
    }
}
