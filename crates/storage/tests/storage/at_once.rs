//! Recording a validation that happened before anything about it was stored
//! (`record_valid_at_once`), and the at-once issuance (`reserve_ready_order`, then the
//! certificate stored against the reservation): each must keep the checks and effects of the
//! two-step paths it replaces, and must never leave a job behind once done.

use std::net::IpAddr;
use std::net::Ipv6Addr;

use acme_core::ids::AccountId;
use acme_core::ids::ChallengeId;
use acme_core::ids::OrderId;
use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use acme_core::status::AccountStatus;
use acme_core::status::AuthzStatus;
use acme_core::status::ChallengeStatus;
use acme_core::status::ChallengeType;
use acme_core::status::OrderStatus;
use storage::Storage;
use storage::error::Error;
use storage::model::Certificate;
use storage::model::ChallengeStart;
use storage::model::JobKind;
use storage::model::NewCertificate;
use storage::model::NotStarted;
use storage::model::Order;
use storage::model::ReservationState;
use storage::model::ReservedAtOnce;
use time::Duration;
use time::OffsetDateTime;

use crate::harness;
use crate::harness::Begun;
use crate::harness::Changed;
use crate::harness::Started;
use crate::harness::ev;
use crate::harness::t0;

crate::both_backends!(
    a_pending_challenge_becomes_valid_at_once,
    at_once_keeps_one_validation_per_authorization,
    a_challenge_that_left_pending_is_returned_unchanged,
    an_expired_authorization_is_refused_and_its_expiry_persisted,
    an_authorization_no_longer_pending_is_refused,
    concurrent_siblings_at_once_have_one_winner,
    at_once_agrees_with_start_then_record,
    a_ready_order_is_issued_at_once,
    a_second_issue_is_refused_and_stores_nothing,
    a_deactivated_account_is_refused_before_anything_is_stored,
    an_order_that_is_not_ready_is_refused,
    an_order_whose_authorization_expired_is_refused_and_invalidated,
    an_expired_order_is_refused_and_invalidated,
    concurrent_issues_have_one_winner,
    issue_at_once_agrees_with_finalize_then_complete,
);

/// A valid-authorization lifetime shorter than the orders' week, so that capping shows.
const VALID: Duration = Duration::hours(2);

fn with_short_lifetime(s: &Storage) -> Storage {
    s.clone()
}

/// What issuing at once did ([`issue_ready`]).
#[derive(Debug, Clone, PartialEq, Eq)]
enum IssuedAtOnce {
    Issued {
        order: Box<Order>,
        certificate: Box<Certificate>,
    },
    AccountNotValid(AccountStatus),
    NotReady(OrderStatus),
}

/// The lease of the job an at-once issuance holds.
const LEASE: Duration = Duration::seconds(60);

/// Where the finalize requests of these tests come from (IPv6 documentation prefix).
const CLIENT: IpAddr = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 7));

/// Issues `cert` for ready order `id` as the at-once path does: the reservation (ready →
/// processing under a claimed job), then the certificate stored against it, settling the job.
async fn issue_ready(
    s: &Storage,
    id: OrderId,
    csr: &[u8],
    cert: NewCertificate,
    now: OffsetDateTime,
) -> Result<IssuedAtOnce, Error> {
    match s
        .reserve_ready_order(
            id,
            csr,
            Some(CLIENT),
            harness::reservation_of(&cert),
            now,
            LEASE,
        )
        .await?
    {
        ReservedAtOnce::Reserved {
            order,
            job,
            reservation,
        } => {
            assert_eq!(order.status, OrderStatus::Processing);
            assert_eq!(order.finalize_client_ip, Some(CLIENT));
            assert_eq!(job.kind, JobKind::Finalize(id));
            assert_eq!(reservation.serial, cert.serial);
            assert_eq!(reservation.state, ReservationState::Reserved);
            let certificate = s.complete_order(id, cert, now, Some(&job), &ev()).await?;
            let order = s.order(id, now).await?.ok_or(Error::NotFound)?;
            assert_eq!(
                order.finalize_client_ip,
                Some(CLIENT),
                "kept with the order once issued"
            );
            Ok(IssuedAtOnce::Issued {
                order: Box::new(order),
                certificate: Box::new(certificate),
            })
        }
        ReservedAtOnce::AccountNotValid(status) => Ok(IssuedAtOnce::AccountNotValid(status)),
        ReservedAtOnce::NotReady(status) => Ok(IssuedAtOnce::NotReady(status)),
    }
}

/// Far enough ahead that every job, leased or not, is due.
fn far_future() -> OffsetDateTime {
    t0() + Duration::days(3650)
}

