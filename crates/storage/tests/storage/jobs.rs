use std::collections::HashSet;

use acme_core::ids::ChallengeId;
use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use acme_core::status::ChallengeStatus;
use storage::Storage;
use storage::error::Error;
use storage::model::JobKind;
use storage::model::OrderGuards;
use time::Duration;
use time::OffsetDateTime;

use crate::harness;
use crate::harness::Begun;
use crate::harness::Created;
use crate::harness::Started;
use crate::harness::t0;

crate::both_backends!(
    claim_lease_retry_complete,
    concurrent_claimers_never_share,
    a_job_past_its_attempts_is_only_handed_out_to_be_settled,
    only_the_holder_renews_a_lease,
    a_job_created_claimed_is_settled_with_its_outcome,
    a_claimed_job_whose_holder_died_goes_back_to_the_queue,
    a_validation_retry_records_the_attempt_and_reschedules_the_job,
);

/// Starts the first challenge of `n` fresh authorizations, enqueuing `n` validation jobs due at `now`.
async fn enqueue_validations(s: &Storage, n: usize, now: OffsetDateTime) -> Vec<ChallengeId> {
    let acct = harness::account(s, now).await;
    let names: Vec<String> = (0..n).map(|i| format!("job{i}.example.com")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let order = s
        .create_order(
            harness::new_order(acct.id, &names, now, false),
            &OrderGuards::default(),
            now,
        )
        .await
        .unwrap()
        .created();
    let mut started = Vec::new();
    for authz_id in order.authz_ids {
        started.push(harness::start_first_challenge(s, authz_id, now).await);
    }
    started
}

async fn claim_lease_retry_complete(s: &Storage) {
    let now = t0();
    assert_eq!(s.next_job_due().await.unwrap(), None);
    assert_eq!(
        s.claim_job(now, Duration::seconds(30), 3).await.unwrap(),
        None
    );
    let chals = enqueue_validations(s, 2, now).await;
    assert_eq!(s.next_job_due().await.unwrap(), Some(now));
    // Not due yet for an earlier clock.
    assert_eq!(
        s.claim_job(now - Duration::seconds(1), Duration::seconds(30), 3)
            .await
            .unwrap(),
        None
    );

    let a = s
        .claim_job(now, Duration::seconds(30), 3)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(a.kind, JobKind::Validate(chals[0]));
    assert_eq!(a.attempts, 1);
    assert!(!a.exhausted);
    assert_eq!(a.lease_until, now + Duration::seconds(30));
    let b = s
        .claim_job(now, Duration::milliseconds(40_500), 3)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(b.kind, JobKind::Validate(chals[1]));
    assert_eq!(b.lease_until, now + Duration::seconds(41));
    assert_eq!(
        s.claim_job(now + Duration::seconds(29), Duration::seconds(30), 3)
            .await
            .unwrap(),
        None
    );
    // Leased jobs are due again when their lease runs out.
    assert_eq!(
        s.next_job_due().await.unwrap(),
        Some(now + Duration::seconds(30))
    );

    // A worker that died: the lease expires and the job is handed out again.
    let again = s
        .claim_job(now + Duration::seconds(30), Duration::seconds(30), 3)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.id, a.id);
    assert_eq!(again.attempts, 2);
    // The dead worker's claim is stale: it can neither release nor delete the job its successor
    // now holds (a released lease would let a third worker run it alongside the second).
    assert!(matches!(
        s.retry_job(&a, now + Duration::seconds(31), "late").await,
        Err(Error::NotFound)
    ));
    assert!(matches!(s.complete_job(&a).await, Err(Error::NotFound)));

    s.retry_job(&again, now + Duration::seconds(100), "connection refused")
        .await
        .unwrap();
    assert_eq!(
        s.next_job_due().await.unwrap(),
        Some(now + Duration::seconds(41))
    );
    s.complete_job(&b).await.unwrap();
    assert_eq!(
        s.next_job_due().await.unwrap(),
        Some(now + Duration::seconds(100))
    );
    assert_eq!(
        s.claim_job(now + Duration::seconds(99), Duration::seconds(30), 3)
            .await
            .unwrap(),
        None
    );
    let third = s
        .claim_job(now + Duration::seconds(100), Duration::seconds(30), 3)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(third.id, a.id);
    assert_eq!(third.attempts, 3);
    s.complete_job(&third).await.unwrap();
    // Completing twice is refused and changes nothing.
    assert!(matches!(s.complete_job(&third).await, Err(Error::NotFound)));
    assert_eq!(s.next_job_due().await.unwrap(), None);
    assert_eq!(
        s.claim_job(now + Duration::days(1), Duration::seconds(30), 3)
            .await
            .unwrap(),
        None
    );
    assert!(matches!(
        s.retry_job(&third, now, "x").await,
        Err(Error::NotFound)
    ));
}

