//! The job loop: claim, run under a renewed lease and a backstop timeout, record, repeat.

use std::sync::Arc;

use acme_core::clock::SharedClock;
use acme_core::identifier::Identifier;
use acme_core::ids::AccountId;
use acme_core::ids::ChallengeId;
use acme_core::ids::OrderId;
use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use acme_core::status::AccountStatus;
use acme_core::status::ChallengeStatus;
use issuance::Ca;
use issuance::CheckedCsr;
use issuance::Intent;
use ra::in_flight::Held;
use ra::jobs::Finalized;
use ra::jobs::JobRunner;
use ra::jobs::Reply;
use ra::jobs::Slot;
use ra::jobs::ValidationTarget;
use ra::verdicts::ValidationHook;
use storage::Storage;
use storage::model::Challenge;
use storage::model::Job;
use storage::model::JobKind;
use storage::model::NewCertificate;
use storage::model::NewReservation;
use storage::model::Order;
use storage::model::Reservation;
use storage::model::Reserved;
use storage::model::ReservedAtOnce;
use storage::model::ValidationRecorded;
use tokio::sync::Notify;
use tokio::sync::Semaphore;
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;
use validation::Validator;

use crate::settings::WorkerSettings;

/// Why a job could not be run this time; the job is retried later.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The database failed.
    #[error("storage: {0}")]
    Storage(#[from] storage::error::Error),
    /// Something the job needs is gone (never expected; logged and the job dropped).
    #[error("{0}")]
    Missing(String),
    /// The attempt outran the runner's backstop (`WorkerSettings::attempt_timeout`).
    #[error("the attempt did not finish within {0:?}")]
    TimedOut(std::time::Duration),
}

/// What the request that created a job already holds and checked, handed to the job so that it
/// does not read and check it again. A job from the queue (after a crash, or without a free
/// place) reads everything from the database instead.
#[derive(Debug)]
pub enum Prepared {
    /// The order as `begin_finalize` left it (`processing`), of an account that was valid when
    /// the request was authenticated, and its CSR, checked against the order. The account is
    /// checked again in the transaction that stores the certificate.
    Finalize { order: Order, csr: CheckedCsr },
}

/// Whether an attempt's last transaction also ended the claim: the outcome and the deletion of
/// the job commit together (or, for a validation retried later, the failed attempt and the job's
/// new due time), so the runner has nothing left to do with the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settled {
    Yes,
    No,
}

/// How one attempt ended.
enum Attempt {
    /// It ran to the end (or hit the backstop, as `Error::TimedOut`).
    Finished(Result<Settled, Error>),
    /// Another worker claimed the job while this one ran: it is that worker's now.
    LeaseLost,
}

struct Inner {
    storage: Storage,
    validator: Validator,
    ca: Arc<Ca>,
    clock: SharedClock,
    settings: WorkerSettings,
    /// `settings.attempt_timeout`, or the backstop derived from the validator's worst case.
    attempt_timeout: std::time::Duration,
    hook: Arc<dyn ValidationHook>,
    wake: Notify,
    /// One permit per job that may run at once, in this instance: taken by a job loop before it
    /// claims from the queue, or by a request that runs the job it created ([`Workers::try_slot`]).
    /// So `settings.concurrency` bounds both together.
    slots: Arc<Semaphore>,
}

/// Handle to the running workers; cheap to clone. Dropping it does not stop them: call
/// [`Workers::shutdown`].
#[derive(Clone)]
pub struct Workers {
    inner: Arc<Inner>,
    cancel: CancellationToken,
    tasks: Arc<tokio::sync::Mutex<JoinSet<()>>>,
    /// Work started by requests (at once, or `run_claimed`), so that shutdown waits for it too.
    direct: TaskTracker,
}

impl Workers {
    /// Starts `settings.concurrency` job loops. Jobs left over from a previous run (or another
    /// instance's expired leases) are picked up at once.
    pub fn spawn(
        storage: Storage,
        validator: Validator,
        ca: Arc<Ca>,
        clock: SharedClock,
        settings: WorkerSettings,
        hook: Arc<dyn ValidationHook>,
    ) -> Self {
        let settings_concurrency = settings.concurrency.max(1);
        let attempt_timeout = settings
            .attempt_timeout
            .unwrap_or_else(|| WorkerSettings::attempt_backstop(validator.worst_case_attempt()));
        let inner = Arc::new(Inner {
            attempt_timeout,
            storage,
            validator,
            ca,
            clock,
            settings,
            hook,
            wake: Notify::new(),
            slots: Arc::new(Semaphore::new(settings_concurrency)),
        });
        let cancel = CancellationToken::new();
        let mut tasks = JoinSet::new();
        for n in 0..settings_concurrency {
            let inner = Arc::clone(&inner);
            let cancel = cancel.clone();
            tasks.spawn(
                async move { run_loop(&inner, &cancel).await }
                    .instrument(tracing::info_span!("worker", n)),
            );
        }
        Self {
            inner,
            cancel,
            tasks: Arc::new(tokio::sync::Mutex::new(tasks)),
            direct: TaskTracker::new(),
        }
    }

    /// Reserves a place to run work at once, if one is free now: a request hands it to
    /// [`JobRunner::validate_at_once`] or [`JobRunner::finalize_at_once`] (or a job it created
    /// already claimed to [`Workers::run_claimed`]), with no queue round trip and no wait for a
    /// worker. `None` when every place is taken; the work then goes through the queue.
    pub fn try_slot(&self) -> Option<Slot> {
        if self.cancel.is_cancelled() {
            return None;
        }
        Arc::clone(&self.inner.slots)
            .try_acquire_owned()
            .ok()
            .map(Slot::new)
    }