/// No job exists at all: none is due, ever, and none can be claimed.
async fn assert_no_job(s: &Storage) {
    assert_eq!(s.next_job_due().await.unwrap(), None, "no job is due");
    assert_eq!(
        s.claim_job(far_future(), Duration::seconds(60), 3)
            .await
            .unwrap(),
        None,
        "no job can be claimed"
    );
}

/// Claims every job there is and returns their kinds, oldest first.
async fn claim_all(s: &Storage) -> Vec<JobKind> {
    let mut kinds = Vec::new();
    while let Some(job) = s
        .claim_job(far_future(), Duration::seconds(60), u32::MAX)
        .await
        .unwrap()
    {
        kinds.push(job.kind);
    }
    kinds
}

/// The challenge of `authz` (of `order`) at `index`: 0 is http-01, 1 is dns-01.
async fn challenge_of(
    s: &Storage,
    order: &Order,
    authz: usize,
    index: usize,
    now: OffsetDateTime,
) -> ChallengeId {
    s.authorization(order.authz_ids[authz], now)
        .await
        .unwrap()
        .unwrap()
        .challenges[index]
        .id
}

/// An order for `names` made ready through `record_valid_at_once`, so that no job exists.
async fn ready_at_once(
    s: &Storage,
    account: AccountId,
    names: &[&str],
    now: OffsetDateTime,
) -> Order {
    let order = harness::pending_order(s, account, names, now).await;
    for i in 0..order.authz_ids.len() {
        let chal = challenge_of(s, &order, i, 0, now).await;
        s.record_valid_at_once(chal, VALID, now)
            .await
            .unwrap()
            .started();
    }
    let order = s.order(order.id, now).await.unwrap().unwrap();
    assert_eq!(order.status, OrderStatus::Ready);
    order
}

/// What an order and its authorizations and challenges look like, without their ids: two
/// identical orders taken down two paths must look the same.
#[derive(Debug, PartialEq)]
struct Seen {
    status: OrderStatus,
    expires_at: OffsetDateTime,
    error: Option<Problem>,
    has_certificate: bool,
    authorizations: Vec<SeenAuthz>,
}

#[derive(Debug, PartialEq)]
struct SeenAuthz {
    status: AuthzStatus,
    expires_at: OffsetDateTime,
    challenges: Vec<(
        ChallengeType,
        ChallengeStatus,
        Option<OffsetDateTime>,
        Option<Problem>,
    )>,
}

async fn seen(s: &Storage, id: OrderId, at: OffsetDateTime) -> Seen {
    let order = s.order(id, at).await.unwrap().unwrap();
    let mut authorizations = Vec::new();
    for authz_id in &order.authz_ids {
        let authz = s.authorization(*authz_id, at).await.unwrap().unwrap();
        authorizations.push(SeenAuthz {
            status: authz.status,
            expires_at: authz.expires_at,
            challenges: authz
                .challenges
                .into_iter()
                .map(|c| (c.kind, c.status, c.validated_at, c.error))
                .collect(),
        });
    }
    Seen {
        status: order.status,
        expires_at: order.expires_at,
        error: order.error,
        has_certificate: order.certificate_id.is_some(),
        authorizations,
    }
}

// ---- record_valid_at_once ----

async fn a_pending_challenge_becomes_valid_at_once(s: &Storage) {
    let s = &with_short_lifetime(s);
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = harness::pending_order(s, acct.id, &["a.example.com", "b.example.com"], now).await;
    let week = now + Duration::days(7);
    assert_eq!(order.expires_at, week);

    // A clock with a fraction of a second: everything stored is in whole seconds.
    let at = now + Duration::minutes(10) + Duration::milliseconds(700);
    let whole = now + Duration::minutes(10);
    let chal = challenge_of(s, &order, 0, 0, now).await;
    let valid = s
        .record_valid_at_once(chal, VALID, at)
        .await
        .unwrap()
        .started();
    assert_eq!(valid.id, chal);
    assert_eq!(valid.status, ChallengeStatus::Valid);
    assert_eq!(valid.validated_at, Some(whole), "truncated to seconds");
    assert_eq!(valid.error, None);
    assert_eq!(
        s.challenge(chal).await.unwrap(),
        Some(valid.clone()),
        "what was returned is what was stored"
    );

    let authz = s
        .authorization(order.authz_ids[0], at)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(authz.status, AuthzStatus::Valid);
    assert_eq!(authz.expires_at, whole + VALID, "the valid lifetime");
    assert_eq!(
        authz.challenges[1].status,
        ChallengeStatus::Pending,
        "the sibling is left alone"
    );
    // One authorization of two: the order stays pending, but no longer outlives it.
    let pending = s.order(order.id, at).await.unwrap().unwrap();
    assert_eq!(pending.status, OrderStatus::Pending);
    assert_eq!(pending.expires_at, whole + VALID, "capped to the authz");

    // The second authorization, through its dns-01 challenge: the order becomes ready.
    let later = now + Duration::minutes(20);
    let chal = challenge_of(s, &order, 1, 1, now).await;
    let valid = s
        .record_valid_at_once(chal, VALID, later)
        .await
        .unwrap()
        .started();
    assert_eq!(valid.status, ChallengeStatus::Valid);
    assert_eq!(valid.kind, ChallengeType::Dns01);
    assert_eq!(valid.validated_at, Some(later));
    let authz = s
        .authorization(order.authz_ids[1], later)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(authz.status, AuthzStatus::Valid);
    assert_eq!(authz.expires_at, later + VALID);
    let ready = s.order(order.id, later).await.unwrap().unwrap();
    assert_eq!(ready.status, OrderStatus::Ready);
    assert_eq!(
        ready.expires_at,
        whole + VALID,
        "the earliest authorization's expiry"
    );
    let validations = s.order_validations(order.id).await.unwrap();
    let how: Vec<_> = validations
        .iter()
        .map(|v| (v.method, v.validated_at))
        .collect();
    assert_eq!(
        how,
        [
            (ChallengeType::Http01, whole),
            (ChallengeType::Dns01, later)
        ]
    );

    assert_no_job(s).await;
}