async fn concurrent_claimers_never_share(s: &Storage) {
    let now = t0();
    let total = 30;
    enqueue_validations(s, total, now).await;
    let mut claimers = tokio::task::JoinSet::new();
    for _ in 0..2 {
        let s = s.clone();
        claimers.spawn(async move {
            let mut mine = Vec::new();
            while let Some(job) = s.claim_job(now, Duration::seconds(60), 3).await.unwrap() {
                mine.push(job.id);
                tokio::task::yield_now().await;
            }
            mine
        });
    }
    let mut seen = HashSet::new();
    while let Some(result) = claimers.join_next().await {
        for id in result.unwrap() {
            assert!(seen.insert(id), "job {id} was handed to two claimers");
        }
    }
    // A claimer may stop early on PostgreSQL when it loses a race for the last rows; whatever is
    // left is still claimable, exactly once.
    while let Some(job) = s.claim_job(now, Duration::seconds(60), 3).await.unwrap() {
        assert!(seen.insert(job.id), "job {} was claimed twice", job.id);
    }
    assert_eq!(seen.len(), total);
}

async fn a_job_past_its_attempts_is_only_handed_out_to_be_settled(s: &Storage) {
    let now = t0();
    let lease = Duration::seconds(10);
    let chals = enqueue_validations(s, 1, now).await;
    // Three workers in a row claim the job and die: each claim is an attempt.
    let mut at = now;
    for n in 1..=3 {
        let job = s.claim_job(at, lease, 3).await.unwrap().unwrap();
        assert_eq!(job.kind, JobKind::Validate(chals[0]));
        assert_eq!(job.attempts, n);
        assert!(!job.exhausted, "attempt {n} of 3 may run");
        assert_eq!(s.claim_job(at, lease, 3).await.unwrap(), None, "leased");
        at = job.lease_until;
    }
    // The fourth claim is not an attempt: the job comes back marked, to be settled, and its
    // lease keeps a second settler away.
    let settle = s.claim_job(at, lease, 3).await.unwrap().unwrap();
    assert!(settle.exhausted, "{settle:?}");
    assert_eq!(settle.attempts, 4);
    assert_eq!(s.claim_job(at, lease, 3).await.unwrap(), None);
    // A settler that died too leaves it exhausted for the next one.
    let again = s
        .claim_job(settle.lease_until, lease, 3)
        .await
        .unwrap()
        .unwrap();
    assert!(again.exhausted);
    // A larger allowance (a configuration change) lets the job run again.
    let rerun = s
        .claim_job(again.lease_until, lease, 10)
        .await
        .unwrap()
        .unwrap();
    assert!(!rerun.exhausted);
    s.complete_job(&rerun).await.unwrap();
    assert_eq!(s.next_job_due().await.unwrap(), None);
}

async fn only_the_holder_renews_a_lease(s: &Storage) {
    let now = t0();
    let lease = Duration::seconds(30);
    enqueue_validations(s, 1, now).await;
    let a = s.claim_job(now, lease, 3).await.unwrap().unwrap();
    assert_eq!(a.lease_until, now + lease);

    // A heartbeat pushes the expiry out; without it the job would be free at now + 30.
    let renewed = s
        .renew_job_lease(&a, now + Duration::seconds(20), lease)
        .await
        .unwrap();
    assert_eq!(renewed, Some(now + Duration::seconds(50)));
    assert_eq!(
        s.claim_job(now + Duration::seconds(45), lease, 3)
            .await
            .unwrap(),
        None,
        "a renewed lease keeps other workers away"
    );
    assert_eq!(
        s.next_job_due().await.unwrap(),
        Some(now + Duration::seconds(50))
    );
    // A late heartbeat with a shorter lease never shrinks it.
    assert_eq!(
        s.renew_job_lease(&a, now + Duration::seconds(21), Duration::seconds(1))
            .await
            .unwrap(),
        Some(now + Duration::seconds(50))
    );

    // The holder stalls past its lease; another worker claims the job.
    let b = s
        .claim_job(now + Duration::seconds(50), lease, 3)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(b.id, a.id);
    assert_eq!(b.attempts, 2);
    assert_eq!(
        s.renew_job_lease(&a, now + Duration::seconds(51), lease)
            .await
            .unwrap(),
        None,
        "the stale holder learns it lost the job"
    );
    assert_eq!(
        s.renew_job_lease(&b, now + Duration::seconds(51), lease)
            .await
            .unwrap(),
        Some(now + Duration::seconds(81))
    );
    assert_eq!(
        s.next_job_due().await.unwrap(),
        Some(now + Duration::seconds(81)),
        "the stale heartbeat changed nothing"
    );

    // A released job (rescheduled) or a finished one has no lease left to renew.
    s.retry_job(&b, now + Duration::seconds(100), "timeout")
        .await
        .unwrap();
    assert_eq!(
        s.renew_job_lease(&b, now + Duration::seconds(60), lease)
            .await
            .unwrap(),
        None
    );
    let c = s
        .claim_job(now + Duration::seconds(100), lease, 3)
        .await
        .unwrap()
        .unwrap();
    s.complete_job(&c).await.unwrap();
    assert_eq!(
        s.renew_job_lease(&c, now + Duration::seconds(101), lease)
            .await
            .unwrap(),
        None
    );
}

