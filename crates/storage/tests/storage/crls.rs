use acme_core::ids::Serial;
use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use acme_core::status::RevocationReason;
use sqlx::Connection;
use storage::Storage;
use storage::ca_state::DEFAULT_ISSUER;
use storage::crls::ABANDONED_SERIAL_REASON;
use storage::crls::PublishedCrl;
use storage::model::NewCertificate;
use storage::model::ReservationState;
use storage::model::ReservedAtOnce;
use time::Duration;
use time::OffsetDateTime;

use crate::harness;
use crate::harness::Begun;
use crate::harness::Changed;
use crate::harness::ev;
use crate::harness::t0;

crate::both_backends!(
    revocations_make_their_shard_stale_and_are_listed_there,
    one_publisher_wins_each_number,
    abandoned_signed_serials_are_revoked_on_their_shard_under_their_issuer,
    revocations_before_the_shards_are_created_are_counted,
);

/// Another CA's chain: the issuer changed (a restart with another intermediate).
const OTHER_CHAIN: &str = "-----BEGIN CERTIFICATE-----\nb3RoZXI=\n-----END CERTIFICATE-----\n";

/// A certificate in shard 1, one in no shard (issued before CRLs), and what their revocations do.
async fn revocations_make_their_shard_stale_and_are_listed_there(s: &Storage) {
    let now = t0();
    s.ensure_crl_shards(DEFAULT_ISSUER, 2).await.unwrap();
    s.ensure_crl_shards(DEFAULT_ISSUER, 2).await.unwrap();
    let states = s.crl_shard_states().await.unwrap();
    assert_eq!(states.len(), 2);
    assert!(states.iter().all(|st| st.number == 0 && st.is_stale()));

    let acct = harness::account(s, now).await;
    let order = harness::ready_order(s, acct.id, &["sharded.example.com"], now).await;
    s.begin_finalize(order.id, b"csr", None, now)
        .await
        .unwrap()
        .begun();
    let mut new = harness::new_cert(1, now);
    new.crl_shard = Some(1);
    let sharded = harness::complete(s, order.id, new, now, None).await;
    let legacy = harness::issue(s, acct.id, &["legacy.example.com"], 2, now).await;
    let kept = harness::issue(s, acct.id, &["kept.example.com"], 3, now).await;

    // Publish both shards empty: no longer stale.
    for st in s.crl_shard_states().await.unwrap() {
        let crl = crl(1, now);
        assert!(
            s.publish_crl(DEFAULT_ISSUER, st.shard, 0, st.revocations, &crl)
                .await
                .unwrap()
        );
    }
    assert!(
        s.crl_shard_states()
            .await
            .unwrap()
            .iter()
            .all(|st| !st.is_stale() && st.number == 1)
    );

    let at = now + Duration::hours(1);
    s.revoke_certificate(sharded.id, RevocationReason::KeyCompromise, at, &ev())
        .await
        .unwrap()
        .changed();
    let states = s.crl_shard_states().await.unwrap();
    assert!(!states[0].is_stale(), "{states:?}");
    assert!(states[1].is_stale(), "{states:?}");
    let listed = s
        .revoked_in_crl_shard(DEFAULT_ISSUER, 1, &chain(), at)
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].serial, sharded.serial);
    assert_eq!(listed[0].revoked_at, at);
    assert_eq!(listed[0].reason, RevocationReason::KeyCompromise);
    assert!(
        s.revoked_in_crl_shard(DEFAULT_ISSUER, 0, &chain(), at)
            .await
            .unwrap()
            .is_empty()
    );

    // Bulk revocation (the admin path) counts too; a certificate without a shard is in shard 0.
    let revoked = s
        .revoke_certificates(&[legacy.id], RevocationReason::Superseded, at, &[ev()])
        .await
        .unwrap();
    assert_eq!(revoked, vec![legacy.id]);
    let states = s.crl_shard_states().await.unwrap();
    assert!(states[0].is_stale(), "{states:?}");
    let listed = s
        .revoked_in_crl_shard(DEFAULT_ISSUER, 0, &chain(), at)
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].serial, legacy.serial);

    // An expired certificate leaves its CRL.
    assert!(
        s.revoked_in_crl_shard(DEFAULT_ISSUER, 1, &chain(), now + Duration::days(91))
            .await
            .unwrap()
            .is_empty()
    );
    // Unrevoked certificates are never listed.
    for shard in 0..2 {
        assert!(
            s.revoked_in_crl_shard(DEFAULT_ISSUER, shard, &chain(), at)
                .await
                .unwrap()
                .iter()
                .all(|r| r.serial != kept.serial)
        );
    }

    // Publishing after the counter read clears the staleness; the stored bytes are served.
    let st = s.crl_shard_states().await.unwrap()[1].clone();
    let second = crl(2, at);
    assert!(
        s.publish_crl(DEFAULT_ISSUER, 1, 1, st.revocations, &second)
            .await
            .unwrap()
    );
    assert!(!s.crl_shard_states().await.unwrap()[1].is_stale());
    assert_eq!(
        s.published_crl(DEFAULT_ISSUER, 1).await.unwrap(),
        Some(second)
    );
}