async fn at_once_keeps_one_validation_per_authorization(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;

    // A sibling started by a client's challenge POST: the one at once is refused.
    let order = harness::pending_order(s, acct.id, &["a.example.com"], now).await;
    let first = challenge_of(s, &order, 0, 0, now).await;
    let second = challenge_of(s, &order, 0, 1, now).await;
    s.start_challenge(first, now).await.unwrap().started();
    let refused = s.record_valid_at_once(second, VALID, now).await.unwrap();
    assert_eq!(
        refused,
        ChallengeStart::NotStarted(NotStarted::SiblingStarted)
    );
    let authz = s
        .authorization(order.authz_ids[0], now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(authz.status, AuthzStatus::Pending);
    assert_eq!(authz.challenges[0].status, ChallengeStatus::Processing);
    assert_eq!(authz.challenges[1].status, ChallengeStatus::Pending);
    assert_eq!(authz.challenges[1].validated_at, None);
    assert_eq!(
        s.order(order.id, now).await.unwrap().unwrap().status,
        OrderStatus::Pending
    );
    let started = first;

    // A sibling validated at once: the authorization is valid with it, so another at once,
    // like a client's start, is refused for that.
    let order = harness::pending_order(s, acct.id, &["b.example.com"], now).await;
    let first = challenge_of(s, &order, 0, 0, now).await;
    let second = challenge_of(s, &order, 0, 1, now).await;
    s.record_valid_at_once(first, VALID, now)
        .await
        .unwrap()
        .started();
    for refused in [
        s.record_valid_at_once(second, VALID, now).await.unwrap(),
        s.start_challenge(second, now).await.unwrap(),
    ] {
        assert_eq!(
            refused,
            ChallengeStart::NotStarted(NotStarted::AuthzNotPending(AuthzStatus::Valid))
        );
    }
    let authz = s
        .authorization(order.authz_ids[0], now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(authz.status, AuthzStatus::Valid);
    assert_eq!(authz.challenges[0].status, ChallengeStatus::Valid);
    assert_eq!(authz.challenges[1].status, ChallengeStatus::Pending);
    assert_eq!(authz.challenges[1].validated_at, None);

    // Only the first order's started challenge has a job; no refusal and no at-once added one.
    assert_eq!(claim_all(s).await, [JobKind::Validate(started)]);
}

async fn a_challenge_that_left_pending_is_returned_unchanged(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let later = now + Duration::hours(1);

    // Processing: the client's start came first; its job will decide.
    let order = harness::pending_order(s, acct.id, &["processing.example.com"], now).await;
    let chal = harness::start_first_challenge(s, order.authz_ids[0], now).await;
    let before = seen(s, order.id, now).await;
    let answer = s
        .record_valid_at_once(chal, VALID, later)
        .await
        .unwrap()
        .started();
    assert_eq!(answer.status, ChallengeStatus::Processing);
    assert_eq!(answer.validated_at, None);
    assert_eq!(Some(answer), s.challenge(chal).await.unwrap());
    assert_eq!(seen(s, order.id, now).await, before, "nothing was written");
    assert_eq!(before.authorizations[0].status, AuthzStatus::Pending);
    assert_eq!(before.status, OrderStatus::Pending);
    assert_eq!(
        claim_all(s).await,
        [JobKind::Validate(chal)],
        "still the start's one job"
    );

    // Valid: a repeat an hour later keeps the first validation's time and expiry.
    let order = harness::pending_order(s, acct.id, &["valid.example.com"], now).await;
    let chal = challenge_of(s, &order, 0, 0, now).await;
    let first = s
        .record_valid_at_once(chal, VALID, now)
        .await
        .unwrap()
        .started();
    let before = seen(s, order.id, now).await;
    assert_eq!(before.status, OrderStatus::Ready);
    let again = s
        .record_valid_at_once(chal, VALID, later)
        .await
        .unwrap()
        .started();
    assert_eq!(again, first);
    assert_eq!(again.validated_at, Some(now));
    assert_eq!(seen(s, order.id, now).await, before, "nothing was written");

    // Invalid: a worker's failed verdict stands.
    let order = harness::pending_order(s, acct.id, &["invalid.example.com"], now).await;
    let chal = harness::start_first_challenge(s, order.authz_ids[0], now).await;
    let problem = Problem::new(ProblemType::Unauthorized, "wrong key authorization");
    s.record_validation(chal, Err(problem.clone()), VALID, now, None)
        .await
        .unwrap();
    let before = seen(s, order.id, now).await;
    let answer = s
        .record_valid_at_once(chal, VALID, later)
        .await
        .unwrap()
        .started();
    assert_eq!(answer.status, ChallengeStatus::Invalid);
    assert_eq!(answer.error, Some(problem));
    assert_eq!(answer.validated_at, None);
    assert_eq!(seen(s, order.id, now).await, before, "nothing was written");
    assert_eq!(before.authorizations[0].status, AuthzStatus::Invalid);
    assert_eq!(before.status, OrderStatus::Invalid);
    assert_eq!(
        claim_all(s).await,
        [JobKind::Validate(chal)],
        "still the start's one job"
    );
}

async fn an_expired_authorization_is_refused_and_its_expiry_persisted(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = harness::order_expiring(
        s,
        acct.id,
        &["a.example.com"],
        now + Duration::days(7),
        now + Duration::hours(1),
        now,
    )
    .await;
    let chal = challenge_of(s, &order, 0, 0, now).await;

    let at = now + Duration::hours(1);
    let refused = s.record_valid_at_once(chal, VALID, at).await.unwrap();
    assert_eq!(
        refused,
        ChallengeStart::NotStarted(NotStarted::AuthzNotPending(AuthzStatus::Expired))
    );
    // Written by the refused call: read back with a clock before the expiry, when a read alone
    // would still say pending.
    let stored = s
        .authorization(order.authz_ids[0], now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.status, AuthzStatus::Expired);
    assert_eq!(stored.challenges[0].status, ChallengeStatus::Pending);
    assert_eq!(stored.challenges[0].validated_at, None);
    assert_eq!(
        s.order(order.id, now).await.unwrap().unwrap().status,
        OrderStatus::Invalid
    );
    assert_no_job(s).await;
}

async fn an_authorization_no_longer_pending_is_refused(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = harness::pending_order(s, acct.id, &["a.example.com"], now).await;
    s.deactivate_authorization(order.authz_ids[0], now)
        .await
        .unwrap()
        .changed();
    let chal = challenge_of(s, &order, 0, 0, now).await;
    let refused = s.record_valid_at_once(chal, VALID, now).await.unwrap();
    assert_eq!(
        refused,
        ChallengeStart::NotStarted(NotStarted::AuthzNotPending(AuthzStatus::Deactivated))
    );
    let authz = s
        .authorization(order.authz_ids[0], now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(authz.status, AuthzStatus::Deactivated);
    assert!(
        authz
            .challenges
            .iter()
            .all(|c| c.status == ChallengeStatus::Pending),
        "{authz:?}"
    );
    assert_eq!(
        s.order(order.id, now).await.unwrap().unwrap().status,
        OrderStatus::Invalid
    );

    let unknown = ChallengeId(chal.0 + 1000);
    assert!(matches!(
        s.record_valid_at_once(unknown, VALID, now).await,
        Err(Error::NotFound)
    ));
    assert_no_job(s).await;
}

async fn concurrent_siblings_at_once_have_one_winner(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = harness::pending_order(s, acct.id, &["a.example.com"], now).await;
    let http = challenge_of(s, &order, 0, 0, now).await;
    let dns = challenge_of(s, &order, 0, 1, now).await;
    let (s1, s2) = (s.clone(), s.clone());
    let one = tokio::spawn(async move { s1.record_valid_at_once(http, VALID, now).await });
    let two = tokio::spawn(async move { s2.record_valid_at_once(dns, VALID, now).await });
    let results = [one.await.unwrap().unwrap(), two.await.unwrap().unwrap()];
    let won: Vec<_> = results
        .iter()
        .filter_map(|r| match r {
            ChallengeStart::Started { challenge, .. } => Some(challenge),
            _ => None,
        })
        .collect();
    assert_eq!(won.len(), 1, "{results:?}");
    assert_eq!(won[0].status, ChallengeStatus::Valid);
    // The loser ran after the winner's commit, under the authorization's lock: it found the
    // authorization already valid.
    assert!(
        results.contains(&ChallengeStart::NotStarted(NotStarted::AuthzNotPending(
            AuthzStatus::Valid
        ))),
        "{results:?}"
    );
    let authz = s
        .authorization(order.authz_ids[0], now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(authz.status, AuthzStatus::Valid);
    let valid: Vec<_> = authz
        .challenges
        .iter()
        .filter(|c| c.status == ChallengeStatus::Valid)
        .map(|c| c.id)
        .collect();
    assert_eq!(valid, [won[0].id], "exactly the winner is valid");
    assert_eq!(
        s.order(order.id, now).await.unwrap().unwrap().status,
        OrderStatus::Ready
    );
    assert_no_job(s).await;
}

/// The one-transaction form and the two-step form (a client's start, then a worker's valid
/// verdict) leave two identical orders in the same state, step by step.
async fn at_once_agrees_with_start_then_record(s: &Storage) {
    let s = &with_short_lifetime(s);
    let now = t0();
    let acct = harness::account(s, now).await;
    let names = ["a.example.com", "b.example.com"];
    let at_once = harness::pending_order(s, acct.id, &names, now).await;
    let two_step = harness::pending_order(s, acct.id, &names, now).await;
    assert_ne!(at_once.authz_ids, two_step.authz_ids, "no reuse");
    assert_eq!(
        seen(s, at_once.id, now).await,
        seen(s, two_step.id, now).await
    );

    // First authorization through http-01, at a clock with a fraction of a second.
    let first = now + Duration::minutes(5) + Duration::milliseconds(250);
    let chal = challenge_of(s, &at_once, 0, 0, now).await;
    s.record_valid_at_once(chal, VALID, first)
        .await
        .unwrap()
        .started();
    let chal = challenge_of(s, &two_step, 0, 0, now).await;
    let mut started = vec![JobKind::Validate(chal)];
    s.start_challenge(chal, first).await.unwrap().started();
    let recorded = s
        .record_validation(chal, Ok(()), VALID, first, None)
        .await
        .unwrap();
    assert!(recorded.changed);
    let one = seen(s, at_once.id, first).await;
    assert_eq!(one, seen(s, two_step.id, first).await);
    let whole = now + Duration::minutes(5);
    assert_eq!(one.status, OrderStatus::Pending);
    assert_eq!(one.expires_at, whole + VALID);
    assert_eq!(one.authorizations[0].status, AuthzStatus::Valid);
    assert_eq!(one.authorizations[0].expires_at, whole + VALID);
    assert_eq!(one.authorizations[1].status, AuthzStatus::Pending);

    // Second authorization through dns-01: both orders become ready, alike.
    let second = now + Duration::minutes(30);
    let chal = challenge_of(s, &at_once, 1, 1, now).await;
    s.record_valid_at_once(chal, VALID, second)
        .await
        .unwrap()
        .started();
    let chal = challenge_of(s, &two_step, 1, 1, now).await;
    started.push(JobKind::Validate(chal));
    s.start_challenge(chal, second).await.unwrap().started();
    s.record_validation(chal, Ok(()), VALID, second, None)
        .await
        .unwrap();
    let both = seen(s, at_once.id, second).await;
    assert_eq!(both, seen(s, two_step.id, second).await);
    assert_eq!(both.status, OrderStatus::Ready);
    assert_eq!(both.expires_at, whole + VALID);
    assert_eq!(both.error, None);
    assert!(!both.has_certificate);
    assert_eq!(both.authorizations[1].status, AuthzStatus::Valid);
    assert_eq!(both.authorizations[1].expires_at, second + VALID);
    assert_eq!(
        both.authorizations[1].challenges[1],
        (
            ChallengeType::Dns01,
            ChallengeStatus::Valid,
            Some(second),
            None
        )
    );
    let how = |order: OrderId| async move {
        s.order_validations(order)
            .await
            .unwrap()
            .into_iter()
            .map(|v| (v.identifier, v.method, v.validated_at))
            .collect::<Vec<_>>()
    };
    assert_eq!(how(at_once.id).await, how(two_step.id).await);

    // Only the two-step path has jobs: the two it started.
    assert_eq!(claim_all(s).await, started);
}

// ---- issuing at once ----

async fn a_ready_order_is_issued_at_once(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = ready_at_once(s, acct.id, &["a.example.com", "b.example.com"], now).await;
    assert_no_job(s).await;
    assert_eq!(s.order_csr(order.id).await.unwrap(), None);

    let at = now + Duration::seconds(5);
    let new = harness::new_cert(1, at);
    let issued = issue_ready(s, order.id, b"the csr", new.clone(), at)
        .await
        .unwrap();
    let IssuedAtOnce::Issued {
        order: valid,
        certificate,
    } = issued
    else {
        panic!("expected an issued certificate, got {issued:?}");
    };
    assert_eq!(valid.id, order.id);
    assert_eq!(valid.status, OrderStatus::Valid);
    assert_eq!(valid.certificate_id, Some(certificate.id));
    assert_eq!(valid.error, None);
    assert_eq!(valid.authz_ids, order.authz_ids);
    assert_eq!(certificate.order_id, order.id);
    assert_eq!(certificate.account_id, acct.id);
    assert_eq!(certificate.set_hash, order.set_hash);
    assert_eq!(certificate.serial, new.serial);
    assert_eq!(certificate.der, new.der);
    assert_eq!(certificate.chain_pem, harness::download_of(&new));
    assert_eq!(certificate.not_before, new.not_before);
    assert_eq!(certificate.not_after, new.not_after);
    assert_eq!(certificate.issued_at, at);
    assert_eq!(certificate.revoked_at, None);

    // What was returned is what was stored.
    assert_eq!(
        s.order(order.id, at).await.unwrap(),
        Some(*valid.clone()),
        "the order read back"
    );
    assert_eq!(
        s.certificate(certificate.id).await.unwrap(),
        Some(*certificate.clone())
    );
    assert_eq!(
        s.certificate_by_serial(&new.serial).await.unwrap(),
        Some(*certificate.clone())
    );
    assert_eq!(
        s.order_csr(order.id).await.unwrap(),
        Some(b"the csr".to_vec())
    );
    assert_no_job(s).await;
}

async fn a_second_issue_is_refused_and_stores_nothing(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = ready_at_once(s, acct.id, &["a.example.com"], now).await;
    let first = match issue_ready(s, order.id, b"first csr", harness::new_cert(1, now), now)
        .await
        .unwrap()
    {
        IssuedAtOnce::Issued { certificate, .. } => certificate,
        other => panic!("expected an issued certificate, got {other:?}"),
    };
    let before = s.order(order.id, now).await.unwrap().unwrap();

    let later = now + Duration::minutes(1);
    let again = issue_ready(
        s,
        order.id,
        b"second csr",
        harness::new_cert(2, later),
        later,
    )
    .await;
    assert!(
        matches!(again, Ok(IssuedAtOnce::NotReady(OrderStatus::Valid))),
        "{again:?}"
    );
    assert_eq!(
        s.certificate_by_serial(&harness::new_cert(2, later).serial)
            .await
            .unwrap(),
        None,
        "no second certificate"
    );
    assert_eq!(
        s.order(order.id, later).await.unwrap().unwrap(),
        before,
        "the order still holds the first certificate"
    );
    assert_eq!(before.certificate_id, Some(first.id));
    assert_eq!(
        s.order_csr(order.id).await.unwrap(),
        Some(b"first csr".to_vec()),
        "the first CSR stays"
    );
    assert_eq!(s.certificate(first.id).await.unwrap(), Some(*first));
    assert_no_job(s).await;
}

async fn a_deactivated_account_is_refused_before_anything_is_stored(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = ready_at_once(s, acct.id, &["gone.example.com"], now).await;
    s.deactivate_account(acct.id, now, &ev())
        .await
        .unwrap()
        .changed();
    // Deactivating the account already ended its unfinished orders; the call must change
    // nothing of what the deactivation left.
    let before = s.order(order.id, now).await.unwrap().unwrap();
    assert_eq!(before.status, OrderStatus::Invalid);

    let new = harness::new_cert(7, now);
    let answer = issue_ready(s, order.id, b"csr", new.clone(), now)
        .await
        .unwrap();
    assert_eq!(
        answer,
        IssuedAtOnce::AccountNotValid(AccountStatus::Deactivated)
    );
    assert_eq!(
        s.order(order.id, now).await.unwrap().unwrap(),
        before,
        "the order is as the deactivation left it"
    );
    assert_eq!(s.order_csr(order.id).await.unwrap(), None, "no CSR stored");
    assert_eq!(
        s.certificate_by_serial(&new.serial).await.unwrap(),
        None,
        "no certificate stored"
    );
    assert_no_job(s).await;
}

async fn an_order_that_is_not_ready_is_refused(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;

    // Pending: not every authorization is valid.
    let pending =
        harness::pending_order(s, acct.id, &["a.example.com", "b.example.com"], now).await;
    let chal = challenge_of(s, &pending, 0, 0, now).await;
    s.record_valid_at_once(chal, VALID, now)
        .await
        .unwrap()
        .started();
    let refused = issue_ready(s, pending.id, b"csr", harness::new_cert(1, now), now).await;
    assert!(
        matches!(refused, Ok(IssuedAtOnce::NotReady(OrderStatus::Pending))),
        "{refused:?}"
    );
    let order = s.order(pending.id, now).await.unwrap().unwrap();
    assert_eq!(order.status, OrderStatus::Pending);
    assert_eq!(order.certificate_id, None);
    assert_eq!(s.order_csr(pending.id).await.unwrap(), None);
    assert_eq!(
        s.certificate_by_serial(&harness::new_cert(1, now).serial)
            .await
            .unwrap(),
        None
    );
    assert_no_job(s).await;

    // Processing: a finalization through the queue came first; its job will issue.
    let finalizing = ready_at_once(s, acct.id, &["c.example.com"], now).await;
    s.begin_finalize(finalizing.id, b"queued csr", None, now)
        .await
        .unwrap()
        .begun();
    let refused = issue_ready(s, finalizing.id, b"csr", harness::new_cert(2, now), now).await;
    assert!(
        matches!(refused, Ok(IssuedAtOnce::NotReady(OrderStatus::Processing))),
        "{refused:?}"
    );
    let order = s.order(finalizing.id, now).await.unwrap().unwrap();
    assert_eq!(order.status, OrderStatus::Processing);
    assert_eq!(order.certificate_id, None);
    assert_eq!(
        s.order_csr(finalizing.id).await.unwrap(),
        Some(b"queued csr".to_vec()),
        "the queued CSR stays"
    );
    assert_eq!(
        s.certificate_by_serial(&harness::new_cert(2, now).serial)
            .await
            .unwrap(),
        None
    );
    assert_eq!(claim_all(s).await, [JobKind::Finalize(finalizing.id)]);

    // Unknown.
    assert!(matches!(
        issue_ready(
            s,
            OrderId(finalizing.id.0 + 1000),
            b"csr",
            harness::new_cert(3, now),
            now
        )
        .await,
        Err(Error::NotFound)
    ));
}

async fn an_order_whose_authorization_expired_is_refused_and_invalidated(s: &Storage) {
    let s = &with_short_lifetime(s);
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = ready_at_once(s, acct.id, &["a.example.com", "b.example.com"], now).await;
    let later = now + VALID;
    let refused = issue_ready(s, order.id, b"csr", harness::new_cert(1, later), later).await;
    assert!(
        matches!(refused, Ok(IssuedAtOnce::NotReady(OrderStatus::Invalid))),
        "{refused:?}"
    );
    // Persisted, read with the earlier clock: the authorizations expired and the order is
    // invalid, with no CSR and no certificate stored.
    for id in &order.authz_ids {
        assert_eq!(
            s.authorization(*id, now).await.unwrap().unwrap().status,
            AuthzStatus::Expired
        );
    }
    let stored = s.order(order.id, now).await.unwrap().unwrap();
    assert_eq!(stored.status, OrderStatus::Invalid);
    assert_eq!(stored.certificate_id, None);
    assert_eq!(s.order_csr(order.id).await.unwrap(), None);
    assert_eq!(
        s.certificate_by_serial(&harness::new_cert(1, later).serial)
            .await
            .unwrap(),
        None
    );
    assert_no_job(s).await;
}

async fn an_expired_order_is_refused_and_invalidated(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    // The order expires in an hour, long before its authorization (valid for 30 days).
    let order = harness::order_expiring(
        s,
        acct.id,
        &["a.example.com"],
        now + Duration::hours(1),
        now + Duration::days(7),
        now,
    )
    .await;
    let chal = challenge_of(s, &order, 0, 0, now).await;
    s.record_valid_at_once(chal, VALID, now)
        .await
        .unwrap()
        .started();
    let ready = s.order(order.id, now).await.unwrap().unwrap();
    assert_eq!(ready.status, OrderStatus::Ready);
    assert_eq!(ready.expires_at, now + Duration::hours(1));

    let at = ready.expires_at;
    let refused = issue_ready(s, order.id, b"csr", harness::new_cert(1, at), at).await;
    assert!(
        matches!(refused, Ok(IssuedAtOnce::NotReady(OrderStatus::Invalid))),
        "{refused:?}"
    );
    // Persisted: an earlier clock still sees the order invalid. Its authorization, which has
    // not expired, stays valid.
    let stored = s.order(order.id, now).await.unwrap().unwrap();
    assert_eq!(stored.status, OrderStatus::Invalid);
    assert_eq!(stored.certificate_id, None);
    assert_eq!(
        s.authorization(order.authz_ids[0], now)
            .await
            .unwrap()
            .unwrap()
            .status,
        AuthzStatus::Valid
    );
    assert_eq!(s.order_csr(order.id).await.unwrap(), None);
    assert_eq!(
        s.certificate_by_serial(&harness::new_cert(1, at).serial)
            .await
            .unwrap(),
        None
    );
    assert_no_job(s).await;
}

async fn concurrent_issues_have_one_winner(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = ready_at_once(s, acct.id, &["a.example.com"], now).await;
    let (s1, s2) = (s.clone(), s.clone());
    let one = tokio::spawn(async move {
        issue_ready(&s1, order.id, b"one", harness::new_cert(1, now), now).await
    });
    let two = tokio::spawn(async move {
        issue_ready(&s2, order.id, b"two", harness::new_cert(2, now), now).await
    });
    let results = [one.await.unwrap(), two.await.unwrap()];
    let won: Vec<&Certificate> = results
        .iter()
        .filter_map(|r| match r {
            Ok(IssuedAtOnce::Issued { certificate, .. }) => Some(&**certificate),
            _ => None,
        })
        .collect();
    assert_eq!(won.len(), 1, "{results:?}");
    // The loser came while the winner's order was processing (reserved, being signed) or
    // after it was valid: either way before anything of its own was reserved.
    assert!(
        results.iter().any(|r| matches!(
            r,
            Ok(IssuedAtOnce::NotReady(
                OrderStatus::Processing | OrderStatus::Valid
            ))
        )),
        "{results:?}"
    );
    assert_eq!(
        s.serial_reservations(order.id).await.unwrap().len(),
        1,
        "only the winner reserved a serial"
    );
    let winner = won[0];
    let stored = s.order(order.id, now).await.unwrap().unwrap();
    assert_eq!(stored.status, OrderStatus::Valid);
    assert_eq!(stored.certificate_id, Some(winner.id));
    let csr = s.order_csr(order.id).await.unwrap().unwrap();
    let (won_csr, lost_serial) = if winner.serial == harness::new_cert(1, now).serial {
        (b"one", harness::new_cert(2, now).serial)
    } else {
        (b"two", harness::new_cert(1, now).serial)
    };
    assert_eq!(csr, won_csr, "the winner's CSR");
    assert_eq!(
        s.certificate_by_serial(&lost_serial).await.unwrap(),
        None,
        "the loser stored no certificate"
    );
    assert_no_job(s).await;
}

/// Issuing at once and the queued form (begin_finalize, then a worker's complete_order) leave
/// two identical orders in the same state with the same certificate.
async fn issue_at_once_agrees_with_finalize_then_complete(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let names = ["a.example.com"];
    let at_once = ready_at_once(s, acct.id, &names, now).await;
    let queued = ready_at_once(s, acct.id, &names, now).await;
    let at = now + Duration::seconds(3);

    let direct = match issue_ready(s, at_once.id, b"csr", harness::new_cert(1, at), at)
        .await
        .unwrap()
    {
        IssuedAtOnce::Issued { certificate, .. } => *certificate,
        other => panic!("expected an issued certificate, got {other:?}"),
    };
    s.begin_finalize(queued.id, b"csr", Some(CLIENT), at)
        .await
        .unwrap()
        .begun();
    let completed = harness::complete(s, queued.id, harness::new_cert(2, at), at, None).await;
    for id in [at_once.id, queued.id] {
        let stored = s.order(id, at).await.unwrap().unwrap();
        assert_eq!(stored.finalize_client_ip, Some(CLIENT), "{id}");
    }

    let one = seen(s, at_once.id, at).await;
    assert_eq!(one, seen(s, queued.id, at).await);
    assert_eq!(one.status, OrderStatus::Valid);
    assert!(one.has_certificate);
    assert_eq!(
        s.order_csr(at_once.id).await.unwrap(),
        s.order_csr(queued.id).await.unwrap()
    );
    // The same certificate but for what makes each one itself.
    let normalized = |c: &Certificate| Certificate {
        id: direct.id,
        order_id: direct.order_id,
        serial: direct.serial.clone(),
        der: direct.der.clone(),
        chain_pem: direct.chain_pem.clone(),
        ..c.clone()
    };
    assert_eq!(normalized(&completed), direct);
    assert_eq!(direct.issued_at, at);
    // Only the queued path had a job: its Finalize, still there since no claim settled it.
    assert_eq!(claim_all(s).await, [JobKind::Finalize(queued.id)]);
}
