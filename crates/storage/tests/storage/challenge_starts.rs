//! Starting a challenge and recording its verdict, at the edges the one-statement forms of these
//! transactions must keep: one validation per authorization, expiry found on the way, and orders
//! and authorizations read back whole and in order.

use acme_core::ids::AccountId;
use acme_core::status::AuthzStatus;
use acme_core::status::ChallengeStatus;
use acme_core::status::ChallengeType;
use acme_core::status::OrderStatus;
use storage::Storage;
use storage::model::ChallengeStart;
use storage::model::NotStarted;
use storage::model::Order;
use time::Duration;
use time::OffsetDateTime;

use crate::harness;
use crate::harness::Started;
use crate::harness::t0;

crate::both_backends!(
    one_validation_per_authorization,
    starting_a_challenge_of_an_expired_authorization_expires_it,
    a_verdict_after_expiry_is_kept_but_does_not_revive_the_authorization,
    orders_and_authorizations_read_back_whole_and_in_order,
);

/// An order for one name whose authorization expires an hour after `now`, the order a week after.
async fn order_with_short_authz(s: &Storage, account: AccountId, now: OffsetDateTime) -> Order {
    harness::order_expiring(
        s,
        account,
        &["a.example.com"],
        now + Duration::days(7),
        now + Duration::hours(1),
        now,
    )
    .await
}

async fn one_validation_per_authorization(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = harness::pending_order(s, acct.id, &["a.example.com"], now).await;
    let authz = s
        .authorization(order.authz_ids[0], now)
        .await
        .unwrap()
        .unwrap();
    let (first, second) = (&authz.challenges[0], &authz.challenges[1]);

    let started = s.start_challenge(first.id, now).await.unwrap().started();
    assert_eq!(started.status, ChallengeStatus::Processing);

    let refused = s.start_challenge(second.id, now).await.unwrap();
    assert_eq!(
        refused,
        ChallengeStart::NotStarted(NotStarted::SiblingStarted)
    );
    let authz = s
        .authorization(order.authz_ids[0], now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(authz.challenges[0].status, ChallengeStatus::Processing);
    assert_eq!(
        authz.challenges[1].status,
        ChallengeStatus::Pending,
        "the refused challenge did not move"
    );

    // Asking again for the one being validated answers with it, and starts nothing new.
    let again = s.start_challenge(first.id, now).await.unwrap().started();
    assert_eq!(again.status, ChallengeStatus::Processing);
}

async fn starting_a_challenge_of_an_expired_authorization_expires_it(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = order_with_short_authz(s, acct.id, now).await;
    let authz = s
        .authorization(order.authz_ids[0], now)
        .await
        .unwrap()
        .unwrap();
    let challenge = authz.challenges[0].id;

    let at = now + Duration::hours(1);
    let refused = s.start_challenge(challenge, at).await.unwrap();
    assert_eq!(
        refused,
        ChallengeStart::NotStarted(NotStarted::AuthzNotPending(AuthzStatus::Expired))
    );
    // The expiry was written by the refused start, not only computed: read it back as of a
    // moment before the expiry, when a read alone would still say pending.
    let stored = s
        .authorization(order.authz_ids[0], now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.status, AuthzStatus::Expired);
    assert_eq!(stored.challenges[0].status, ChallengeStatus::Pending);
    assert_eq!(
        s.order(order.id, now).await.unwrap().unwrap().status,
        OrderStatus::Invalid
    );
}

async fn a_verdict_after_expiry_is_kept_but_does_not_revive_the_authorization(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = order_with_short_authz(s, acct.id, now).await;
    let challenge = harness::start_first_challenge(s, order.authz_ids[0], now).await;

    let late = now + Duration::hours(2);
    let recorded = s
        .record_validation(challenge, Ok(()), harness::VALID_FOR, late, None)
        .await
        .unwrap();
    assert!(recorded.changed);
    assert_eq!(recorded.status, ChallengeStatus::Valid);
    let authz = s
        .authorization(order.authz_ids[0], now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(authz.status, AuthzStatus::Expired);
    assert_eq!(authz.challenges[0].status, ChallengeStatus::Valid);
    assert_eq!(
        s.order(order.id, now).await.unwrap().unwrap().status,
        OrderStatus::Invalid,
        "an expired authorization never makes its order ready"
    );
}

async fn orders_and_authorizations_read_back_whole_and_in_order(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let names = [
        "c.example.com",
        "a.example.com",
        "b.example.com",
        "d.example.com",
    ];
    let created = harness::pending_order(s, acct.id, &names, now).await;
    assert_eq!(created.authz_ids.len(), names.len());

    let read = s.order(created.id, now).await.unwrap().unwrap();
    assert_eq!(read.authz_ids, created.authz_ids, "same ids, same order");
    assert_eq!(read.identifiers, created.identifiers);
    for (position, authz_id) in read.authz_ids.iter().enumerate() {
        let authz = s.authorization(*authz_id, now).await.unwrap().unwrap();
        assert_eq!(authz.id, *authz_id);
        assert_eq!(authz.account_id, acct.id);
        assert_eq!(authz.status, AuthzStatus::Pending);
        assert_eq!(
            authz.identifier, read.identifiers[position],
            "authorization {position} is for the order's identifier {position}"
        );
        let kinds: Vec<ChallengeType> = authz.challenges.iter().map(|c| c.kind).collect();
        assert_eq!(kinds, [ChallengeType::Http01, ChallengeType::Dns01]);
        assert!(authz.challenges.iter().all(|c| c.authz_id == *authz_id));
        assert!(
            authz.challenges.windows(2).all(|w| w[0].id.0 < w[1].id.0),
            "challenges in id order"
        );
    }
    assert!(
        s.authorization(acme_core::ids::AuthzId(i64::MAX), now)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        s.order(acme_core::ids::OrderId(i64::MAX), now)
            .await
            .unwrap()
            .is_none()
    );
}