    /// The lease a job created for [`Workers::run_claimed`] is claimed under.
    pub fn lease(&self) -> time::Duration {
        self.inner.settings.lease
    }

    /// Runs a job its caller created already claimed, on its own task, under the same lease
    /// heartbeat, backstop and recording as a job from the queue. The returned handle finishes
    /// when the attempt has been recorded (or left to the queue); awaiting it is optional, and
    /// dropping it does not stop the job.
    pub fn run_claimed(
        &self,
        slot: Slot,
        job: Job,
        prepared: Option<Prepared>,
    ) -> tokio::task::JoinHandle<()> {
        let inner = Arc::clone(&self.inner);
        let kind = job_kind_name(&job);
        self.direct.spawn(
            async move {
                run_job(&inner, job, prepared).await;
                drop(slot);
            }
            .instrument(tracing::info_span!("job", kind)),
        )
    }

    /// Tells one idle worker that a job was just enqueued: one job, one worker. Waking them all
    /// made every idle worker race for the job (a claim on the database writer and a due-time
    /// query each, all but one in vain). If none is idle, the permit is kept for the next one to
    /// go idle, and busy workers look for more work after each job anyway.
    pub fn wake(&self) {
        self.inner.wake.notify_one();
    }

    /// Stops the loops after their current job.
    pub async fn shutdown(&self) {
        self.cancel.cancel();
        self.inner.wake.notify_waiters();
        let mut tasks = self.tasks.lock().await;
        while tasks.join_next().await.is_some() {}
        self.direct.close();
        self.direct.wait().await;
    }
}

/// The policy layer starts the jobs its requests create through this, without depending on the
/// runner.
impl JobRunner for Workers {
    fn try_slot(&self) -> Option<Slot> {
        Workers::try_slot(self)
    }

    fn validate_at_once(
        &self,
        slot: Slot,
        target: ValidationTarget,
        wait: std::time::Duration,
        held: Held,
    ) -> Reply<Challenge> {
        let (reply, answer) = oneshot::channel();
        let inner = Arc::clone(&self.inner);
        self.direct.spawn(
            async move {
                validate_at_once(&inner, target, wait, held, reply).await;
                drop(slot);
            }
            .instrument(tracing::info_span!("job", kind = "validate")),
        );
        answer
    }

    fn finalize_at_once(
        &self,
        slot: Slot,
        order: Order,
        csr_der: Vec<u8>,
        csr: CheckedCsr,
        wait: std::time::Duration,
        held: Held,
    ) -> Reply<Finalized> {
        let (reply, answer) = oneshot::channel();
        let inner = Arc::clone(&self.inner);
        let at_once = AtOnceFinalization {
            order,
            csr_der,
            csr,
            wait,
            held,
        };
        self.direct.spawn(
            async move {
                finalize_at_once(&inner, at_once, reply).await;
                drop(slot);
            }
            .instrument(tracing::info_span!("job", kind = "finalize")),
        );
        answer
    }

    fn wake(&self) {
        Workers::wake(self);
    }
}

async fn run_loop(inner: &Inner, cancel: &CancellationToken) {
    while !cancel.is_cancelled() {
        // A place first, then a claim: a claimed job never waits for one.
        let slot = tokio::select! {
            slot = Arc::clone(&inner.slots).acquire_owned() => slot,
            () = cancel.cancelled() => return,
        };
        let Ok(slot) = slot else {
            return; // The semaphore is never closed; if it were, there would be no more work.
        };
        let now = inner.clock.now();
        match inner
            .storage
            .claim_job(now, inner.settings.lease, inner.settings.max_attempts)
            .await
        {
            Ok(Some(job)) => {
                run_job(inner, job, None).await;
                drop(slot);
            }
            Ok(None) => {
                drop(slot);
                idle(inner, cancel).await;
            }
            Err(e) => {
                drop(slot);
                tracing::warn!(error = %e, "claiming a job failed; retrying shortly");
                metrics::counter!("certeasy_worker_errors_total", "stage" => "claim").increment(1);
                sleep_or_cancel(cancel, std::time::Duration::from_millis(500)).await;
            }
        }
    }
}

async fn idle(inner: &Inner, cancel: &CancellationToken) {
    let mut wait = inner.settings.poll_interval;
    if let Ok(Some(due)) = inner.storage.next_job_due().await {
        let until = due - inner.clock.now();
        if until <= time::Duration::ZERO {
            return;
        }
        if let Ok(until) = std::time::Duration::try_from(until) {
            wait = wait.min(until);
        }
    }
    tokio::select! {
        () = inner.wake.notified() => {}
        () = tokio::time::sleep(wait) => {}
        () = cancel.cancelled() => {}
    }
}

async fn sleep_or_cancel(cancel: &CancellationToken, d: std::time::Duration) {
    tokio::select! {
        () = tokio::time::sleep(d) => {}
        () = cancel.cancelled() => {}
    }
}

fn job_kind_name(job: &Job) -> &'static str {
    match job.kind {
        JobKind::Validate(_) => "validate",
        JobKind::Finalize(_) => "finalize",
    }
}

async fn run_job(inner: &Inner, job: Job, prepared: Option<Prepared>) {
    let kind = job_kind_name(&job);
    if job.exhausted {
        // Its last allowed attempt ended without a report (the worker crashed or lost its
        // lease): running it again would exceed max-attempts, so it is settled instead.
        tracing::error!(job = %job.id, kind, claims = job.attempts, "job used up its attempts without finishing; giving up");
        metrics::counter!("certeasy_jobs_total", "kind" => kind, "outcome" => "exhausted")
            .increment(1);
        give_up(
            inner,
            &job,
            "its attempts were used up by workers that stopped",
        )
        .await;
        return;
    }
    let work = async {
        match job.kind {
            JobKind::Validate(id) => validate(inner, &job, id).await,
            JobKind::Finalize(id) => finalize(inner, &job, id, prepared).await,
        }
    };
    finish_job(inner, &job, work).await;
}

