//! The job loop: claim, run, record, repeat.

use std::sync::Arc;

use acme_core::clock::SharedClock;
use acme_core::ids::ChallengeId;
use acme_core::ids::OrderId;
use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use issuance::Ca;
use storage::Storage;
use storage::model::Job;
use storage::model::JobKind;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use validation::Validator;

use crate::hooks::ValidationHook;
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
}

struct Inner {
    storage: Storage,
    validator: Validator,
    ca: Arc<Ca>,
    clock: SharedClock,
    settings: WorkerSettings,
    hook: Arc<dyn ValidationHook>,
    wake: Notify,
}

/// Handle to the running workers; cheap to clone. Dropping it does not stop them: call
/// [`Workers::shutdown`].
#[derive(Clone)]
pub struct Workers {
    inner: Arc<Inner>,
    cancel: CancellationToken,
    tasks: Arc<tokio::sync::Mutex<JoinSet<()>>>,
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
        let inner = Arc::new(Inner {
            storage,
            validator,
            ca,
            clock,
            settings,
            hook,
            wake: Notify::new(),
        });
        let cancel = CancellationToken::new();
        let mut tasks = JoinSet::new();
        for n in 0..inner.settings.concurrency.max(1) {
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
        }
    }

    /// Tells idle workers that a job was just enqueued.
    pub fn wake(&self) {
        self.inner.wake.notify_waiters();
        self.inner.wake.notify_one();
    }

    /// Stops the loops after their current job.
    pub async fn shutdown(&self) {
        self.cancel.cancel();
        self.inner.wake.notify_waiters();
        let mut tasks = self.tasks.lock().await;
        while tasks.join_next().await.is_some() {}
    }
}

