use acme_core::ids::OrderId;
use acme_core::status::OrderStatus;
use acme_core::status::RevocationReason;
use storage::PruneReport;
use storage::Storage;
use storage::model::Order;
use storage::model::OrderGuards;
use time::Duration;
use time::OffsetDateTime;

use crate::harness;
use crate::harness::Begun;
use crate::harness::Changed;
use crate::harness::Created;
use crate::harness::ev;
use crate::harness::t0;

crate::both_backends!(
    only_finished_transient_rows_go,
    batches_take_everything_over_several_transactions,
    concurrent_pruners_share_the_work,
);

const RETENTION: Duration = Duration::days(7);

/// An order for one fresh name at `now`, left pending (it and its authorization expire a week
/// later).
async fn pending_order(
    s: &Storage,
    account: acme_core::ids::AccountId,
    name: &str,
    now: OffsetDateTime,
) -> Order {
    s.create_order(
        harness::new_order(account, &[name], now, false),
        &OrderGuards::default(),
        now,
    )
    .await
    .unwrap()
    .created()
}

async fn order_gone(s: &Storage, id: OrderId, now: OffsetDateTime) -> bool {
    s.order(id, now).await.unwrap().is_none()
}

async fn only_finished_transient_rows_go(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;

    // Issued, then revoked: certificate and order stay; the CSR, links and authorization go.
    let cert = harness::issue(s, acct.id, &["issued.example.com"], 1, now).await;
    let revoked = s
        .revoke_certificate(
            cert.id,
            RevocationReason::KeyCompromise,
            now + Duration::days(1),
            &ev(),
        )
        .await
        .unwrap()
        .changed();
    let issued = s.order(cert.order_id, now).await.unwrap().unwrap();
    // The fixture records verdicts itself: settle the jobs a worker would have finished.
    while let Some(job) = s.claim_job(now, Duration::minutes(1), 10).await.unwrap() {
        s.complete_job(&job).await.unwrap();
    }
    assert_eq!(issued.authz_ids.len(), 1);

    // Never finished: the order, its authorization and challenges go.
    let abandoned = pending_order(s, acct.id, "abandoned.example.com", now).await;
    let abandoned_authz = s
        .authorization(abandoned.authz_ids[0], now)
        .await
        .unwrap()
        .unwrap();

    // A validation job still names its challenge: the order goes, the authorization stays.
    let validating = pending_order(s, acct.id, "validating.example.com", now).await;
    let validating_authz = validating.authz_ids[0];
    let chal = harness::start_first_challenge(s, validating_authz, now).await;

    // In processing with its finalization job: everything stays.
    let processing = harness::ready_order(s, acct.id, &["processing.example.com"], now).await;
    s.begin_finalize(processing.id, b"csr", None, now)
        .await
        .unwrap()
        .begun();

    // Long after: everything above expired more than the retention ago; this one did not.
    let late = now + Duration::days(60);
    let recent = pending_order(s, acct.id, "recent.example.com", late - Duration::days(2)).await;

    let report = s.prune(late, RETENTION, 500).await.unwrap();
    assert_eq!(
        report,
        PruneReport {
            orders: 2,
            orders_trimmed: 1,
            order_links: 3,
            authorizations: 2,
            challenges: 4,
            // Kept until two years after issuance.
            evidence: 0,
            more: false,
            longest_hold: report.longest_hold,
        }
    );
    // Each batch's transactions were timed (what the pruner sizes its batches by).
    assert!(report.longest_hold > std::time::Duration::ZERO);

    // The certificate and its revocation are intact, by id and by serial.
    assert_eq!(s.certificate(cert.id).await.unwrap(), Some(revoked.clone()));
    assert_eq!(
        s.certificate_by_serial(&cert.serial).await.unwrap(),
        Some(revoked)
    );
    // Its order answers, valid with its certificate, without CSR or authorizations.
    let trimmed = s.order(issued.id, late).await.unwrap().unwrap();
    assert_eq!(trimmed.status, OrderStatus::Valid);
    assert_eq!(trimmed.certificate_id, Some(cert.id));
    assert!(trimmed.authz_ids.is_empty());
    assert_eq!(s.order_csr(issued.id).await.unwrap(), None);
    assert!(
        s.authorization(issued.authz_ids[0], late)
            .await
            .unwrap()
            .is_none()
    );

    assert!(order_gone(s, abandoned.id, late).await);
    assert!(
        s.authorization(abandoned.authz_ids[0], late)
            .await
            .unwrap()
            .is_none()
    );
    for c in &abandoned_authz.challenges {
        assert!(s.challenge(c.id).await.unwrap().is_none());
    }

    assert!(order_gone(s, validating.id, late).await);
    assert!(
        s.authorization(validating_authz, late)
            .await
            .unwrap()
            .is_some()
    );
    assert!(s.challenge(chal).await.unwrap().is_some());

    let kept = s.order(processing.id, late).await.unwrap().unwrap();
    assert_eq!(kept.status, OrderStatus::Processing);
    assert_eq!(kept.authz_ids, processing.authz_ids);
    assert_eq!(
        s.order_csr(processing.id).await.unwrap(),
        Some(b"csr".to_vec())
    );
    assert!(
        s.authorization(processing.authz_ids[0], late)
            .await
            .unwrap()
            .is_some()
    );

    let recent_now = s.order(recent.id, late).await.unwrap().unwrap();
    assert_eq!(recent_now.status, OrderStatus::Pending);
    assert!(
        s.authorization(recent.authz_ids[0], late)
            .await
            .unwrap()
            .is_some()
    );

    // Again: nothing left to do.
    let again = s.prune(late, RETENTION, 500).await.unwrap();
    assert!(again.is_empty(), "{again:?}");

    // The retention counts from the expiry: the recent order goes once it has passed, not before.
    let edge = recent.expires_at + RETENTION;
    let before = s
        .prune(edge - Duration::seconds(1), RETENTION, 500)
        .await
        .unwrap();
    assert!(before.is_empty(), "{before:?}");
    let after = s
        .prune(edge + Duration::seconds(1), RETENTION, 500)
        .await
        .unwrap();
    assert_eq!((after.orders, after.authorizations), (1, 1));
    assert!(order_gone(s, recent.id, edge).await);
}

