//! What the workers' integration tests share: a hook that ignores verdicts, the storage on
//! either backend, and orders made ready without a validation job.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use acme_core::identifier::Identifier;
use acme_core::identifier::canonical_set_hash;
use acme_core::ids::AccountId;
use acme_core::ids::ChallengeId;
use acme_core::ids::OrderId;
use acme_core::status::ChallengeType;
use acme_core::status::OrderStatus;
use issuance::Ca;
use issuance::Intent;
use issuance::Profiles;
use ra::verdicts::ValidationHook;
use storage::Backend;
use storage::Storage;
use storage::model::NewAccount;
use storage::model::NewAuthz;
use storage::model::NewOrder;
use storage::model::NewReservation;
use storage::model::Order;
use storage::model::OrderCreation;
use storage::model::OrderGuards;
use storage::model::ReservedAtOnce;
use storage::model::ValidationRecorded;
use testkit::poll::eventually;
use testkit::postgres::PgDatabase;
use time::OffsetDateTime;

/// An audit record for a write whose record these tests do not look at.
pub(crate) fn ev() -> storage::audit::AuditEvent {
    storage::audit::AuditEvent::new(
        storage::audit::AuditKind::AdminAction,
        storage::audit::Actor::System,
        "test",
    )
}

/// A validation hook that ignores every verdict.
pub(crate) struct Silent;

impl ValidationHook for Silent {
    fn on_validation<'a>(
        &'a self,
        _recorded: &'a ValidationRecorded,
    ) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(async {})
    }
}

/// Storage on `backend`: a SQLite file in `dir`, or a throw-away PostgreSQL database named from
/// `prefix`, which lives as long as the returned guard.
pub(crate) async fn storage_on(
    backend: Backend,
    dir: &Path,
    prefix: &str,
) -> (Option<PgDatabase>, Storage) {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let pg = (backend == Backend::Postgres).then(|| PgDatabase::create(prefix).unwrap());
    let url = match &pg {
        Some(pg) => pg.url().to_owned(),
        None => format!("sqlite://{}", dir.join("db.sqlite").display()),
    };
    let storage = Storage::connect(&url).await.unwrap();
    (pg, storage)
}

/// A pending order of `account` for `name`, with one challenge, and that challenge's id.
pub(crate) async fn pending_order(
    storage: &Storage,
    account: AccountId,
    name: &str,
    challenge: (ChallengeType, String),
    now: OffsetDateTime,
) -> (Order, ChallengeId) {
    let id = Identifier::dns(name).unwrap();
    let created = storage
        .create_order(
            NewOrder {
                account_id: account,
                identifiers: vec![id.clone()],
                set_hash: canonical_set_hash(std::slice::from_ref(&id)),
                not_before: None,
                not_after: None,
                expires_at: now + time::Duration::days(1),
                authorizations: vec![NewAuthz {
                    identifier: id,
                    expires_at: now + time::Duration::days(1),
                    challenges: vec![challenge],
                }],
                reuse_valid_until: None,
                replaces: None,
                profile: "tls-server".to_owned(),
                valid_authz_lifetime: None,
                reuse_challenge_types: Vec::new(),
            },
            &OrderGuards::default(),
            now,
        )
        .await
        .unwrap();
    let OrderCreation::Created { order, .. } = created else {
        panic!("the order was not created: {created:?}");
    };
    let authz = storage
        .authorization(order.authz_ids[0], now)
        .await
        .unwrap()
        .unwrap();
    (*order, authz.challenges[0].id)
}

/// A ready order for `name` of a fresh account (validated at once: no job exists).
pub(crate) async fn ready_order(storage: &Storage, name: &str) -> Order {
    let now = OffsetDateTime::now_utc();
    let account = storage
        .create_account(
            NewAccount {
                jwk_json: "{}".into(),
                thumbprint: format!("tp-{name}"),
                contacts: vec![],
                tos_agreed: true,
            },
            now,
            &ev(),
        )
        .await
        .unwrap();
    let (order, challenge) = pending_order(
        storage,
        account.id,
        name,
        (ChallengeType::Http01, format!("tok-{name}")),
        now,
    )
    .await;
    storage
        .record_valid_at_once(
            challenge,
            ra::settings::DEFAULT_VALID_AUTHORIZATION_LIFETIME,
            now,
        )
        .await
        .unwrap();
    let order = order_now(storage, order.id).await;
    assert_eq!(order.status, OrderStatus::Ready);
    order
}

/// Order `id` as stored now.
pub(crate) async fn order_now(storage: &Storage, id: OrderId) -> Order {
    storage
        .order(id, OffsetDateTime::now_utc())
        .await
        .unwrap()
        .unwrap()
}

/// Order `id` once it is `want`, polled for at most 30 s.
pub(crate) async fn wait_for(storage: &Storage, id: OrderId, want: OrderStatus) -> Order {
    let (within, every) = (Duration::from_secs(30), Duration::from_millis(50));
    let reached = eventually(within, every, async || {
        let order = order_now(storage, id).await;
        (order.status == want).then_some(order)
    })
    .await;
    reached.unwrap_or_else(|| panic!("order {id} never became {}", want.as_str()))
}

/// A CSR for `name` with a fresh P-256 key.
pub(crate) fn csr(name: &str) -> Vec<u8> {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.serialize_request(&key).unwrap().der().to_vec()
}

/// What a finalization at once does before it stops: reserves a serial under `ca` (the
/// order's job claimed for a second) and signs it. Nothing stores the certificate.
pub(crate) async fn reserve_sign_and_stop(
    storage: &Storage,
    ca: &Ca,
    order: &Order,
    name: &str,
) -> Intent {
    let der = csr(name);
    let checked = issuance::check_csr(&der, &order.identifiers).unwrap();
    let now = OffsetDateTime::now_utc();
    let profiles = Profiles::shipped();
    let profile = profiles.select(Some("tls-server")).unwrap();
    let intent = ca
        .prepare(
            &checked,
            &order.identifiers,
            profile,
            now - time::Duration::minutes(1),
            now + time::Duration::days(3),
        )
        .unwrap();
    let reserved = storage
        .reserve_ready_order(
            order.id,
            &der,
            None,
            NewReservation {
                serial: intent.serial.clone(),
                not_before: intent.not_before,
                not_after: intent.not_after,
                issuer_chain_pem: ca.chain_pem().to_owned(),
                crl_shard: intent.crl_shard,
                issuer: storage::ca_state::DEFAULT_ISSUER.to_owned(),
            },
            now,
            time::Duration::seconds(1),
        )
        .await
        .unwrap();
    assert!(
        matches!(reserved, ReservedAtOnce::Reserved { .. }),
        "{reserved:?}"
    );
    ca.issue(&checked, &order.identifiers, profile, &intent)
        .unwrap();
    intent
}
