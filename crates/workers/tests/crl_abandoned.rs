//! A serial that was reserved and possibly signed, then abandoned, has no certificate row to
//! revoke: the CRL the worker publishes for its shard revokes the serial itself, when the
//! issuer that reserved it is the one publishing. Real parts: SQLite or PostgreSQL storage,
//! generated CAs with CRL distribution, the job workers and the CRL publisher; the published
//! CRLs are parsed with x509-parser and verified under the CA that signed them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use acme_core::clock::SharedClock;
use acme_core::clock::SystemClock;
use acme_core::ids::Serial;
use acme_core::status::OrderStatus;
use common::Silent;
use common::ready_order;
use common::reserve_sign_and_stop;
use common::storage_on;
use common::wait_for;
use issuance::Ca;
use issuance::CaSettings;
use issuance::CrlDistribution;
use issuance::Profiles;
use storage::Backend;
use storage::Storage;
use storage::ca_state::DEFAULT_ISSUER;
use storage::model::ReservationState;
use testkit::postgres::PgDatabase;
use time::OffsetDateTime;
use validation::ValidationSettings;
use validation::Validator;
use workers::Workers;
use workers::crl::CrlSettings;
use workers::settings::WorkerSettings;
use x509_parser::prelude::FromDer;
use x509_parser::revocation_list::CertificateRevocationList;

const SHARDS: u16 = 4;

struct Env {
    _pg: Option<PgDatabase>,
    dir: tempfile::TempDir,
    storage: Storage,
    clock: SharedClock,
}

async fn env(backend: Backend) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let (pg, storage) = storage_on(backend, dir.path(), "certeasy_crl_abandoned_").await;
    storage
        .ensure_crl_shards(DEFAULT_ISSUER, SHARDS)
        .await
        .unwrap();
    Env {
        _pg: pg,
        dir,
        storage,
        clock: Arc::new(SystemClock),
    }
}

impl Env {
    /// A CA generated under `name` in the test's directory, publishing CRLs; two names are two
    /// issuers (each its own root, intermediate and key).
    fn ca(&self, name: &str) -> Arc<Ca> {
        let ca = Ca::load_or_create(
            &CaSettings::new(self.dir.path().join(name)),
            OffsetDateTime::now_utc(),
        )
        .unwrap()
        .with_crl_distribution(CrlDistribution {
            base_url: "http://127.0.0.1:9/crl".to_owned(),
            shards: SHARDS,
        });
        Arc::new(ca)
    }

    /// The job workers signing with `ca`, on one-second leases.
    fn workers(&self, ca: &Arc<Ca>) -> Workers {
        Workers::spawn(
            self.storage.clone(),
            Validator::new(ValidationSettings::default()).unwrap(),
            Arc::clone(ca),
            Arc::clone(&self.clock),
            WorkerSettings {
                concurrency: 2,
                lease: time::Duration::seconds(1),
                poll_interval: Duration::from_millis(100),
                profiles: Profiles::shipped(),
                ..WorkerSettings::default()
            },
            Arc::new(Silent),
        )
    }

    /// What the CRL publisher does on a check: rebuilds every stale or due shard with `ca`.
    async fn publish(&self, ca: &Ca) -> usize {
        workers::crl::publish_due(&self.storage, ca, &self.clock, &CrlSettings::default())
            .await
            .unwrap()
    }

    /// The serials of `shard`'s published CRL, which must verify under `ca`'s intermediate.
    async fn listed(&self, ca: &Ca, shard: u16) -> Vec<Vec<u8>> {
        let published = self
            .storage
            .published_crl(DEFAULT_ISSUER, shard)
            .await
            .unwrap()
            .unwrap();
        let (rest, crl) = CertificateRevocationList::from_der(&published.der).unwrap();
        assert!(rest.is_empty());
        let (_, pem) = x509_parser::pem::parse_x509_pem(ca.chain_pem().as_bytes()).unwrap();
        let intermediate = pem.parse_x509().unwrap();
        crl.verify_signature(intermediate.public_key()).unwrap();
        crl.iter_revoked_certificates()
            .map(|entry| {
                assert!(
                    entry.reason_code().is_none(),
                    "revoked with no reasonCode (unspecified)"
                );
                unsigned(entry.raw_serial())
            })
            .collect()
    }
}

fn is_stale(states: &[storage::crls::CrlShardState], shard: u16) -> bool {
    states
        .iter()
        .find(|st| st.shard == shard)
        .unwrap()
        .is_stale()
}

/// A serial's magnitude: DER writes a leading zero before a first byte with its high bit set.
fn unsigned(bytes: &[u8]) -> Vec<u8> {
    let first = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
    bytes[first..].to_vec()
}