/// Instances that build the same shard at once: exactly one stores each number.
async fn one_publisher_wins_each_number(s: &Storage) {
    let now = t0();
    s.ensure_crl_shards(DEFAULT_ISSUER, 1).await.unwrap();
    assert_eq!(
        s.published_crl(DEFAULT_ISSUER, 0).await.unwrap(),
        None,
        "nothing before the first"
    );
    for number in 1..=3u64 {
        let attempts = (0..8).map(|i| {
            let s = s.clone();
            async move {
                let mut crl = crl(number, now);
                crl.der.push(i);
                s.publish_crl(DEFAULT_ISSUER, 0, number - 1, 0, &crl)
                    .await
                    .unwrap()
            }
        });
        let won = futures::future::join_all(attempts).await;
        assert_eq!(
            won.iter().filter(|w| **w).count(),
            1,
            "number {number}: {won:?}"
        );
        let stored = s.published_crl(DEFAULT_ISSUER, 0).await.unwrap().unwrap();
        assert_eq!(stored.number, number);
    }
    // A publisher that read an old number cannot overwrite a newer CRL.
    assert!(
        !s.publish_crl(DEFAULT_ISSUER, 0, 1, 0, &crl(2, now))
            .await
            .unwrap()
    );
    assert_eq!(
        s.published_crl(DEFAULT_ISSUER, 0)
            .await
            .unwrap()
            .unwrap()
            .number,
        3
    );
}

/// A reservation marked abandoned after signing was begun names a serial the key may have
/// signed and no certificate row holds: it is listed in its shard (revoked when abandoned, no
/// reason) by its own issuer's CRL and no other, and marking it raises the shard's counter.
/// Open and issued reservations, and expired abandoned ones, are not listed.
async fn abandoned_signed_serials_are_revoked_on_their_shard_under_their_issuer(s: &Storage) {
    let now = t0();
    s.ensure_crl_shards(DEFAULT_ISSUER, 2).await.unwrap();
    publish_all(s, now).await;
    let acct = harness::account(s, now).await;
    let at = now + Duration::hours(1);

    // The order fails after its serial was reserved (and perhaps signed) in shard 1.
    let failed = sharded_cert(1, Some(1), now);
    let order = harness::ready_order(s, acct.id, &["failed.example.com"], now).await;
    let ReservedAtOnce::Reserved {
        job, reservation, ..
    } = s
        .reserve_ready_order(
            order.id,
            b"csr",
            None,
            harness::reservation_of(&failed),
            now,
            LEASE,
        )
        .await
        .unwrap()
    else {
        panic!("not reserved");
    };
    assert_eq!(reservation.signings, 1, "recorded as about to be signed");
    assert!(!stale(s).await.iter().any(|st| *st), "nothing new yet");
    let problem = Problem::new(ProblemType::ServerInternal, "the CA could not sign");
    s.fail_order(order.id, problem, at, Some(&job))
        .await
        .unwrap()
        .changed();
    assert_eq!(stale(s).await, [false, true], "its shard's CRL is stale");
    let listed = s
        .revoked_in_crl_shard(DEFAULT_ISSUER, 1, &chain(), at)
        .await
        .unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].serial, failed.serial);
    assert_eq!(
        listed[0].revoked_at, at,
        "revoked as of when it was abandoned"
    );
    assert_eq!(listed[0].reason, ABANDONED_SERIAL_REASON);
    assert_eq!(listed[0].reason, RevocationReason::Unspecified);
    assert!(
        s.revoked_in_crl_shard(DEFAULT_ISSUER, 0, &chain(), at)
            .await
            .unwrap()
            .is_empty()
    );
    // Another issuer's CRL does not speak for this serial.
    assert!(
        s.revoked_in_crl_shard(DEFAULT_ISSUER, 1, OTHER_CHAIN, at)
            .await
            .unwrap()
            .is_empty()
    );
    // Past its notAfter it leaves the CRL, as a certificate does.
    assert!(
        s.revoked_in_crl_shard(DEFAULT_ISSUER, 1, &chain(), now + Duration::days(91))
            .await
            .unwrap()
            .is_empty()
    );

    // Open (being signed) and issued reservations are not revoked, and raise no counter.
    publish_all(s, at).await;
    let open = sharded_cert(2, Some(1), now);
    let order = harness::ready_order(s, acct.id, &["open.example.com"], now).await;
    s.reserve_ready_order(
        order.id,
        b"csr",
        None,
        harness::reservation_of(&open),
        at,
        LEASE,
    )
    .await
    .unwrap();
    let issued = sharded_cert(3, Some(1), now);
    let order = harness::ready_order(s, acct.id, &["issued.example.com"], now).await;
    s.begin_finalize(order.id, b"csr", None, at)
        .await
        .unwrap()
        .begun();
    harness::complete(s, order.id, issued, at, None).await;
    assert_eq!(stale(s).await, [false, false]);
    assert_eq!(
        listed_serials(s, 1, &chain(), at).await,
        std::slice::from_ref(&failed.serial)
    );

    // A resumed job under another issuer abandons the first serial: listed by the issuer that
    // reserved it, not by the new one.
    let replaced = sharded_cert(4, Some(1), now);
    let order = harness::ready_order(s, acct.id, &["replaced.example.com"], now).await;
    s.begin_finalize(order.id, b"csr", None, now)
        .await
        .unwrap()
        .begun();
    s.reserve_serial(order.id, harness::reservation_of(&replaced), now)
        .await
        .unwrap();
    let other = NewCertificate {
        issuer_chain_pem: OTHER_CHAIN.to_owned(),
        ..sharded_cert(5, Some(1), now)
    };
    s.reserve_serial(order.id, harness::reservation_of(&other), at)
        .await
        .unwrap();
    let states: Vec<_> = s
        .serial_reservations(order.id)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.state)
        .collect();
    assert_eq!(
        states,
        [ReservationState::Abandoned, ReservationState::Reserved]
    );
    assert_eq!(stale(s).await, [false, true]);
    let mut want = vec![failed.serial.clone(), replaced.serial.clone()];
    want.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    assert_eq!(listed_serials(s, 1, &chain(), at).await, want);
    assert!(listed_serials(s, 1, OTHER_CHAIN, at).await.is_empty());

    // Reserved while no CRL was published (no shard): listed in shard 0, as certificates are.
    publish_all(s, at).await;
    let unsharded = sharded_cert(6, None, now);
    let order = harness::ready_order(s, acct.id, &["unsharded.example.com"], now).await;
    let ReservedAtOnce::Reserved { job, .. } = s
        .reserve_ready_order(
            order.id,
            b"csr",
            None,
            harness::reservation_of(&unsharded),
            at,
            LEASE,
        )
        .await
        .unwrap()
    else {
        panic!("not reserved");
    };
    let problem = Problem::new(ProblemType::ServerInternal, "the CA could not sign");
    s.fail_order(order.id, problem, at, Some(&job))
        .await
        .unwrap()
        .changed();
    assert_eq!(stale(s).await, [true, false]);
    assert_eq!(listed_serials(s, 0, &chain(), at).await, [unsharded.serial]);
}

