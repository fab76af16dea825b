//! Side effects of a validation verdict (rate-limit spends, pausing): the policy that the job
//! runner calls through [`ValidationHook`].
//!
//! They run just before the transaction that records the verdict, never inside it (so the
//! database write lock is not held while a limiter talks to Redis), and never after it: a client
//! that re-orders the instant it sees `invalid` must already find the failure counted.

use std::future::Future;
use std::pin::Pin;

use acme_core::problem::Problem;
use storage::model::ChallengeAttempt;
use storage::model::ValidationRecorded;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::limits::pair;

/// The problem a challenge is failed with after `attempt` attempts, the last one ending at `at`
/// with `last`, the earlier ones recorded in `earlier` (empty when it failed at once).
///
/// The type is the last attempt's; the detail starts with the last attempt's (what clients show)
/// and then lists every attempt with its time, type and detail. RFC 8555 §6.7.1 subproblems are
/// about identifiers, not attempts, so the history is text in the detail, not a structure.
pub fn final_problem(
    last: Problem,
    attempt: u32,
    at: OffsetDateTime,
    earlier: &[ChallengeAttempt],
) -> Problem {
    if earlier.is_empty() {
        return last;
    }
    let stamp = |t: OffsetDateTime| t.format(&Rfc3339).unwrap_or_else(|_| t.to_string());
    let mut history: Vec<String> = earlier
        .iter()
        .map(|a| {
            format!(
                "attempt {} at {} ({}): {}",
                a.attempt,
                stamp(a.at),
                a.problem.kind.as_str(),
                a.problem.detail
            )
        })
        .collect();
    history.push(format!(
        "attempt {attempt} at {} ({}): {}",
        stamp(at),
        last.kind.as_str(),
        last.detail
    ));
    let detail = format!(
        "{} (failed after {attempt} attempts: {})",
        last.detail,
        history.join("; ")
    );
    Problem { detail, ..last }
}

/// Observer of validation verdicts.
pub trait ValidationHook: Send + Sync + 'static {
    /// Called once per verdict of a challenge that was still processing (its final one: an
    /// attempt that fails transiently and is retried is no verdict), before the verdict is
    /// committed (and so before any client can see it). A worker that dies between the two runs
    /// it again on the retry: spends may over-count by one, never under-count.
    fn on_validation<'a>(
        &'a self,
        recorded: &'a ValidationRecorded,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;
}

/// A hook that does nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHook;

impl ValidationHook for NoHook {
    fn on_validation<'a>(
        &'a self,
        _recorded: &'a ValidationRecorded,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(async {})
    }
}

/// Spends one failed-validation token for the (account, identifier) pair of every challenge that
/// turns invalid (layer 4 of the limiter chain). Spend-only: an already exhausted bucket stays
/// exhausted, and a limiter failure never affects the verdict that was recorded.
pub struct FailedValidationHook {
    limiter: std::sync::Arc<ratelimits::limiter::Limiter>,
    clock: acme_core::clock::SharedClock,
}

impl FailedValidationHook {
    /// A hook spending through `limiter`.
    pub fn new(
        limiter: std::sync::Arc<ratelimits::limiter::Limiter>,
        clock: acme_core::clock::SharedClock,
    ) -> Self {
        Self { limiter, clock }
    }
}

impl ValidationHook for FailedValidationHook {
    fn on_validation<'a>(
        &'a self,
        recorded: &'a ValidationRecorded,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            if recorded.status != acme_core::status::ChallengeStatus::Invalid {
                return;
            }
            let request = ratelimits::limiter::Request::new(
                ratelimits::limit::LimitName::FailedValidationPerAccountIdentifier,
                pair(recorded.account_id, &recorded.identifier),
                1,
            )
            .with_kind(ratelimits::batch::Kind::SpendOnly);
            if let Err(e) = self.limiter.check(self.clock.now(), &[request]).await {
                tracing::warn!(error = %e, "could not count a failed validation");
            }
        })
    }
}

/// Runs several hooks in order.
pub struct HookChain(pub Vec<std::sync::Arc<dyn ValidationHook>>);

