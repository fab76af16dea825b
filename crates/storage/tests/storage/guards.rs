use acme_core::status::AccountStatus;
use acme_core::status::OrderStatus;
use storage::Storage;
use storage::model::DuplicateGuard;
use storage::model::GuardExceeded;
use storage::model::GuardUsage;
use storage::model::OrderCreation;
use storage::model::OrderGuards;
use storage::model::PendingAuthzGuard;
use time::Duration;

use crate::harness;
use crate::harness::Changed;
use crate::harness::Created;
use crate::harness::ev;
use crate::harness::t0;

crate::both_backends!(
    pending_authz_cap,
    duplicate_certificate_cap,
    an_exceeded_limit_not_to_refuse_on_is_reported_with_the_order,
    an_order_of_an_account_no_longer_valid_is_not_created,
    parallel_orders_respect_pending_cap
);

async fn pending_authz_cap(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let guards = OrderGuards {
        max_pending_authz: Some(PendingAuthzGuard {
            max: 3,
            refuse: true,
        }),
        duplicate_certificates: None,
    };
    // Authorizations expiring one hour apart, the soonest first.
    for (i, name) in ["a.example.com", "b.example.com"].iter().enumerate() {
        let expires = now + Duration::hours(1 + i64::try_from(i).unwrap());
        let new =
            harness::new_order_expiring(acct.id, &[name], now + Duration::days(7), expires, None);
        s.create_order(new, &guards, now).await.unwrap().created();
    }
    // Two new ones would make four.
    let two = harness::new_order(acct.id, &["c.example.com", "d.example.com"], now, false);
    match s.create_order(two, &guards, now).await {
        Ok(OrderCreation::WouldExceed {
            exceeded:
                GuardExceeded::PendingAuthz {
                    pending,
                    max,
                    retry_at,
                },
            also,
        }) => {
            assert!(also.is_empty());
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
    .unwrap()
    .created();
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
            Ok(OrderCreation::WouldExceed {
                exceeded: GuardExceeded::PendingAuthz {
                    pending: 3,
                    max: 3,
                    ..
                },
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
    .unwrap()
    .created();

    // Expired pending authorizations no longer count.
    let later = now + Duration::hours(1);
    s.create_order(
        harness::new_order(acct.id, &["e.example.com"], later, false),
        &guards,
        later,
    )
    .await
    .unwrap()
    .created();

    // An order made only of reused valid authorizations adds nothing pending and passes.
    let full = OrderGuards {
        max_pending_authz: Some(PendingAuthzGuard {
            max: 0,
            refuse: true,
        }),
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
        .unwrap()
        .created();
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
        duplicate_certificates: Some(DuplicateGuard {
            max,
            window: week,
            refuse: true,
        }),
    };
    match s
        .create_order(
            harness::new_order(acct.id, &names, at, false),
            &guard(2),
            at,
        )
        .await
    {
        Ok(OrderCreation::WouldExceed {
            exceeded:
                GuardExceeded::Duplicates {
                    count,
                    max: 2,
                    retry_at,
                },
            ..
        }) => {
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
    .unwrap()
    .created();
    s.create_order(
        harness::new_order(acct.id, &["a.example.com"], at, false),
        &guard(2),
        at,
    )
    .await
    .unwrap()
    .created();
    let other = harness::account(s, now).await;
    s.create_order(
        harness::new_order(other.id, &names, at, false),
        &guard(2),
        at,
    )
    .await
    .unwrap()
    .created();

    // Certificates issued before the window do not count.
    let late = now + week + Duration::seconds(1);
    s.create_order(
        harness::new_order(acct.id, &names, late, false),
        &OrderGuards {
            max_pending_authz: None,
            duplicate_certificates: Some(DuplicateGuard {
                max: 2,
                window: week,
                refuse: true,
            }),
        },
        late,
    )
    .await
    .unwrap()
    .created();

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
        Ok(OrderCreation::WouldExceed {
            exceeded: GuardExceeded::Duplicates { retry_at, .. },
            ..
        }) => assert_eq!(retry_at, boundary),
        other => panic!("expected the duplicate cap, got {other:?}"),
    }
    let OrderCreation::Created { usage, .. } = s
        .create_order(
            harness::new_order(acct.id, &names, boundary, false),
            &guard(2),
            boundary,
        )
        .await
        .unwrap()
    else {
        panic!("the order at the boundary was not created");
    };
    let usage = usage.duplicates.unwrap();
    assert_eq!(usage.count, 1, "the oldest left the window at retry_at");
    assert_eq!(usage.all_left_at, Some(now + Duration::hours(1) + week));

    // Revoked certificates do not count.
    s.revoke_certificate(
        first.id,
        acme_core::status::RevocationReason::Superseded,
        at,
        &ev(),
    )
    .await
    .unwrap()
    .changed();
    match s
        .create_order(
            harness::new_order(acct.id, &names, at, false),
            &guard(1),
            at,
        )
        .await
    {
        Ok(OrderCreation::WouldExceed {
            exceeded: GuardExceeded::Duplicates {
                count, retry_at, ..
            },
            ..
        }) => {
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
    .unwrap()
    .created();
}

/// A limit not to refuse on (shadow mode) is counted in the same transaction and reported with
/// the created order; one to refuse on after it still refuses, naming the other too.
async fn an_exceeded_limit_not_to_refuse_on_is_reported_with_the_order(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let names = ["a.example.com"];
    harness::issue(s, acct.id, &names, 1, now).await;
    let shadow = OrderGuards {
        max_pending_authz: Some(PendingAuthzGuard {
            max: 0,
            refuse: false,
        }),
        duplicate_certificates: Some(DuplicateGuard {
            max: 1,
            window: Duration::days(7),
            refuse: false,
        }),
    };
    match s
        .create_order(
            harness::new_order(acct.id, &names, now, false),
            &shadow,
            now,
        )
        .await
        .unwrap()
    {
        OrderCreation::Created {
            order,
            usage,
            exceeded,
        } => {
            assert_eq!(order.status, OrderStatus::Pending);
            assert_eq!(usage, GuardUsage::default());
            assert!(
                matches!(
                    exceeded.as_slice(),
                    [
                        GuardExceeded::PendingAuthz {
                            pending: 0,
                            max: 0,
                            ..
                        },
                        GuardExceeded::Duplicates {
                            count: 1,
                            max: 1,
                            ..
                        }
                    ]
                ),
                "{exceeded:?}"
            );
        }
        other => panic!("expected the order, got {other:?}"),
    }
    let mixed = OrderGuards {
        duplicate_certificates: Some(DuplicateGuard {
            max: 1,
            window: Duration::days(7),
            refuse: true,
        }),
        ..shadow
    };
    let refused = s
        .create_order(harness::new_order(acct.id, &names, now, false), &mixed, now)
        .await
        .unwrap();
    assert!(
        matches!(
            &refused,
            OrderCreation::WouldExceed {
                exceeded: GuardExceeded::Duplicates { count: 1, .. },
                also,
            } if matches!(also.as_slice(), [GuardExceeded::PendingAuthz { .. }])
        ),
        "{refused:?}"
    );
}

/// The account's status is read under its lock and told, nothing written.
async fn an_order_of_an_account_no_longer_valid_is_not_created(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    s.deactivate_account(acct.id, now, &ev())
        .await
        .unwrap()
        .changed();
    for guards in [
        OrderGuards::default(),
        OrderGuards {
            max_pending_authz: Some(PendingAuthzGuard {
                max: 10,
                refuse: true,
            }),
            duplicate_certificates: None,
        },
    ] {
        let outcome = s
            .create_order(
                harness::new_order(acct.id, &["a.example.com"], now, false),
                &guards,
                now,
            )
            .await
            .unwrap();
        assert_eq!(
            outcome,
            OrderCreation::AccountNotValid(AccountStatus::Deactivated)
        );
    }
    assert!(
        s.account_orders(acct.id, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn parallel_orders_respect_pending_cap(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let guards = OrderGuards {
        max_pending_authz: Some(PendingAuthzGuard {
            max: 10,
            refuse: true,
        }),
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
            Ok(OrderCreation::Created { order, .. }) => {
                assert_eq!(order.status, OrderStatus::Pending);
                ok += 1;
            }
            Ok(OrderCreation::WouldExceed {
                exceeded:
                    GuardExceeded::PendingAuthz {
                        pending: 10,
                        max: 10,
                        ..
                    },
                ..
            }) => refused += 1,
            other => panic!("unexpected outcome: {other:?}"),
        }
    }
    assert_eq!((ok, refused), (10, 40));
    assert_eq!(
        s.account_orders(acct.id, None, 100).await.unwrap().len(),
        10
    );
}
