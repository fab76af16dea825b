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

crate::both_backends!(certificate_filters_and_pages, accounts_filters_and_counts);

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
