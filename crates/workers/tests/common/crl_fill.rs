//! Revoked certificates written through the storage's own writes, as the server writes them, for
//! the CRL bench (`benches/crl.rs`) and the large-CRL test (`tests/crl_large.rs`), which include
//! this file by path: an order reusing one valid authorization (ready at once), the serial
//! reserved and the certificate stored against it (the at-once finalization), then revoked
//! through the bulk revocation of `certeasy admin`, [`REVOKE_BATCH`] per transaction (or left
//! valid, as most certificates are).

use acme_core::identifier::Identifier;
use acme_core::identifier::canonical_set_hash;
use acme_core::ids::AccountId;
use acme_core::ids::CertificateId;
use acme_core::ids::Serial;
use acme_core::status::ChallengeType;
use acme_core::status::OrderStatus;
use acme_core::status::RevocationReason;
use issuance::Ca;
use issuance::crl_distribution::shard_of;
use storage::Storage;
use storage::audit::Actor;
use storage::audit::AuditEvent;
use storage::audit::AuditKind;
use storage::ca_state::DEFAULT_ISSUER;
use storage::model::NewAccount;
use storage::model::NewAuthz;
use storage::model::NewCertificate;
use storage::model::NewOrder;
use storage::model::NewReservation;
use storage::model::Order;
use storage::model::OrderCreation;
use storage::model::OrderGuards;
use storage::model::ReservedAtOnce;
use time::Duration;
use time::OffsetDateTime;

/// The name every filled order is for; one authorization validated once serves them all.
const NAME: &str = "crl-fill.example.com";
/// Revocations per bulk-revocation transaction.
pub(crate) const REVOKE_BATCH: usize = 1_000;
/// A P-256 leaf with one SAN is about 700 bytes of DER.
const LEAF_DER_BYTES: usize = 700;
/// The reasons revocations are given, one per batch in turn.
pub(crate) const REASONS: [RevocationReason; 3] = [
    RevocationReason::Unspecified,
    RevocationReason::KeyCompromise,
    RevocationReason::Superseded,
];

/// What to fill: `count` certificates of `ca`, each in the shard its serial falls in among
/// `shards` (all in `only_shard` if given), issued at `now` and expiring at `not_after`.
pub(crate) struct Fill<'a> {
    pub(crate) ca: &'a Ca,
    pub(crate) count: usize,
    pub(crate) shards: u16,
    pub(crate) only_shard: Option<u16>,
    pub(crate) now: OffsetDateTime,
    pub(crate) not_after: OffsetDateTime,
    /// Where the serials start; fills of one database use distinct ones.
    pub(crate) first_serial: u64,
    /// Whether the certificates are revoked; unrevoked ones are what a CRL query must skip.
    pub(crate) revoke: bool,
}

/// One certificate the fill revoked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Revoked {
    pub(crate) serial: Serial,
    pub(crate) reason: RevocationReason,
    pub(crate) shard: u16,
}

/// Bytes that look like a signed leaf to the database (they are never parsed).
fn filler(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_be_bytes()[0]
        })
        .collect()
}

/// The next serial after `*i` whose shard among `shards` is `shard` (any with `None`): 16
/// bytes, positive, like the server's random serials.
fn serial(i: &mut u64, shards: u16, shard: Option<u16>) -> Serial {
    loop {
        *i += 1;
        let mut bytes = filler(*i, 16);
        bytes[0] = 0x40 | (bytes[0] & 0x3f);
        let serial = Serial::from_bytes(bytes);
        if shard.is_none_or(|want| shard_of(&serial, shards) == want) {
            return serial;
        }
    }
}

fn ev() -> AuditEvent {
    AuditEvent::new(AuditKind::AdminAction, Actor::System, "crl fill")
}

