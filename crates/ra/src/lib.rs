//! The registration authority: every decision about who may do what. Boulder's split is the
//! model: the HTTP front end (`acme-api`) parses and authenticates, this crate decides, and
//! `storage` stores. New accounts, orders, finalizations, challenges, revocations, pausing and
//! unpausing, the rate-limit charges and refunds, and the database guards all go through [`Ra`];
//! the admin API and the job runner's validation hooks call the same functions as the ACME
//! endpoint, so one rule never has two implementations.
//!
//! Outcomes are domain values: an [`error::Refusal`] says which rule refused and why, and the
//! front end turns it into an ACME problem in one place.

pub mod accounts;
pub mod attempts;
pub mod audit;
pub mod caa;
mod certificate_names;
pub mod challenges;
pub mod eab;
pub mod error;
mod guards;
pub mod in_flight;
pub mod issuers;
pub mod jobs;
pub mod keys;
pub mod limits;
pub mod operator;
pub mod orders;
pub mod overrides;
pub mod pausing;
pub mod pre_authorization;
mod profiles;
pub mod rate_info;
pub mod renewals;
pub mod revocation;
pub mod settings;
pub mod verdicts;

use std::sync::Arc;

use acme_core::clock::SharedClock;
use storage::Storage;
use time::OffsetDateTime;

use crate::in_flight::InFlight;
use crate::jobs::JobRunner;
use crate::limits::RateLimits;
use crate::settings::PolicySettings;

pub use crate::error::Error;
pub use crate::error::Refusal;

/// The policy layer; cheap to clone.
#[derive(Clone)]
pub struct Ra {
    inner: Arc<Inner>,
}

struct Inner {
    settings: PolicySettings,
    storage: Storage,
    clock: SharedClock,
    limits: Arc<RateLimits>,
    jobs: Arc<dyn JobRunner>,
    /// Validations and finalizations this instance runs at once, not yet written.
    in_flight: InFlight,
}

impl std::fmt::Debug for Ra {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ra")
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

impl Ra {
    /// The policy layer over `storage`, deciding with `settings` and `limits`, starting jobs
    /// through `jobs`.
    pub fn new(
        settings: PolicySettings,
        storage: Storage,
        clock: SharedClock,
        limits: Arc<RateLimits>,
        jobs: Arc<dyn JobRunner>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                settings,
                storage,
                clock,
                limits,
                jobs,
                in_flight: InFlight::default(),
            }),
        }
    }

    /// The settings decisions are made with.
    pub fn settings(&self) -> &PolicySettings {
        &self.inner.settings
    }

    /// The live limits (the admin API inspects and resets buckets through them).
    pub fn limits(&self) -> &Arc<RateLimits> {
        &self.inner.limits
    }

    fn now(&self) -> OffsetDateTime {
        self.inner.clock.now()
    }
}
