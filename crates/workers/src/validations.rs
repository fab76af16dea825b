//! Validation jobs: one attempt at a challenge as the validator makes it, then what
//! `ra::attempts::decide` says it comes to (valid, invalid, or a retry) recorded.

use acme_core::ids::ChallengeId;
use acme_core::problem::{Problem, ProblemType};
use acme_core::status::{ChallengeStatus, ChallengeType};
use ra::attempts::AttemptOutcome;
use ra::attempts::AttemptsSoFar;
use ra::attempts::Decision;
use ra::in_flight::Held;
use ra::jobs::ValidationTarget;
use storage::evidence::Evidence;
use storage::model::Challenge;
use storage::model::ChallengeStart;
use storage::model::Job;
use storage::model::ValidationRecorded;
use tokio::sync::oneshot;
use tracing::Instrument;

use crate::context::Error;
use crate::context::JobAfter;
use crate::context::WorkerContext;
use crate::lease::finish_job;

/// A validation job from the queue or one claimed by its request: what it needs is read again,
/// since a request that validates at once does so without a job (`validate_at_once`).
pub(crate) async fn validate(
    cx: &WorkerContext,
    job: &Job,
    id: ChallengeId,
) -> Result<JobAfter, Error> {
    let Some(target) = load_validation(cx, id).await? else {
        return Ok(JobAfter::Delete);
    };
    let span = validation_span(&target);
    let outcome = attempt_validation(cx, &target, &span).await;
    record_attempt(cx, job, &target, outcome, &span).await
}

/// Validates before anything is recorded; see [`ra::jobs::JobRunner::validate_at_once`].
pub(crate) async fn validate_at_once(
    cx: &WorkerContext,
    target: ValidationTarget,
    wait: std::time::Duration,
    held: Held,
    reply: oneshot::Sender<Result<Challenge, ra::Error>>,
) {
    let span = validation_span(&target);
    let id = target.challenge.id;
    let attempt = attempt_validation(cx, &target, &span);
    tokio::pin!(attempt);
    let early = tokio::select! {
        outcome = &mut attempt => Some(outcome),
        () = tokio::time::sleep(wait) => None,
    };
    if let Some(Ok(seen)) = &early {
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
        cx.hook.on_validation(&verdict).await;
        let now = cx.clock.now();
        let recorded = cx
            .storage
            .record_valid_at_once_with_evidence(
                id,
                &kept(seen),
                valid_lifetime(cx, seen.persist_until, now),
                now,
            )
            .await;
        drop(held);
        // Logged and counted once recorded: a challenge started elsewhere, or one that could
        // not start, got no verdict of this request.
        if let Ok(ChallengeStart::Started { .. }) = recorded {
            span.in_scope(|| tracing::info!(attempt = 1, "validation succeeded"));
            metrics::counter!("certeasy_validations_total", "type" => target.challenge.kind.as_str(), "outcome" => "valid").increment(1);
        }
        let _ = reply.send(answer(recorded));
        return;
    }
    // A failure, or an attempt still running: recorded the durable way, a started challenge and
    // a job that settles it (a retry scheduled, or the verdict after the hook has spent).
    let started = cx
        .storage
        .start_challenge_claimed(id, cx.clock.now(), cx.settings.lease)
        .await;
    drop(held);
    let (started, job) = match started {
        Ok(ChallengeStart::Started {
            challenge,
            job: Some(job),
        }) => (challenge, job),
        // Started first by another instance, or unable to start (its authorization decided
        // meanwhile): that outcome stands, and this attempt's is dropped.
        other => {
            let _ = reply.send(answer(other));
            return;
        }
    };
    match early {
        Some(outcome) => {
            finish_job(cx, &job, record_attempt(cx, &job, &target, outcome, &span)).await;
            let answer = cx
                .storage
                .challenge(id)
                .await
                .map(|challenge| challenge.unwrap_or(started))
                .map_err(ra::Error::from);
            let _ = reply.send(answer);
        }
        None => {
            let _ = reply.send(Ok(started));
            let rest = async {
                let outcome = attempt.await;
                record_attempt(cx, &job, &target, outcome, &span).await
            };
            finish_job(cx, &job, rest).await;
        }
    }
}

