//! A deactivated account gets nothing signed, even for an order that was already processing;
//! what was reserved before the deactivation is stored whatever happens after.

use acme_core::status::AccountStatus;
use acme_core::status::OrderStatus;
use storage::Storage;
use storage::model::ReservationState;
use storage::model::Reserved;

use crate::harness;
use crate::harness::Begun;
use crate::harness::Changed;
use crate::harness::ev;
use crate::harness::t0;

crate::both_backends!(
    a_reservation_is_refused_once_the_account_is_deactivated,
    a_certificate_reserved_before_the_deactivation_is_stored,
    completion_before_deactivation_stands,
);

async fn a_reservation_is_refused_once_the_account_is_deactivated(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = harness::ready_order(s, acct.id, &["gone.example.com"], now).await;
    s.begin_finalize(order.id, b"csr", None, now)
        .await
        .unwrap()
        .begun();
    // The account is deactivated while the job waits in the queue.
    s.deactivate_account(acct.id, now, &ev())
        .await
        .unwrap()
        .changed();
    let processing = s.order(order.id, now).await.unwrap().unwrap();
    assert_eq!(processing.status, OrderStatus::Processing);

    let cert = harness::new_cert(7, now);
    let reserved = s
        .reserve_serial(order.id, harness::reservation_of(&cert), now)
        .await
        .unwrap();
    assert_eq!(
        reserved,
        Reserved::AccountNotValid(AccountStatus::Deactivated)
    );
    assert_eq!(
        s.serial_reservations(order.id).await.unwrap(),
        [],
        "nothing reserved, so nothing may be signed"
    );
    let after = s.order(order.id, now).await.unwrap().unwrap();
    assert_eq!(after.status, OrderStatus::Processing, "nothing was changed");
    assert_eq!(after.certificate_id, None);
    // Without a reservation there is nothing to store a certificate against.
    assert!(
        s.complete_order(order.id, cert.clone(), now, None, &ev())
            .await
            .is_err()
    );
    assert_eq!(s.certificate_by_serial(&cert.serial).await.unwrap(), None);
}

async fn a_certificate_reserved_before_the_deactivation_is_stored(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = harness::ready_order(s, acct.id, &["signing.example.com"], now).await;
    s.begin_finalize(order.id, b"csr", None, now)
        .await
        .unwrap()
        .begun();
    let cert = harness::new_cert(9, now);
    let reserved = s
        .reserve_serial(order.id, harness::reservation_of(&cert), now)
        .await
        .unwrap();
    assert!(matches!(reserved, Reserved::Reserved(_)), "{reserved:?}");
    // Deactivated while the worker signs: the issuance was decided before, and what the key
    // signed must be recorded.
    s.deactivate_account(acct.id, now, &ev())
        .await
        .unwrap()
        .changed();
    let stored = s
        .complete_order(order.id, cert.clone(), now, None, &ev())
        .await
        .unwrap();
    assert_eq!(stored.serial, cert.serial);
    assert_eq!(
        s.order(order.id, now).await.unwrap().unwrap().status,
        OrderStatus::Valid
    );
    let reservations = s.serial_reservations(order.id).await.unwrap();
    assert_eq!(reservations.len(), 1);
    assert_eq!(reservations[0].state, ReservationState::Issued);
    assert_eq!(reservations[0].certificate_id, Some(stored.id));
}

async fn completion_before_deactivation_stands(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let cert = harness::issue(s, acct.id, &["kept.example.com"], 8, now).await;
    s.deactivate_account(acct.id, now, &ev())
        .await
        .unwrap()
        .changed();
    // A repeated completion (a job that runs twice) still finds the certificate it stored.
    let order = s.order(cert.order_id, now).await.unwrap().unwrap();
    assert_eq!(order.status, OrderStatus::Valid);
    assert_eq!(
        s.complete_order(order.id, harness::new_cert(8, now), now, None, &ev())
            .await
            .unwrap(),
        cert
    );
}
