//! A deactivated account gets no certificate, even for an order that was already processing.

use acme_core::status::AccountStatus;
use acme_core::status::OrderStatus;
use storage::Storage;
use storage::model::Completion;

use crate::harness;
use crate::harness::t0;

crate::both_backends!(
    completion_is_refused_once_the_account_is_deactivated,
    completion_before_deactivation_stands,
);

async fn completion_is_refused_once_the_account_is_deactivated(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = harness::ready_order(s, acct.id, &["gone.example.com"], now).await;
    s.begin_finalize(order.id, b"csr", now).await.unwrap();
    // The account is deactivated while the worker signs.
    s.deactivate_account(acct.id, now).await.unwrap();
    let processing = s.order(order.id, now).await.unwrap().unwrap();
    assert_eq!(processing.status, OrderStatus::Processing);

    let done = s
        .complete_order(order.id, harness::new_cert(7, now), now, None)
        .await
        .unwrap();
    assert_eq!(
        done,
        Completion::AccountNotValid(AccountStatus::Deactivated)
    );
    let after = s.order(order.id, now).await.unwrap().unwrap();
    assert_eq!(after.status, OrderStatus::Processing, "nothing was changed");
    assert_eq!(after.certificate_id, None);
    assert_eq!(
        s.certificate_by_serial(&harness::new_cert(7, now).serial)
            .await
            .unwrap(),
        None,
        "no certificate was stored"
    );
}

async fn completion_before_deactivation_stands(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let cert = harness::issue(s, acct.id, &["kept.example.com"], 8, now).await;
    s.deactivate_account(acct.id, now).await.unwrap();
    // A repeated completion (a job that runs twice) still finds the certificate it stored.
    let order = s.order(cert.order_id, now).await.unwrap().unwrap();
    assert_eq!(order.status, OrderStatus::Valid);
    assert_eq!(
        s.complete_order(order.id, harness::new_cert(8, now), now, None)
            .await
            .unwrap(),
        Completion::Issued(Box::new(cert))
    );
}
