//! Sign last, and only what the record says: a finalization signs nothing before every check
//! has passed and the serial is reserved in a committed transaction; a refusal of the database
//! leaves no signature behind; a finalization that stopped between reserving and storing is
//! resumed with the same serial. Real parts: SQLite or PostgreSQL storage, a generated CA, the
//! workers; the CA counts every subscriber certificate it signs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use acme_core::clock::SystemClock;
use acme_core::ids::OrderId;
use acme_core::status::AccountStatus;
use acme_core::status::OrderStatus;
use common::Silent;
use common::csr;
use common::ev;
use common::ready_order;
use common::reserve_sign_and_stop;
use common::storage_on;
use common::wait_for;
use issuance::Ca;
use issuance::CaSettings;
use issuance::Profiles;
use ra::Refusal;
use ra::error::StateRefusal;
use ra::in_flight::InFlight;
use ra::in_flight::Key;
use ra::jobs::Finalized;
use ra::jobs::JobRunner;
use storage::Backend;
use storage::Storage;
use storage::model::Order;
use storage::model::ReservationState;
use testkit::postgres::PgDatabase;
use time::OffsetDateTime;
use validation::ValidationSettings;
use validation::Validator;
use workers::Workers;
use workers::settings::WorkerSettings;

struct Env {
    _pg: Option<PgDatabase>,
    _dir: tempfile::TempDir,
    storage: Storage,
    ca: Arc<Ca>,
    workers: Workers,
}

/// One-second leases, so that a job left by a finalization that stopped is soon claimed again.
async fn env(backend: Backend) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let (pg, storage) = storage_on(backend, dir.path(), "certeasy_sign_last_").await;
    let ca = Arc::new(
        Ca::load_or_create(
            &CaSettings::new(dir.path().join("ca")),
            OffsetDateTime::now_utc(),
        )
        .unwrap(),
    );
    let validator = Validator::new(ValidationSettings::default()).unwrap();
    let workers = Workers::spawn(
        storage.clone(),
        validator,
        Arc::clone(&ca),
        Arc::new(SystemClock),
        WorkerSettings {
            concurrency: 2,
            lease: time::Duration::seconds(1),
            poll_interval: Duration::from_millis(100),
            profiles: Profiles::shipped(),
            ..WorkerSettings::default()
        },
        Arc::new(Silent),
    );
    Env {
        _pg: pg,
        _dir: dir,
        storage,
        ca,
        workers,
    }
}