/// Migration 0017 makes stale, once, the shards that already hold abandoned signed serials
/// (their CRLs were built without them), and no other; the next CRL of each lists them.
#[tokio::test]
async fn sqlite_serials_abandoned_before_the_migration_make_their_shards_stale() {
    let dir = tempfile::tempdir().unwrap();
    let (url, mut conn) = harness::sqlite_migrated_before(dir.path(), "0017").await;
    let pem = chain();
    let digest = hex::encode(aws_lc_rs::digest::digest(
        &aws_lc_rs::digest::SHA256,
        pem.as_bytes(),
    ));
    let reservation = |serial: &str, shard: &str, state: &str| {
        format!(
            "INSERT INTO serial_reservations (serial, order_id, account_id, identifiers, \
             issuer_chain_id, not_before, not_after, crl_shard, reserved_at, signings, state, \
             settled_at) VALUES ('{serial}', 7, 1, 'dns:a.example', 3, 1700000000, 1800000000, \
             {shard}, 1700000000, 1, '{state}', 1700000100)"
        )
    };
    for statement in [
        "INSERT INTO accounts (id, thumbprint, jwk, status, created_at) \
         VALUES (1, 'tp', '{}', 'valid', 1700000000)"
            .to_owned(),
        format!("INSERT INTO issuer_chains (id, digest, pem) VALUES (3, '{digest}', '{pem}')"),
        "INSERT INTO crl_shards (shard, number, revocations, published_revocations) \
         VALUES (0, 1, 0, 0), (1, 1, 0, 0), (2, 1, 0, 0)"
            .to_owned(),
        reservation("00a1", "1", "abandoned"),
        reservation("00a0", "NULL", "abandoned"),
        reservation("00a2", "2", "reserved"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    conn.close().await.unwrap();

    let s = Storage::connect(&url).await.unwrap();
    assert_eq!(stale(&s).await, [true, true, false]);
    let at = OffsetDateTime::from_unix_timestamp(1_750_000_000).unwrap();
    let listed = s
        .revoked_in_crl_shard(DEFAULT_ISSUER, 1, &pem, at)
        .await
        .unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].serial, Serial::from_hex("00a1").unwrap());
    assert_eq!(
        listed[0].revoked_at,
        OffsetDateTime::from_unix_timestamp(1_700_000_100).unwrap()
    );
    assert_eq!(
        listed_serials(&s, 0, &pem, at).await,
        [Serial::from_hex("00a0").unwrap()]
    );
    assert!(listed_serials(&s, 2, &pem, at).await.is_empty());
    s.close().await;
}

