use acme_core::status::RevocationReason;
use storage::Storage;
use storage::crls::PublishedCrl;
use time::Duration;

use crate::harness;
use crate::harness::t0;

crate::both_backends!(
    revocations_make_their_shard_stale_and_are_listed_there,
    one_publisher_wins_each_number
);

/// A certificate in shard 1, one in no shard (issued before CRLs), and what their revocations do.
async fn revocations_make_their_shard_stale_and_are_listed_there(s: &Storage) {
    let now = t0();
    s.ensure_crl_shards(2).await.unwrap();
    s.ensure_crl_shards(2).await.unwrap();
    let states = s.crl_shard_states().await.unwrap();
    assert_eq!(states.len(), 2);
    assert!(states.iter().all(|st| st.number == 0 && st.is_stale()));

    let acct = harness::account(s, now).await;
    let order = harness::ready_order(s, acct.id, &["sharded.example.com"], now).await;
    s.begin_finalize(order.id, b"csr", now).await.unwrap();
    let mut new = harness::new_cert(1, now);
    new.crl_shard = Some(1);
    let sharded = harness::complete(s, order.id, new, now, None).await;
    let legacy = harness::issue(s, acct.id, &["legacy.example.com"], 2, now).await;
    let kept = harness::issue(s, acct.id, &["kept.example.com"], 3, now).await;

    // Publish both shards empty: no longer stale.
    for st in s.crl_shard_states().await.unwrap() {
        let crl = crl(1, now);
        assert!(
            s.publish_crl(st.shard, 0, st.revocations, &crl)
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
    s.revoke_certificate(sharded.id, RevocationReason::KeyCompromise, at)
        .await
        .unwrap();
    let states = s.crl_shard_states().await.unwrap();
    assert!(!states[0].is_stale(), "{states:?}");
    assert!(states[1].is_stale(), "{states:?}");
    let listed = s.revoked_in_crl_shard(1, at).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].serial, sharded.serial);
    assert_eq!(listed[0].revoked_at, at);
    assert_eq!(listed[0].reason, RevocationReason::KeyCompromise);
    assert!(s.revoked_in_crl_shard(0, at).await.unwrap().is_empty());

    // Bulk revocation (the admin path) counts too; a certificate without a shard is in shard 0.
    let revoked = s
        .revoke_certificates(&[legacy.id], RevocationReason::Superseded, at)
        .await
        .unwrap();
    assert_eq!(revoked, vec![legacy.id]);
    let states = s.crl_shard_states().await.unwrap();
    assert!(states[0].is_stale(), "{states:?}");
    let listed = s.revoked_in_crl_shard(0, at).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].serial, legacy.serial);

    // An expired certificate leaves its CRL.
    assert!(
        s.revoked_in_crl_shard(1, now + Duration::days(91))
            .await
            .unwrap()
            .is_empty()
    );
    // Unrevoked certificates are never listed.
    for shard in 0..2 {
        assert!(
            s.revoked_in_crl_shard(shard, at)
                .await
                .unwrap()
                .iter()
                .all(|r| r.serial != kept.serial)
        );
    }

    // Publishing after the counter read clears the staleness; the stored bytes are served.
    let st = s.crl_shard_states().await.unwrap()[1].clone();
    let second = crl(2, at);
    assert!(s.publish_crl(1, 1, st.revocations, &second).await.unwrap());
    assert!(!s.crl_shard_states().await.unwrap()[1].is_stale());
    assert_eq!(s.published_crl(1).await.unwrap(), Some(second));
}

/// Instances that build the same shard at once: exactly one stores each number.
async fn one_publisher_wins_each_number(s: &Storage) {
    let now = t0();
    s.ensure_crl_shards(1).await.unwrap();
    assert_eq!(
        s.published_crl(0).await.unwrap(),
        None,
        "nothing before the first"
    );
    for number in 1..=3u64 {
        let attempts = (0..8).map(|i| {
            let s = s.clone();
            async move {
                let mut crl = crl(number, now);
                crl.der.push(i);
                s.publish_crl(0, number - 1, 0, &crl).await.unwrap()
            }
        });
        let won = futures::future::join_all(attempts).await;
        assert_eq!(
            won.iter().filter(|w| **w).count(),
            1,
            "number {number}: {won:?}"
        );
        let stored = s.published_crl(0).await.unwrap().unwrap();
        assert_eq!(stored.number, number);
    }
    // A publisher that read an old number cannot overwrite a newer CRL.
    assert!(!s.publish_crl(0, 1, 0, &crl(2, now)).await.unwrap());
    assert_eq!(s.published_crl(0).await.unwrap().unwrap().number, 3);
}

fn crl(number: u64, now: time::OffsetDateTime) -> PublishedCrl {
    PublishedCrl {
        number,
        der: vec![0x30, 0x03, 0x02, 0x01, u8::try_from(number).unwrap()],
        this_update: now,
        next_update: now + Duration::days(7),
    }
}
