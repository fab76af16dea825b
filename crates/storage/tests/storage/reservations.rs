//! Serials are reserved, and committed, before anything is signed (migration 0014): the
//! reservation holds what the certificate will be, a certificate is stored only against its
//! own open reservation, a resumed job gets the same reservation again, and nothing open is
//! ever silently replaced or forgotten.

use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use acme_core::status::OrderStatus;
use storage::Storage;
use storage::error::Error;
use storage::model::JobKind;
use storage::model::NewCertificate;
use storage::model::ReservationState;
use storage::model::Reserved;
use storage::model::ReservedAtOnce;
use time::Duration;

use crate::harness;
use crate::harness::Begun;
use crate::harness::Changed;
use crate::harness::ev;
use crate::harness::t0;

crate::both_backends!(
    a_reservation_at_once_is_committed_before_signing_and_resumed_after_a_crash,
    a_resumed_reservation_of_another_issuer_is_abandoned_and_both_are_kept,
    a_failed_order_abandons_its_open_reservation,
    only_the_reserved_certificate_is_stored,
    an_expired_authorization_refuses_the_reservation,
    a_settled_order_reserves_nothing,
);

const LEASE: Duration = Duration::seconds(60);

/// Another CA's chain: the issuer changed (a restart with another intermediate).
const OTHER_CHAIN: &str = "-----BEGIN CERTIFICATE-----\nb3RoZXI=\n-----END CERTIFICATE-----\n";

async fn a_reservation_at_once_is_committed_before_signing_and_resumed_after_a_crash(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = harness::ready_order(s, acct.id, &["a.example.com", "b.example.com"], now).await;
    let cert = harness::new_cert(1, now);
    let ReservedAtOnce::Reserved {
        order: processing,
        job,
        reservation,
    } = s
        .reserve_ready_order(
            order.id,
            b"csr",
            None,
            harness::reservation_of(&cert),
            now,
            LEASE,
        )
        .await
        .unwrap()
    else {
        panic!("not reserved");
    };
    assert_eq!(processing.status, OrderStatus::Processing);
    assert_eq!(reservation.serial, cert.serial);
    assert_eq!(reservation.order_id, order.id);
    assert_eq!(reservation.account_id, acct.id);
    assert_eq!(reservation.identifiers, order.identifiers);
    assert_eq!(
        (reservation.not_before, reservation.not_after),
        (cert.not_before, cert.not_after)
    );
    assert_eq!(reservation.signings, 1);
    assert_eq!(reservation.state, ReservationState::Reserved);
    assert_eq!(reservation.certificate_id, None);

    // The process dies here, after the commit and (perhaps) the signature, before the store.
    // The reservation is there for operators, and the order's job for a worker once its lease
    // has run out.
    let later = now + LEASE + Duration::seconds(1);
    assert_eq!(
        s.open_reservations(later, 10).await.unwrap(),
        [*reservation.clone()]
    );
    // (The validation jobs `ready_order` left come first.)
    let resumed_job = loop {
        let claimed = s.claim_job(later, LEASE, 3).await.unwrap().unwrap();
        if claimed.kind == JobKind::Finalize(order.id) {
            break claimed;
        }
    };
    assert_eq!(resumed_job.id, job.id);
    assert_eq!(resumed_job.attempts, 2);

    // The resumed job asks for a fresh serial and gets the open reservation back instead, to
    // sign it again exactly, counted.
    let fresh = harness::new_cert(2, later);
    let Reserved::Reserved(again) = s
        .reserve_serial(order.id, harness::reservation_of(&fresh), later)
        .await
        .unwrap()
    else {
        panic!("not reserved");
    };
    assert_eq!(
        again.serial, cert.serial,
        "the same serial, not a second one"
    );
    assert_eq!(
        (again.not_before, again.not_after),
        (cert.not_before, cert.not_after),
        "the same window"
    );
    assert_eq!(again.signings, 2);
    assert_eq!(s.serial_reservations(order.id).await.unwrap().len(), 1);

    let stored = s
        .complete_order(order.id, cert.clone(), later, Some(&resumed_job), &ev())
        .await
        .unwrap();
    assert_eq!(stored.serial, cert.serial);
    let reservations = s.serial_reservations(order.id).await.unwrap();
    assert_eq!(reservations.len(), 1);
    assert_eq!(reservations[0].state, ReservationState::Issued);
    assert_eq!(reservations[0].certificate_id, Some(stored.id));
    assert_eq!(s.open_reservations(later, 10).await.unwrap(), []);
    // The finalization job was settled with the certificate: only the validation jobs are left.
    for round in 2..8 {
        let at = later + LEASE * round;
        if let Some(left) = s.claim_job(at, LEASE, 3).await.unwrap() {
            assert_ne!(left.kind, JobKind::Finalize(order.id), "the job is settled");
        }
    }
}

