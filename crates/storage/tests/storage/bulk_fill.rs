//! `bulk_fill.rs`: a small history written through the fill reads back through the server's own
//! reads, and pruning leaves of it what it leaves of a served history.

use acme_core::identifier::canonical_set_hash;
use acme_core::ids::AccountId;
use acme_core::ids::Serial;
use acme_core::status::ChallengeType;
use acme_core::status::OrderStatus;
use acme_core::status::RevocationReason;
use storage::Storage;
use storage::audit::Actor;
use storage::audit::AuditEvent;
use storage::audit::AuditKind;
use storage::bulk_fill::FillIssuance;
use storage::bulk_fill::FillRevocation;
use storage::bulk_fill::FilledCertificate;
use storage::ca_state::DEFAULT_ISSUER;
use storage::evidence::Evidence;
use storage::model::CertificateFilter;
use storage::model::NewAccount;
use storage::model::NewCertificate;
use storage::model::Page;
use time::Duration;
use time::OffsetDateTime;

use crate::harness;
use crate::harness::ev;
use crate::harness::t0;

crate::both_backends!(a_small_history_reads_back);

const CERTIFICATES: u32 = 2_000;
const ACCOUNTS: u32 = 50;
const REVOCATIONS: u32 = 100;
const DAYS: u32 = 20;
const SHARDS: u16 = 4;
const CHAIN: &str = "-----BEGIN CERTIFICATE-----\naW50ZXJtZWRpYXRl\n-----END CERTIFICATE-----\n";

fn serial(i: u32) -> Serial {
    let mut bytes = vec![0x01];
    bytes.extend(i.to_be_bytes());
    Serial::from_bytes(bytes)
}

fn issuance(i: u32, account: AccountId, at: OffsetDateTime) -> FillIssuance {
    let names: Vec<String> = if i.is_multiple_of(3) {
        vec![format!("c{i}.fill.test"), format!("www.c{i}.fill.test")]
    } else {
        vec![format!("c{i}.fill.test")]
    };
    let identifiers: Vec<_> = names.iter().map(|n| harness::dns(n)).collect();
    let issued_at = at + Duration::seconds(6);
    let certificate = NewCertificate {
        serial: serial(i),
        der: vec![0x30, 0x82, (i % 251) as u8, (i / 251) as u8],
        issuer_chain_pem: CHAIN.to_owned(),
        not_before: issued_at,
        not_after: issued_at + Duration::days(90),
        crl_shard: Some((i % u32::from(SHARDS)) as u16),
    };
    let mut audit = AuditEvent::new(
        AuditKind::CertificateIssued,
        Actor::Account(account),
        "fill",
    );
    audit.account = Some(account);
    audit.serial = Some(certificate.serial.clone());
    FillIssuance {
        account,
        set_hash: canonical_set_hash(&identifiers),
        challenges: names
            .iter()
            .map(|n| {
                vec![
                    (ChallengeType::Http01, format!("t{n}")),
                    (ChallengeType::Dns01, format!("u{n}")),
                ]
            })
            .collect(),
        identifiers,
        profile: "tls-server".to_owned(),
        evidence: Evidence {
            addresses: vec!["192.0.2.1:80".to_owned()],
            observed: "key authorization matched".to_owned(),
            caa: vec![],
        },
        ordered_at: at,
        order_expires_at: at + Duration::days(7),
        pending_authz_expires_at: at + Duration::days(7),
        validated_at: at + Duration::seconds(3),
        valid_authz_expires_at: at + Duration::days(30),
        finalized_at: at + Duration::seconds(5),
        csr_der: b"csr".to_vec(),
        client_ip: None,
        issued_at,
        issuer: DEFAULT_ISSUER.to_owned(),
        certificate,
        audit,
    }
}