/// The CRL worker creates the configured shards at its first tick; a revocation, or a signed
/// serial abandoned, before that (just after a start, or in a shard past a count since lowered)
/// creates its shard's row and counts there, so the shard is stale and its CRL lists it.
async fn revocations_before_the_shards_are_created_are_counted(s: &Storage) {
    let now = t0();
    let at = now + Duration::hours(1);
    let acct = harness::account(s, now).await;
    let order = harness::ready_order(s, acct.id, &["early.example.com"], now).await;
    s.begin_finalize(order.id, b"csr", None, now)
        .await
        .unwrap()
        .begun();
    let early = harness::complete(s, order.id, sharded_cert(1, Some(3), now), now, None).await;
    let order = harness::ready_order(s, acct.id, &["abandoned.example.com"], now).await;
    let ReservedAtOnce::Reserved { job, .. } = s
        .reserve_ready_order(
            order.id,
            b"csr",
            None,
            harness::reservation_of(&sharded_cert(2, Some(5), now)),
            now,
            LEASE,
        )
        .await
        .unwrap()
    else {
        panic!("not reserved");
    };
    assert!(s.crl_shard_states().await.unwrap().is_empty());

    s.revoke_certificate(early.id, RevocationReason::KeyCompromise, at, &ev())
        .await
        .unwrap()
        .changed();
    let problem = Problem::new(ProblemType::ServerInternal, "the CA could not sign");
    s.fail_order(order.id, problem, at, Some(&job))
        .await
        .unwrap()
        .changed();
    let states = s.crl_shard_states().await.unwrap();
    let counted: Vec<(String, u16, u64, bool)> = states
        .iter()
        .map(|st| (st.issuer.clone(), st.shard, st.revocations, st.is_stale()))
        .collect();
    assert_eq!(
        counted,
        [
            (DEFAULT_ISSUER.to_owned(), 3, 1, true),
            (DEFAULT_ISSUER.to_owned(), 5, 1, true),
        ]
    );
    // The worker's own creation afterwards keeps the counts.
    s.ensure_crl_shards(DEFAULT_ISSUER, 8).await.unwrap();
    let states = s.crl_shard_states().await.unwrap();
    assert_eq!(states.len(), 8);
    assert_eq!(states.iter().map(|st| st.revocations).sum::<u64>(), 2);
    assert_eq!(listed_serials(s, 3, &chain(), at).await, [early.serial]);
    assert_eq!(listed_serials(s, 5, &chain(), at).await.len(), 1);
}

const LEASE: Duration = Duration::seconds(60);

/// The chain every certificate of the harness names: the publishing CA's.
fn chain() -> String {
    harness::new_cert(0, t0()).issuer_chain_pem
}

fn sharded_cert(serial: u8, shard: Option<u16>, now: OffsetDateTime) -> NewCertificate {
    NewCertificate {
        crl_shard: shard,
        ..harness::new_cert(serial, now)
    }
}

/// Publishes a CRL of every shard after its current counter, so that none is stale.
async fn publish_all(s: &Storage, now: OffsetDateTime) {
    for st in s.crl_shard_states().await.unwrap() {
        let next = crl(st.number + 1, now);
        assert!(
            s.publish_crl(DEFAULT_ISSUER, st.shard, st.number, st.revocations, &next)
                .await
                .unwrap()
        );
    }
    assert!(!stale(s).await.iter().any(|st| *st));
}

async fn stale(s: &Storage) -> Vec<bool> {
    s.crl_shard_states()
        .await
        .unwrap()
        .iter()
        .map(storage::crls::CrlShardState::is_stale)
        .collect()
}

async fn listed_serials(s: &Storage, shard: u16, chain: &str, at: OffsetDateTime) -> Vec<Serial> {
    s.revoked_in_crl_shard(DEFAULT_ISSUER, shard, chain, at)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.serial)
        .collect()
}

fn crl(number: u64, now: OffsetDateTime) -> PublishedCrl {
    PublishedCrl {
        number,
        der: vec![0x30, 0x03, 0x02, 0x01, u8::try_from(number).unwrap()],
        this_update: now,
        next_update: now + Duration::days(7),
    }
}