/// Runs `work`, one attempt of `job`, under its lease, and deals with how it ended: the job is
/// deleted once done (unless the attempt's last transaction already did), rescheduled with a
/// backoff after an error, or given up after too many.
async fn finish_job(inner: &Inner, job: &Job, work: impl Future<Output = Result<Settled, Error>>) {
    let kind = job_kind_name(job);
    let started = std::time::Instant::now();
    let attempt = attempt_under_lease(inner, job, work).await;
    metrics::histogram!("certeasy_job_seconds", "kind" => kind)
        .record(started.elapsed().as_secs_f64());
    match attempt {
        Attempt::LeaseLost => {
            // Another worker holds the job now and will run it; recording is idempotent, so the
            // abandoned attempt left nothing half-done.
            tracing::warn!(job = %job.id, kind, "lost the lease of a running job; leaving it to its new holder");
            metrics::counter!("certeasy_jobs_total", "kind" => kind, "outcome" => "lease_lost")
                .increment(1);
        }
        Attempt::Finished(Ok(settled)) => {
            metrics::counter!("certeasy_jobs_total", "kind" => kind, "outcome" => "done")
                .increment(1);
            if settled == Settled::No
                && let Err(e) = inner.storage.complete_job(job).await
            {
                tracing::warn!(job = %job.id, error = %e, "could not delete a finished job (or another worker claimed it since); it will run again harmlessly");
            }
        }
        Attempt::Finished(Err(e)) => {
            metrics::counter!("certeasy_jobs_total", "kind" => kind, "outcome" => "error")
                .increment(1);
            // Claims that ended in a scheduled validation retry were verdicts of a sort, not
            // failures of the job: only the others count towards max-attempts.
            let failed_claims = job.attempts.saturating_sub(job.retries);
            if failed_claims >= inner.settings.max_attempts {
                tracing::error!(job = %job.id, kind, attempts = job.attempts, error = %e, "job failed too often; giving up");
                give_up(inner, job, &e.to_string()).await;
            } else {
                let backoff = time::Duration::seconds(2_i64.saturating_pow(failed_claims.min(10)));
                tracing::warn!(job = %job.id, kind, attempts = job.attempts, error = %e, "job failed; will retry");
                let run_at = inner.clock.now() + backoff;
                if let Err(e) = inner.storage.retry_job(job, run_at, &e.to_string()).await {
                    tracing::warn!(job = %job.id, error = %e, "could not reschedule a job (or another worker claimed it since); its lease will expire");
                }
            }
        }
    }
}

/// Runs `work` under the backstop timeout while a heartbeat keeps `job`'s lease. The lease is
/// short so a dead worker's job is soon picked up again, and renewed so a slow attempt never has
/// its job taken by a second worker (which would then hold two workers for one stuck name).
async fn attempt_under_lease(
    inner: &Inner,
    job: &Job,
    work: impl Future<Output = Result<Settled, Error>>,
) -> Attempt {
    let limit = inner.attempt_timeout;
    // Dropping the attempt on timeout cancels its I/O; an open transaction rolls back.
    let work = async {
        tokio::time::timeout(limit, work)
            .await
            .unwrap_or(Err(Error::TimedOut(limit)))
    };
    tokio::select! {
        result = work => Attempt::Finished(result),
        () = heartbeat(inner, job) => Attempt::LeaseLost,
    }
}

/// Renews the lease every third of it; returns only once another worker has claimed the job.
/// A database error is not a loss: the lease may well still be ours, so it tries again next beat.
async fn heartbeat(inner: &Inner, job: &Job) {
    let every = inner.settings.heartbeat_every();
    loop {
        tokio::time::sleep(every).await;
        match inner
            .storage
            .renew_job_lease(job, inner.clock.now(), inner.settings.lease)
            .await
        {
            Ok(Some(_)) => {}
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(job = %job.id, error = %e, "could not renew a job lease; trying again");
                metrics::counter!("certeasy_worker_errors_total", "stage" => "heartbeat")
                    .increment(1);
            }
        }
    }
}

/// A job that keeps failing for internal reasons is settled with a server error, so the client
/// sees a final state instead of polling forever.
async fn give_up(inner: &Inner, job: &Job, cause: &str) {
    let now = inner.clock.now();
    let problem = Problem::new(
        ProblemType::ServerInternal,
        "The server could not complete this request; please try again",
    );
    let settled = match job.kind {
        JobKind::Validate(id) => inner
            .storage
            .record_validation(id, Err(problem), now, Some(job))
            .await
            .map(|_| ()),
        JobKind::Finalize(id) => inner
            .storage
            .fail_order(id, problem, now, Some(job))
            .await
            .map(|_| ()),
    };
    match settled {
        // Recorded and deleted together (or, if another claim overtook this one, left to it).
        Ok(()) => return,
        // Already final (a finished attempt whose job was not deleted) or gone: nothing to settle.
        Err(storage::error::Error::WrongState(state)) => {
            tracing::info!(job = %job.id, state, "abandoned job's object was already settled");
        }
        Err(storage::error::Error::NotFound) => {
            tracing::warn!(job = %job.id, "abandoned job's object no longer exists");
        }
        Err(e) => {
            // The job is kept: once its lease runs out it is claimed as exhausted and settled
            // again, so the object still reaches a final state.
            tracing::error!(job = %job.id, error = %e, cause, "could not settle an abandoned job; will try again");
            return;
        }
    }
    if let Err(e) = inner.storage.complete_job(job).await {
        tracing::warn!(job = %job.id, error = %e, "could not delete an abandoned job");
    }
}

