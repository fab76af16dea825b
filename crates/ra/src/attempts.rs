//! What one validation attempt comes to: the challenge valid, invalid, or attempted again later.
//!
//! The job runner makes the attempt and records what [`decide`] answers; the policy of retries
//! lives here. Only a dns-01 record that may still be propagating is attempted again, at most
//! [`RetryPolicy::retries`] times, only if the retry starts within [`RetryPolicy::window`] of the
//! first failure (so the client sees the verdict while it still polls) and ends before the
//! authorization expires, and only if the validation hook grants it
//! ([`ValidationHook::grants_retry`]: a pair that failed lately gets none, so a failing client
//! costs one attempt per challenge).

use acme_core::identifier::Identifier;
use acme_core::ids::AccountId;
use acme_core::problem::Problem;
use storage::model::ChallengeAttempt;
use time::Duration;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::verdicts::ValidationHook;

/// The longest wait between two attempts of one challenge, whatever the retries and backoff
/// configured: the doubling stops here.
pub const MAX_RETRY_BACKOFF: Duration = Duration::minutes(10);

/// The settings a retry is granted under (`validation.retries`, `retry-backoff`,
/// `retry-window`), and how long an attempt may take at worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts after the first for a challenge whose dns-01 record may still be propagating.
    pub retries: u32,
    /// Wait before the first retry; doubled for each further one, capped at
    /// [`MAX_RETRY_BACKOFF`].
    pub backoff: Duration,
    /// The latest a retry may start, counted from the end of the challenge's first attempt.
    pub window: Duration,
    /// The longest one attempt can take (the validator's worst case): a retry must end before
    /// the authorization expires, or its verdict could not be recorded.
    pub worst_attempt: std::time::Duration,
}

impl RetryPolicy {
    /// The wait before the retry that follows `failed` failed attempts (1 for the first retry):
    /// `backoff` doubled `failed - 1` times, at most [`MAX_RETRY_BACKOFF`].
    pub fn delay(&self, failed: u32) -> Duration {
        let doublings = failed.saturating_sub(1).min(20);
        self.backoff
            .checked_mul(1_i32 << doublings)
            .unwrap_or(MAX_RETRY_BACKOFF)
            .min(MAX_RETRY_BACKOFF)
    }
}

/// How an attempt ended, as the validator told it.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptOutcome {
    /// The target served the key authorization (and CAA allows issuance).
    Succeeded,
    /// It did not, with the problem the subscriber is to see.
    Failed {
        problem: Problem,
        /// Whether the failure may go away by itself (a dns-01 record still propagating): the
        /// only kind of failure ever attempted again.
        may_propagate: bool,
    },
}

/// The challenge an attempt was made for, and its attempts so far.
#[derive(Debug, Clone, Copy)]
pub struct AttemptsSoFar<'a> {
    pub account: AccountId,
    pub identifier: &'a Identifier,
    /// When the challenge's authorization expires.
    pub authz_expires: OffsetDateTime,
    /// Failed attempts before this one that were retried.
    pub retries: u32,
    /// Those attempts as recorded, first first: they date the first failure and fill the final
    /// problem's detail. The caller may leave it empty when `retries` is 0 (nothing to read).
    pub earlier: &'a [ChallengeAttempt],
    /// When this attempt ended.
    pub now: OffsetDateTime,
}

/// What is to be recorded for an attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// The challenge is valid.
    Valid,
    /// The challenge stays processing: `problem` is recorded as this attempt's, and the
    /// challenge is attempted again at `run_at`. Not a verdict, so no hook spends for it.
    Retry {
        problem: Problem,
        run_at: OffsetDateTime,
    },
    /// The challenge is invalid with this problem (the last attempt's, with every attempt's
    /// history in its detail when there were several).
    Invalid(Problem),
}

/// Decides what `outcome`, the attempt that ended at `so_far.now`, comes to. The hook is asked
/// last, and only when every other condition of a retry holds: it is the only check that reads
/// anything.
pub async fn decide(
    outcome: AttemptOutcome,
    so_far: &AttemptsSoFar<'_>,
    policy: &RetryPolicy,
    hook: &dyn ValidationHook,
) -> Decision {
    let (problem, may_propagate) = match outcome {
        AttemptOutcome::Succeeded => return Decision::Valid,
        AttemptOutcome::Failed {
            problem,
            may_propagate,
        } => (problem, may_propagate),
    };
    if may_propagate
        && let Some(run_at) = retry_at(so_far, policy)
        && hook.grants_retry(so_far.account, so_far.identifier).await
    {
        return Decision::Retry { problem, run_at };
    }
    let attempt = so_far.retries.saturating_add(1);
    Decision::Invalid(final_problem(problem, attempt, so_far.now, so_far.earlier))
}

