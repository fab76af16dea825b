//! The issuer set in force, swapped whole by a reload of `ca.issuers` while requests, jobs and
//! the CRL publisher go on reading it.
//!
//! Each reader takes the set once ([`CaHandle::current`]) and works with that snapshot to the
//! end of what it does, so that a finalization reserves and signs under one set even if a
//! reload lands in between. `arc-swap` rather than a lock: every request reads, a reload writes
//! a few times a year, and a reader never waits for one.

use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::alternate_chains;
use crate::ca::Ca;

/// A shared, swappable [`Ca`]; cheap to clone (every clone sees the same swaps).
#[derive(Clone)]
pub struct CaHandle {
    set: Arc<ArcSwap<Ca>>,
}

impl CaHandle {
    /// A handle whose set is `ca` until the first [`CaHandle::replace`].
    pub fn new(ca: Arc<Ca>) -> Self {
        Self {
            set: Arc::new(ArcSwap::new(ca)),
        }
    }

    /// The set in force now. Kept by the caller for as long as one piece of work needs one
    /// consistent set; an old set lives on until its last reader drops it.
    pub fn current(&self) -> Arc<Ca> {
        self.set.load_full()
    }

    /// Puts `ca` in force for every holder of this handle at once; returns the set it replaces.
    pub fn replace(&self, ca: Ca) -> Arc<Ca> {
        self.set.swap(Arc::new(ca))
    }

    /// [`Ca::alternate_chains_for`] under the set in force, owned: the set may be swapped as
    /// soon as this returns.
    pub fn alternate_chains_for(&self, leaf_der: &[u8]) -> Vec<Arc<str>> {
        let ca = self.set.load();
        let sets = ca.issuers().flat_map(Ca::alternate_chain_sets);
        alternate_chains::for_leaf(sets, leaf_der).to_vec()
    }
}

impl From<Arc<Ca>> for CaHandle {
    fn from(ca: Arc<Ca>) -> Self {
        Self::new(ca)
    }
}

impl From<Ca> for CaHandle {
    fn from(ca: Ca) -> Self {
        Self::new(Arc::new(ca))
    }
}

impl std::fmt::Debug for CaHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ca = self.set.load();
        f.debug_struct("CaHandle")
            .field("issuers", &ca.configured_names())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::settings::CaSettings;

    #[test]
    fn a_replaced_set_reaches_every_clone_and_old_snapshots_stay_usable() {
        let dir = tempfile::tempdir().unwrap();
        let now = time::OffsetDateTime::now_utc();
        let ca = Ca::load_or_create(&CaSettings::new(dir.path().join("ca")), now).unwrap();
        let handle = CaHandle::from(ca);
        let other = handle.clone();
        let before = handle.current();
        let reloaded = before.with_reloaded_issuers(&[], now).unwrap();
        let replaced = other.replace(reloaded);
        assert!(Arc::ptr_eq(&replaced, &before));
        assert!(!Arc::ptr_eq(&handle.current(), &before));
        // The implicit issuer is shared, not loaded again: same chain, same root.
        assert_eq!(handle.current().chain_pem(), before.chain_pem());
        assert_eq!(handle.current().root_pem(), before.root_pem());
        assert_eq!(before.name().as_str(), "default");
    }
}