async fn batches_take_everything_over_several_transactions(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let mut orders = Vec::new();
    for i in 0..5 {
        orders.push(pending_order(s, acct.id, &format!("b{i}.example.com"), now).await);
    }
    let late = now + Duration::days(30);

    // One batch of two: two orders, then the two authorizations they no longer name.
    let first = s.prune_batch(late, RETENTION, 2).await.unwrap();
    assert_eq!(
        first,
        PruneReport {
            orders: 2,
            orders_trimmed: 0,
            order_links: 2,
            authorizations: 2,
            challenges: 4,
            evidence: 0,
            more: true,
            longest_hold: first.longest_hold,
        }
    );
    assert!(first.longest_hold > std::time::Duration::ZERO);
    let rest = s.prune(late, RETENTION, 2).await.unwrap();
    assert_eq!(
        (rest.orders, rest.authorizations, rest.challenges, rest.more),
        (3, 3, 6, false)
    );
    for order in &orders {
        assert!(order_gone(s, order.id, late).await);
    }
    assert!(s.prune(late, RETENTION, 2).await.unwrap().is_empty());
}

/// Two pruners at once (two instances on one PostgreSQL database, or two passes on SQLite):
/// neither fails, and together they delete each row once.
async fn concurrent_pruners_share_the_work(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    for i in 0..20 {
        pending_order(s, acct.id, &format!("c{i}.example.com"), now).await;
    }
    let late = now + Duration::days(30);
    let (a, b) = tokio::join!(s.prune(late, RETENTION, 3), s.prune(late, RETENTION, 3));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.orders + b.orders, 20, "{a:?} {b:?}");
    assert_eq!(a.authorizations + b.authorizations, 20, "{a:?} {b:?}");
    assert_eq!(a.challenges + b.challenges, 40, "{a:?} {b:?}");
    assert!(s.prune(late, RETENTION, 3).await.unwrap().is_empty());
}
