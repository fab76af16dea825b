//! Pre-authorization (RFC 8555 §7.4.1): a pending authorization no order names, counted against
//! the pending cap under the account's lock, returned again while it can be reused once valid,
//! and reused by a later order like any other valid authorization.

use acme_core::status::AuthzStatus;
use acme_core::status::ChallengeType;
use acme_core::status::OrderStatus;
use storage::Storage;
use storage::model::Account;
use storage::model::GuardExceeded;
use storage::model::NewAuthz;
use storage::model::PendingAuthzGuard;
use storage::model::PreAuthorization;
use time::Duration;
use time::OffsetDateTime;

use crate::harness;
use crate::harness::REUSE_MARGIN;
use crate::harness::VALID_FOR;
use crate::harness::ev;
use crate::harness::t0;

crate::both_backends!(
    a_pre_authorization_is_a_pending_authorization_of_no_order,
    a_valid_pre_authorization_is_returned_again_and_reused_by_an_order,
    the_pending_cap_counts_pre_authorizations,
    a_deactivated_account_is_not_pre_authorized,
    reuse_asks_for_the_method_of_the_validation
);

fn new_authz(name: &str, now: OffsetDateTime) -> NewAuthz {
    NewAuthz {
        identifier: harness::dns(name),
        expires_at: now + Duration::days(7),
        challenges: vec![
            (
                ChallengeType::Http01,
                format!("pre-http-{}", harness::unique()),
            ),
            (
                ChallengeType::Dns01,
                format!("pre-dns-{}", harness::unique()),
            ),
        ],
    }
}

async fn created(
    s: &Storage,
    account: &Account,
    name: &str,
    cap: Option<PendingAuthzGuard>,
    now: OffsetDateTime,
) -> storage::model::Authorization {
    match s
        .pre_authorize(
            account,
            &new_authz(name, now),
            Some(now + REUSE_MARGIN),
            cap,
            now,
        )
        .await
        .unwrap()
    {
        PreAuthorization::Created { authz, .. } => *authz,
        other => panic!("expected a new authorization, got {other:?}"),
    }
}

async fn a_pre_authorization_is_a_pending_authorization_of_no_order(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let authz = created(s, &acct, "pre.example.com", None, now).await;
    assert_eq!(authz.status, AuthzStatus::Pending);
    assert_eq!(authz.account_id, acct.id);
    assert_eq!(authz.identifier.value(), "pre.example.com");
    assert_eq!(authz.expires_at, now + Duration::days(7));
    let kinds: Vec<ChallengeType> = authz.challenges.iter().map(|c| c.kind).collect();
    assert_eq!(kinds, [ChallengeType::Http01, ChallengeType::Dns01]);
    // Read back as any authorization is.
    let read = s.authorization(authz.id, now).await.unwrap().unwrap();
    assert_eq!(read, authz);
    // A second request while it is pending makes another (pending ones are never reused).
    let again = created(s, &acct, "pre.example.com", None, now).await;
    assert_ne!(again.id, authz.id);
}

async fn a_valid_pre_authorization_is_returned_again_and_reused_by_an_order(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let authz = created(s, &acct, "reuse.example.com", None, now).await;
    let challenge = authz.challenges[0].id;
    s.start_challenge(challenge, now).await.unwrap();
    s.record_validation(challenge, Ok(()), VALID_FOR, now, None)
        .await
        .unwrap();

    let later = now + Duration::hours(1);
    match s
        .pre_authorize(
            &acct,
            &new_authz("reuse.example.com", later),
            Some(later + REUSE_MARGIN),
            None,
            later,
        )
        .await
        .unwrap()
    {
        PreAuthorization::Reused(found) => {
            assert_eq!(found.id, authz.id);
            assert_eq!(found.status, AuthzStatus::Valid);
        }
        other => panic!("expected the valid authorization back, got {other:?}"),
    }
    // Without reuse a new one is made.
    match s
        .pre_authorize(
            &acct,
            &new_authz("reuse.example.com", later),
            None,
            None,
            later,
        )
        .await
        .unwrap()
    {
        PreAuthorization::Created { authz: fresh, .. } => assert_ne!(fresh.id, authz.id),
        other => panic!("expected a new authorization, got {other:?}"),
    }

    // An order for the name reuses the pre-authorization and is ready at once.
    let order = harness::created_order(
        s,
        harness::new_order(acct.id, &["reuse.example.com"], later, true),
        later,
    )
    .await;
    assert_eq!(order.authz_ids, [authz.id]);
    assert_eq!(order.status, OrderStatus::Ready);

    // Another account's order does not.
    let other = harness::account(s, now).await;
    let theirs = harness::created_order(
        s,
        harness::new_order(other.id, &["reuse.example.com"], later, true),
        later,
    )
    .await;
    assert_ne!(theirs.authz_ids, [authz.id]);
    assert_eq!(theirs.status, OrderStatus::Pending);
}