/// A fresh order for `name` and the id of its first (http-01) challenge.
async fn order_with_one_challenge(
    s: &Storage,
    name: &str,
    now: OffsetDateTime,
) -> (storage::model::Order, ChallengeId) {
    let acct = harness::account(s, now).await;
    let order = harness::pending_order(s, acct.id, &[name], now).await;
    let authz = s
        .authorization(order.authz_ids[0], now)
        .await
        .unwrap()
        .unwrap();
    (order, authz.challenges[0].id)
}

/// A request that runs the job it creates: the job is inserted already claimed, the queue passes
/// over it while its lease runs, and recording the outcome deletes it in the same transaction.
async fn a_job_created_claimed_is_settled_with_its_outcome(s: &Storage) {
    let now = t0();
    let lease = Duration::seconds(30);
    let (order, chal) = order_with_one_challenge(s, "claimed.example.com", now).await;

    let (started, job) = s
        .start_challenge_claimed(chal, now, lease)
        .await
        .unwrap()
        .started_claimed();
    assert_eq!(started.status, ChallengeStatus::Processing);
    // Read back, the challenge is what the call returned.
    assert_eq!(s.challenge(chal).await.unwrap(), Some(started.clone()));
    let job = job.expect("a new job comes back claimed");
    assert_eq!(job.kind, JobKind::Validate(chal));
    assert_eq!(job.attempts, 1, "its first attempt is counted");
    assert_eq!(job.lease_until, now + lease);
    assert!(!job.exhausted);
    assert_eq!(
        s.claim_job(now, lease, 3).await.unwrap(),
        None,
        "held by its creator"
    );
    // Starting again (a client's repeated POST) creates nothing more and claims nothing.
    let (again, none) = s
        .start_challenge_claimed(chal, now, lease)
        .await
        .unwrap()
        .started_claimed();
    assert_eq!(again.status, ChallengeStatus::Processing);
    assert_eq!(none, None);

    s.record_validation(chal, Ok(()), harness::VALID_FOR, now, Some(&job))
        .await
        .unwrap();
    assert_eq!(
        s.next_job_due().await.unwrap(),
        None,
        "deleted with the verdict"
    );
    assert_eq!(s.claim_job(now + lease, lease, 3).await.unwrap(), None);

    // Finalization: the same, and the certificate and the deletion commit together.
    let (processing, job) = s
        .begin_finalize_claimed(order.id, b"csr", None, now, lease)
        .await
        .unwrap()
        .begun_claimed();
    assert_eq!(
        processing.status,
        acme_core::status::OrderStatus::Processing
    );
    let job = job.expect("claimed finalize job");
    assert_eq!(job.kind, JobKind::Finalize(order.id));
    assert_eq!(s.claim_job(now, lease, 3).await.unwrap(), None);
    harness::complete(s, order.id, harness::new_cert(7, now), now, Some(&job)).await;
    assert_eq!(s.next_job_due().await.unwrap(), None);
    assert_eq!(
        s.order(order.id, now).await.unwrap().unwrap().status,
        acme_core::status::OrderStatus::Valid
    );
}

