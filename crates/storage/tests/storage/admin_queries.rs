use acme_core::ids::AccountId;
use acme_core::ids::CertificateId;
use acme_core::status::AccountStatus;
use acme_core::status::RevocationReason;
use storage::Storage;
use storage::model::AccountFilter;
use storage::model::CertificateFilter;
use storage::model::CertificateSummary;
use storage::model::NewAccount;
use storage::model::Page;
use time::Duration;

use crate::harness;
use crate::harness::Changed;
use crate::harness::dns;
use crate::harness::ev;
use crate::harness::t0;

crate::both_backends!(
    certificate_filters_and_pages,
    accounts_filters_and_counts,
    names_drive_pages_and_combine,
    bulk_revocation_in_chunks
);

fn ids(rows: &[CertificateSummary]) -> Vec<CertificateId> {
    rows.iter().map(|r| r.id).collect()
}

fn page(limit: u32) -> Page<CertificateId> {
    Page {
        before: None,
        limit,
    }
}

async fn certificate_filters_and_pages(s: &Storage) {
    let now = t0();
    let a = harness::account(s, now).await;
    let b = harness::account(s, now).await;
    let c1 = harness::issue(s, a.id, &["a.example.com", "www.example.com"], 1, now).await;
    let c2 = harness::issue(s, a.id, &["b.example.com"], 2, now + Duration::days(10)).await;
    let c3 = harness::issue(s, b.id, &["a.example.com"], 3, now + Duration::days(20)).await;
    // Holds "a.example.com" only as a suffix: no match for that name.
    let c4 = harness::issue(s, b.id, &["xa.example.com"], 4, now + Duration::days(30)).await;

    let list = |filter: CertificateFilter| async move {
        ids(&s.list_certificates(&filter, page(100)).await.unwrap())
    };
    assert_eq!(
        list(CertificateFilter::default()).await,
        vec![c4.id, c3.id, c2.id, c1.id]
    );
    let all = s
        .list_certificates(&CertificateFilter::default(), page(100))
        .await
        .unwrap();
    let first = all.last().unwrap();
    assert_eq!(first.serial, c1.serial);
    assert_eq!(first.account_id, a.id);
    assert_eq!(first.order_id, c1.order_id);
    assert_eq!(
        first.identifiers,
        vec![dns("a.example.com"), dns("www.example.com")]
    );
    assert_eq!(first.not_after, c1.not_after);
    assert_eq!(first.issued_at, now);
    assert_eq!(first.revoked_at, None);

    let by_name = CertificateFilter {
        name: Some(dns("a.example.com")),
        ..Default::default()
    };
    assert_eq!(list(by_name.clone()).await, vec![c3.id, c1.id]);
    assert_eq!(s.count_certificates(&by_name).await.unwrap(), 2);
    let second_name = CertificateFilter {
        name: Some(dns("www.example.com")),
        ..Default::default()
    };
    assert_eq!(list(second_name).await, vec![c1.id]);
    assert_eq!(
        list(CertificateFilter {
            serial: Some(c2.serial.clone()),
            ..Default::default()
        })
        .await,
        vec![c2.id]
    );
    assert_eq!(
        list(CertificateFilter {
            account: Some(a.id),
            ..Default::default()
        })
        .await,
        vec![c2.id, c1.id]
    );
    assert_eq!(
        list(CertificateFilter {
            account: Some(AccountId(b.id.0 + 1000)),
            ..Default::default()
        })
        .await,
        Vec::<CertificateId>::new()
    );
    // Issued in [day 5, day 20): the end is excluded.
    assert_eq!(
        list(CertificateFilter {
            issued_from: Some(now + Duration::days(5)),
            issued_until: Some(now + Duration::days(20)),
            ..Default::default()
        })
        .await,
        vec![c2.id]
    );
    // Expiring (90 days after issue) in [day 100, day 111).
    assert_eq!(
        list(CertificateFilter {
            expires_from: Some(now + Duration::days(100)),
            expires_until: Some(now + Duration::days(111)),
            ..Default::default()
        })
        .await,
        vec![c3.id, c2.id]
    );

    // Revocation of a batch: only the unrevoked ones change, and the first revocation stands.
    let at = now + Duration::days(40);
    s.revoke_certificate(c3.id, RevocationReason::Superseded, at, &ev())
        .await
        .unwrap()
        .changed();
    let revoked = s
        .revoke_certificates(
            &[c1.id, c3.id],
            RevocationReason::KeyCompromise,
            at,
            &[ev(), ev()],
        )
        .await
        .unwrap();
    assert_eq!(revoked, vec![c1.id]);
    assert_eq!(
        s.revoke_certificates(&[c1.id], RevocationReason::Unspecified, at, &[ev()])
            .await
            .unwrap(),
        Vec::<CertificateId>::new()
    );
    let c1_now = s.certificate(c1.id).await.unwrap().unwrap();
    assert_eq!(c1_now.revoked_at, Some(at));
    assert_eq!(
        c1_now.revocation_reason,
        Some(RevocationReason::KeyCompromise)
    );
    let c3_now = s.certificate(c3.id).await.unwrap().unwrap();
    assert_eq!(c3_now.revocation_reason, Some(RevocationReason::Superseded));
    let revoked_only = CertificateFilter {
        revoked: Some(true),
        ..Default::default()
    };
    assert_eq!(list(revoked_only).await, vec![c3.id, c1.id]);
    let unrevoked = CertificateFilter {
        revoked: Some(false),
        ..Default::default()
    };
    assert_eq!(list(unrevoked.clone()).await, vec![c4.id, c2.id]);
    let listed = s.list_certificates(&by_name, page(10)).await.unwrap();
    assert_eq!(
        listed[1].revocation_reason,
        Some(RevocationReason::KeyCompromise)
    );
    assert_eq!(listed[1].revoked_at, Some(at));
    assert_eq!(
        s.count_certificates(&CertificateFilter {
            account: Some(a.id),
            revoked: Some(false),
            ..Default::default()
        })
        .await
        .unwrap(),
        1
    );
    assert_eq!(
        s.count_certificates(&CertificateFilter::default())
            .await
            .unwrap(),
        4
    );

    // Keyset pages, newest first.
    let p1 = s
        .list_certificates(&CertificateFilter::default(), page(3))
        .await
        .unwrap();
    assert_eq!(ids(&p1), vec![c4.id, c3.id, c2.id]);
    let p2 = s
        .list_certificates(
            &CertificateFilter::default(),
            Page {
                before: Some(c2.id),
                limit: 3,
            },
        )
        .await
        .unwrap();
    assert_eq!(ids(&p2), vec![c1.id]);
    let p3 = s
        .list_certificates(
            &unrevoked,
            Page {
                before: Some(c4.id),
                limit: 3,
            },
        )
        .await
        .unwrap();
    assert_eq!(ids(&p3), vec![c2.id]);
}

