use acme_core::status::OrderStatus;
use storage::Storage;
use storage::error::Error;
use storage::model::DuplicateGuard;
use storage::model::OrderGuards;
use time::Duration;

use crate::harness;
use crate::harness::t0;

crate::both_backends!(
    pending_authz_cap,
    duplicate_certificate_cap,
    parallel_orders_respect_pending_cap
);

async fn pending_authz_cap(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let guards = OrderGuards {
        max_pending_authz: Some(3),
        duplicate_certificates: None,
    };
    // Authorizations expiring one hour apart, the soonest first.
    for (i, name) in ["a.example.com", "b.example.com"].iter().enumerate() {
        let expires = now + Duration::hours(1 + i64::try_from(i).unwrap());
        let new =
            harness::new_order_expiring(acct.id, &[name], now + Duration::days(7), expires, false);
        s.create_order(new, &guards, now).await.unwrap();
    }
    // Two new ones would make four.
    let two = harness::new_order(acct.id, &["c.example.com", "d.example.com"], now, false);
    match s.create_order(two, &guards, now).await {
        Err(Error::PendingAuthzLimit {
            pending,
            max,
            retry_at,
        }) => {
            assert_eq!((pending, max), (2, 3));
            assert_eq!(retry_at, now + Duration::hours(1));
        }
        other => panic!("expected the pending cap, got {other:?}"),
    }
    s.create_order(
        harness::new_order(acct.id, &["c.example.com"], now, false),
        &guards,
        now,
    )
    .await
    .unwrap();
    let refused = s
        .create_order(
            harness::new_order(acct.id, &["e.example.com"], now, false),
            &guards,
            now,
        )
        .await;
    assert!(
        matches!(
            refused,
            Err(Error::PendingAuthzLimit {
                pending: 3,
                max: 3,
                ..
            })
        ),
        "{refused:?}"
    );

    // Other accounts have their own count.
    let other = harness::account(s, now).await;
    s.create_order(
        harness::new_order(other.id, &["e.example.com"], now, false),
        &guards,
        now,
    )
    .await
    .unwrap();

    // Expired pending authorizations no longer count.
    let later = now + Duration::hours(1);
    s.create_order(
        harness::new_order(acct.id, &["e.example.com"], later, false),
        &guards,
        later,
    )
    .await
    .unwrap();

    // An order made only of reused valid authorizations adds nothing pending and passes.
    let full = OrderGuards {
        max_pending_authz: Some(0),
        duplicate_certificates: None,
    };
    let ready = harness::ready_order(s, other.id, &["v.example.com"], now).await;
    let reused = s
        .create_order(
            harness::new_order(other.id, &["v.example.com"], now, true),
            &full,
            now,
        )
        .await
        .unwrap();
    assert_eq!(reused.status, OrderStatus::Ready);
    assert_eq!(reused.authz_ids, ready.authz_ids);
}

async fn duplicate_certificate_cap(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let names = ["a.example.com", "b.example.com"];
    let first = harness::issue(s, acct.id, &names, 1, now).await;
    let second = harness::issue(s, acct.id, &names, 2, now + Duration::hours(1)).await;
    assert_eq!(first.set_hash, second.set_hash);

    let at = now + Duration::days(2);
    let week = Duration::days(7);
    let guard = |max| OrderGuards {
        max_pending_authz: None,
        duplicate_certificates: Some(DuplicateGuard { max, window: week }),
    };
    match s
        .create_order(
            harness::new_order(acct.id, &names, at, false),
            &guard(2),
            at,
        )
        .await
    {
        Err(Error::DuplicateCertificate { count, retry_at }) => {
            assert_eq!(count, 2);
            assert_eq!(retry_at, now + week);
        }
        other => panic!("expected the duplicate cap, got {other:?}"),
    }
    // Under a higher cap, another set, or another account: allowed.
    s.create_order(
        harness::new_order(acct.id, &names, at, false),
        &guard(3),
        at,
    )
    .await
    .unwrap();
    s.create_order(
        harness::new_order(acct.id, &["a.example.com"], at, false),
        &guard(2),
        at,
    )
    .await
    .unwrap();
    let other = harness::account(s, now).await;
    s.create_order(
        harness::new_order(other.id, &names, at, false),
        &guard(2),
        at,
    )
    .await
    .unwrap();

    // Certificates issued before the window do not count.
    let late = now + week + Duration::seconds(1);
    s.create_order(
        harness::new_order(acct.id, &names, late, false),
        &OrderGuards {
            max_pending_authz: None,
            duplicate_certificates: Some(DuplicateGuard {
                max: 2,
                window: week,
            }),
        },
        late,
    )
    .await
    .unwrap();

    // The refusal's retry_at is exactly when the oldest leaves: refused a nanosecond before it,
    // allowed at it.
    let boundary = now + week;
    let just_before = boundary - Duration::nanoseconds(1);
    match s
        .create_order(
            harness::new_order(acct.id, &names, just_before, false),
            &guard(2),
            just_before,
        )
        .await
    {
        Err(Error::DuplicateCertificate { retry_at, .. }) => assert_eq!(retry_at, boundary),
        other => panic!("expected the duplicate cap, got {other:?}"),
    }
    let (_, usage) = s
        .create_order_with_usage(
            harness::new_order(acct.id, &names, boundary, false),
            &guard(2),
            boundary,
        )
        .await
        .unwrap();
    let usage = usage.duplicates.unwrap();
    assert_eq!(usage.count, 1, "the oldest left the window at retry_at");
    assert_eq!(usage.all_left_at, Some(now + Duration::hours(1) + week));

    // Revoked certificates do not count.
    s.revoke_certificate(
        first.id,
        acme_core::status::RevocationReason::Superseded,
        at,
    )
    .await
    .unwrap();
    match s
        .create_order(
            harness::new_order(acct.id, &names, at, false),
            &guard(1),
            at,
        )
        .await
    {
        Err(Error::DuplicateCertificate { count, retry_at }) => {
            assert_eq!(count, 1);
            assert_eq!(retry_at, now + Duration::hours(1) + week);
        }
        other => panic!("expected the duplicate cap, got {other:?}"),
    }
    s.create_order(
        harness::new_order(acct.id, &names, at, false),
        &guard(2),
        at,
    )
    .await
    .unwrap();
}

async fn parallel_orders_respect_pending_cap(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let guards = OrderGuards {
        max_pending_authz: Some(10),
        duplicate_certificates: None,
    };
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..50 {
        let s = s.clone();
        let guards = guards.clone();
        let name = format!("host{i}.example.com");
        tasks.spawn(async move {
            let new = harness::new_order(acct.id, &[name.as_str()], now, false);
            s.create_order(new, &guards, now).await
        });
    }
    let (mut ok, mut refused) = (0, 0);
    while let Some(result) = tasks.join_next().await {
        match result.unwrap() {
            Ok(order) => {
                assert_eq!(order.status, OrderStatus::Pending);
                ok += 1;
            }
            Err(Error::PendingAuthzLimit {
                pending: 10,
                max: 10,
                ..
            }) => refused += 1,
            Err(other) => panic!("unexpected error: {other:?}"),
        }
    }
    assert_eq!((ok, refused), (10, 40));
    assert_eq!(
        s.account_orders(acct.id, None, 100).await.unwrap().len(),
        10
    );
}
