//! The hand-off between the policy layer and the job runner. `workers` implements
//! [`JobRunner`]; the policy layer and, through it, the HTTP front end only see this trait, so
//! neither depends on the runner (the runner depends on this crate for its hooks).

use std::time::Duration;

use acme_core::identifier::Identifier;
use acme_core::ids::AccountId;
use acme_core::ids::AuthzId;
use issuance::CheckedCsr;
use storage::model::Challenge;
use storage::model::Job;
use storage::model::Order;
use tokio::sync::OwnedSemaphorePermit;
use tokio::task::JoinHandle;

/// What the request that created a job already holds and checked, handed to
/// [`JobRunner::run_claimed`] so the job does not read and check it again. A job from the queue
/// (after a crash, or without a free place) reads everything from the database instead.
#[derive(Debug)]
pub enum Prepared {
    /// The challenge as `start_challenge` left it (`processing`), and what the validation needs
    /// of its authorization and account.
    Validate(ValidationTarget),
    /// The order as `begin_finalize` left it (`processing`), of an account that was valid when the
    /// request was authenticated, and its CSR, checked against the order. The account is checked
    /// again in the transaction that stores the certificate.
    Finalize { order: Order, csr: CheckedCsr },
}

/// What one validation needs: the challenge, its authorization's identifier and the account
/// whose key authorization the target must serve.
#[derive(Debug, Clone)]
pub struct ValidationTarget {
    pub challenge: Challenge,
    pub authz_id: AuthzId,
    /// When the authorization expires: a retry is scheduled only before it.
    pub authz_expires: time::OffsetDateTime,
    pub identifier: Identifier,
    pub account_id: AccountId,
    /// RFC 7638 thumbprint of the account key (RFC 8555 §8.1 key authorization).
    pub thumbprint: String,
}

/// A reserved place for one job to run now; see [`JobRunner::try_slot`]. Dropping it frees the
/// place.
#[derive(Debug)]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
}

impl Slot {
    /// A place held by `permit` of the runner's semaphore.
    pub fn new(permit: OwnedSemaphorePermit) -> Self {
        Self { _permit: permit }
    }
}

/// The job runner as the policy layer uses it.
pub trait JobRunner: Send + Sync + 'static {
    /// Reserves a place to run a job at once, if one is free now. The caller then creates the
    /// job already claimed and hands it to [`JobRunner::run_claimed`]: no queue round trip and
    /// no wait for a worker. `None` when every place is taken; the job then goes through the
    /// queue.
    fn try_slot(&self) -> Option<Slot>;

    /// The lease a job created for [`JobRunner::run_claimed`] is claimed under.
    fn lease(&self) -> time::Duration;

    /// Runs a job its caller created already claimed, under the same lease, backstop and
    /// recording as a job from the queue. The handle finishes when the attempt was recorded;
    /// dropping it does not stop the job.
    fn run_claimed(&self, slot: Slot, job: Job, prepared: Option<Prepared>) -> JoinHandle<()>;

    /// Tells one idle worker that a job was just enqueued.
    fn wake(&self);
}

/// Runs the claimed job and waits up to `wait` for it to be recorded: true when it was.
///
/// RFC 8555 lets the response to a challenge or a finalization carry any status; clients poll
/// only while it says `pending` or `processing`. A request that waits a bounded moment for work
/// that usually takes milliseconds can answer with the outcome and spare every client its polls.
/// Past the wait the job finishes on its own; a client that disconnects does not stop it.
pub(crate) async fn run_and_wait(
    runner: &dyn JobRunner,
    slot: Slot,
    job: Job,
    prepared: Option<Prepared>,
    wait: Duration,
) -> bool {
    let run = runner.run_claimed(slot, job, prepared);
    matches!(tokio::time::timeout(wait, run).await, Ok(Ok(())))
}

/// How long a finalize request waits for its certificate: signing and storing take milliseconds.
pub(crate) const ISSUE_WAIT: Duration = Duration::from_secs(2);

/// How long a challenge request waits for its validation. A validation of a reachable target on
/// a company network takes tens of milliseconds; one that takes longer (a slow or silent target,
/// up to `validation.timeout`) is answered `processing`, so no request is held for long.
pub(crate) const VALIDATION_WAIT: Duration = Duration::from_secs(1);