/// A validation job from the queue or one claimed by its request: what it needs is read again,
/// since a request that validates at once does so without a job (`validate_at_once`).
async fn validate(inner: &Inner, job: &Job, id: ChallengeId) -> Result<Settled, Error> {
    let Some(target) = load_validation(inner, id).await? else {
        return Ok(Settled::No);
    };
    let span = validation_span(&target);
    let outcome = attempt_validation(inner, &target, &span).await;
    record_attempt(inner, job, &target, outcome, &span).await
}

fn validation_span(target: &ValidationTarget) -> tracing::Span {
    tracing::info_span!("validation", account_id = %target.account_id, authz_id = %target.authz_id, challenge = target.challenge.kind.as_str(), identifier = %target.identifier)
}

/// One attempt at `target`'s challenge (and CAA), as the validator makes it.
async fn attempt_validation(
    inner: &Inner,
    target: &ValidationTarget,
    span: &tracing::Span,
) -> Result<(), validation::Failure> {
    if inner.settings.always_valid {
        // Test mode: the whole attempt (challenge and CAA) is skipped; see the setting.
        return Ok(());
    }
    let key_authorization = format!("{}.{}", target.challenge.token, target.thumbprint);
    let account_uri = inner.settings.account_uris.uri(target.account_id);
    inner
        .validator
        .attempt(
            &target.identifier,
            target.challenge.kind,
            &target.challenge.token,
            &key_authorization,
            &account_uri,
        )
        .instrument(span.clone())
        .await
}

/// Records the outcome of one attempt of `job`'s validation: a retry scheduled when
/// [`retry_at`] grants one, the verdict otherwise (after the hook has spent for it).
async fn record_attempt(
    inner: &Inner,
    job: &Job,
    target: &ValidationTarget,
    outcome: Result<(), validation::Failure>,
    span: &tracing::Span,
) -> Result<Settled, Error> {
    let ValidationTarget {
        challenge,
        authz_id,
        authz_expires,
        identifier,
        account_id,
        thumbprint: _,
    } = target;
    let id = challenge.id;
    let attempt = job.retries.saturating_add(1);
    match &outcome {
        Ok(()) => span.in_scope(|| tracing::info!(attempt, "validation succeeded")),
        // The detail may quote (a short, escaped prefix of) what the target served, which is
        // the subscriber's content, not the operator's: it stays out of info-level logs.
        Err(f) => span.in_scope(|| {
            let p = &f.problem;
            tracing::info!(problem = p.kind.as_str(), class = f.class(), attempt, "validation failed");
            tracing::debug!(problem = p.kind.as_str(), detail = %p.detail, "validation failure detail");
        }),
    }
    let outcome = match outcome {
        Ok(()) => Ok(()),
        Err(failure) => {
            let now = inner.clock.now();
            // Earlier attempts are read only after a retry, so a challenge decided at its first
            // attempt costs no extra query; they date the first attempt and fill the final
            // problem's detail.
            let earlier = if job.retries > 0 {
                inner.storage.challenge_attempts(id).await?
            } else {
                Vec::new()
            };
            let first_failed = earlier.first().map_or(now, |a| a.at);
            let retry = RetryCandidate {
                failure: &failure,
                retries: job.retries,
                first_failed,
                now,
                authz_expires: *authz_expires,
            };
            if let Some(run_at) = retry_at(inner, &retry, *account_id, identifier).await {
                // Not a verdict: the challenge stays processing and no hook runs, so the
                // failed-validation limit and zombie pausing count the challenge once, at its
                // final verdict. The attempt and the new due time commit together.
                match inner
                    .storage
                    .retry_validation(job, id, &failure.problem, now, run_at)
                    .await
                {
                    Ok(()) => {}
                    // The lease ran out and another worker holds the job: it runs the attempt
                    // again and decides; nothing was recorded here.
                    Err(storage::error::Error::NotFound) => {
                        span.in_scope(|| tracing::warn!(attempt, "lost the job before scheduling its retry; leaving it to its new holder"));
                        return Ok(Settled::Yes);
                    }
                    Err(e) => return Err(e.into()),
                }
                span.in_scope(|| tracing::info!(attempt, %run_at, "validation will be retried"));
                metrics::counter!("certeasy_validations_total", "type" => challenge.kind.as_str(), "outcome" => "retried").increment(1);
                // The job is not deleted but released: it is due again at `run_at`.
                return Ok(Settled::Yes);
            }
            Err(ra::verdicts::final_problem(
                failure.problem,
                attempt,
                now,
                &earlier,
            ))
        }
    };
    metrics::counter!("certeasy_validations_total", "type" => challenge.kind.as_str(), "outcome" => if outcome.is_ok() { "valid" } else { "invalid" }).increment(1);
    // The hook's spends (failed-validation bucket, zombie count and pause) complete before the
    // verdict is committed: a client that re-orders the instant it sees `invalid` is already
    // counted. Trade-off: if recording then fails (or the worker dies in between), the retried
    // attempt spends again, over-counting one failure; that errs towards refusing, and a repeat
    // after the commit spends nothing (the challenge is no longer processing, see above).
    let verdict = ValidationRecorded {
        account_id: *account_id,
        authz_id: *authz_id,
        identifier: identifier.clone(),
        status: if outcome.is_ok() {
            ChallengeStatus::Valid
        } else {
            ChallengeStatus::Invalid
        },
        changed: true,
    };
    inner.hook.on_validation(&verdict).await;
    inner
        .storage
        .record_validation(id, outcome, inner.clock.now(), Some(job))
        .await?;
    // Deleted with the verdict, or overtaken by a later claim that will find it recorded.
    Ok(Settled::Yes)
}