/// Nothing accepted is lost: if the request that holds a job it created dies, the lease runs out
/// and a worker claims the job as its second attempt. The first holder, if it comes back, can no
/// longer delete it: its outcome is recorded, and the job stays for its new holder to end.
async fn a_claimed_job_whose_holder_died_goes_back_to_the_queue(s: &Storage) {
    let now = t0();
    let lease = Duration::seconds(30);
    let (_, chal) = order_with_one_challenge(s, "orphan.example.com", now).await;
    let (_, first) = s
        .start_challenge_claimed(chal, now, lease)
        .await
        .unwrap()
        .started_claimed();
    let first = first.unwrap();
    assert_eq!(s.next_job_due().await.unwrap(), Some(now + lease));
    assert_eq!(
        s.claim_job(now + lease - Duration::seconds(1), lease, 3)
            .await
            .unwrap(),
        None
    );
    let second = s.claim_job(now + lease, lease, 3).await.unwrap().unwrap();
    assert_eq!(second.id, first.id);
    assert_eq!(second.attempts, 2);

    // The stale holder records its verdict: kept, but the job is not its to delete.
    s.record_validation(chal, Ok(()), harness::VALID_FOR, now + lease, Some(&first))
        .await
        .unwrap();
    assert_eq!(s.next_job_due().await.unwrap(), Some(second.lease_until));
    // The new holder finds the verdict recorded and ends the job.
    let recorded = s
        .record_validation(chal, Ok(()), harness::VALID_FOR, now + lease, Some(&second))
        .await
        .unwrap();
    assert!(!recorded.changed);
    assert_eq!(s.next_job_due().await.unwrap(), None);
}

/// A transient failure is recorded as an attempt and the job released until its retry, in one
/// transaction, only by the claim that holds the job; the retried claims are not held against
/// the attempt allowance, and the challenge stays processing.
async fn a_validation_retry_records_the_attempt_and_reschedules_the_job(s: &Storage) {
    let now = t0();
    let lease = Duration::seconds(10);
    let chals = enqueue_validations(s, 1, now).await;
    let id = chals[0];
    assert_eq!(
        s.validation_retry_at(id).await.unwrap(),
        None,
        "first attempt not ended"
    );
    let mut at = now;
    // Allowance 1: every claim after the first is a retry, so none is exhausted.
    for n in 1..=3_u32 {
        let job = s.claim_job(at, lease, 1).await.unwrap().unwrap();
        assert_eq!((job.attempts, job.retries), (n, n - 1));
        assert!(!job.exhausted, "claim {n}: {job:?}");
        let failed = Problem::new(ProblemType::Connection, format!("refused {n}"));
        let run_at = at + Duration::seconds(5);
        // A stale claim (another count) cannot record or reschedule.
        let mut stale = job.clone();
        stale.attempts += 1;
        assert!(matches!(
            s.retry_validation(&stale, id, &failed, at, run_at).await,
            Err(Error::NotFound)
        ));
        s.retry_validation(&job, id, &failed, at, run_at)
            .await
            .unwrap();
        assert_eq!(s.validation_retry_at(id).await.unwrap(), Some(run_at));
        assert_eq!(s.next_job_due().await.unwrap(), Some(run_at));
        assert_eq!(
            s.claim_job(at, lease, 1).await.unwrap(),
            None,
            "not due yet"
        );
        at = run_at;
    }
    let attempts = s.challenge_attempts(id).await.unwrap();
    assert_eq!(attempts.len(), 3);
    for (i, a) in attempts.iter().enumerate() {
        assert_eq!(a.attempt as usize, i + 1);
        assert_eq!(a.problem.kind, ProblemType::Connection);
        assert_eq!(a.problem.detail, format!("refused {}", i + 1));
    }
    assert_eq!(attempts[0].at, now);
    let challenge = s.challenge(id).await.unwrap().unwrap();
    assert_eq!(challenge.status, ChallengeStatus::Processing);
    // A claim whose worker dies still counts against the allowance.
    let job = s.claim_job(at, lease, 1).await.unwrap().unwrap();
    assert!(!job.exhausted);
    let next = s
        .claim_job(job.lease_until, lease, 1)
        .await
        .unwrap()
        .unwrap();
    assert!(next.exhausted, "{next:?}");
    // The final verdict settles the job; the attempts stay with the challenge.
    s.record_validation(
        id,
        Err(Problem::new(ProblemType::Connection, "final")),
        harness::VALID_FOR,
        next.lease_until,
        Some(&next),
    )
    .await
    .unwrap();
    assert_eq!(s.next_job_due().await.unwrap(), None);
    assert_eq!(s.validation_retry_at(id).await.unwrap(), None);
    assert_eq!(s.challenge_attempts(id).await.unwrap().len(), 3);
}
