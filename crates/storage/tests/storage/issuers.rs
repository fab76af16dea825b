//! Several issuers (migration 0020): each certificate and reservation records its issuer, CRL
//! shards are per (issuer, shard), and the active issuer is one row every instance reads.

use acme_core::status::RevocationReason;
use storage::Storage;
use storage::ca_state::DEFAULT_ISSUER;
use storage::crls::PublishedCrl;
use storage::model::NewCertificate;
use storage::model::Reserved;
use time::Duration;

use crate::harness;
use crate::harness::Begun;
use crate::harness::ev;
use crate::harness::t0;

crate::both_backends!(
    certificates_are_listed_only_on_their_own_issuers_crl,
    the_active_issuer_is_one_row,
);

const ROTATED: &str = "int-2027";

/// The rotated issuer's chain: another intermediate than the harness's.
const ROTATED_CHAIN: &str =
    "-----BEGIN CERTIFICATE-----\naW50LTIwMjc=\n-----END CERTIFICATE-----\n";

/// Stores `cert` for a new ready order of `names`, reserved under `issuer`.
async fn issue_under(
    s: &Storage,
    issuer: &str,
    names: &[&str],
    cert: NewCertificate,
) -> storage::model::Certificate {
    let now = t0();
    let acct = harness::account(s, now).await;
    let order = harness::ready_order(s, acct.id, names, now).await;
    s.begin_finalize(order.id, b"csr", None, now)
        .await
        .unwrap()
        .begun();
    let mut reservation = harness::reservation_of(&cert);
    reservation.issuer = issuer.to_owned();
    let reserved = s.reserve_serial(order.id, reservation, now).await.unwrap();
    let Reserved::Reserved(reserved) = reserved else {
        panic!("not reserved: {reserved:?}");
    };
    assert_eq!(reserved.issuer, issuer, "the reservation names its issuer");
    let stored = s
        .complete_order(order.id, cert, now, None, &ev())
        .await
        .unwrap();
    let reservations = s.serial_reservations(order.id).await.unwrap();
    assert_eq!(reservations[0].issuer, issuer);
    stored
}

/// Two certificates in shard 0, one per issuer: each revocation makes only its own issuer's
/// shard stale, each issuer's CRL lists only its own certificate, and publishing one issuer's
/// shard leaves the other's untouched.
async fn certificates_are_listed_only_on_their_own_issuers_crl(s: &Storage) {
    let now = t0();
    s.ensure_crl_shards(DEFAULT_ISSUER, 1).await.unwrap();
    s.ensure_crl_shards(ROTATED, 1).await.unwrap();
    s.ensure_crl_shards(ROTATED, 1).await.unwrap();
    let states = s.crl_shard_states().await.unwrap();
    let keys: Vec<(&str, u16)> = states
        .iter()
        .map(|st| (st.issuer.as_str(), st.shard))
        .collect();
    assert_eq!(keys, [(DEFAULT_ISSUER, 0), (ROTATED, 0)]);
    for st in &states {
        assert!(
            s.publish_crl(&st.issuer, st.shard, 0, st.revocations, &crl(1, now))
                .await
                .unwrap()
        );
    }

    let mut old = harness::new_cert(1, now);
    old.crl_shard = Some(0);
    let old = issue_under(s, DEFAULT_ISSUER, &["old.example.com"], old).await;
    let mut new = harness::new_cert(2, now);
    new.crl_shard = Some(0);
    new.issuer_chain_pem = ROTATED_CHAIN.to_owned();
    let new = issue_under(s, ROTATED, &["new.example.com"], new).await;

    let at = now + Duration::hours(1);
    s.revoke_certificate(old.id, RevocationReason::Superseded, at, &ev())
        .await
        .unwrap();
    let stale: Vec<(String, bool)> = s
        .crl_shard_states()
        .await
        .unwrap()
        .into_iter()
        .map(|st| (st.issuer.clone(), st.is_stale()))
        .collect();
    assert_eq!(
        stale,
        [
            (DEFAULT_ISSUER.to_owned(), true),
            (ROTATED.to_owned(), false)
        ],
        "only the revoked certificate's issuer's shard is stale"
    );
    s.revoke_certificate(new.id, RevocationReason::KeyCompromise, at, &ev())
        .await
        .unwrap();
    let listed = |issuer: &'static str, chain: String| async move {
        s.revoked_in_crl_shard(issuer, 0, &chain, at)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.serial)
            .collect::<Vec<_>>()
    };
    let default_chain = harness::new_cert(0, now).issuer_chain_pem;
    assert_eq!(
        listed(DEFAULT_ISSUER, default_chain).await,
        std::slice::from_ref(&old.serial)
    );
    assert_eq!(
        listed(ROTATED, ROTATED_CHAIN.to_owned()).await,
        std::slice::from_ref(&new.serial)
    );

    // Each issuer's CRL number is its own.
    let rotated = s
        .crl_shard_states()
        .await
        .unwrap()
        .into_iter()
        .find(|st| st.issuer == ROTATED)
        .unwrap();
    assert!(
        s.publish_crl(ROTATED, 0, 1, rotated.revocations, &crl(2, at))
            .await
            .unwrap()
    );
    assert_eq!(s.published_crl(ROTATED, 0).await.unwrap(), Some(crl(2, at)));
    assert_eq!(
        s.published_crl(DEFAULT_ISSUER, 0).await.unwrap(),
        Some(crl(1, now))
    );
    // The compare-and-set is per issuer: "default"'s shard 0 is still at number 1.
    assert!(
        !s.publish_crl(DEFAULT_ISSUER, 0, 0, 9, &crl(2, at))
            .await
            .unwrap()
    );

    let usage = s.issuer_usage().await.unwrap();
    let counts: Vec<(&str, u64)> = usage
        .iter()
        .map(|u| (u.issuer.as_str(), u.certificates))
        .collect();
    assert_eq!(counts, [(DEFAULT_ISSUER, 1), (ROTATED, 1)]);
    assert_eq!(usage[1].last_not_after, Some(new.not_after));
}

/// No row until the first activation; then the last one stands, with its time, and each
/// activation is one audit record of its own transaction.
async fn the_active_issuer_is_one_row(s: &Storage) {
    let now = t0();
    assert_eq!(s.active_issuer().await.unwrap(), None);
    let (before, _) = s.audit_head().await.unwrap();
    s.set_active_issuer(ROTATED, now, &ev()).await.unwrap();
    assert_eq!(s.audit_head().await.unwrap().0, before + 1);
    let active = s.active_issuer().await.unwrap().unwrap();
    assert_eq!((active.name.as_str(), active.changed_at), (ROTATED, now));
    let later = now + Duration::minutes(5);
    s.set_active_issuer(DEFAULT_ISSUER, later, &ev())
        .await
        .unwrap();
    assert_eq!(s.audit_head().await.unwrap().0, before + 2);
    let active = s.active_issuer().await.unwrap().unwrap();
    assert_eq!(
        (active.name.as_str(), active.changed_at),
        (DEFAULT_ISSUER, later)
    );
}

fn crl(number: u64, now: time::OffsetDateTime) -> PublishedCrl {
    PublishedCrl {
        number,
        der: vec![0x30, 0x03, 0x02, 0x01, u8::try_from(number).unwrap()],
        this_update: now,
        next_update: now + Duration::days(7),
    }
}
