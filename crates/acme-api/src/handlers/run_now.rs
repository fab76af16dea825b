//! Jobs that a request creates and runs at once (`workers::Workers::try_slot`), and how long the
//! request waits for them before it answers.
//!
//! RFC 8555 lets the response to a challenge or a finalization carry any status; clients poll
//! only while it says `pending` or `processing`, after the `Retry-After`. A request that waits a
//! bounded moment for work that usually takes milliseconds can answer with the outcome and spare
//! every client its polls (lego, for one, waits the full `Retry-After` before its first poll).
//! Past the wait it answers `processing` as before and the job finishes on its own; a client that
//! disconnects while waiting does not stop it.

use std::time::Duration;

use storage::model::Job;
use workers::runner::Prepared;
use workers::runner::Slot;

use crate::state::ApiState;

/// How long a finalize request waits for its certificate: signing and storing take milliseconds.
pub(crate) const ISSUE_WAIT: Duration = Duration::from_secs(2);

/// How long a challenge request waits for its validation. A validation of a reachable target on
/// a company network takes tens of milliseconds; one that takes longer (a slow or silent target,
/// up to `validation.timeout`) is answered `processing`, so no request is held for long.
pub(crate) const VALIDATION_WAIT: Duration = Duration::from_secs(1);

/// Runs the claimed job, with what the request already `prepared` for it, and waits up to `wait`
/// for it to be recorded: true when it was.
pub(crate) async fn run_and_wait(
    state: &ApiState,
    slot: Slot,
    job: Job,
    prepared: Option<Prepared>,
    wait: Duration,
) -> bool {
    let run = state.inner.workers.run_claimed(slot, job, prepared);
    matches!(tokio::time::timeout(wait, run).await, Ok(Ok(())))
}