/// When a retry would run, if the settings and the authorization allow one.
fn retry_at(so_far: &AttemptsSoFar<'_>, policy: &RetryPolicy) -> Option<OffsetDateTime> {
    if so_far.retries >= policy.retries {
        return None;
    }
    let first_failed = so_far.earlier.first().map_or(so_far.now, |a| a.at);
    let run_at = so_far.now + policy.delay(so_far.retries.saturating_add(1));
    if run_at - first_failed > policy.window {
        return None;
    }
    let worst = Duration::try_from(policy.worst_attempt).ok()?;
    let ends = run_at.checked_add(worst)?;
    (ends < so_far.authz_expires).then_some(run_at)
}

/// The problem a challenge is failed with after `attempt` attempts, the last one ending at `at`
/// with `last`, the earlier ones recorded in `earlier` (empty when it failed at once).
///
/// The type is the last attempt's; the detail starts with the last attempt's (what clients show)
/// and then lists every attempt with its time, type and detail. RFC 8555 §6.7.1 subproblems are
/// about identifiers, not attempts, so the history is text in the detail, not a structure.
fn final_problem(
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

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::atomic::AtomicU32;
    use std::sync::atomic::Ordering;

    use acme_core::problem::ProblemType;
    use storage::model::ValidationRecorded;

    use super::*;

    /// A hook that answers `grants` and counts how often it was asked.
    struct Grants {
        grants: bool,
        asked: AtomicU32,
    }

    impl Grants {
        fn new(grants: bool) -> Self {
            Self {
                grants,
                asked: AtomicU32::new(0),
            }
        }

        fn asked(&self) -> u32 {
            self.asked.load(Ordering::SeqCst)
        }
    }

    impl ValidationHook for Grants {
        fn on_validation<'a>(
            &'a self,
            _recorded: &'a ValidationRecorded,
        ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
            Box::pin(async {})
        }

        fn grants_retry<'a>(
            &'a self,
            _account: AccountId,
            _identifier: &'a Identifier,
        ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            Box::pin(std::future::ready(self.grants))
        }
    }

    fn start() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_800_000_000).expect("a valid timestamp")
    }

    fn policy() -> RetryPolicy {
        RetryPolicy {
            retries: 2,
            backoff: Duration::seconds(3),
            window: Duration::seconds(10),
            worst_attempt: std::time::Duration::from_secs(12),
        }
    }

    fn missing_record(detail: &str) -> Problem {
        Problem::new(ProblemType::Unauthorized, detail)
    }

    fn propagating(detail: &str) -> AttemptOutcome {
        AttemptOutcome::Failed {
            problem: missing_record(detail),
            may_propagate: true,
        }
    }

    fn earlier_attempt(attempt: u32, at: OffsetDateTime) -> ChallengeAttempt {
        ChallengeAttempt {
            attempt,
            at,
            problem: missing_record(&format!("no record at attempt {attempt}")),
        }
    }

    /// A challenge failing its attempt at `now` after `earlier`, its authorization long valid.
    fn so_far<'a>(
        identifier: &'a Identifier,
        earlier: &'a [ChallengeAttempt],
        now: OffsetDateTime,
    ) -> AttemptsSoFar<'a> {
        AttemptsSoFar {
            account: AccountId(7),
            identifier,
            authz_expires: start() + Duration::days(7),
            retries: u32::try_from(earlier.len()).expect("a few attempts"),
            earlier,
            now,
        }
    }

    fn name() -> Identifier {
        Identifier::dns("example.com").expect("a valid name")
    }

    #[tokio::test]
    async fn a_success_is_valid_without_asking_the_hook() {
        let hook = Grants::new(true);
        let id = name();
        let decision = decide(
            AttemptOutcome::Succeeded,
            &so_far(&id, &[], start()),
            &policy(),
            &hook,
        )
        .await;
        assert_eq!(decision, Decision::Valid);
        assert_eq!(hook.asked(), 0);
    }

    #[tokio::test]
    async fn a_propagating_record_is_retried_after_the_backoff() {
        let hook = Grants::new(true);
        let id = name();
        let decision = decide(
            propagating("no record"),
            &so_far(&id, &[], start()),
            &policy(),
            &hook,
        )
        .await;
        assert_eq!(
            decision,
            Decision::Retry {
                problem: missing_record("no record"),
                run_at: start() + Duration::seconds(3),
            }
        );
        assert_eq!(hook.asked(), 1);
    }

    #[tokio::test]
    async fn the_second_retry_waits_twice_as_long() {
        let hook = Grants::new(true);
        let id = name();
        let earlier = [earlier_attempt(1, start())];
        let now = start() + Duration::seconds(3);
        let decision = decide(
            propagating("still none"),
            &so_far(&id, &earlier, now),
            &policy(),
            &hook,
        )
        .await;
        assert_eq!(
            decision,
            Decision::Retry {
                problem: missing_record("still none"),
                run_at: now + Duration::seconds(6),
            }
        );
    }

    #[tokio::test]
    async fn a_failure_that_cannot_propagate_is_invalid_at_once() {
        let hook = Grants::new(true);
        let id = name();
        let refused = Problem::new(ProblemType::Connection, "connection refused");
        let decision = decide(
            AttemptOutcome::Failed {
                problem: refused.clone(),
                may_propagate: false,
            },
            &so_far(&id, &[], start()),
            &policy(),
            &hook,
        )
        .await;
        assert_eq!(decision, Decision::Invalid(refused));
        assert_eq!(hook.asked(), 0);
    }

    #[tokio::test]
    async fn used_up_retries_end_in_the_verdict_with_every_attempt() {
        let hook = Grants::new(true);
        let id = name();
        let earlier = [
            earlier_attempt(1, start()),
            earlier_attempt(2, start() + Duration::seconds(3)),
        ];
        let now = start() + Duration::seconds(9);
        let decision = decide(
            propagating("never appeared"),
            &so_far(&id, &earlier, now),
            &policy(),
            &hook,
        )
        .await;
        let Decision::Invalid(problem) = decision else {
            panic!("expected the verdict, got {decision:?}");
        };
        assert_eq!(problem.kind, ProblemType::Unauthorized);
        assert!(
            problem
                .detail
                .starts_with("never appeared (failed after 3 attempts: attempt 1 at "),
            "{}",
            problem.detail
        );
        assert!(problem.detail.contains("no record at attempt 2"));
        assert_eq!(hook.asked(), 0);
    }

    #[tokio::test]
    async fn no_retry_starts_after_the_window() {
        let hook = Grants::new(true);
        let id = name();
        // The first retry would start 8 s after the first failure (within 10 s); the second
        // would wait 6 s more, 14 s after it.
        let earlier = [earlier_attempt(1, start())];
        let now = start() + Duration::seconds(8);
        let decision = decide(
            propagating("still none"),
            &so_far(&id, &earlier, now),
            &policy(),
            &hook,
        )
        .await;
        assert!(matches!(decision, Decision::Invalid(_)), "{decision:?}");
        assert_eq!(hook.asked(), 0);
    }

    #[tokio::test]
    async fn no_retry_that_would_end_after_the_authorization_expires() {
        let hook = Grants::new(true);
        let id = name();
        let mut attempt = so_far(&id, &[], start());
        // The retry would start at +3 s and may take 12 s: it must end before +15 s.
        attempt.authz_expires = start() + Duration::seconds(15);
        let decision = decide(propagating("no record"), &attempt, &policy(), &hook).await;
        assert!(matches!(decision, Decision::Invalid(_)), "{decision:?}");
        attempt.authz_expires = start() + Duration::seconds(16);
        let decision = decide(propagating("no record"), &attempt, &policy(), &hook).await;
        assert!(matches!(decision, Decision::Retry { .. }), "{decision:?}");
    }

    #[tokio::test]
    async fn a_hook_refusal_is_the_verdict_at_once() {
        let hook = Grants::new(false);
        let id = name();
        let decision = decide(
            propagating("no record"),
            &so_far(&id, &[], start()),
            &policy(),
            &hook,
        )
        .await;
        assert_eq!(decision, Decision::Invalid(missing_record("no record")));
        assert_eq!(hook.asked(), 1);
    }

    #[tokio::test]
    async fn no_retries_configured_means_none() {
        let hook = Grants::new(true);
        let id = name();
        let none = RetryPolicy {
            retries: 0,
            ..policy()
        };
        let decision = decide(
            propagating("no record"),
            &so_far(&id, &[], start()),
            &none,
            &hook,
        )
        .await;
        assert_eq!(decision, Decision::Invalid(missing_record("no record")));
        assert_eq!(hook.asked(), 0);
    }

    #[test]
    fn retry_delays_double_and_are_capped() {
        let delays: Vec<i64> = (1..=4).map(|n| policy().delay(n).whole_seconds()).collect();
        assert_eq!(delays, [3, 6, 12, 24]);
        assert_eq!(policy().delay(30), MAX_RETRY_BACKOFF);
        assert_eq!(policy().delay(u32::MAX), MAX_RETRY_BACKOFF);
    }
}