/// A failed attempt that [`retry_at`] may repeat.
struct RetryCandidate<'a> {
    failure: &'a validation::Failure,
    /// Failed attempts of the challenge before this one.
    retries: u32,
    /// When the challenge's first attempt failed (this one's end, if it was the first).
    first_failed: time::OffsetDateTime,
    now: time::OffsetDateTime,
    authz_expires: time::OffsetDateTime,
}

/// When to repeat the failed attempt of `account`'s challenge for `identifier`, if at all: only
/// a dns-01 record that may still be propagating, only `validation_retries` times, only if the
/// retry starts within `retry_window` of the first failure (so the client sees the verdict while
/// it still polls) and ends before the authorization expires, and only if the hook grants it (a
/// pair that failed lately gets none, so failing clients cost one attempt per challenge). The
/// hook is asked last: it is the only check that reads anything.
async fn retry_at(
    inner: &Inner,
    candidate: &RetryCandidate<'_>,
    account: AccountId,
    identifier: &Identifier,
) -> Option<time::OffsetDateTime> {
    let settings = &inner.settings;
    if !candidate.failure.may_propagate() || candidate.retries >= settings.validation_retries {
        return None;
    }
    let run_at = candidate.now + settings.retry_delay(candidate.retries.saturating_add(1));
    if run_at - candidate.first_failed > settings.retry_window {
        return None;
    }
    let worst = time::Duration::try_from(inner.validator.worst_case_attempt()).ok()?;
    if run_at + worst >= candidate.authz_expires {
        return None;
    }
    inner
        .hook
        .grants_retry(account, identifier)
        .await
        .then_some(run_at)
}

/// The challenge in `processing`, its authorization and its account: what a job from the queue
/// starts from. `None` when the challenge is already decided (a repeat after a crash between
/// commit and job deletion): validating again would only run the hook a second time.
async fn load_validation(
    inner: &Inner,
    id: ChallengeId,
) -> Result<Option<ValidationTarget>, Error> {
    let challenge = inner
        .storage
        .challenge(id)
        .await?
        .ok_or_else(|| Error::Missing(format!("challenge {id}")))?;
    if challenge.status != ChallengeStatus::Processing {
        return Ok(None);
    }
    let now = inner.clock.now();
    let authz = inner
        .storage
        .authorization(challenge.authz_id, now)
        .await?
        .ok_or_else(|| Error::Missing(format!("authorization {}", challenge.authz_id)))?;
    let account = inner
        .storage
        .account(authz.account_id)
        .await?
        .ok_or_else(|| Error::Missing(format!("account {}", authz.account_id)))?;
    Ok(Some(ValidationTarget {
        challenge,
        authz_id: authz.id,
        authz_expires: authz.expires_at,
        identifier: authz.identifier,
        account_id: account.id,
        thumbprint: account.thumbprint,
    }))
}

/// Finalizes an order in `processing`: every check first (the account and the CSR when read
/// from the queue, CAA at issuance time, the validity window at signing time), then the serial
/// reserved and committed with what will be signed, then the signature, then the certificate
/// stored against the reservation. A job resumed after a crash between reservation and storage
/// finds the order's open reservation and signs the same serial and window again.
async fn finalize(
    inner: &Inner,
    job: &Job,
    id: OrderId,
    prepared: Option<Prepared>,
) -> Result<Settled, Error> {
    let now = inner.clock.now();
    let (order, checked) = match prepared {
        Some(Prepared::Finalize { order, csr }) if order.id == id => (order, csr),
        _ => match load_finalization(inner, job, id, now).await? {
            Ok(loaded) => loaded,
            Err(settled) => return Ok(settled),
        },
    };
    // Last check before signing, so that CAA is judged at issuance time.
    if let Some(problem) = recheck_caa(inner, &order, now).await? {
        tracing::info!(order_id = %id, account_id = %order.account_id, "CAA, checked again at issuance, refuses the order");
        tracing::debug!(order_id = %id, detail = %problem.detail, "CAA refusal detail");
        inner
            .storage
            .fail_order(id, problem, now, Some(job))
            .await?;
        return Ok(Settled::Yes);
    }
    let intent = match prepare(inner, &order, &checked, now) {
        Ok(intent) => intent,
        Err(problem) => {
            inner
                .storage
                .fail_order(id, problem, now, Some(job))
                .await?;
            return Ok(Settled::Yes);
        }
    };
    let reserved = inner
        .storage
        .reserve_serial(id, new_reservation(inner, &intent), inner.clock.now())
        .await?;
    let reservation = match reserved {
        Reserved::Reserved(reservation) => reservation,
        // Deactivated since the finalization was accepted: nothing was reserved or signed.
        Reserved::AccountNotValid(_) => {
            return refuse_deactivated(inner, job, id, inner.clock.now()).await;
        }
        Reserved::AuthorizationNotValid => {
            tracing::info!(order_id = %id, "an authorization of the order is no longer valid; the order is not issued");
            inner
                .storage
                .fail_order(
                    id,
                    Problem::new(
                        ProblemType::Unauthorized,
                        "An authorization of this order expired or was deactivated before the certificate was issued",
                    ),
                    inner.clock.now(),
                    Some(job),
                )
                .await?;
            return Ok(Settled::Yes);
        }
        // Settled meanwhile (a repeat after a crash between commit and job deletion).
        Reserved::Settled(_) => return Ok(Settled::No),
    };
    if reservation.signings > 1 {
        tracing::warn!(order_id = %id, serial = %reservation.serial, signings = reservation.signings, "signing a reserved serial again: an earlier finalization stopped between reserving and storing it");
    }
    let intent = Intent {
        serial: reservation.serial,
        not_before: reservation.not_before,
        not_after: reservation.not_after,
        crl_shard: reservation.crl_shard,
    };
    let cert = match sign(inner, &order, &checked, &intent) {
        Ok(cert) => cert,
        Err(problem) => {
            // The order fails, and its reservation is marked abandoned with it.
            inner
                .storage
                .fail_order(id, problem, inner.clock.now(), Some(job))
                .await?;
            return Ok(Settled::Yes);
        }
    };
    let stored = inner
        .storage
        .complete_order(id, cert, inner.clock.now(), Some(job))
        .await?;
    issued(&order, &stored);
    Ok(Settled::Yes)
}

