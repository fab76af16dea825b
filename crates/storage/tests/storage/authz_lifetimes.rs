//! Authorization lifetimes: a valid authorization expires the configured lifetime after its
//! validation, an order never outlives its authorizations, reuse keeps a margin, and finalize
//! refuses an order whose authorization has expired.

use acme_core::ids::AuthzId;
use acme_core::status::AuthzStatus;
use acme_core::status::OrderStatus;
use storage::Storage;
use storage::error::Error;
use storage::model::Order;
use storage::model::OrderGuards;
use time::Duration;
use time::OffsetDateTime;

use crate::harness;
use crate::harness::t0;

crate::both_backends!(
    a_valid_authorization_expires_its_lifetime_after_validation,
    an_order_never_outlives_its_authorizations,
    reuse_needs_a_margin_of_validity,
    finalize_refuses_an_order_whose_authorization_expired,
);

const VALID: Duration = Duration::hours(2);

fn with_short_lifetime(s: &Storage) -> Storage {
    s.clone().with_valid_authorization_lifetime(VALID)
}

/// Validates every authorization of `order` at `at`.
async fn validate(s: &Storage, order: &Order, at: OffsetDateTime) {
    for authz_id in &order.authz_ids {
        let authz = s.authorization(*authz_id, at).await.unwrap().unwrap();
        let challenge = &authz.challenges[0];
        s.start_challenge(challenge.id, at).await.unwrap();
        s.record_validation(challenge.id, Ok(()), at, None)
            .await
            .unwrap();
    }
}

async fn authz_status(s: &Storage, id: AuthzId, at: OffsetDateTime) -> AuthzStatus {
    s.authorization(id, at).await.unwrap().unwrap().status
}

async fn a_valid_authorization_expires_its_lifetime_after_validation(s: &Storage) {
    let s = &with_short_lifetime(s);
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = s
        .create_order(
            harness::new_order(acct.id, &["a.example.com"], now, false),
            &OrderGuards::default(),
            now,
        )
        .await
        .unwrap();
    let validated_at = now + Duration::minutes(10);
    validate(s, &order, validated_at).await;
    let authz_id = order.authz_ids[0];
    let authz = s
        .authorization(authz_id, validated_at)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(authz.status, AuthzStatus::Valid);
    assert_eq!(
        authz.expires_at,
        validated_at + VALID,
        "not the pending expiry"
    );
    let order = s.order(order.id, validated_at).await.unwrap().unwrap();
    assert_eq!(order.status, OrderStatus::Ready);
    assert_eq!(
        order.expires_at,
        validated_at + VALID,
        "capped to the authz"
    );

    let end = validated_at + VALID;
    assert_eq!(
        authz_status(s, authz_id, end - Duration::seconds(1)).await,
        AuthzStatus::Valid
    );
    assert_eq!(authz_status(s, authz_id, end).await, AuthzStatus::Expired);
    assert_eq!(
        s.order(order.id, end).await.unwrap().unwrap().status,
        OrderStatus::Invalid
    );
}

async fn an_order_never_outlives_its_authorizations(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    // Pending authorizations that expire before the order: the order is cut to them.
    let order = s
        .create_order(
            harness::new_order_expiring(
                acct.id,
                &["a.example.com", "b.example.com"],
                now + Duration::days(7),
                now + Duration::hours(1),
                false,
            ),
            &OrderGuards::default(),
            now,
        )
        .await
        .unwrap();
    assert_eq!(order.expires_at, now + Duration::hours(1));
    // Authorizations that outlive the order leave the order's own expiry alone.
    let order = s
        .create_order(
            harness::new_order_expiring(
                acct.id,
                &["c.example.com"],
                now + Duration::hours(3),
                now + Duration::days(7),
                false,
            ),
            &OrderGuards::default(),
            now,
        )
        .await
        .unwrap();
    assert_eq!(order.expires_at, now + Duration::hours(3));
}

async fn reuse_needs_a_margin_of_validity(s: &Storage) {
    let s = &with_short_lifetime(s);
    let now = t0();
    let acct = harness::account(s, now).await;
    let first = s
        .create_order(
            harness::new_order(acct.id, &["a.example.com"], now, false),
            &OrderGuards::default(),
            now,
        )
        .await
        .unwrap();
    validate(s, &first, now).await;
    let authz_expiry = now + VALID;

    // Well inside the lifetime: reused, and the new order expires with the reused authz.
    let at = now + Duration::minutes(30);
    let reused = s
        .create_order(
            harness::new_order(acct.id, &["a.example.com"], at, true),
            &OrderGuards::default(),
            at,
        )
        .await
        .unwrap();
    assert_eq!(reused.status, OrderStatus::Ready);
    assert_eq!(reused.authz_ids, first.authz_ids);
    assert_eq!(reused.expires_at, authz_expiry);

    // Still valid, but with less than the margin (half of two hours) left: not reused.
    let at = authz_expiry - Duration::minutes(59);
    assert_eq!(
        authz_status(s, first.authz_ids[0], at).await,
        AuthzStatus::Valid
    );
    let fresh = s
        .create_order(
            harness::new_order(acct.id, &["a.example.com"], at, true),
            &OrderGuards::default(),
            at,
        )
        .await
        .unwrap();
    assert_eq!(fresh.status, OrderStatus::Pending);
    assert_ne!(fresh.authz_ids, first.authz_ids);
    assert_eq!(
        authz_status(s, fresh.authz_ids[0], at).await,
        AuthzStatus::Pending
    );
}

async fn finalize_refuses_an_order_whose_authorization_expired(s: &Storage) {
    let s = &with_short_lifetime(s);
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = s
        .create_order(
            harness::new_order(acct.id, &["a.example.com", "b.example.com"], now, false),
            &OrderGuards::default(),
            now,
        )
        .await
        .unwrap();
    validate(s, &order, now).await;
    assert_eq!(
        s.order(order.id, now).await.unwrap().unwrap().status,
        OrderStatus::Ready
    );
    let later = now + VALID;
    assert!(matches!(
        s.begin_finalize(order.id, b"csr", later).await,
        Err(Error::OrderNotReady(OrderStatus::Invalid))
    ));
    // Persisted, read with the earlier clock: the authorizations expired and the order is
    // invalid, with no CSR stored and no job.
    for id in &order.authz_ids {
        assert_eq!(authz_status(s, *id, now).await, AuthzStatus::Expired);
    }
    assert_eq!(
        s.order(order.id, now).await.unwrap().unwrap().status,
        OrderStatus::Invalid
    );
    assert_eq!(s.order_csr(order.id).await.unwrap(), None);
}