async fn a_small_history_reads_back(s: &Storage) {
    let start = t0();
    s.ensure_crl_shards(DEFAULT_ISSUER, SHARDS).await.unwrap();
    let mut accounts = Vec::new();
    for a in 0..ACCOUNTS {
        let new = NewAccount {
            jwk_json: format!("{{\"k\":{a}}}"),
            thumbprint: format!("fill-{a}"),
            contacts: vec![],
            tos_agreed: true,
        };
        accounts.push(s.create_account(new, start, &ev()).await.unwrap().id);
    }
    let per_day = CERTIFICATES / DAYS;
    let mut stored: Vec<(u32, FilledCertificate, OffsetDateTime)> = Vec::new();
    let retention = storage::DEFAULT_PRUNE_AFTER;
    for day in 0..DAYS {
        let day_start = start + Duration::days(i64::from(day));
        let batch: Vec<FillIssuance> = (day * per_day..(day + 1) * per_day)
            .map(|i| {
                let at = day_start + Duration::seconds(i64::from(i % per_day) * 60);
                issuance(i, accounts[(i % ACCOUNTS) as usize], at)
            })
            .collect();
        let filled = s.fill_issuances(&batch).await.unwrap();
        assert_eq!(filled.len(), batch.len());
        stored.extend(
            batch
                .iter()
                .zip(filled)
                .enumerate()
                .map(|(n, (b, f))| (day * per_day + n as u32, f, b.issued_at)),
        );
        s.prune(day_start + Duration::days(1), retention, 1_000)
            .await
            .unwrap();
        // As the load generator does when the history has grown (every day here).
        s.fill_analyze().await.unwrap();
    }
    let end = start + Duration::days(i64::from(DAYS));

    // Every 20th certificate revoked, a day after the last issuance.
    let revoked_at = end + Duration::hours(1);
    let revocations: Vec<FillRevocation> = stored
        .iter()
        .step_by((CERTIFICATES / REVOCATIONS) as usize)
        .map(|(_, f, _)| FillRevocation {
            certificate: f.id,
            reason: RevocationReason::Superseded,
            at: revoked_at,
            audit: ev(),
        })
        .collect();
    assert_eq!(
        s.fill_revocations(&revocations).await.unwrap(),
        u64::from(REVOCATIONS)
    );
    // A second revocation of the same certificates counts nothing.
    assert_eq!(s.fill_revocations(&revocations[..3]).await.unwrap(), 0);

    // Counts, through the admin listing's own count.
    let all = CertificateFilter::default();
    assert_eq!(
        s.count_certificates(&all).await.unwrap(),
        u64::from(CERTIFICATES)
    );
    let revoked = CertificateFilter {
        revoked: Some(true),
        ..CertificateFilter::default()
    };
    assert_eq!(
        s.count_certificates(&revoked).await.unwrap(),
        u64::from(REVOCATIONS)
    );

    // A certificate by serial, as the ARI and download paths read it.
    let (i, first, _) = stored[0];
    let cert = s.certificate_by_serial(&serial(i)).await.unwrap().unwrap();
    assert_eq!(cert.id, first.id);
    assert_eq!(cert.der, vec![0x30, 0x82, 0, 0]);
    assert_eq!(cert.revocation_reason, Some(RevocationReason::Superseded));
    // Its evidence, one record per identifier, kept after its authorizations were pruned.
    let evidence = s.certificate_evidence(&serial(i)).await.unwrap();
    assert_eq!(evidence.len(), 2);
    assert_eq!(evidence[0].identifier, "c0.fill.test");
    assert_eq!(evidence[0].method, "http-01");

    // The CRL shards: their counters and their revoked lists hold every revocation.
    let states = s.crl_shard_states().await.unwrap();
    assert_eq!(states.len(), usize::from(SHARDS));
    assert_eq!(
        states.iter().map(|st| st.revocations).sum::<u64>(),
        u64::from(REVOCATIONS)
    );
    let mut listed = 0;
    for shard in 0..SHARDS {
        listed += s
            .revoked_in_crl_shard(DEFAULT_ISSUER, shard, CHAIN, revoked_at)
            .await
            .unwrap()
            .len();
    }
    assert_eq!(listed, REVOCATIONS as usize);

    // The admin listing by name.
    let by_name = CertificateFilter {
        name: Some(harness::dns("www.c3.fill.test")),
        ..CertificateFilter::default()
    };
    let page = s
        .list_certificates(
            &by_name,
            Page {
                before: None,
                limit: 10,
            },
        )
        .await
        .unwrap();
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].serial, serial(3));
    assert_eq!(page[0].identifiers.len(), 2);

    // Pruned as the server prunes: the first day's order is trimmed (valid, certificate kept,
    // no CSR, no authorizations); the last day's is whole.
    let old = s.order(first.order, end).await.unwrap().unwrap();
    assert_eq!(old.status, OrderStatus::Valid);
    assert_eq!(old.certificate_id, Some(first.id));
    assert!(old.authz_ids.is_empty(), "{old:?}");
    assert_eq!(s.order_csr(first.order).await.unwrap(), None);
    let (_, last, _) = *stored.last().unwrap();
    let recent = s.order(last.order, end).await.unwrap().unwrap();
    assert_eq!(recent.status, OrderStatus::Valid);
    assert_eq!(recent.authz_ids.len(), 1);
    assert_eq!(
        s.order_csr(last.order).await.unwrap(),
        Some(b"csr".to_vec())
    );
    let authz = s
        .authorization(recent.authz_ids[0], end)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(authz.challenges.len(), 2);
    // Everything prunable at the end is gone already: the fill pruned as it went.
    let report = s.prune(end, retention, 1_000).await.unwrap();
    assert_eq!(
        report.orders_trimmed + report.authorizations,
        0,
        "{report:?}"
    );
}