fn issued(order: &Order, stored: &storage::model::Certificate) {
    tracing::info!(order_id = %order.id, account_id = %order.account_id, serial = %stored.serial, "certificate issued");
    metrics::counter!("certeasy_certificates_issued_total").increment(1);
}

/// What `order`'s certificate is to be for the checked CSR under the order's profile, decided
/// at `now` and checked, nothing signed; or with which problem the order fails: its profile was
/// removed from the configuration since the order was created (signing it under another would
/// give the client a certificate it did not ask for), the order's notAfter has passed
/// (`ra::orders::signing_window`), the profile no longer certifies the CSR's key type, or the CA
/// refuses.
fn prepare(
    inner: &Inner,
    order: &Order,
    checked: &CheckedCsr,
    now: time::OffsetDateTime,
) -> Result<Intent, Problem> {
    let id = order.id;
    let profile = profile_of(inner, order)?;
    let (not_before, not_after) = ra::orders::signing_window(
        profile,
        order.not_before,
        order.not_after,
        now,
        inner.settings.backdate,
    )
    .inspect_err(|problem| {
        tracing::info!(order_id = %id, detail = %problem.detail, "the order's validity window cannot be signed");
    })?;
    // A certificate can never outlive the CA that signs it.
    let not_after = not_after.min(inner.ca.issuing_not_after());
    inner
        .ca
        .prepare(checked, &order.identifiers, profile, not_before, not_after)
        .map_err(|e| ca_problem(id, e))
}

/// The order's profile; `invalidProfile` when it is gone from the configuration.
fn profile_of<'a>(inner: &'a Inner, order: &Order) -> Result<&'a issuance::Profile, Problem> {
    inner
        .settings
        .profiles
        .select(order.profile.as_deref())
        .map_err(|e| {
            tracing::warn!(order_id = %order.id, error = %e, "the order's profile is gone; the order fails");
            Problem::new(ProblemType::InvalidProfile, e.to_string())
        })
}

/// The problem an order fails with when the CA refuses or fails.
fn ca_problem(id: OrderId, e: issuance::Error) -> Problem {
    match e {
        // The profile no longer certifies this key type (its definition changed since the
        // finalize request was accepted).
        issuance::Error::BadCsr(detail) => {
            tracing::warn!(order_id = %id, detail, "the CSR's key is refused by the order's profile");
            Problem::new(ProblemType::BadCsr, detail)
        }
        e => {
            tracing::error!(order_id = %id, error = %e, "signing failed");
            Problem::new(
                ProblemType::ServerInternal,
                "The CA could not sign the certificate",
            )
        }
    }
}

/// The reservation that records `intent` before it is signed.
fn new_reservation(inner: &Inner, intent: &Intent) -> NewReservation {
    NewReservation {
        serial: intent.serial.clone(),
        not_before: intent.not_before,
        not_after: intent.not_after,
        issuer_chain_pem: inner.ca.chain_pem().to_owned(),
        crl_shard: intent.crl_shard,
    }
}

/// Signs exactly the reserved `intent` for `order`'s checked CSR under the order's profile.
fn sign(
    inner: &Inner,
    order: &Order,
    checked: &CheckedCsr,
    intent: &Intent,
) -> Result<NewCertificate, Problem> {
    let profile = profile_of(inner, order)?;
    let issued = inner
        .ca
        .issue(checked, &order.identifiers, profile, intent)
        .map_err(|e| ca_problem(order.id, e))?;
    // The one place the server signs a subscriber certificate: more signatures than
    // `certeasy_certificates_issued_total` means reserved serials signed again after a
    // finalization stopped between signing and storing.
    metrics::counter!("certeasy_certificates_signed_total").increment(1);
    Ok(NewCertificate {
        serial: issued.serial,
        der: issued.der,
        issuer_chain_pem: issued.issuer_chain_pem.to_string(),
        not_before: issued.not_before,
        not_after: issued.not_after,
        crl_shard: issued.crl_shard,
    })
}

/// A finalization a request runs at once ([`JobRunner::finalize_at_once`]).
struct AtOnceFinalization {
    order: Order,
    csr_der: Vec<u8>,
    csr: CheckedCsr,
    wait: std::time::Duration,
    held: Held,
}

