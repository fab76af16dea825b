//! The job loops and the handle that starts and stops them: a loop takes a free place, claims a
//! due job, runs it (`crate::lease`), and sleeps until the next one is due or a request wakes it.
//! Requests that run their work at once go through the same places ([`Workers::try_slot`]).

use std::sync::Arc;

use acme_core::clock::SharedClock;
use issuance::CaHandle;
use issuance::CheckedCsr;
use issuance::IssuerName;
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
use storage::model::Order;
use tokio::sync::Notify;
use tokio::sync::Semaphore;
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;
use validation::Validator;

use crate::context::WorkerContext;
use crate::context::job_kind_name;
use crate::finalizations::AtOnceFinalization;
use crate::finalizations::Prepared;
use crate::finalizations::finalize;
use crate::finalizations::finalize_at_once;
use crate::lease::finish_job;
use crate::lease::give_up;
use crate::settings::WorkerSettings;
use crate::validations::validate;
use crate::validations::validate_at_once;

/// Handle to the running workers; cheap to clone. Dropping it does not stop them: call
/// [`Workers::shutdown`].
#[derive(Clone)]
pub struct Workers {
    context: Arc<WorkerContext>,
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
        ca: impl Into<CaHandle>,
        clock: SharedClock,
        settings: WorkerSettings,
        hook: Arc<dyn ValidationHook>,
    ) -> Self {
        let settings_concurrency = settings.concurrency.max(1);
        let attempt_timeout = settings
            .attempt_timeout
            .unwrap_or_else(|| WorkerSettings::attempt_backstop(validator.worst_case_attempt()));
        let context = Arc::new(WorkerContext {
            attempt_timeout,
            storage,
            validator,
            ca: ca.into(),
            clock,
            settings,
            hook,
            wake: Notify::new(),
            slots: Arc::new(Semaphore::new(settings_concurrency)),
        });
        let cancel = CancellationToken::new();
        let mut tasks = JoinSet::new();
        for n in 0..settings_concurrency {
            let context = Arc::clone(&context);
            let cancel = cancel.clone();
            tasks.spawn(
                async move { run_loop(&context, &cancel).await }
                    .instrument(tracing::info_span!("worker", n)),
            );
        }
        Self {
            context,
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
        Arc::clone(&self.context.slots)
            .try_acquire_owned()
            .ok()
            .map(Slot::new)
    }

    /// The lease a job created for [`Workers::run_claimed`] is claimed under.
    pub fn lease(&self) -> time::Duration {
        self.context.settings.lease
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
        let context = Arc::clone(&self.context);
        let kind = job_kind_name(&job);
        self.direct.spawn(
            async move {
                run_job(&context, job, prepared).await;
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
        self.context.wake.notify_one();
    }

    /// Stops the loops after their current job.
    pub async fn shutdown(&self) {
        self.cancel.cancel();
        self.context.wake.notify_waiters();
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
        let context = Arc::clone(&self.context);
        self.direct.spawn(
            async move {
                validate_at_once(&context, target, wait, held, reply).await;
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
        let context = Arc::clone(&self.context);
        let at_once = AtOnceFinalization {
            order,
            csr_der,
            csr,
            wait,
            held,
        };
        self.direct.spawn(
            async move {
                finalize_at_once(&context, at_once, reply).await;
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

async fn run_loop(cx: &WorkerContext, cancel: &CancellationToken) {
    let mut missing: Option<IssuerName> = None;
    while !cancel.is_cancelled() {
        // An instance without the active issuer claims nothing: each finalization it claimed
        // would fail its attempt and count towards giving the order up, while an instance that
        // has the issuer (or this one after a reload) can finish it. Validations wait with it;
        // `/readyz` says why, so the load balancer has taken the instance out meanwhile.
        let now_missing = missing_active_issuer(cx).await;
        if now_missing != missing {
            match &now_missing {
                Some(name) => {
                    tracing::error!(issuer = %name, "the active issuer is not loaded on this instance: no job is claimed here until a reload adds it to ca.issuers");
                }
                None => tracing::info!("the active issuer is loaded: claiming jobs again"),
            }
            missing = now_missing;
        }
        if missing.is_some() {
            sleep_or_cancel(cancel, ra::issuers::ACTIVE_ISSUER_REFRESH).await;
            continue;
        }
        // A place first, then a claim: a claimed job never waits for one.
        let slot = tokio::select! {
            slot = Arc::clone(&cx.slots).acquire_owned() => slot,
            () = cancel.cancelled() => return,
        };
        let Ok(slot) = slot else {
            return; // The semaphore is never closed; if it were, there would be no more work.
        };
        let now = cx.clock.now();
        match cx
            .storage
            .claim_job(now, cx.settings.lease, cx.settings.max_attempts)
            .await
        {
            Ok(Some(job)) => {
                run_job(cx, job, None).await;
                drop(slot);
            }
            Ok(None) => {
                drop(slot);
                idle(cx, cancel).await;
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

/// The active issuer when this instance's set in force cannot sign with it.
async fn missing_active_issuer(cx: &WorkerContext) -> Option<IssuerName> {
    let active = cx.settings.active_issuer.as_ref()?;
    active.missing_from(&cx.ca.current()).await
}

async fn idle(cx: &WorkerContext, cancel: &CancellationToken) {
    let mut wait = cx.settings.poll_interval;
    if let Ok(Some(due)) = cx.storage.next_job_due().await {
        let until = due - cx.clock.now();
        if until <= time::Duration::ZERO {
            return;
        }
        if let Ok(until) = std::time::Duration::try_from(until) {
            wait = wait.min(until);
        }
    }
    tokio::select! {
        () = cx.wake.notified() => {}
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

async fn run_job(cx: &WorkerContext, job: Job, prepared: Option<Prepared>) {
    let kind = job_kind_name(&job);
    if job.exhausted {
        // Its last allowed attempt ended without a report (the worker crashed or lost its
        // lease): running it again would exceed max-attempts, so it is settled instead.
        tracing::error!(job = %job.id, kind, claims = job.attempts, "job used up its attempts without finishing; giving up");
        metrics::counter!("certeasy_jobs_total", "kind" => kind, "outcome" => "exhausted")
            .increment(1);
        give_up(
            cx,
            &job,
            "its attempts were used up by workers that stopped",
        )
        .await;
        return;
    }
    let work = async {
        match job.kind {
            JobKind::Validate(id) => validate(cx, &job, id).await,
            JobKind::Finalize(id) => finalize(cx, &job, id, prepared).await,
        }
    };
    finish_job(cx, &job, work).await;
}