/// What a request that validated at once is answered, from what storage did: the challenge as it
/// stands, or the refusal of one that could not start (as the queued start would answer).
fn answer(start: Result<ChallengeStart, storage::error::Error>) -> Result<Challenge, ra::Error> {
    match start? {
        ChallengeStart::Started { challenge, .. } | ChallengeStart::Left(challenge) => {
            Ok(challenge)
        }
        ChallengeStart::NotStarted(why) => Err(why.into()),
    }
}

fn validation_span(target: &ValidationTarget) -> tracing::Span {
    tracing::info_span!("validation", account_id = %target.account_id, authz_id = %target.authz_id, challenge = target.challenge.kind.as_str(), identifier = %target.identifier)
}

/// One attempt at `target`'s challenge (and CAA), as the validator makes it; a success says
/// what it established, which is kept with the challenge (storage's `evidence.rs`).
async fn attempt_validation(
    cx: &WorkerContext,
    target: &ValidationTarget,
    span: &tracing::Span,
) -> Result<validation::Evidence, validation::Failure> {
    if cx.settings.always_valid {
        // Test mode: the whole attempt (challenge and CAA) is skipped; see the setting.
        return Ok(validation::Evidence {
            addresses: Vec::new(),
            observed: "test mode (--always-valid): recorded valid without any network traffic"
                .to_owned(),
            caa: vec!["no CAA check: test mode (--always-valid)".to_owned()],
            persist_until: None,
        });
    }
    let key_authorization = format!("{}.{}", target.challenge.token, target.thumbprint);
    let account_uri = cx.settings.account_uris.uri(target.account_id);
    // dns-persist-01 accepts records made with the account's earlier keys (draft §4.2); the
    // other types need only the current one, so nothing is read for them.
    let earlier = if target.challenge.kind == ChallengeType::DnsPersist01 {
        match cx.storage.earlier_thumbprints(target.account_id).await {
            Ok(earlier) => earlier,
            Err(e) => {
                span.in_scope(
                    || tracing::warn!(error = %e, "reading the account's earlier keys failed"),
                );
                return Err(validation::Failure::transient(Problem::new(
                    ProblemType::ServerInternal,
                    "the account's keys could not be read; try again",
                )));
            }
        }
    } else {
        Vec::new()
    };
    let account = validation::AttemptAccount {
        uri: &account_uri,
        thumbprint: &target.thumbprint,
        earlier_thumbprints: &earlier,
        now_unix: cx.clock.now().unix_timestamp(),
    };
    cx.validator
        .attempt(
            &target.identifier,
            target.challenge.kind,
            &target.challenge.token,
            &key_authorization,
            &account,
        )
        .instrument(span.clone())
        .await
}

/// How long a validated authorization lives: `valid-authorization-lifetime`, but never past a
/// dns-persist-01 record's `persistUntil` (draft-ietf-acme-dns-persist-02 §4.1).
fn valid_lifetime(
    cx: &WorkerContext,
    persist_until: Option<i64>,
    now: time::OffsetDateTime,
) -> time::Duration {
    let lifetime = cx.settings.valid_authorization_lifetime;
    match persist_until.and_then(|t| time::OffsetDateTime::from_unix_timestamp(t).ok()) {
        Some(until) => lifetime.min(until - now).max(time::Duration::ZERO),
        None => lifetime,
    }
}

/// The validator's evidence as storage keeps it.
fn kept(evidence: &validation::Evidence) -> Evidence {
    Evidence {
        addresses: evidence.addresses.clone(),
        observed: evidence.observed.clone(),
        caa: evidence.caa.clone(),
    }
}