fn serial_of(serial: &Serial) -> Vec<u8> {
    unsigned(serial.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_order_s_signed_serial_is_on_its_shard_s_crl_sqlite() {
    a_failed_order_s_signed_serial_is_on_its_shard_s_crl(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_order_s_signed_serial_is_on_its_shard_s_crl_postgres() {
    a_failed_order_s_signed_serial_is_on_its_shard_s_crl(Backend::Postgres).await;
}

/// A finalization reserved and signed a serial and stopped before storing the certificate; the
/// order's authorization was deactivated meanwhile, so the resumed job fails the order and its
/// reservation is abandoned. The serial was signed and nothing can revoke a certificate row for
/// it: the shard's CRL is stale at once, and the CRL the publisher then builds revokes the
/// serial (no reasonCode, as of when it was abandoned); no other shard lists it.
async fn a_failed_order_s_signed_serial_is_on_its_shard_s_crl(backend: Backend) {
    let env = env(backend).await;
    let ca = env.ca("ca");
    assert_eq!(env.publish(&ca).await, usize::from(SHARDS), "first CRLs");

    let name = "failed.crl-abandoned.test";
    let order = ready_order(&env.storage, name).await;
    let before = OffsetDateTime::now_utc().replace_nanosecond(0).unwrap();
    let intent = reserve_sign_and_stop(&env.storage, &ca, &order, name).await;
    let shard = intent
        .crl_shard
        .expect("a CA publishing CRLs gives a shard");
    env.storage
        .deactivate_authorization(order.authz_ids[0], OffsetDateTime::now_utc())
        .await
        .unwrap();
    let states = env.storage.crl_shard_states().await.unwrap();
    assert!(!is_stale(&states, shard), "nothing revoked yet");

    let workers = env.workers(&ca);
    wait_for(&env.storage, order.id, OrderStatus::Invalid).await;
    workers.shutdown().await;
    let reservations = env.storage.serial_reservations(order.id).await.unwrap();
    assert_eq!(reservations.len(), 1, "{reservations:?}");
    assert_eq!(reservations[0].serial, intent.serial);
    assert_eq!(reservations[0].state, ReservationState::Abandoned);
    assert_eq!(
        ca.leaves_signed(),
        1,
        "signed once, by the request that stopped"
    );

    let states = env.storage.crl_shard_states().await.unwrap();
    assert!(is_stale(&states, shard), "{states:?}");
    assert_eq!(env.publish(&ca).await, 1, "only its shard is rebuilt");
    assert_eq!(env.listed(&ca, shard).await, [serial_of(&intent.serial)]);
    for other in (0..SHARDS).filter(|s| *s != shard) {
        assert!(env.listed(&ca, other).await.is_empty(), "shard {other}");
    }
    let published = env
        .storage
        .published_crl(DEFAULT_ISSUER, shard)
        .await
        .unwrap()
        .unwrap();
    let (_, crl) = CertificateRevocationList::from_der(&published.der).unwrap();
    let revoked_at = crl
        .iter_revoked_certificates()
        .next()
        .unwrap()
        .revocation_date
        .to_datetime();
    assert!(
        before <= revoked_at && revoked_at <= published.this_update,
        "revoked when abandoned: {before} <= {revoked_at} <= {}",
        published.this_update
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_issuer_change_abandons_the_old_serial_for_its_own_issuer_s_crl_sqlite() {
    an_issuer_change_abandons_the_old_serial_for_its_own_issuer_s_crl(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_issuer_change_abandons_the_old_serial_for_its_own_issuer_s_crl_postgres() {
    an_issuer_change_abandons_the_old_serial_for_its_own_issuer_s_crl(Backend::Postgres).await;
}

/// A finalization under one CA reserved and signed a serial and stopped; the server restarted
/// with another CA, whose worker resumes the job: the old serial is abandoned (it cannot be
/// signed again) and a new one issued. The old serial is revoked for the CA that signed it, and
/// its shard's counter is raised; the new CA's CRL of that shard, which that CA signs and
/// which speaks only for its own serials, does not list it.
async fn an_issuer_change_abandons_the_old_serial_for_its_own_issuer_s_crl(backend: Backend) {
    let env = env(backend).await;
    let old = env.ca("old-ca");
    let new = env.ca("new-ca");
    assert_ne!(old.chain_pem(), new.chain_pem());
    assert_eq!(env.publish(&new).await, usize::from(SHARDS), "first CRLs");

    let name = "changed.crl-abandoned.test";
    let order = ready_order(&env.storage, name).await;
    let intent = reserve_sign_and_stop(&env.storage, &old, &order, name).await;
    let shard = intent.crl_shard.unwrap();

    let workers = env.workers(&new);
    let valid = wait_for(&env.storage, order.id, OrderStatus::Valid).await;
    workers.shutdown().await;
    let reservations = env.storage.serial_reservations(order.id).await.unwrap();
    let states: Vec<_> = reservations.iter().map(|r| r.state).collect();
    assert_eq!(
        states,
        [ReservationState::Abandoned, ReservationState::Issued]
    );
    assert_eq!(reservations[0].serial, intent.serial);
    let cert = env
        .storage
        .certificate(valid.certificate_id.unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(cert.serial, reservations[1].serial);

    let states = env.storage.crl_shard_states().await.unwrap();
    assert!(is_stale(&states, shard), "{states:?}");
    assert!(env.publish(&new).await >= 1);
    assert!(env.listed(&new, shard).await.is_empty(), "not the new CA's");
    let now = OffsetDateTime::now_utc();
    let for_old: Vec<_> = env
        .storage
        .revoked_in_crl_shard(DEFAULT_ISSUER, shard, old.chain_pem(), now)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.serial)
        .collect();
    assert_eq!(for_old, [intent.serial]);
}
