//! Starting a validation (at once through the job runner, or queued) and deactivating an
//! authorization (RFC 8555 §7.5).

use acme_core::status::AuthzStatus;
use acme_core::status::ChallengeStatus;
use ra::Refusal;
use ra::error::StateRefusal;

use crate::harness::Handed;
use crate::harness::dns;
use crate::harness::harness;
use crate::harness::refusal;

#[tokio::test]
async fn starting_a_validation_with_a_free_worker_place_hands_the_target_to_the_runner() {
    let h = harness().slots(1).build().await;
    let (account, _) = h.account().await;
    let order = h.order(&account, &["a.example.com"]).await.unwrap().order;
    let authz =
        h.ra.authorization_of(account.id, order.authz_ids[0])
            .await
            .unwrap();
    let challenge = authz.challenges[0].clone();
    let (found, found_authz) = h.ra.challenge_of(account.id, challenge.id).await.unwrap();
    assert_eq!(found, challenge);
    assert_eq!(found_authz.id, authz.id);
    let answered =
        h.ra.start_validation(&account, challenge.clone(), &authz)
            .await
            .unwrap();
    assert_eq!(answered.id, challenge.id);
    let handed = h.jobs.handed();
    let [Handed::Validation { target, wait }] = handed.as_slice() else {
        panic!("one validation handed over, got {handed:?}");
    };
    assert_eq!(target.challenge.id, challenge.id);
    assert_eq!(target.authz_id, authz.id);
    assert_eq!(target.authz_expires, authz.expires_at);
    assert_eq!(target.identifier, dns("a.example.com"));
    assert_eq!(target.account_id, account.id);
    assert_eq!(target.thumbprint, account.thumbprint);
    assert_eq!(*wait, std::time::Duration::from_secs(1));
    assert_eq!(h.jobs.wakes(), 0, "nothing was queued");
    // The policy layer wrote nothing: the runner records the outcome.
    let stored = h.storage.challenge(challenge.id).await.unwrap().unwrap();
    assert_eq!(stored.status, ChallengeStatus::Pending);
}

#[tokio::test]
async fn starting_a_validation_without_a_free_worker_place_queues_it_as_processing() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let order = h.order(&account, &["a.example.com"]).await.unwrap().order;
    let authz =
        h.ra.authorization_of(account.id, order.authz_ids[0])
            .await
            .unwrap();
    let challenge = authz.challenges[0].clone();
    let started =
        h.ra.start_validation(&account, challenge.clone(), &authz)
            .await
            .unwrap();
    assert_eq!(started.status, ChallengeStatus::Processing);
    assert_eq!(h.jobs.wakes(), 1);
    assert!(h.jobs.handed().is_empty());
    let stored = h.storage.challenge(challenge.id).await.unwrap().unwrap();
    assert_eq!(stored.status, ChallengeStatus::Processing);
}

#[tokio::test]
async fn a_challenge_that_already_left_pending_is_answered_as_it_stands_and_not_started_again() {
    let h = harness().slots(1).build().await;
    let (account, _) = h.account().await;
    let order = h.order(&account, &["a.example.com"]).await.unwrap().order;
    let authz =
        h.ra.authorization_of(account.id, order.authz_ids[0])
            .await
            .unwrap();
    let mut challenge = authz.challenges[0].clone();
    challenge.status = ChallengeStatus::Processing;
    let answered =
        h.ra.start_validation(&account, challenge.clone(), &authz)
            .await
            .unwrap();
    assert_eq!(answered, challenge);
    assert!(h.jobs.handed().is_empty());
    assert_eq!(h.jobs.wakes(), 0);
}

#[tokio::test]
async fn a_second_challenge_of_an_authorization_already_being_validated_is_not_handed_at_once() {
    let h = harness().slots(2).build().await;
    let (account, _) = h.account().await;
    let order = h.order(&account, &["a.example.com"]).await.unwrap().order;
    let authz =
        h.ra.authorization_of(account.id, order.authz_ids[0])
            .await
            .unwrap();
    // The first challenge was started the durable way (another instance, or the queue).
    h.storage
        .start_challenge(authz.challenges[0].id, h.now())
        .await
        .unwrap();
    let second = authz.challenges[1].clone();
    // Only one challenge of an authorization is attempted: the durable start decides.
    assert!(matches!(
        refusal(h.ra.start_validation(&account, second, &authz).await),
        Refusal::State(StateRefusal::SiblingChallengeStarted)
    ));
    assert!(h.jobs.handed().is_empty());
    assert_eq!(h.jobs.wakes(), 0);
}

#[tokio::test]
async fn a_challenge_whose_authorization_was_deactivated_since_it_was_read_is_refused() {
    let h = harness().slots(1).build().await;
    let (account, _) = h.account().await;
    let order = h.order(&account, &["a.example.com"]).await.unwrap().order;
    let read =
        h.ra.authorization_of(account.id, order.authz_ids[0])
            .await
            .unwrap();
    h.ra.deactivate_authorization(account.id, &read)
        .await
        .unwrap();
    // The request read the authorization while it was still pending.
    assert!(matches!(
        refusal(
            h.ra.start_validation(&account, read.challenges[0].clone(), &read)
                .await
        ),
        Refusal::State(StateRefusal::AuthzNotPending(AuthzStatus::Deactivated))
    ));
    assert!(h.jobs.handed().is_empty(), "nothing runs for it at once");
}