/// Finalizes `order` at once, as a request that found a free place: with the order as the
/// request read it, which the database may have moved on from since.
async fn finalize_at_once(env: &Env, order: Order, der: Vec<u8>) -> Result<Finalized, ra::Error> {
    let checked = issuance::check_csr(&der, &order.identifiers).unwrap();
    let in_flight = InFlight::default();
    let held = in_flight.enter(Key::Order(order.id)).unwrap();
    let slot = loop {
        if let Some(slot) = env.workers.try_slot() {
            break slot;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    JobRunner::finalize_at_once(
        &env.workers,
        slot,
        order,
        der,
        checked,
        Duration::from_secs(5),
        held,
    )
    .await
    .expect("a reply is always sent")
}

/// Every serial the CA signed is in the database: as many signatures as reservations were
/// signed, each reservation issued with its certificate stored under the same serial.
async fn assert_every_signature_recorded(env: &Env, orders: &[OrderId]) {
    let mut recorded = 0;
    for id in orders {
        for reservation in env.storage.serial_reservations(*id).await.unwrap() {
            assert_eq!(
                reservation.state,
                ReservationState::Issued,
                "{reservation:?}"
            );
            let cert = env
                .storage
                .certificate(reservation.certificate_id.unwrap())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(cert.serial, reservation.serial);
            recorded += u64::from(reservation.signings);
        }
    }
    assert_eq!(env.ca.leaves_signed(), recorded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_of_the_database_leaves_no_signature_sqlite() {
    a_refusal_of_the_database_leaves_no_signature(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_of_the_database_leaves_no_signature_postgres() {
    a_refusal_of_the_database_leaves_no_signature(Backend::Postgres).await;
}

/// The request's checks pass (it read a ready order of a valid account), and then the database
/// refuses: the account was deactivated, or another finalization took the order, meanwhile.
/// Nothing is signed for the refused request; what the other finalization signed is recorded.
async fn a_refusal_of_the_database_leaves_no_signature(backend: Backend) {
    let env = env(backend).await;

    // Deactivated after the request read the order.
    let name = "deactivated.sign-last.test";
    let order = ready_order(&env.storage, name).await;
    env.storage
        .deactivate_account(order.account_id, OffsetDateTime::now_utc(), &ev())
        .await
        .unwrap();
    let refused = finalize_at_once(&env, order.clone(), csr(name)).await;
    assert!(
        matches!(
            refused,
            Ok(Finalized::AccountNotValid(AccountStatus::Deactivated))
        ),
        "{refused:?}"
    );
    assert_eq!(env.ca.leaves_signed(), 0, "nothing signed");
    assert_eq!(env.storage.serial_reservations(order.id).await.unwrap(), []);

    // Taken by a queued finalization after the request read it ready.
    let name = "taken.sign-last.test";
    let order = ready_order(&env.storage, name).await;
    env.storage
        .begin_finalize(order.id, &csr(name), None, OffsetDateTime::now_utc())
        .await
        .unwrap();
    let refused = finalize_at_once(&env, order.clone(), csr(name)).await;
    assert!(
        matches!(
            refused,
            Err(ra::Error::Refused(ref refusal))
                if matches!(
                    **refusal,
                    Refusal::State(StateRefusal::OrderNotReady(
                        OrderStatus::Processing | OrderStatus::Valid
                    ))
                )
        ),
        "{refused:?}"
    );
    env.workers.wake();
    let valid = wait_for(&env.storage, order.id, OrderStatus::Valid).await;
    assert!(valid.certificate_id.is_some());
    // One signature, the queued job's, and it is the stored certificate.
    assert_eq!(env.ca.leaves_signed(), 1);
    assert_every_signature_recorded(&env, &[order.id]).await;
    env.workers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finalization_that_stopped_after_reserving_is_resumed_with_the_same_serial_sqlite() {
    a_finalization_that_stopped_after_reserving_is_resumed_with_the_same_serial(Backend::Sqlite)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finalization_that_stopped_after_reserving_is_resumed_with_the_same_serial_postgres() {
    a_finalization_that_stopped_after_reserving_is_resumed_with_the_same_serial(Backend::Postgres)
        .await;
}

/// A request reserved a serial (and may have signed it) and its process stopped before the
/// certificate was stored: the reservation is committed, and the order's job, once its lease
/// runs out, signs the same serial and window again and stores it. No second serial.
async fn a_finalization_that_stopped_after_reserving_is_resumed_with_the_same_serial(
    backend: Backend,
) {
    let env = env(backend).await;
    let name = "resumed.sign-last.test";
    let order = ready_order(&env.storage, name).await;
    // The stopped request had signed it: a signature the database knows of only by its
    // reservation.
    let intent = reserve_sign_and_stop(&env.storage, &env.ca, &order, name).await;

    let valid = wait_for(&env.storage, order.id, OrderStatus::Valid).await;
    let cert = env
        .storage
        .certificate(valid.certificate_id.unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        cert.serial, intent.serial,
        "the reserved serial, signed again"
    );
    assert_eq!(
        (cert.not_before, cert.not_after),
        (intent.not_before, intent.not_after),
        "the reserved window"
    );
    let reservations = env.storage.serial_reservations(order.id).await.unwrap();
    assert_eq!(reservations.len(), 1, "no second serial: {reservations:?}");
    assert_eq!(reservations[0].signings, 2);
    assert_eq!(env.ca.leaves_signed(), 2);
    assert_every_signature_recorded(&env, &[order.id]).await;
    env.workers.shutdown().await;
}