/// When nothing needs the network: every check, then one transaction that moves the order to
/// processing under a job this request holds and reserves the serial, then the signature and
/// the certificate stored (a crash between the two leaves the job to resume the reservation).
/// Otherwise the durable way, the order `processing` under a job, answered after at most the
/// wait.
async fn finalize_at_once(
    inner: &Inner,
    work: AtOnceFinalization,
    reply: oneshot::Sender<Result<Finalized, storage::error::Error>>,
) {
    let AtOnceFinalization {
        order,
        csr_der,
        csr,
        wait,
        held,
    } = work;
    let now = inner.clock.now();
    // CAA that must be looked up again goes the durable way: network time is not spent before
    // anything is recorded, and a refusal fails the order as the job records it.
    let prepared = match caa_rechecks_due(inner, &order, now).await {
        Ok(false) => Some(prepare(inner, &order, &csr, now)),
        Ok(true) => None,
        Err(e) => {
            tracing::warn!(order_id = %order.id, error = %e, "could not tell whether CAA must be checked again; finalizing through a job");
            None
        }
    };
    if let Some(Ok(intent)) = &prepared {
        let reserved = inner
            .storage
            .reserve_ready_order(
                order.id,
                &csr_der,
                new_reservation(inner, intent),
                inner.clock.now(),
                inner.settings.lease,
            )
            .await;
        let answer = match reserved {
            Ok(ReservedAtOnce::Reserved {
                order: processing,
                job,
                reservation,
            }) => {
                let work = sign_reserved(inner, &job, &processing, &csr, &reservation);
                finish_job(inner, &job, work).await;
                // Held until the certificate is stored: a concurrent finalization of this
                // instance then finds the order valid, not processing.
                drop(held);
                let id = processing.id;
                inner
                    .storage
                    .order(id, inner.clock.now())
                    .await
                    .map(|order| Finalized::Order(Box::new(order.unwrap_or(*processing))))
            }
            // Deactivated since the request was authenticated: nothing was reserved or signed,
            // and the order stays as it was.
            Ok(ReservedAtOnce::AccountNotValid(status)) => {
                drop(held);
                Ok(Finalized::AccountNotValid(status))
            }
            Err(e) => {
                drop(held);
                Err(e)
            }
        };
        let _ = reply.send(answer);
        return;
    }
    let (processing, job) = match inner
        .storage
        .begin_finalize_claimed(order.id, &csr_der, now, inner.settings.lease)
        .await
    {
        Ok((processing, Some(job))) => (processing, job),
        // Already finalized by another instance: its job issues the certificate.
        Ok((processing, None)) => {
            drop(held);
            let _ = reply.send(Ok(Finalized::Order(Box::new(processing))));
            return;
        }
        Err(e) => {
            drop(held);
            let _ = reply.send(Err(e));
            return;
        }
    };
    drop(held);
    let id = processing.id;
    let work = async {
        match prepared {
            // Refused before anything was reserved, for a reason of the order's own: the order
            // fails with it.
            Some(Err(problem)) => {
                inner
                    .storage
                    .fail_order(id, problem, now, Some(&job))
                    .await?;
                Ok(Settled::Yes)
            }
            _ => {
                let prepared = Prepared::Finalize {
                    order: processing.clone(),
                    csr,
                };
                finalize(inner, &job, id, Some(prepared)).await
            }
        }
    };
    let run = finish_job(inner, &job, work);
    tokio::pin!(run);
    let finished = tokio::select! {
        () = &mut run => true,
        () = tokio::time::sleep(wait) => false,
    };
    let answer = if finished {
        inner
            .storage
            .order(id, inner.clock.now())
            .await
            .map(|order| order.unwrap_or_else(|| processing.clone()))
    } else {
        Ok(processing.clone())
    };
    let _ = reply.send(answer.map(|order| Finalized::Order(Box::new(order))));
    if !finished {
        run.await;
    }
}

/// Signs the reservation [`finalize_at_once`] made and stores the certificate, settling `job`.
async fn sign_reserved(
    inner: &Inner,
    job: &Job,
    order: &Order,
    csr: &CheckedCsr,
    reservation: &Reservation,
) -> Result<Settled, Error> {
    let intent = Intent {
        serial: reservation.serial.clone(),
        not_before: reservation.not_before,
        not_after: reservation.not_after,
        crl_shard: reservation.crl_shard,
    };
    let cert = match sign(inner, order, csr, &intent) {
        Ok(cert) => cert,
        Err(problem) => {
            inner
                .storage
                .fail_order(order.id, problem, inner.clock.now(), Some(job))
                .await?;
            return Ok(Settled::Yes);
        }
    };
    let stored = inner
        .storage
        .complete_order(order.id, cert, inner.clock.now(), Some(job))
        .await?;
    issued(order, &stored);
    Ok(Settled::Yes)
}

/// Validates before anything is recorded; see [`JobRunner::validate_at_once`].
async fn validate_at_once(
    inner: &Inner,
    target: ValidationTarget,
    wait: std::time::Duration,
    held: Held,
    reply: oneshot::Sender<Result<Challenge, storage::error::Error>>,
) {
    let span = validation_span(&target);
    let id = target.challenge.id;
    let attempt = attempt_validation(inner, &target, &span);
    tokio::pin!(attempt);
    let early = tokio::select! {
        outcome = &mut attempt => Some(outcome),
        () = tokio::time::sleep(wait) => None,
    };
    if let Some(Ok(())) = early {
        // The hook runs before the write, as the trait promises for every verdict. Should the
        // write then find the challenge started by another instance, or refuse it (its
        // authorization expired meanwhile), the client still answered a real validation, which
        // is all a valid verdict tells the hook (the zombie count resets on it).
        let verdict = ValidationRecorded {
            account_id: target.account_id,
            authz_id: target.authz_id,
            identifier: target.identifier.clone(),
            status: ChallengeStatus::Valid,
            changed: true,
        };
        inner.hook.on_validation(&verdict).await;
        let recorded = inner
            .storage
            .record_valid_at_once(id, inner.clock.now())
            .await;
        drop(held);
        // Logged and counted once recorded: a refused write is no verdict of this request.
        if recorded.is_ok() {
            span.in_scope(|| tracing::info!(attempt = 1, "validation succeeded"));
            metrics::counter!("certeasy_validations_total", "type" => target.challenge.kind.as_str(), "outcome" => "valid").increment(1);
        }
        let _ = reply.send(recorded);
        return;
    }
    // A failure, or an attempt still running: recorded the durable way, a started challenge and
    // a job that settles it (a retry scheduled, or the verdict after the hook has spent).
    let started = inner
        .storage
        .start_challenge_claimed(id, inner.clock.now(), inner.settings.lease)
        .await;
    drop(held);
    let (started, job) = match started {
        Ok((started, Some(job))) => (started, job),
        // Started first by another instance (or refused): its outcome stands, and this
        // attempt's is dropped.
        Ok((challenge, None)) => {
            let _ = reply.send(Ok(challenge));
            return;
        }
        Err(e) => {
            let _ = reply.send(Err(e));
            return;
        }
    };
    match early {
        Some(outcome) => {
            finish_job(
                inner,
                &job,
                record_attempt(inner, &job, &target, outcome, &span),
            )
            .await;
            let answer = inner
                .storage
                .challenge(id)
                .await
                .map(|challenge| challenge.unwrap_or(started));
            let _ = reply.send(answer);
        }
        None => {
            let _ = reply.send(Ok(started));
            let rest = async {
                let outcome = attempt.await;
                record_attempt(inner, &job, &target, outcome, &span).await
            };
            finish_job(inner, &job, rest).await;
        }
    }
}