#[tokio::test]
async fn a_challenge_whose_authorization_expired_is_refused_and_not_handed_at_once() {
    let h = harness()
        .slots(1)
        .settings(|s| s.authorization_lifetime = time::Duration::hours(1))
        .build()
        .await;
    let (account, _) = h.account().await;
    let order = h.order(&account, &["a.example.com"]).await.unwrap().order;
    let read =
        h.ra.authorization_of(account.id, order.authz_ids[0])
            .await
            .unwrap();
    h.advance(time::Duration::hours(1));
    assert!(matches!(
        refusal(
            h.ra.start_validation(&account, read.challenges[0].clone(), &read)
                .await
        ),
        Refusal::State(StateRefusal::AuthzNotPending(AuthzStatus::Expired))
    ));
    assert!(h.jobs.handed().is_empty());
}

#[tokio::test]
async fn a_challenge_of_an_authorization_read_as_not_pending_is_refused_as_one_that_left_pending_since()
 {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let order = h.order(&account, &["a.example.com"]).await.unwrap().order;
    let authz =
        h.ra.authorization_of(account.id, order.authz_ids[0])
            .await
            .unwrap();
    let deactivated =
        h.ra.deactivate_authorization(account.id, &authz)
            .await
            .unwrap();
    assert_eq!(deactivated.status, AuthzStatus::Deactivated);
    // Seen on the request's own read, and found by storage after a stale read: one refusal.
    let seen =
        h.ra.start_validation(&account, authz.challenges[0].clone(), &deactivated)
            .await;
    let found =
        h.ra.start_validation(&account, authz.challenges[0].clone(), &authz)
            .await;
    for outcome in [seen, found] {
        assert!(matches!(
            refusal(outcome),
            Refusal::State(StateRefusal::AuthzNotPending(AuthzStatus::Deactivated))
        ));
    }
    assert!(h.jobs.handed().is_empty());
}

#[tokio::test]
async fn authorizations_and_challenges_of_another_account_are_not_found() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (other, _) = h.account().await;
    let order = h.order(&account, &["a.example.com"]).await.unwrap().order;
    let authz =
        h.ra.authorization_of(account.id, order.authz_ids[0])
            .await
            .unwrap();
    assert!(matches!(
        refusal(h.ra.authorization_of(other.id, authz.id).await),
        Refusal::NotFound("authorization")
    ));
    assert!(matches!(
        refusal(h.ra.challenge_of(other.id, authz.challenges[0].id).await),
        Refusal::NotFound("challenge")
    ));
}

#[tokio::test]
async fn a_valid_authorization_may_be_deactivated() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let order = h.ready_order(&account, &["a.example.com"]).await;
    let authz =
        h.ra.authorization_of(account.id, order.authz_ids[0])
            .await
            .unwrap();
    assert_eq!(authz.status, AuthzStatus::Valid);
    let deactivated =
        h.ra.deactivate_authorization(account.id, &authz)
            .await
            .unwrap();
    assert_eq!(deactivated.status, AuthzStatus::Deactivated);
}

#[tokio::test]
async fn deactivating_an_authorization_read_as_neither_pending_nor_valid_is_refused_as_one_changed_since()
 {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let order = h.order(&account, &["a.example.com"]).await.unwrap().order;
    let authz =
        h.ra.authorization_of(account.id, order.authz_ids[0])
            .await
            .unwrap();
    let deactivated =
        h.ra.deactivate_authorization(account.id, &authz)
            .await
            .unwrap();
    // Seen on the request's own read, and found by storage after a stale read: one refusal.
    for read in [&deactivated, &authz] {
        assert!(matches!(
            refusal(h.ra.deactivate_authorization(account.id, read).await),
            Refusal::State(StateRefusal::AuthzNotActive(AuthzStatus::Deactivated))
        ));
    }
}

#[tokio::test]
async fn deactivating_an_authorization_deactivated_since_it_was_read_is_refused_with_its_state() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let order = h.order(&account, &["a.example.com"]).await.unwrap().order;
    let read =
        h.ra.authorization_of(account.id, order.authz_ids[0])
            .await
            .unwrap();
    h.ra.deactivate_authorization(account.id, &read)
        .await
        .unwrap();
    assert!(matches!(
        refusal(h.ra.deactivate_authorization(account.id, &read).await),
        Refusal::State(StateRefusal::AuthzNotActive(AuthzStatus::Deactivated))
    ));
}

#[tokio::test]
async fn a_challenge_not_being_retried_has_no_retry_after_of_its_own() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let order = h.order(&account, &["a.example.com"]).await.unwrap().order;
    let authz =
        h.ra.authorization_of(account.id, order.authz_ids[0])
            .await
            .unwrap();
    let pending = authz.challenges[0].clone();
    assert_eq!(h.ra.validation_retry_after(&pending).await.unwrap(), None);
    let started =
        h.ra.start_validation(&account, pending, &authz)
            .await
            .unwrap();
    assert_eq!(h.ra.validation_retry_after(&started).await.unwrap(), None);
}