/// A new account with [`NAME`]'s authorization validated, so that its later orders are ready
/// at once.
async fn validated_account(s: &Storage, seed: u64, now: OffsetDateTime) -> AccountId {
    let thumbprint = format!("crl-fill-{seed}");
    let account = s
        .create_account(
            NewAccount {
                jwk_json: format!(r#"{{"kty":"EC","x":"{thumbprint}"}}"#),
                thumbprint,
                contacts: Vec::new(),
                tos_agreed: true,
            },
            now,
            &ev(),
        )
        .await
        .unwrap()
        .id;
    let order = create_order(s, account, seed, now, None).await;
    let authz = s
        .authorization(order.authz_ids[0], now)
        .await
        .unwrap()
        .unwrap();
    let challenge = authz.challenges[0].id;
    s.start_challenge(challenge, now).await.unwrap();
    s.record_validation(challenge, Ok(()), Duration::days(30), now, None)
        .await
        .unwrap();
    account
}

async fn create_order(
    s: &Storage,
    account: AccountId,
    i: u64,
    now: OffsetDateTime,
    reuse_valid_until: Option<OffsetDateTime>,
) -> Order {
    let identifier = Identifier::dns(NAME).unwrap();
    let identifiers = vec![identifier.clone()];
    match s
        .create_order(
            NewOrder {
                account_id: account,
                set_hash: canonical_set_hash(&identifiers),
                identifiers,
                not_before: None,
                not_after: None,
                expires_at: now + Duration::days(7),
                authorizations: vec![NewAuthz {
                    identifier,
                    expires_at: now + Duration::days(7),
                    challenges: vec![(ChallengeType::Http01, format!("h{i:042}"))],
                }],
                reuse_valid_until,
                replaces: None,
                profile: "tls-server".to_owned(),
                valid_authz_lifetime: None,
                reuse_challenge_types: Vec::new(),
            },
            &OrderGuards::default(),
            now,
        )
        .await
        .unwrap()
    {
        OrderCreation::Created { order, .. } => *order,
        other => panic!("the order was not created: {other:?}"),
    }
}

/// How many writers fill at once: PostgreSQL commits their transactions together (one flush for
/// several), SQLite takes them one after the other.
const WRITERS: u64 = 16;

/// Issues (and revokes) the certificates `fill` describes with [`WRITERS`] concurrent writers,
/// each its own account; returns the revoked ones.
pub(crate) async fn fill(s: &Storage, fill: &Fill<'_>) -> Vec<Revoked> {
    let per = (fill.count as u64).div_ceil(WRITERS);
    let writers = (0..WRITERS).map(|w| {
        let count = usize::try_from(per.min((fill.count as u64).saturating_sub(w * per))).unwrap();
        // Serials of distinct writers never meet: each starts 2^32 after the previous.
        writer(s, fill, count, fill.first_serial + (w << 32))
    });
    futures::future::join_all(writers)
        .await
        .into_iter()
        .flatten()
        .collect()
}

async fn writer(s: &Storage, fill: &Fill<'_>, count: usize, first_serial: u64) -> Vec<Revoked> {
    let now = fill.now;
    let mut written = Vec::with_capacity(count);
    if count == 0 {
        return written;
    }
    let account = validated_account(s, first_serial, now).await;
    let mut counter = first_serial;
    let mut batch: Vec<CertificateId> = Vec::with_capacity(REVOKE_BATCH);
    let mut batches = 0usize;
    for i in 0..count {
        let seed = first_serial + i as u64 + 1;
        let order = create_order(s, account, seed, now, Some(now)).await;
        assert_eq!(
            order.status,
            OrderStatus::Ready,
            "the authorization is reused"
        );
        let serial = serial(&mut counter, fill.shards, fill.only_shard);
        let shard = shard_of(&serial, fill.shards);
        let cert = NewCertificate {
            serial: serial.clone(),
            der: filler(seed, LEAF_DER_BYTES),
            issuer_chain_pem: fill.ca.chain_pem().to_owned(),
            not_before: now,
            not_after: fill.not_after,
            crl_shard: Some(shard),
        };
        let reserved = s
            .reserve_ready_order(
                order.id,
                &filler(seed, 300),
                None,
                NewReservation {
                    serial: serial.clone(),
                    not_before: cert.not_before,
                    not_after: cert.not_after,
                    issuer_chain_pem: cert.issuer_chain_pem.clone(),
                    crl_shard: Some(shard),
                    issuer: DEFAULT_ISSUER.to_owned(),
                },
                now,
                Duration::minutes(5),
            )
            .await
            .unwrap();
        let ReservedAtOnce::Reserved { job, .. } = reserved else {
            panic!("not reserved: {reserved:?}");
        };
        let stored = s
            .complete_order(order.id, cert, now, Some(&job), &ev())
            .await
            .unwrap();
        if !fill.revoke {
            continue;
        }
        batch.push(stored.id);
        let reason = REASONS[batches % REASONS.len()];
        written.push(Revoked {
            serial,
            reason,
            shard,
        });
        if batch.len() == REVOKE_BATCH || i + 1 == count {
            let audits = vec![ev(); batch.len()];
            let revoked = s
                .revoke_certificates(&batch, reason, now, &audits)
                .await
                .unwrap();
            assert_eq!(revoked.len(), batch.len());
            batch.clear();
            batches += 1;
        }
    }
    written
}