/// Whether CAA must be looked up again before `order` is signed: some DNS identifier was
/// validated longer ago than a CAA check vouches for. Nothing is read when the validator does
/// not check CAA.
async fn caa_rechecks_due(
    inner: &Inner,
    order: &Order,
    now: time::OffsetDateTime,
) -> Result<bool, Error> {
    if !inner.validator.checks_caa() {
        return Ok(false);
    }
    let validations = inner.storage.order_validations(order.id).await?;
    Ok(!ra::caa::rechecks(&validations, now, inner.settings.caa_recheck_after).is_empty())
}

/// Checks CAA again for the order's authorizations validated too long ago (`ra::caa` decides
/// which, and what a refusal is), with the method that validated each and the order's account:
/// `Some(problem)` when the order must fail. All lookups run at once, each bounded by the
/// validator's timeout. Nothing is read when the validator does not check CAA.
async fn recheck_caa(
    inner: &Inner,
    order: &Order,
    now: time::OffsetDateTime,
) -> Result<Option<Problem>, Error> {
    if !inner.validator.checks_caa() {
        return Ok(None);
    }
    let validations = inner.storage.order_validations(order.id).await?;
    let after = inner.settings.caa_recheck_after;
    let rechecks = ra::caa::rechecks(&validations, now, after);
    if rechecks.is_empty() {
        return Ok(None);
    }
    let account_uri = inner.settings.account_uris.uri(order.account_id);
    let outcomes = futures::future::join_all(rechecks.iter().map(|r| {
        inner
            .validator
            .check_caa(&r.identifier, r.method, &account_uri)
    }))
    .await;
    let mut refused = Vec::new();
    for (recheck, outcome) in rechecks.into_iter().zip(outcomes) {
        let label = if outcome.is_ok() {
            "allowed"
        } else {
            "refused"
        };
        metrics::counter!("certeasy_caa_rechecks_total", "outcome" => label).increment(1);
        tracing::debug!(order_id = %order.id, identifier = %recheck.identifier, method = recheck.method.as_str(), outcome = label, "CAA checked again at issuance");
        if let Err(problem) = outcome {
            refused.push((recheck.identifier, problem));
        }
    }
    Ok(ra::caa::refusal(refused, after))
}

/// The order in `processing` and its stored CSR, checked again: what a job from the queue starts
/// from. `Err(settled)` when there is nothing to issue (already settled, or the order was failed
/// here).
async fn load_finalization(
    inner: &Inner,
    job: &Job,
    id: OrderId,
    now: time::OffsetDateTime,
) -> Result<Result<(Order, CheckedCsr), Settled>, Error> {
    let order = inner
        .storage
        .order(id, now)
        .await?
        .ok_or_else(|| Error::Missing(format!("order {id}")))?;
    if order.status != acme_core::status::OrderStatus::Processing {
        // Already settled (a repeat after a crash between commit and job deletion).
        return Ok(Err(Settled::No));
    }
    // A deactivated account gets nothing more (RFC 8555 §7.3.6); checked here so nothing is
    // signed, and again in the transaction that would store the certificate.
    let account = inner
        .storage
        .account(order.account_id)
        .await?
        .ok_or_else(|| Error::Missing(format!("account {}", order.account_id)))?;
    if account.status != AccountStatus::Valid {
        return refuse_deactivated(inner, job, id, now).await.map(Err);
    }
    let csr = inner
        .storage
        .order_csr(id)
        .await?
        .ok_or_else(|| Error::Missing(format!("CSR of order {id}")))?;
    let checked = match issuance::check_csr(&csr, &order.identifiers) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(order_id = %id, error = %e, "the stored CSR no longer passes; the order fails");
            inner
                .storage
                .fail_order(
                    id,
                    Problem::new(ProblemType::BadCsr, e.to_string()),
                    now,
                    Some(job),
                )
                .await?;
            return Ok(Err(Settled::Yes));
        }
    };
    Ok(Ok((order, checked)))
}

/// Ends an order whose account was deactivated while it was processing.
async fn refuse_deactivated(
    inner: &Inner,
    job: &Job,
    id: OrderId,
    now: time::OffsetDateTime,
) -> Result<Settled, Error> {
    tracing::info!(order_id = %id, "the account was deactivated; the order is not issued");
    inner
        .storage
        .fail_order(
            id,
            Problem::new(
                ProblemType::Unauthorized,
                "The account was deactivated before the certificate was issued",
            ),
            now,
            Some(job),
        )
        .await?;
    Ok(Settled::Yes)
}