async fn a_resumed_reservation_of_another_issuer_is_abandoned_and_both_are_kept(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = harness::ready_order(s, acct.id, &["a.example.com"], now).await;
    s.begin_finalize(order.id, b"csr", None, now)
        .await
        .unwrap()
        .begun();
    let first = harness::new_cert(1, now);
    s.reserve_serial(order.id, harness::reservation_of(&first), now)
        .await
        .unwrap();

    // Resumed under another CA: the first serial cannot be signed again, so it is marked and a
    // second one recorded, never signed silently.
    let second = NewCertificate {
        issuer_chain_pem: OTHER_CHAIN.to_owned(),
        ..harness::new_cert(2, now)
    };
    let Reserved::Reserved(reserved) = s
        .reserve_serial(order.id, harness::reservation_of(&second), now)
        .await
        .unwrap()
    else {
        panic!("not reserved");
    };
    assert_eq!(reserved.serial, second.serial);
    assert_eq!(reserved.signings, 1);
    let all = s.serial_reservations(order.id).await.unwrap();
    let states: Vec<_> = all.iter().map(|r| (r.serial.clone(), r.state)).collect();
    assert_eq!(
        states,
        [
            (first.serial.clone(), ReservationState::Abandoned),
            (second.serial.clone(), ReservationState::Reserved),
        ]
    );
    assert_ne!(all[0].issuer_chain_id, all[1].issuer_chain_id);

    // The abandoned serial's certificate can no longer be stored; the second one can.
    assert!(matches!(
        s.complete_order(order.id, first, now, None, &ev()).await,
        Err(Error::Corrupt(_))
    ));
    let stored = s
        .complete_order(order.id, second, now, None, &ev())
        .await
        .unwrap();
    assert_eq!(stored.serial, reserved.serial);
}

async fn a_failed_order_abandons_its_open_reservation(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = harness::ready_order(s, acct.id, &["a.example.com"], now).await;
    let cert = harness::new_cert(1, now);
    let ReservedAtOnce::Reserved { job, .. } = s
        .reserve_ready_order(
            order.id,
            b"csr",
            None,
            harness::reservation_of(&cert),
            now,
            LEASE,
        )
        .await
        .unwrap()
    else {
        panic!("not reserved");
    };
    let problem = Problem::new(ProblemType::ServerInternal, "the CA could not sign");
    s.fail_order(order.id, problem, now, Some(&job))
        .await
        .unwrap()
        .changed();
    let reservations = s.serial_reservations(order.id).await.unwrap();
    assert_eq!(reservations.len(), 1, "the serial stays recorded");
    assert_eq!(reservations[0].state, ReservationState::Abandoned);
    assert_eq!(s.open_reservations(now + LEASE, 10).await.unwrap(), []);
    assert!(
        s.complete_order(order.id, cert, now, None, &ev())
            .await
            .is_err()
    );
}

async fn only_the_reserved_certificate_is_stored(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = harness::ready_order(s, acct.id, &["a.example.com"], now).await;
    s.begin_finalize(order.id, b"csr", None, now)
        .await
        .unwrap()
        .begun();
    let cert = harness::new_cert(1, now);
    s.reserve_serial(order.id, harness::reservation_of(&cert), now)
        .await
        .unwrap();

    // Another serial than the reserved one.
    assert!(matches!(
        s.complete_order(order.id, harness::new_cert(2, now), now, None, &ev())
            .await,
        Err(Error::Corrupt(_))
    ));
    // The reserved serial with another window or another issuer than recorded.
    for changed in [
        NewCertificate {
            not_before: cert.not_before - Duration::days(6),
            ..cert.clone()
        },
        NewCertificate {
            not_after: cert.not_after + Duration::seconds(1),
            ..cert.clone()
        },
        NewCertificate {
            issuer_chain_pem: OTHER_CHAIN.to_owned(),
            ..cert.clone()
        },
        NewCertificate {
            crl_shard: Some(3),
            ..cert.clone()
        },
    ] {
        assert!(
            matches!(
                s.complete_order(order.id, changed.clone(), now, None, &ev())
                    .await,
                Err(Error::Corrupt(_))
            ),
            "{changed:?}"
        );
    }
    assert_eq!(
        s.order(order.id, now).await.unwrap().unwrap().status,
        OrderStatus::Processing,
        "nothing stored"
    );
    let stored = s
        .complete_order(order.id, cert.clone(), now, None, &ev())
        .await
        .unwrap();
    assert_eq!(stored.serial, cert.serial);
}

async fn an_expired_authorization_refuses_the_reservation(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = harness::ready_order(s, acct.id, &["a.example.com"], now).await;
    s.begin_finalize(order.id, b"csr", None, now)
        .await
        .unwrap()
        .begun();
    // The job ran only after the authorization's validity ended.
    let late = now + harness::VALID_FOR;
    let cert = harness::new_cert(1, late);
    assert_eq!(
        s.reserve_serial(order.id, harness::reservation_of(&cert), late)
            .await
            .unwrap(),
        Reserved::AuthorizationNotValid
    );
    assert_eq!(s.serial_reservations(order.id).await.unwrap(), []);
    // A moment earlier it was still valid.
    let Reserved::Reserved(reserved) = s
        .reserve_serial(
            order.id,
            harness::reservation_of(&cert),
            late - Duration::seconds(1),
        )
        .await
        .unwrap()
    else {
        panic!("not reserved");
    };
    assert_eq!(reserved.serial, cert.serial);
}

async fn a_settled_order_reserves_nothing(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let issued = harness::issue(s, acct.id, &["a.example.com"], 1, now).await;
    let cert = harness::new_cert(2, now);
    assert_eq!(
        s.reserve_serial(issued.order_id, harness::reservation_of(&cert), now)
            .await
            .unwrap(),
        Reserved::Settled(OrderStatus::Valid)
    );
    assert_eq!(
        s.serial_reservations(issued.order_id).await.unwrap().len(),
        1
    );
}
