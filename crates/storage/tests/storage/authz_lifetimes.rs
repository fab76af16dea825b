//! Authorization lifetimes: a valid authorization expires the configured lifetime after its
//! validation, an order never outlives its authorizations, reuse keeps a margin, and finalize
//! refuses an order whose authorization has expired.

use acme_core::ids::AccountId;
use acme_core::ids::AuthzId;
use acme_core::status::AuthzStatus;
use acme_core::status::OrderStatus;
use storage::Storage;
use storage::error::Error;
use storage::model::Finalizing;
use storage::model::NewOrder;
use storage::model::Order;
use storage::model::OrderGuards;
use time::Duration;
use time::OffsetDateTime;

use crate::harness;
use crate::harness::Created;
use crate::harness::Started;
use crate::harness::t0;

crate::both_backends!(
    a_valid_authorization_expires_its_lifetime_after_validation,
    an_order_never_outlives_its_authorizations,
    reuse_needs_a_margin_of_validity,
    finalize_refuses_an_order_whose_authorization_expired,
    order_validations_tell_how_and_when_each_authorization_was_validated,
);

const VALID: Duration = Duration::hours(2);

fn with_short_lifetime(s: &Storage) -> Storage {
    s.clone()
}

/// An order for `names` at `at` that reuses the authorizations still valid for the reuse margin
/// of [`VALID`] (half of it, shorter than a day).
fn reusing(account: AccountId, names: &[&str], at: OffsetDateTime) -> NewOrder {
    NewOrder {
        reuse_valid_until: Some(at + VALID / 2),
        ..harness::new_order(account, names, at, false)
    }
}

/// Validates every authorization of `order` at `at`.
async fn validate(s: &Storage, order: &Order, at: OffsetDateTime) {
    for authz_id in &order.authz_ids {
        let authz = s.authorization(*authz_id, at).await.unwrap().unwrap();
        let challenge = &authz.challenges[0];
        s.start_challenge(challenge.id, at).await.unwrap().started();
        s.record_validation(challenge.id, Ok(()), VALID, at, None)
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
        .unwrap()
        .created();
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
    let order = harness::order_expiring(
        s,
        acct.id,
        &["a.example.com", "b.example.com"],
        now + Duration::days(7),
        now + Duration::hours(1),
        now,
    )
    .await;
    assert_eq!(order.expires_at, now + Duration::hours(1));
    // Authorizations that outlive the order leave the order's own expiry alone.
    let order = harness::order_expiring(
        s,
        acct.id,
        &["c.example.com"],
        now + Duration::hours(3),
        now + Duration::days(7),
        now,
    )
    .await;
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
        .unwrap()
        .created();
    validate(s, &first, now).await;
    let authz_expiry = now + VALID;

    // Well inside the lifetime: reused, and the new order expires with the reused authz.
    let at = now + Duration::minutes(30);
    let reused = s
        .create_order(
            reusing(acct.id, &["a.example.com"], at),
            &OrderGuards::default(),
            at,
        )
        .await
        .unwrap()
        .created();
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
            reusing(acct.id, &["a.example.com"], at),
            &OrderGuards::default(),
            at,
        )
        .await
        .unwrap()
        .created();
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
        .unwrap()
        .created();
    validate(s, &order, now).await;
    assert_eq!(
        s.order(order.id, now).await.unwrap().unwrap().status,
        OrderStatus::Ready
    );
    let later = now + VALID;
    assert!(matches!(
        s.begin_finalize(order.id, b"csr", None, later).await,
        Ok(Finalizing::NotReady(OrderStatus::Invalid))
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

/// What CAA is rechecked with at issuance: per authorization of the order, in its order, the
/// type of its valid challenge and when it was validated, a reused authorization keeping its
/// original validation time.
async fn order_validations_tell_how_and_when_each_authorization_was_validated(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let early = harness::ready_order(s, acct.id, &["old.example.com"], now).await;
    let later = now + Duration::hours(9);
    let order = s
        .create_order(
            harness::new_order(
                acct.id,
                &["new.example.com", "old.example.com"],
                later,
                true,
            ),
            &OrderGuards::default(),
            later,
        )
        .await
        .unwrap()
        .created();
    // Not every authorization is valid yet: this order cannot be finalized, and says so.
    assert!(matches!(
        s.order_validations(order.id).await,
        Err(Error::Corrupt(_))
    ));
    // The new name is validated over its second challenge (dns-01), nine hours after the old.
    let fresh = order
        .authz_ids
        .iter()
        .copied()
        .find(|id| !early.authz_ids.contains(id))
        .unwrap();
    let authz = s.authorization(fresh, later).await.unwrap().unwrap();
    let dns01 = &authz.challenges[1];
    assert_eq!(dns01.kind, acme_core::status::ChallengeType::Dns01);
    s.start_challenge(dns01.id, later).await.unwrap().started();
    s.record_validation(dns01.id, Ok(()), VALID, later, None)
        .await
        .unwrap();
    let validations = s.order_validations(order.id).await.unwrap();
    let seen: Vec<_> = validations
        .iter()
        .map(|v| (v.identifier.value().to_owned(), v.method, v.validated_at))
        .collect();
    let order = s.order(order.id, later).await.unwrap().unwrap();
    let expected: Vec<_> = order
        .authz_ids
        .iter()
        .map(|id| {
            if *id == fresh {
                (
                    "new.example.com".to_owned(),
                    acme_core::status::ChallengeType::Dns01,
                    later,
                )
            } else {
                assert_eq!(*id, early.authz_ids[0], "the old authorization is reused");
                (
                    "old.example.com".to_owned(),
                    acme_core::status::ChallengeType::Http01,
                    now,
                )
            }
        })
        .collect();
    assert_eq!(seen, expected);
    assert_eq!(
        validations.iter().map(|v| v.authz_id).collect::<Vec<_>>(),
        order.authz_ids
    );
}
