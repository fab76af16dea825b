//! The hand-off between the policy layer and the job runner. `workers` implements
//! [`JobRunner`]; the policy layer and, through it, the HTTP front end only see this trait, so
//! neither depends on the runner (the runner depends on this crate for its hooks).

use std::time::Duration;

use acme_core::identifier::Identifier;
use acme_core::ids::AccountId;
use acme_core::ids::AuthzId;
use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use acme_core::status::AccountStatus;
use issuance::CheckedCsr;
use storage::model::Challenge;
use storage::model::Order;
use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::oneshot;

use crate::in_flight::Held;

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

/// A reserved place for one piece of work to run now; see [`JobRunner::try_slot`]. Dropping it
/// frees the place.
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

/// What the work a request runs at once answers with ([`JobRunner::validate_at_once`],
/// [`JobRunner::finalize_at_once`]): sent once the work has written something durable, never
/// before, so a client is only ever told what the database holds. The error is what the durable
/// path would have returned: a storage failure, or the refusal of what storage found (a
/// challenge that did not start, `crate::error::StateRefusal` from `NotStarted`; an order no
/// longer ready, `StateRefusal::OrderNotReady`).
pub type Reply<T> = oneshot::Receiver<Result<T, crate::Error>>;

/// What a finalization run at once came to.
#[derive(Debug)]
pub enum Finalized {
    /// The order as stored: `valid` when the certificate was issued within the wait,
    /// `processing` when it is still being issued, `invalid` when it failed.
    Order(Box<Order>),
    /// The account was deactivated before the certificate could be stored: nothing was.
    AccountNotValid(AccountStatus),
}

/// Why a finalization the policy layer accepted is refused before anything is signed: what
/// changed since, as the job runner (or the reserving transaction) finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IssuanceRefusal {
    /// The account is no longer valid: a deactivated account gets nothing more (RFC 8555
    /// §7.3.6), not even the certificate of an order it finalized before.
    AccountNotValid(AccountStatus),
    /// An authorization of the order expired or was deactivated meanwhile.
    AuthorizationNotValid,
}

impl IssuanceRefusal {
    /// The problem the order fails with.
    pub fn problem(self) -> Problem {
        match self {
            Self::AccountNotValid(_) => Problem::new(
                ProblemType::Unauthorized,
                "The account was deactivated before the certificate was issued",
            ),
            Self::AuthorizationNotValid => Problem::new(
                ProblemType::Unauthorized,
                "An authorization of this order expired or was deactivated before the certificate was issued",
            ),
        }
    }
}

/// Whether an order of an account in `status` may still be signed. The job runner asks before it
/// signs anything; storage then reports the status it finds under the reserving transaction's
/// lock ([`storage::model::Reserved::AccountNotValid`]), so a deactivation that commits between
/// the two is refused too.
pub fn account_may_be_issued(status: AccountStatus) -> Result<(), IssuanceRefusal> {
    match status {
        AccountStatus::Valid => Ok(()),
        status => Err(IssuanceRefusal::AccountNotValid(status)),
    }
}

/// The job runner as the policy layer uses it.
pub trait JobRunner: Send + Sync + 'static {
    /// Reserves a place to run work at once, if one is free now. `None` when every place is
    /// taken; the work then goes through the queue.
    fn try_slot(&self) -> Option<Slot>;

    /// Validates `target`'s challenge at once, before anything about it is recorded. A success
    /// within `wait` is recorded in one transaction that starts and decides the challenge; a
    /// failure is recorded the durable way (a started challenge and a job that settles it or
    /// schedules its retry), and so is an attempt still running after `wait`, which the answer
    /// then shows `processing` and which goes on under the job's lease. `held` is let go after
    /// the first write. Dropping the reply does not stop the work.
    fn validate_at_once(
        &self,
        slot: Slot,
        target: ValidationTarget,
        wait: Duration,
        held: Held,
    ) -> Reply<Challenge>;

    /// Issues `order`'s certificate at once: once every check has passed, one transaction takes
    /// the order from ready to processing under a job this request holds and reserves the
    /// serial with what will be signed; then the certificate is signed exactly so and stored
    /// against the reservation, settling the job (a crash in between leaves the job to sign the
    /// same serial again). When it cannot be done there and then (CAA must be checked again
    /// over the network, or a check refuses), the order is finalized the durable way
    /// (`processing` and a job) and the answer waits for that job up to `wait`. `csr_der` is the
    /// CSR as the client sent it, `csr` the same, checked against the order. `order`'s
    /// `finalize_client_ip` is the finalize request's address, to be stored with the order when
    /// it goes to processing (the issuance's audit record names it). `held` as for
    /// [`JobRunner::validate_at_once`].
    fn finalize_at_once(
        &self,
        slot: Slot,
        order: Order,
        csr_der: Vec<u8>,
        csr: CheckedCsr,
        wait: Duration,
        held: Held,
    ) -> Reply<Finalized>;

    /// Tells one idle worker that a job was just enqueued.
    fn wake(&self);
}

/// How long a finalize request waits for its certificate: signing and storing take milliseconds.
pub(crate) const ISSUE_WAIT: Duration = Duration::from_secs(2);

/// How long a challenge request waits for its validation. A validation of a reachable target on
/// a company network takes tens of milliseconds; one that takes longer (a slow or silent target,
/// up to `validation.timeout`) is answered `processing`, so no request is held for long.
pub(crate) const VALIDATION_WAIT: Duration = Duration::from_secs(1);