async fn run_loop(inner: &Inner, cancel: &CancellationToken) {
    while !cancel.is_cancelled() {
        let now = inner.clock.now();
        match inner.storage.claim_job(now, inner.settings.lease).await {
            Ok(Some(job)) => run_job(inner, job).await,
            Ok(None) => idle(inner, cancel).await,
            Err(e) => {
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

async fn run_job(inner: &Inner, job: Job) {
    let started = std::time::Instant::now();
    let (kind, result) = match job.kind {
        JobKind::Validate(id) => ("validate", validate(inner, id).await),
        JobKind::Finalize(id) => ("finalize", finalize(inner, id).await),
    };
    metrics::histogram!("certeasy_job_seconds", "kind" => kind)
        .record(started.elapsed().as_secs_f64());
    match result {
        Ok(()) => {
            metrics::counter!("certeasy_jobs_total", "kind" => kind, "outcome" => "done")
                .increment(1);
            if let Err(e) = inner.storage.complete_job(job.id).await {
                tracing::warn!(job = %job.id, error = %e, "could not delete a finished job; it will run again harmlessly");
            }
        }
        Err(e) => {
            metrics::counter!("certeasy_jobs_total", "kind" => kind, "outcome" => "error")
                .increment(1);
            if job.attempts >= inner.settings.max_attempts {
                tracing::error!(job = %job.id, kind, attempts = job.attempts, error = %e, "job failed too often; giving up");
                give_up(inner, &job, &e).await;
            } else {
                let backoff = time::Duration::seconds(2_i64.saturating_pow(job.attempts.min(10)));
                tracing::warn!(job = %job.id, kind, attempts = job.attempts, error = %e, "job failed; will retry");
                let run_at = inner.clock.now() + backoff;
                if let Err(e) = inner
                    .storage
                    .retry_job(job.id, run_at, &e.to_string())
                    .await
                {
                    tracing::warn!(job = %job.id, error = %e, "could not reschedule a job; its lease will expire");
                }
            }
        }
    }
}

/// A job that keeps failing for internal reasons is settled with a server error, so the client
/// sees a final state instead of polling forever.
async fn give_up(inner: &Inner, job: &Job, error: &Error) {
    let now = inner.clock.now();
    let problem = Problem::new(
        ProblemType::ServerInternal,
        "The server could not complete this request; please try again",
    );
    let settled = match job.kind {
        JobKind::Validate(id) => inner
            .storage
            .record_validation(id, Err(problem), now)
            .await
            .map(|_| ()),
        JobKind::Finalize(id) => inner.storage.fail_order(id, problem, now).await.map(|_| ()),
    };
    if let Err(e) = settled {
        tracing::error!(job = %job.id, error = %e, cause = %error, "could not settle an abandoned job");
    }
    if let Err(e) = inner.storage.complete_job(job.id).await {
        tracing::warn!(job = %job.id, error = %e, "could not delete an abandoned job");
    }
}

async fn validate(inner: &Inner, id: ChallengeId) -> Result<(), Error> {
    let challenge = inner
        .storage
        .challenge(id)
        .await?
        .ok_or_else(|| Error::Missing(format!("challenge {id}")))?;
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
    let key_authorization = format!("{}.{}", challenge.token, account.thumbprint);
    let span = tracing::info_span!("validation", account_id = %account.id, authz_id = %authz.id, challenge = challenge.kind.as_str(), identifier = %authz.identifier);
    let outcome = inner
        .validator
        .validate(
            &authz.identifier,
            challenge.kind,
            &challenge.token,
            &key_authorization,
        )
        .instrument(span.clone())
        .await;
    match &outcome {
        Ok(()) => span.in_scope(|| tracing::info!("validation succeeded")),
        Err(p) => span.in_scope(
            || tracing::info!(problem = p.kind.as_str(), detail = %p.detail, "validation failed"),
        ),
    }
    metrics::counter!("certeasy_validations_total", "type" => challenge.kind.as_str(), "outcome" => if outcome.is_ok() { "valid" } else { "invalid" }).increment(1);
    let recorded = inner
        .storage
        .record_validation(id, outcome, inner.clock.now())
        .await?;
    if recorded.changed {
        inner.hook.on_validation(&recorded).await;
    }
    Ok(())
}

async fn finalize(inner: &Inner, id: OrderId) -> Result<(), Error> {
    let now = inner.clock.now();
    let order = inner
        .storage
        .order(id, now)
        .await?
        .ok_or_else(|| Error::Missing(format!("order {id}")))?;
    if order.status != acme_core::status::OrderStatus::Processing {
        // Already settled (a repeat after a crash between commit and job deletion).
        return Ok(());
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
                .fail_order(id, Problem::new(ProblemType::BadCsr, e.to_string()), now)
                .await?;
            return Ok(());
        }
    };
    let not_before = order.not_before.unwrap_or(now - inner.settings.backdate);
    // A certificate can never outlive the CA that signs it.
    let not_after = order
        .not_after
        .unwrap_or(not_before + inner.settings.default_validity)
        .min(inner.ca.issuing_not_after());
    let issued = match inner
        .ca
        .issue(&checked, &order.identifiers, not_before, not_after)
    {
        Ok(issued) => issued,
        Err(e) => {
            tracing::error!(order_id = %id, error = %e, "signing failed");
            inner
                .storage
                .fail_order(
                    id,
                    Problem::new(
                        ProblemType::ServerInternal,
                        "The CA could not sign the certificate",
                    ),
                    now,
                )
                .await?;
            return Ok(());
        }
    };
    let cert = storage::model::NewCertificate {
        serial: issued.serial,
        der: issued.der,
        chain_pem: issued.chain_pem,
        not_before: issued.not_before,
        not_after: issued.not_after,
    };
    let stored = inner
        .storage
        .complete_order(id, cert, inner.clock.now())
        .await?;
    tracing::info!(order_id = %id, account_id = %order.account_id, serial = %stored.serial, "certificate issued");
    metrics::counter!("certeasy_certificates_issued_total").increment(1);
    Ok(())
}
