//! One attempt of a claimed job: run under a lease a heartbeat renews and a backstop timeout,
//! then the job deleted, rescheduled with a backoff after an error, or given up after too many.
//!
//! A claim is named by the job's id and its claim count, and every renewal, release and deletion
//! names it: a worker that lost its lease can never touch a job another worker now holds. While an
//! attempt runs, a heartbeat renews the lease every third of it; a worker that finds its lease
//! taken abandons the attempt, so a slow attempt never runs twice at once, and a crashed worker's
//! job is claimed again within one lease, by any instance. Each attempt is also cut off by a
//! backstop timeout (twice the validator's worst case plus 5 s), which counts as a transient
//! error. A transient error reschedules the job with a doubling backoff; a job claimed more than
//! `max-attempts` times (including one whose worker died on its last attempt, which the claim
//! returns as exhausted instead of running it) settles its object with `serverInternal`, so
//! clients never poll forever. Recording is idempotent: a job that runs twice (a crash between
//! the commit and the deletion) changes nothing.

use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use acme_core::status::OrderStatus;
use storage::model::Job;
use storage::model::JobKind;
use storage::model::StatusChange;

use crate::context::Error;
use crate::context::JobAfter;
use crate::context::WorkerContext;
use crate::context::job_kind_name;

/// How one attempt ended.
enum Attempt {
    /// It ran to the end (or hit the backstop, as `Error::TimedOut`).
    Finished(Result<JobAfter, Error>),
    /// Another worker claimed the job while this one ran: it is that worker's now.
    LeaseLost,
}

/// Runs `work`, one attempt of `job`, under its lease, and deals with how it ended: the job is
/// deleted once done (unless the attempt's last transaction already did), rescheduled with a
/// backoff after an error, or given up after too many.
pub(crate) async fn finish_job(
    cx: &WorkerContext,
    job: &Job,
    work: impl Future<Output = Result<JobAfter, Error>>,
) {
    let kind = job_kind_name(job);
    let started = std::time::Instant::now();
    let attempt = attempt_under_lease(cx, job, work).await;
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
        Attempt::Finished(Ok(after)) => {
            metrics::counter!("certeasy_jobs_total", "kind" => kind, "outcome" => "done")
                .increment(1);
            if after == JobAfter::Delete
                && let Err(e) = cx.storage.complete_job(job).await
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
            if failed_claims >= cx.settings.max_attempts {
                tracing::error!(job = %job.id, kind, attempts = job.attempts, error = %e, "job failed too often; giving up");
                give_up(cx, job, &e.to_string()).await;
            } else {
                let backoff = time::Duration::seconds(2_i64.saturating_pow(failed_claims.min(10)));
                tracing::warn!(job = %job.id, kind, attempts = job.attempts, error = %e, "job failed; will retry");
                let run_at = cx.clock.now() + backoff;
                if let Err(e) = cx.storage.retry_job(job, run_at, &e.to_string()).await {
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
    cx: &WorkerContext,
    job: &Job,
    work: impl Future<Output = Result<JobAfter, Error>>,
) -> Attempt {
    let limit = cx.attempt_timeout;
    // Dropping the attempt on timeout cancels its I/O; an open transaction rolls back.
    let work = async {
        tokio::time::timeout(limit, work)
            .await
            .unwrap_or(Err(Error::TimedOut(limit)))
    };
    tokio::select! {
        result = work => Attempt::Finished(result),
        () = heartbeat(cx, job) => Attempt::LeaseLost,
    }
}

/// Renews the lease every third of it; returns only once another worker has claimed the job.
/// A database error is not a loss: the lease may well still be ours, so it tries again next beat.
async fn heartbeat(cx: &WorkerContext, job: &Job) {
    let every = cx.settings.heartbeat_every();
    loop {
        tokio::time::sleep(every).await;
        match cx
            .storage
            .renew_job_lease(job, cx.clock.now(), cx.settings.lease)
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
pub(crate) async fn give_up(cx: &WorkerContext, job: &Job, cause: &str) {
    let now = cx.clock.now();
    let problem = Problem::new(
        ProblemType::ServerInternal,
        "The server could not complete this request; please try again",
    );
    let settled = match job.kind {
        // Recorded and deleted together; a challenge already decided settles the job all the
        // same (or, if another claim overtook this one, it is left to it).
        JobKind::Validate(id) => cx
            .storage
            .record_validation(
                id,
                Err(problem),
                cx.settings.valid_authorization_lifetime,
                now,
                Some(job),
            )
            .await
            .map(|_| true),
        // An order already invalid settles the job too; one in another state (valid: a finished
        // attempt whose job was not deleted) leaves it to be deleted here.
        JobKind::Finalize(id) => cx
            .storage
            .fail_order(id, problem, now, Some(job))
            .await
            .map(|change| match change {
                StatusChange::Changed(_) => true,
                StatusChange::Unchanged(order) => order.status == OrderStatus::Invalid,
            }),
    };
    match settled {
        Ok(true) => return,
        Ok(false) => {
            tracing::info!(job = %job.id, "abandoned job's object was already settled");
        }
        Err(storage::error::Error::NotFound) => {
            tracing::warn!(job = %job.id, "abandoned job's object no longer exists");
        }
        // A verdict for a challenge that was never started: nothing to settle, and claiming the
        // job again would only find the same.
        Err(storage::error::Error::Corrupt(detail)) => {
            tracing::error!(job = %job.id, detail, "abandoned job's object cannot be settled");
        }
        Err(e) => {
            // The job is kept: once its lease runs out it is claimed as exhausted and settled
            // again, so the object still reaches a final state.
            tracing::error!(job = %job.id, error = %e, cause, "could not settle an abandoned job; will try again");
            return;
        }
    }
    if let Err(e) = cx.storage.complete_job(job).await {
        tracing::warn!(job = %job.id, error = %e, "could not delete an abandoned job");
    }
}
