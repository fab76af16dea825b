//! Side effects of a validation verdict (rate-limit spends, pausing): the policy that the job
//! runner calls through [`ValidationHook`].
//!
//! They run just before the transaction that records the verdict, never inside it (so the
//! database write lock is not held while a limiter talks to Redis), and never after it: a client
//! that re-orders the instant it sees `invalid` must already find the failure counted.
//!
//! The same hooks decide whether a failed attempt that could be repeated (a dns-01 record that
//! may still be propagating) is: [`ValidationHook::grants_retry`]. A retry is a courtesy to a
//! pair that has not failed lately. A pair with a failure still in its failed-validation bucket,
//! counting towards a pause, paused, or in its re-pause grace gets none, so a failing client
//! costs one attempt per challenge, as before retries existed, and its failures are counted as
//! promptly as the verdict of its first attempt.

use std::future::Future;
use std::pin::Pin;

use acme_core::identifier::Identifier;
use acme_core::ids::AccountId;
use ratelimits::limit::LimitName;
use ratelimits::limiter::Limiter;
use storage::model::ValidationRecorded;
use time::OffsetDateTime;

use crate::limits::pair;

/// Observer of validation verdicts.
pub trait ValidationHook: Send + Sync + 'static {
    /// Called once per verdict of a challenge that was still processing (its final one: an
    /// attempt that failed and is retried is no verdict), before the verdict is
    /// committed (and so before any client can see it). A worker that dies between the two runs
    /// it again on the retry: spends may over-count by one, never under-count.
    fn on_validation<'a>(
        &'a self,
        recorded: &'a ValidationRecorded,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

    /// Whether `account`'s challenge for `identifier`, whose attempt just failed in a way that
    /// may be repeated, may be attempted again instead of failing now. Asked by
    /// [`crate::attempts::decide`] only once every other condition of a retry holds; nothing is
    /// spent. The default grants it.
    fn grants_retry<'a>(
        &'a self,
        account: AccountId,
        identifier: &'a Identifier,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        let _ = (account, identifier);
        Box::pin(std::future::ready(true))
    }
}

/// Whether the pair's bucket of `limit` is full: nothing of it spent lately. A disabled limit
/// has no bucket and holds nothing against the pair; a limiter that cannot tell refuses (a retry
/// is a courtesy, never owed).
async fn bucket_full(
    limiter: &Limiter,
    now: OffsetDateTime,
    limit: LimitName,
    account: AccountId,
    identifier: &Identifier,
) -> bool {
    match limiter.show(now, limit, &pair(account, identifier)).await {
        Ok(None) => true,
        Ok(Some(state)) => state.remaining >= state.limit.burst(),
        Err(e) => {
            tracing::warn!(error = %e, limit = %limit, "could not read a pair's bucket; no retry");
            false
        }
    }
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
    limiter: std::sync::Arc<Limiter>,
    clock: acme_core::clock::SharedClock,
}

impl FailedValidationHook {
    /// A hook spending through `limiter`.
    pub fn new(limiter: std::sync::Arc<Limiter>, clock: acme_core::clock::SharedClock) -> Self {
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
                LimitName::FailedValidationPerAccountIdentifier,
                pair(recorded.account_id, &recorded.identifier),
                1,
            )
            .with_kind(ratelimits::batch::Kind::SpendOnly);
            if let Err(e) = self.limiter.check(self.clock.now(), &[request]).await {
                tracing::warn!(error = %e, "could not count a failed validation");
            }
        })
    }

    /// Only a pair whose failed-validation bucket is full: one failure within the limit's
    /// emission interval and its next challenge fails at its first attempt.
    fn grants_retry<'a>(
        &'a self,
        account: AccountId,
        identifier: &'a Identifier,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        Box::pin(bucket_full(
            &self.limiter,
            self.clock.now(),
            LimitName::FailedValidationPerAccountIdentifier,
            account,
            identifier,
        ))
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

    /// Granted only if every hook grants it.
    fn grants_retry<'a>(
        &'a self,
        account: AccountId,
        identifier: &'a Identifier,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        Box::pin(async move {
            for hook in &self.0 {
                if !hook.grants_retry(account, identifier).await {
                    return false;
                }
            }
            true
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
    limiter: std::sync::Arc<Limiter>,
    storage: storage::Storage,
    clock: acme_core::clock::SharedClock,
    grace: time::Duration,
}

impl ZombieHook {
    /// A hook pausing through `storage` with the given re-pause grace.
    pub fn new(
        limiter: std::sync::Arc<Limiter>,
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
            LimitName::ConsecutiveFailuresPerAccountIdentifier,
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
        let audit = crate::audit::Requester::system().event(
            crate::audit::AuditKind::AccountPaused,
            format!(
                "paused by the server: the pair's validations failed {} times in a row",
                verdict
                    .binding
                    .as_ref()
                    .map_or_else(|| "too many".to_owned(), |b| b.burst.to_string())
            ),
        );
        match self
            .storage
            .pause_identifiers(
                recorded.account_id,
                std::slice::from_ref(&recorded.identifier),
                self.grace,
                now,
                &audit,
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
    /// Only a pair that is not paused, not in its re-pause grace (where failures go uncounted,
    /// so its bucket would say nothing) and owes nothing to its consecutive-failure bucket: a
    /// zombie's failing orders cost one attempt each.
    fn grants_retry<'a>(
        &'a self,
        account: AccountId,
        identifier: &'a Identifier,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        Box::pin(async move {
            match self.storage.pause_state(account, identifier).await {
                Ok(None) => {}
                Ok(Some(state)) => match state.unpaused_at {
                    None => return false,
                    Some(at) if self.clock.now() - at < self.grace => return false,
                    Some(_) => {}
                },
                Err(e) => {
                    tracing::warn!(error = %e, "could not read the pause state; no retry");
                    return false;
                }
            }
            bucket_full(
                &self.limiter,
                self.clock.now(),
                LimitName::ConsecutiveFailuresPerAccountIdentifier,
                account,
                identifier,
            )
            .await
        })
    }

    fn on_validation<'a>(
        &'a self,
        recorded: &'a ValidationRecorded,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            match recorded.status {
                acme_core::status::ChallengeStatus::Invalid => self.failed(recorded).await,
                acme_core::status::ChallengeStatus::Valid => {
                    let name = LimitName::ConsecutiveFailuresPerAccountIdentifier;
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