async fn accounts_filters_and_counts(s: &Storage) {
    let now = t0();
    let a = harness::account(s, now).await;
    let b = s
        .create_account(
            NewAccount {
                jwk_json: r#"{"kty":"EC","x":"other"}"#.to_owned(),
                thumbprint: format!("thumb-{}", harness::unique()),
                contacts: vec!["mailto:100%_team@corp.example".to_owned()],
                tos_agreed: true,
            },
            now,
            &ev(),
        )
        .await
        .unwrap();
    let c = harness::account(s, now).await;
    let list = |filter: AccountFilter, before: Option<AccountId>, limit: u32| async move {
        s.list_accounts(&filter, Page { before, limit })
            .await
            .unwrap()
            .into_iter()
            .map(|a| a.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        list(AccountFilter::default(), None, 10).await,
        vec![c.id, b.id, a.id]
    );
    assert_eq!(
        list(AccountFilter::default(), Some(c.id), 1).await,
        vec![b.id]
    );
    // The contact is matched as a literal substring: '%' and '_' are no wildcards.
    let corp = AccountFilter {
        contact: Some("100%_team@corp".to_owned()),
        ..Default::default()
    };
    assert_eq!(list(corp, None, 10).await, vec![b.id]);
    let wildcard = AccountFilter {
        contact: Some("%".to_owned()),
        ..Default::default()
    };
    assert_eq!(list(wildcard, None, 10).await, vec![b.id]);

    s.deactivate_account(c.id, now, &ev())
        .await
        .unwrap()
        .changed();
    let deactivated = AccountFilter {
        status: Some(AccountStatus::Deactivated),
        ..Default::default()
    };
    assert_eq!(list(deactivated, None, 10).await, vec![c.id]);
    let valid = AccountFilter {
        status: Some(AccountStatus::Valid),
        ..Default::default()
    };
    assert_eq!(list(valid, None, 10).await, vec![b.id, a.id]);

    let first = harness::issue(s, a.id, &["one.example.com"], 1, now).await;
    harness::issue(s, a.id, &["two.example.com"], 2, now).await;
    harness::pending_order(s, a.id, &["three.example.com"], now).await;
    s.revoke_certificate(first.id, RevocationReason::Unspecified, now, &ev())
        .await
        .unwrap()
        .changed();
    let counts = s.account_counts(a.id).await.unwrap();
    assert_eq!(counts.orders, 3);
    assert_eq!(counts.certificates, 2);
    assert_eq!(counts.revoked_certificates, 1);
    let none = s.account_counts(b.id).await.unwrap();
    assert_eq!(none, storage::model::AccountCounts::default());
}

/// The name filter reads `certificate_names` (migration 0026), written with each certificate:
/// its keyset pages, and its conditions combined with every other filter, as the count sees them.
async fn names_drive_pages_and_combine(s: &Storage) {
    let now = t0();
    let a = harness::account(s, now).await;
    let b = harness::account(s, now).await;
    let mut named = Vec::new();
    for i in 0..5_u8 {
        let day = now + Duration::days(i64::from(i));
        // Another name between each, so the name's ids are not consecutive.
        harness::issue(s, a.id, &["other.example.com"], 100 + i, day).await;
        let account = if i == 3 { b.id } else { a.id };
        let names: &[&str] = if i == 2 {
            &["*.n.example.com", "n.example.com"]
        } else {
            &["n.example.com"]
        };
        named.push(harness::issue(s, account, names, 10 + i, day).await.id);
    }
    named.reverse();
    let by_name = CertificateFilter {
        name: Some(dns("n.example.com")),
        ..Default::default()
    };
    let mut pages = Vec::new();
    let mut before = None;
    loop {
        let rows = s
            .list_certificates(&by_name, Page { before, limit: 2 })
            .await
            .unwrap();
        let Some(last) = rows.last() else { break };
        before = Some(last.id);
        pages.push(ids(&rows));
    }
    assert_eq!(
        pages,
        vec![
            named[0..2].to_vec(),
            named[2..4].to_vec(),
            named[4..5].to_vec()
        ]
    );
    assert_eq!(s.count_certificates(&by_name).await.unwrap(), 5);
    let wildcard = CertificateFilter {
        name: Some(dns("*.n.example.com")),
        ..Default::default()
    };
    assert_eq!(
        ids(&s.list_certificates(&wildcard, page(10)).await.unwrap()),
        vec![named[2]]
    );
    let listed = s.list_certificates(&wildcard, page(10)).await.unwrap();
    assert_eq!(
        listed[0].identifiers,
        vec![dns("*.n.example.com"), dns("n.example.com")]
    );
    let nobody = CertificateFilter {
        name: Some(dns("example.com")),
        ..Default::default()
    };
    assert!(
        s.list_certificates(&nobody, page(10))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(s.count_certificates(&nobody).await.unwrap(), 0);

    s.revoke_certificate(named[0], RevocationReason::Superseded, now, &ev())
        .await
        .unwrap()
        .changed();
    let unrevoked = CertificateFilter {
        revoked: Some(false),
        ..by_name.clone()
    };
    assert_eq!(
        ids(&s.list_certificates(&unrevoked, page(10)).await.unwrap()),
        named[1..].to_vec()
    );
    assert_eq!(s.count_certificates(&unrevoked).await.unwrap(), 4);
    // Past a keyset bound and on the unrevoked only.
    assert_eq!(
        ids(&s
            .list_certificates(
                &unrevoked,
                Page {
                    before: Some(named[2]),
                    limit: 10
                }
            )
            .await
            .unwrap()),
        named[3..].to_vec()
    );
    let of_b = CertificateFilter {
        account: Some(b.id),
        ..by_name.clone()
    };
    assert_eq!(
        ids(&s.list_certificates(&of_b, page(10)).await.unwrap()),
        vec![named[1]]
    );
    // Issued on days 1 to 2, so expiring (90 days on) in [day 91, day 93).
    let expiring = CertificateFilter {
        expires_from: Some(now + Duration::days(91)),
        expires_until: Some(now + Duration::days(93)),
        ..by_name.clone()
    };
    assert_eq!(
        ids(&s.list_certificates(&expiring, page(10)).await.unwrap()),
        vec![named[2], named[3]]
    );
    assert_eq!(s.count_certificates(&expiring).await.unwrap(), 2);
    let issued = CertificateFilter {
        issued_from: Some(now + Duration::days(4)),
        ..by_name
    };
    assert_eq!(
        ids(&s.list_certificates(&issued, page(10)).await.unwrap()),
        vec![named[0]]
    );
}

/// More certificates than one write transaction takes (`REVOKE_CHUNK`, 100): every one is
/// revoked once, with its record, and a second call with the same ids (a resumed batch) revokes
/// nothing and records nothing.
async fn bulk_revocation_in_chunks(s: &Storage) {
    let now = t0();
    let a = harness::account(s, now).await;
    let mut issued = Vec::new();
    for i in 0..230_u8 {
        issued.push(
            harness::issue(s, a.id, &["bulk.example.com"], i, now)
                .await
                .id,
        );
    }
    // One revoked before, by its holder: kept as it was.
    s.revoke_certificate(issued[150], RevocationReason::KeyCompromise, now, &ev())
        .await
        .unwrap()
        .changed();
    let records_before = s.audit_head().await.unwrap().0;
    let at = now + Duration::hours(1);
    let revoked = s
        .revoke_certificates(
            &issued,
            RevocationReason::Superseded,
            at,
            &vec![ev(); issued.len()],
        )
        .await
        .unwrap();
    let mut expected: Vec<CertificateId> = issued
        .iter()
        .copied()
        .filter(|id| *id != issued[150])
        .collect();
    expected.sort_unstable_by(|x, y| y.cmp(x));
    assert_eq!(revoked, expected);
    assert_eq!(s.audit_head().await.unwrap().0, records_before + 229);
    let again = s
        .revoke_certificates(
            &issued,
            RevocationReason::Unspecified,
            at,
            &vec![ev(); issued.len()],
        )
        .await
        .unwrap();
    assert!(again.is_empty());
    assert_eq!(s.audit_head().await.unwrap().0, records_before + 229);
    let unrevoked = CertificateFilter {
        account: Some(a.id),
        revoked: Some(false),
        ..Default::default()
    };
    assert_eq!(s.count_certificates(&unrevoked).await.unwrap(), 0);
    let kept = s.certificate(issued[150]).await.unwrap().unwrap();
    assert_eq!(
        kept.revocation_reason,
        Some(RevocationReason::KeyCompromise)
    );
    let last = s.certificate(issued[229]).await.unwrap().unwrap();
    assert_eq!(last.revocation_reason, Some(RevocationReason::Superseded));
    assert_eq!(last.revoked_at, Some(at));
}

/// Rows as the releases before migration 0026 left them: an account, two orders with their
/// certificates (one of two names, one of one), and an order that issued nothing. `nl` is the
/// backend's newline expression.
fn rows_before_names(nl: &str) -> Vec<String> {
    vec![
        "INSERT INTO accounts (id, thumbprint, jwk, status, created_at) \
         VALUES (1, 'tp', '{}', 'valid', 1700000000)"
            .to_owned(),
        format!(
            "INSERT INTO orders (id, account_id, status, identifiers, set_hash, expires_at, \
             created_at, updated_at) VALUES \
             (7, 1, 'valid', 'dns:a.example' || {nl} || 'dns:b.example', 'h1', 1800000000, 1700000000, 1700000000), \
             (8, 1, 'valid', 'dns:a.example', 'h2', 1800000000, 1700000000, 1700000000), \
             (9, 1, 'pending', 'dns:c.example', 'h3', 1800000000, 1700000000, 1700000000)"
        ),
        "INSERT INTO certificates (id, account_id, order_id, serial, der, chain_pem, set_hash, \
         not_before, not_after, issued_at) VALUES \
         (70, 1, 7, '0a70', '', '', 'h1', 1700000000, 1707776000, 1700000000), \
         (80, 1, 8, '0a80', '', '', 'h2', 1700000000, 1707776000, 1700000000)"
            .to_owned(),
        "UPDATE orders SET certificate_id = id * 10 WHERE id IN (7, 8)".to_owned(),
    ]
}

/// What the backfill of migration 0026 must give for [`rows_before_names`].
async fn names_backfilled(s: &Storage) {
    let by = |name: &str| CertificateFilter {
        name: Some(dns(name)),
        ..Default::default()
    };
    let listed = |name: &'static str| async move {
        ids(&s.list_certificates(&by(name), page(10)).await.unwrap())
    };
    assert_eq!(
        listed("a.example").await,
        vec![CertificateId(80), CertificateId(70)]
    );
    assert_eq!(listed("b.example").await, vec![CertificateId(70)]);
    assert_eq!(listed("c.example").await, Vec::<CertificateId>::new());
    assert_eq!(s.count_certificates(&by("a.example")).await.unwrap(), 2);
}

/// Migration 0026 fills `certificate_names` with the names of the certificates already stored.
#[tokio::test]
async fn sqlite_names_of_existing_certificates_are_backfilled() {
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let (url, mut conn) = harness::sqlite_migrated_before(dir.path(), "0026").await;
    for statement in rows_before_names("char(10)") {
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    conn.close().await.unwrap();
    let s = Storage::connect(&url).await.unwrap();
    names_backfilled(&s).await;
    s.close().await;
}

/// As [`sqlite_names_of_existing_certificates_are_backfilled`], on PostgreSQL.
#[tokio::test]
async fn postgres_names_of_existing_certificates_are_backfilled() {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let db = testkit::postgres::PgDatabase::create("names_backfill").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let shipped =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations/postgres");
    for entry in std::fs::read_dir(&shipped).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        if name.as_str() < "0026" {
            std::fs::copy(entry.path(), dir.path().join(&name)).unwrap();
        }
    }
    let mut conn = sqlx::AnyConnection::connect(db.url()).await.unwrap();
    sqlx::migrate::Migrator::new(dir.path())
        .await
        .unwrap()
        .run(&mut conn)
        .await
        .unwrap();
    for statement in rows_before_names("chr(10)") {
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    conn.close().await.unwrap();
    let s = Storage::connect(db.url()).await.unwrap();
    names_backfilled(&s).await;
    s.close().await;
}