impl ValidationHook for HookChain {
    fn on_validation<'a>(
        &'a self,
        recorded: &'a ValidationRecorded,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            for hook in &self.0 {
                hook.on_validation(recorded).await;
            }
        })
    }
}

/// Zombie-client pausing: each failed validation spends one token of the pair's
/// consecutive-failure bucket; an exhausted bucket pauses the pair; any success empties the debt.
///
/// A pair unpaused less than `grace` ago is neither counted nor paused, and its bucket was reset
/// when it was unpaused, so after the grace the count starts fresh rather than from the old,
/// nearly empty bucket.
pub struct ZombieHook {
    limiter: std::sync::Arc<ratelimits::limiter::Limiter>,
    storage: storage::Storage,
    clock: acme_core::clock::SharedClock,
    grace: time::Duration,
}

impl ZombieHook {
    /// A hook pausing through `storage` with the given re-pause grace.
    pub fn new(
        limiter: std::sync::Arc<ratelimits::limiter::Limiter>,
        storage: storage::Storage,
        clock: acme_core::clock::SharedClock,
        grace: time::Duration,
    ) -> Self {
        Self {
            limiter,
            storage,
            clock,
            grace,
        }
    }

    async fn failed(&self, recorded: &ValidationRecorded) {
        let now = self.clock.now();
        match self
            .storage
            .pause_state(recorded.account_id, &recorded.identifier)
            .await
        {
            Ok(Some(state)) => match state.unpaused_at {
                // Still paused (the validation started before the pause): nothing to count.
                None => return,
                Some(at) if now - at < self.grace => {
                    metrics::counter!("certeasy_pauses_total", "outcome" => "skipped_grace")
                        .increment(1);
                    return;
                }
                Some(_) => {}
            },
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "could not read the pause state; counting the failure anyway");
            }
        }
        let request = ratelimits::limiter::Request::new(
            ratelimits::limit::LimitName::ConsecutiveFailuresPerAccountIdentifier,
            pair(recorded.account_id, &recorded.identifier),
            1,
        );
        let verdict = match self.limiter.check(now, &[request]).await {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "could not count a consecutive failure");
                return;
            }
        };
        if verdict.fail_open {
            return;
        }
        // The N-th consecutive failure empties a bucket of N: that one pauses the pair.
        let exhausted =
            !verdict.allowed || verdict.binding.as_ref().is_some_and(|b| b.remaining == 0);
        if !exhausted {
            return;
        }
        match self
            .storage
            .pause_identifiers(
                recorded.account_id,
                std::slice::from_ref(&recorded.identifier),
                self.grace,
                now,
            )
            .await
        {
            Ok(outcomes) => {
                for (identifier, outcome) in outcomes {
                    let label = match outcome {
                        storage::model::PauseOutcome::Paused => "paused",
                        storage::model::PauseOutcome::Repaused => "repaused",
                        storage::model::PauseOutcome::SkippedGrace => "skipped_grace",
                        storage::model::PauseOutcome::AlreadyPaused => "already_paused",
                    };
                    metrics::counter!("certeasy_pauses_total", "outcome" => label).increment(1);
                    tracing::info!(account_id = %recorded.account_id, identifier = %identifier, outcome = label, "zombie pausing");
                }
            }
            Err(e) => tracing::error!(error = %e, "could not pause a failing pair"),
        }
    }
}

impl ValidationHook for ZombieHook {
    fn on_validation<'a>(
        &'a self,
        recorded: &'a ValidationRecorded,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            match recorded.status {
                acme_core::status::ChallengeStatus::Invalid => self.failed(recorded).await,
                acme_core::status::ChallengeStatus::Valid => {
                    let name =
                        ratelimits::limit::LimitName::ConsecutiveFailuresPerAccountIdentifier;
                    if self
                        .limiter
                        .limit_for(name, &pair(recorded.account_id, &recorded.identifier))
                        .is_some()
                        && let Err(e) = self
                            .limiter
                            .reset(name, &pair(recorded.account_id, &recorded.identifier))
                            .await
                    {
                        tracing::warn!(error = %e, "could not reset the consecutive-failure count after a success");
                    }
                }
                _ => {}
            }
        })
    }
}
