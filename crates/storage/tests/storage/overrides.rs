//! Rate-limit overrides kept in the database: add (one per bucket, an expired one replaced),
//! look up, list, the change marker, remove; each change with its audit record, a refused one
//! with none.

use std::time::Duration;

use storage::Storage;
use storage::audit::AuditFilter;
use storage::overrides::NewOverride;
use storage::overrides::OverridesVersion;

use crate::harness::ev;
use crate::harness::t0;

crate::both_backends!(overrides_round_trip);

fn new(bucket: &str, expires_at: Option<time::OffsetDateTime>) -> NewOverride {
    NewOverride {
        limit: "order-creation".to_owned(),
        bucket: bucket.to_owned(),
        burst: Some(10),
        count: None,
        period: Some(Duration::from_secs(1800)),
        comment: "ticket 4711".to_owned(),
        expires_at,
        created_by: "alice (admin token abc)".to_owned(),
    }
}

async fn records(s: &Storage) -> usize {
    s.audit_records(&AuditFilter::default())
        .await
        .unwrap()
        .len()
}

async fn overrides_round_trip(s: &Storage) {
    assert_eq!(
        s.overrides_version().await.unwrap(),
        OverridesVersion::default()
    );
    assert!(s.overrides().await.unwrap().is_empty());

    let added = s
        .add_override(&new("12345", None), t0(), &ev())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(added.limit, "order-creation");
    assert_eq!(added.bucket, "12345");
    assert_eq!(
        (added.burst, added.count, added.period),
        (Some(10), None, Some(Duration::from_secs(1800)))
    );
    assert_eq!(added.comment, "ticket 4711");
    assert_eq!(added.created_by, "alice (admin token abc)");
    assert_eq!((added.created_at, added.expires_at), (t0(), None));
    assert_eq!(records(s).await, 1);
    let v1 = s.overrides_version().await.unwrap();
    assert_eq!(
        v1,
        OverridesVersion {
            rows: 1,
            last_id: added.id
        }
    );

    // A second override of the same bucket is refused while the first is in force: nothing
    // written, nothing recorded.
    let existing = s
        .add_override(&new("12345", None), t0(), &ev())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(existing, added);
    assert_eq!(records(s).await, 1);
    assert_eq!(s.overrides_version().await.unwrap(), v1);

    // One that expires; at its expiry it is replaced by a new add of the same bucket.
    let soon = t0() + time::Duration::minutes(5);
    let expiring = s
        .add_override(&new("777", Some(soon)), t0(), &ev())
        .await
        .unwrap()
        .unwrap();
    assert!(!expiring.expired_at(t0()));
    assert!(expiring.expired_at(soon));
    assert!(
        s.add_override(&new("777", None), soon - time::Duration::seconds(1), &ev())
            .await
            .unwrap()
            .is_err(),
        "not expired yet"
    );
    let replaced = s
        .add_override(&new("777", None), soon, &ev())
        .await
        .unwrap()
        .unwrap();
    assert!(replaced.id > expiring.id);
    assert_eq!(records(s).await, 3);
    let listed = s.overrides().await.unwrap();
    assert_eq!(listed, vec![added.clone(), replaced.clone()]);
    let v2 = s.overrides_version().await.unwrap();
    assert_eq!(
        v2,
        OverridesVersion {
            rows: 2,
            last_id: replaced.id
        }
    );

    assert_eq!(
        s.override_of("order-creation", "777").await.unwrap(),
        Some(replaced.clone())
    );
    assert_eq!(s.override_of("san-budget", "777").await.unwrap(), None);

    // Remove: the row comes back once, with its record; a second remove finds nothing.
    let removed = s
        .remove_override("order-creation", "12345", t0(), &ev())
        .await
        .unwrap();
    assert_eq!(removed, Some(added));
    assert_eq!(records(s).await, 4);
    assert_eq!(
        s.remove_override("order-creation", "12345", t0(), &ev())
            .await
            .unwrap(),
        None
    );
    assert_eq!(records(s).await, 4);
    let v3 = s.overrides_version().await.unwrap();
    assert_ne!(v3, v2, "a delete moves the marker");
    assert_eq!(s.overrides().await.unwrap(), vec![replaced]);
}