/// Records what `ra::attempts::decide` makes of one attempt of `job`'s validation: a retry
/// scheduled, or the verdict (after the hook has spent for it), with a valid one's evidence.
async fn record_attempt(
    cx: &WorkerContext,
    job: &Job,
    target: &ValidationTarget,
    outcome: Result<validation::Evidence, validation::Failure>,
    span: &tracing::Span,
) -> Result<JobAfter, Error> {
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
    let mut evidence = Evidence::default();
    let mut persist_until = None;
    let outcome = match outcome {
        Ok(seen) => {
            span.in_scope(|| tracing::info!(attempt, "validation succeeded"));
            evidence = kept(&seen);
            persist_until = seen.persist_until;
            AttemptOutcome::Succeeded
        }
        // The detail may quote (a short, escaped prefix of) what the target served, which is
        // the subscriber's content, not the operator's: it stays out of info-level logs.
        Err(f) => {
            span.in_scope(|| {
                let p = &f.problem;
                tracing::info!(problem = p.kind.as_str(), class = f.class(), attempt, "validation failed");
                tracing::debug!(problem = p.kind.as_str(), detail = %p.detail, "validation failure detail");
            });
            AttemptOutcome::Failed {
                may_propagate: f.may_propagate(),
                problem: f.problem,
            }
        }
    };
    let now = cx.clock.now();
    // Earlier attempts are read only after a retry, so a challenge decided at its first attempt
    // costs no extra query; they date the first attempt and fill the final problem's detail.
    let earlier = if job.retries > 0 && outcome != AttemptOutcome::Succeeded {
        cx.storage.challenge_attempts(id).await?
    } else {
        Vec::new()
    };
    let so_far = AttemptsSoFar {
        account: *account_id,
        identifier,
        authz_expires: *authz_expires,
        retries: job.retries,
        earlier: &earlier,
        now,
    };
    let policy = cx.settings.retry_policy(cx.validator.worst_case_attempt());
    let outcome = match ra::attempts::decide(outcome, &so_far, &policy, cx.hook.as_ref()).await {
        Decision::Valid => Ok(&evidence),
        Decision::Invalid(problem) => Err(problem),
        Decision::Retry { problem, run_at } => {
            // Not a verdict: the challenge stays processing and no hook runs, so the
            // failed-validation limit and zombie pausing count the challenge once, at its final
            // verdict. The attempt and the new due time commit together.
            match cx
                .storage
                .retry_validation(job, id, &problem, now, run_at)
                .await
            {
                Ok(()) => {}
                // The lease ran out and another worker holds the job: it runs the attempt again
                // and decides; nothing was recorded here.
                Err(storage::error::Error::NotFound) => {
                    span.in_scope(|| {
                        tracing::warn!(
                            attempt,
                            "lost the job before scheduling its retry; leaving it to its new holder"
                        )
                    });
                    return Ok(JobAfter::Settled);
                }
                Err(e) => return Err(e.into()),
            }
            span.in_scope(|| tracing::info!(attempt, %run_at, "validation will be retried"));
            metrics::counter!("certeasy_validations_total", "type" => challenge.kind.as_str(), "outcome" => "retried").increment(1);
            // The job is not deleted but released: it is due again at `run_at`.
            return Ok(JobAfter::Settled);
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
    cx.hook.on_validation(&verdict).await;
    cx.storage
        .record_validation_with_evidence(
            id,
            outcome,
            valid_lifetime(cx, persist_until, now),
            now,
            Some(job),
        )
        .await?;
    // Deleted with the verdict, or overtaken by a later claim that will find it recorded.
    Ok(JobAfter::Settled)
}

/// The challenge in `processing`, its authorization and its account: what a job from the queue
/// starts from. `None` when the challenge is already decided (a repeat after a crash between
/// commit and job deletion): validating again would only run the hook a second time.
async fn load_validation(
    cx: &WorkerContext,
    id: ChallengeId,
) -> Result<Option<ValidationTarget>, Error> {
    let challenge = cx
        .storage
        .challenge(id)
        .await?
        .ok_or_else(|| Error::Missing(format!("challenge {id}")))?;
    if challenge.status != ChallengeStatus::Processing {
        return Ok(None);
    }
    let now = cx.clock.now();
    let authz = cx
        .storage
        .authorization(challenge.authz_id, now)
        .await?
        .ok_or_else(|| Error::Missing(format!("authorization {}", challenge.authz_id)))?;
    let account = cx
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
