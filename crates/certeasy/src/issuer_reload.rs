//! The `ca.issuers` part of a reload (SIGHUP, `certeasy admin reload`): a new issuer is added, a
//! renewed file taken, an expired one dropped, on each instance without a restart.
//!
//! The new set is built beside the one in force: the implicit issuer ("default", the generated
//! intermediate or `ca.existing`) is shared as it is, never loaded again (its key may sit on a
//! token behind a PIN; `ca.existing` itself is read at start only), and every entry of
//! `ca.issuers` is loaded afresh from its files. Only when all of them load, and no issuer that
//! is still needed would go, is the new set swapped in ([`issuance::CaHandle`]); otherwise the
//! set in force stays whole and the error names the entry and its file.
//!
//! Removing an issuer is refused while it is the active one, and while any certificate it
//! signed is unexpired: its CRLs must go on being published (only a loaded issuer can sign
//! them), so it stays until its last certificate has expired. An expired (retired) issuer may
//! go at any time.

use std::path::Path;
use std::sync::Arc;

use acme_core::clock::SharedClock;
use anyhow::Context;
use issuance::CaHandle;
use issuance::IssuerName;
use ra::issuers::ActiveIssuer;
use storage::Storage;

use crate::config::Config;
use crate::config::TestModeConfig;

/// What a reload of `ca.issuers` needs: the set in force and where the active issuer is read.
#[derive(Clone)]
pub struct IssuerReload {
    ca: CaHandle,
    active: Arc<ActiveIssuer>,
    storage: Storage,
    clock: SharedClock,
    /// One reload of the issuers at a time: two at once would each build on the set the other
    /// is about to replace.
    running: Arc<tokio::sync::Mutex<()>>,
    /// The issuers certificate profiles name (`issuance.profiles.<name>.issuer`), by profile:
    /// a reload that would leave one of them unloaded is refused, since that profile's orders
    /// could no longer be signed.
    profile_issuers: Vec<(String, IssuerName)>,
}

/// What a reload changed in the issuer set, for the log and the `config_reloaded` record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IssuerChange {
    /// Issuers configured now and not before.
    pub added: Vec<IssuerName>,
    /// Issuers configured before and not now (each retired, or without unexpired certificates).
    pub removed: Vec<IssuerName>,
    /// `ca.active-issuer` before and after, when it changed.
    pub configured_active: Option<(IssuerName, IssuerName)>,
}

impl IssuerChange {
    /// The change as the audit record's detail shows it.
    pub fn json(&self) -> serde_json::Value {
        let names =
            |list: &[IssuerName]| -> Vec<String> { list.iter().map(ToString::to_string).collect() };
        serde_json::json!({
            "added": names(&self.added),
            "removed": names(&self.removed),
            "configured_active": self.configured_active.as_ref().map(|(before, after)| {
                serde_json::json!({ "before": before.as_str(), "after": after.as_str() })
            }),
        })
    }
}

impl IssuerReload {
    pub fn new(
        ca: CaHandle,
        active: Arc<ActiveIssuer>,
        storage: Storage,
        clock: SharedClock,
    ) -> Self {
        Self {
            ca,
            active,
            storage,
            clock,
            running: Arc::default(),
            profile_issuers: Vec::new(),
        }
    }

    /// The issuers named by `profiles`, each of which every reload must keep loaded.
    pub fn with_profile_issuers(mut self, profiles: &issuance::Profiles) -> Self {
        self.profile_issuers = profiles
            .iter()
            .filter_map(|p| p.issuer().map(|i| (p.name().to_owned(), i.clone())))
            .collect();
        self
    }

    /// Reads `ca.issuers` and `ca.active-issuer` from `config_path` again (in test mode with
    /// `test_mode`'s settings, as the rest of the reload) and puts the new set in force. On any
    /// error what is in force stays.
    pub async fn reload_from(
        &self,
        config_path: &Path,
        test_mode: Option<&TestModeConfig>,
    ) -> anyhow::Result<IssuerChange> {
        let mut config = crate::config::load(config_path).map_err(|e| anyhow::anyhow!("{e}"))?;
        if let Some(test_mode) = test_mode {
            config.test_mode = test_mode.clone();
            let data_dir = config.data_dir.clone();
            config.apply_test_mode(data_dir);
        }
        self.reload(&config).await
    }

    /// Puts `config`'s issuers in force (see the module's doc).
    pub async fn reload(&self, config: &Config) -> anyhow::Result<IssuerChange> {
        let _one_at_a_time = self.running.lock().await;
        let settings = crate::config::issuers::settings(&config.ca.issuers)?;
        let configured_active =
            IssuerName::new(&config.ca.active_issuer).map_err(anyhow::Error::msg)?;
        let current = self.ca.current();
        let now = self.clock.now();
        // Keys are read from files or a token: blocking work, off the runtime's threads.
        let building = Arc::clone(&current);
        let reloaded =
            tokio::task::spawn_blocking(move || building.with_reloaded_issuers(&settings, now))
                .await
                .context("loading ca.issuers")??;
        for (profile, name) in &self.profile_issuers {
            if reloaded.issuer(name).is_none() {
                anyhow::bail!(
                    "issuer {name} signs profile {profile:?} (issuance.profiles.{profile}.issuer): it stays in ca.issuers, unexpired, while the profile names it"
                );
            }
        }
        let before = current.configured_names();
        let after = reloaded.configured_names();
        let added: Vec<IssuerName> = after
            .iter()
            .filter(|name| !before.contains(name))
            .cloned()
            .collect();
        let removed: Vec<IssuerName> = before
            .iter()
            .filter(|name| !after.contains(name))
            .cloned()
            .collect();
        if !removed.is_empty() {
            let active = self.active.current().await;
            let usage = self
                .storage
                .issuer_usage()
                .await
                .context("reading what the removed issuers signed")?;
            for name in &removed {
                if name == &active {
                    anyhow::bail!(
                        "issuer {name} is the active issuer: activate another (certeasy admin ca activate) before removing it from ca.issuers"
                    );
                }
                // A retired issuer's certificates have all expired: none outlives its issuer.
                if current.issuer(name).is_none() {
                    continue;
                }
                let last = usage
                    .iter()
                    .find(|u| u.issuer == name.as_str())
                    .and_then(|u| u.last_not_after);
                if let Some(last) = last.filter(|last| *last > now) {
                    anyhow::bail!(
                        "issuer {name} still has unexpired certificates (the last expires at {last}): it stays in ca.issuers, publishing their CRLs, until then"
                    );
                }
            }
        }
        let configured_before = self.active.configured_name();
        let configured_active = (configured_before != configured_active)
            .then_some((configured_before, configured_active));
        self.ca.replace(reloaded);
        if let Some((_, after)) = &configured_active {
            self.active.set_configured(after.clone());
        }
        let change = IssuerChange {
            added,
            removed,
            configured_active,
        };
        tracing::info!(
            added = ?change.added.iter().map(IssuerName::as_str).collect::<Vec<_>>(),
            removed = ?change.removed.iter().map(IssuerName::as_str).collect::<Vec<_>>(),
            "ca.issuers reloaded"
        );
        Ok(change)
    }
}
