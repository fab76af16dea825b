//! The operator's blocked keys: block, look up, list, refuse a second block, unblock.

use storage::Storage;

use crate::harness::ev;
use crate::harness::t0;

crate::both_backends!(blocked_keys_round_trip);

async fn blocked_keys_round_trip(s: &Storage) {
    let a = [0xa5_u8; 32];
    let b = [0x01_u8; 32];
    assert!(!s.is_key_blocked(&a).await.unwrap());
    assert!(s.blocked_keys().await.unwrap().is_empty());

    let blocked = s
        .block_key(&a, "key compromise", t0(), &ev())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(blocked.spki_sha256, a);
    assert_eq!(blocked.reason, "key compromise");
    s.block_key(&b, "", t0() + time::Duration::seconds(1), &ev())
        .await
        .unwrap()
        .unwrap();
    assert!(s.is_key_blocked(&a).await.unwrap());
    assert!(s.is_key_blocked(&b).await.unwrap());

    // A second block keeps the first reason.
    assert!(matches!(
        s.block_key(&a, "again", t0(), &ev()).await,
        Ok(None)
    ));
    let listed = s.blocked_keys().await.unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0], blocked);
    assert_eq!(listed[1].spki_sha256, b);
    assert_eq!(listed[1].created_at, t0() + time::Duration::seconds(1));

    assert!(
        s.unblock_key(&a, time::OffsetDateTime::now_utc(), &ev())
            .await
            .unwrap()
    );
    assert!(
        !s.unblock_key(&a, time::OffsetDateTime::now_utc(), &ev())
            .await
            .unwrap(),
        "already unblocked"
    );
    assert!(!s.is_key_blocked(&a).await.unwrap());
    assert!(s.is_key_blocked(&b).await.unwrap());
}