async fn the_pending_cap_counts_pre_authorizations(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let cap = Some(PendingAuthzGuard {
        max: 2,
        refuse: true,
    });
    created(s, &acct, "one.example.com", cap, now).await;
    // An order's pending authorization counts too.
    harness::pending_order(s, acct.id, &["two.example.com"], now).await;
    match s
        .pre_authorize(&acct, &new_authz("three.example.com", now), None, cap, now)
        .await
        .unwrap()
    {
        PreAuthorization::WouldExceed(GuardExceeded::PendingAuthz { pending, max, .. }) => {
            assert_eq!((pending, max), (2, 2));
        }
        other => panic!("expected the pending cap, got {other:?}"),
    }
    // In shadow mode it is created and the excess reported.
    let shadow = Some(PendingAuthzGuard {
        max: 2,
        refuse: false,
    });
    match s
        .pre_authorize(
            &acct,
            &new_authz("three.example.com", now),
            None,
            shadow,
            now,
        )
        .await
        .unwrap()
    {
        PreAuthorization::Created { exceeded, .. } => assert_eq!(exceeded.len(), 1),
        other => panic!("expected a new authorization, got {other:?}"),
    }
}

async fn a_deactivated_account_is_not_pre_authorized(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    s.deactivate_account(acct.id, now, &ev()).await.unwrap();
    let outcome = s
        .pre_authorize(&acct, &new_authz("gone.example.com", now), None, None, now)
        .await
        .unwrap();
    assert!(
        matches!(outcome, PreAuthorization::AccountNotValid(_)),
        "{outcome:?}"
    );
}

async fn reuse_asks_for_the_method_of_the_validation(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let authz = created(s, &acct, "method.example.com", None, now).await;
    // challenges[0] is http-01.
    let challenge = authz.challenges[0].id;
    s.start_challenge(challenge, now).await.unwrap();
    s.record_validation(challenge, Ok(()), VALID_FOR, now, None)
        .await
        .unwrap();
    let order_with = |types: Vec<ChallengeType>| storage::model::NewOrder {
        reuse_challenge_types: types,
        ..harness::new_order(acct.id, &["method.example.com"], now, true)
    };
    let dns_only = harness::created_order(s, order_with(vec![ChallengeType::Dns01]), now).await;
    assert_ne!(dns_only.authz_ids, [authz.id]);
    assert_eq!(dns_only.status, OrderStatus::Pending);
    let http = harness::created_order(
        s,
        order_with(vec![ChallengeType::Dns01, ChallengeType::Http01]),
        now,
    )
    .await;
    assert_eq!(http.authz_ids, [authz.id]);
    assert_eq!(http.status, OrderStatus::Ready);
    // With a profile lifetime too (the other reuse query).
    let within = storage::model::NewOrder {
        valid_authz_lifetime: Some(Duration::days(10)),
        ..order_with(vec![ChallengeType::Dns01])
    };
    let order = harness::created_order(s, within, now).await;
    assert_ne!(order.authz_ids, [authz.id]);
    let within = storage::model::NewOrder {
        valid_authz_lifetime: Some(Duration::days(10)),
        ..order_with(vec![ChallengeType::Http01])
    };
    let order = harness::created_order(s, within, now).await;
    assert_eq!(order.authz_ids, [authz.id]);
}
