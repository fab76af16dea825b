//! What every job of this instance runs with, and how an attempt can end: the leaf module the job
//! loop, validations and finalizations share, so that none of them imports another's internals.

use std::sync::Arc;

use acme_core::clock::SharedClock;
use issuance::CaHandle;
use issuance::IssuerName;
use ra::verdicts::ValidationHook;
use storage::Storage;
use storage::model::Job;
use storage::model::JobKind;
use tokio::sync::Notify;
use tokio::sync::Semaphore;
use validation::Validator;

use crate::settings::WorkerSettings;

/// Why a job could not be run this time; the job is retried later.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The database failed.
    #[error("storage: {0}")]
    Storage(#[from] storage::error::Error),
    /// Something the job needs is gone (never expected; logged and the job dropped).
    #[error("{0}")]
    Missing(String),
    /// The attempt outran the runner's backstop (`WorkerSettings::attempt_timeout`).
    #[error("the attempt did not finish within {0:?}")]
    TimedOut(std::time::Duration),
    /// The active issuer is not in this instance's set (`ra::issuers::ActiveIssuer::missing_from`):
    /// nothing is signed here, and the order stays `processing` for a retry, here after a
    /// reload that adds the issuer or on an instance that has it.
    #[error(
        "the active issuer {0} is not loaded on this instance (add it to ca.issuers and reload)"
    )]
    IssuerNotLoaded(IssuerName),
}

/// What is left to do with a job once its attempt ran to the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JobAfter {
    /// The attempt's last transaction also ended the claim: the outcome and the deletion of the
    /// job committed together (or, for a validation retried later, the failed attempt and the
    /// job's new due time), or another worker holds the job now.
    Settled,
    /// Nothing was recorded because the object was already decided (a repeat after a crash
    /// between commit and job deletion): the job is deleted.
    Delete,
}

/// Everything a job of this instance runs with, shared by the job loops and the work requests
/// start at once.
pub(crate) struct WorkerContext {
    pub(crate) storage: Storage,
    pub(crate) validator: Validator,
    /// The issuer set in force; a job takes one snapshot and keeps it to its end.
    pub(crate) ca: CaHandle,
    pub(crate) clock: SharedClock,
    pub(crate) settings: WorkerSettings,
    /// `settings.attempt_timeout`, or the backstop derived from the validator's worst case.
    pub(crate) attempt_timeout: std::time::Duration,
    pub(crate) hook: Arc<dyn ValidationHook>,
    pub(crate) wake: Notify,
    /// One permit per job that may run at once, in this instance: taken by a job loop before it
    /// claims from the queue, or by a request that runs the job it created
    /// ([`crate::Workers::try_slot`]). So `settings.concurrency` bounds both together.
    pub(crate) slots: Arc<Semaphore>,
}

/// The job's kind, as logs and metrics label it.
pub(crate) fn job_kind_name(job: &Job) -> &'static str {
    match job.kind {
        JobKind::Validate(_) => "validate",
        JobKind::Finalize(_) => "finalize",
    }
}
