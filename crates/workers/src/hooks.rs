//! Side effects that follow a committed validation verdict (rate-limit spends, pausing).
//!
//! They run after the transaction that recorded the verdict, never inside it, so the database
//! write lock is not held while a limiter talks to Redis.

use std::future::Future;
use std::pin::Pin;

use storage::model::ValidationRecorded;

/// Observer of validation verdicts.
pub trait ValidationHook: Send + Sync + 'static {
    /// Called once per decided challenge (`changed == true`), after commit.
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
            let pair = ratelimits::bucket::BucketId::AccountIdentifier {
                account: recorded.account_id.0,
                identifier: recorded.identifier.value().to_owned(),
            };
            let request = ratelimits::limiter::Request::new(
                ratelimits::limit::LimitName::FailedValidationPerAccountIdentifier,
                pair,
                1,
            )
            .with_kind(ratelimits::batch::Kind::SpendOnly);
            if let Err(e) = self.limiter.check(self.clock.now(), &[request]).await {
                tracing::warn!(error = %e, "could not count a failed validation");
            }
        })
    }
}
