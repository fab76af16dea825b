//! Validation evidence (migration 0019): kept with the challenge that became valid, copied for
//! each identifier when the certificate is stored, surviving the pruning of authorizations and
//! challenges, deleted only past `kept_until`.

use acme_core::ids::AccountId;
use acme_core::ids::AuthzId;
use storage::DEFAULT_PRUNE_AFTER;
use storage::Storage;
use storage::evidence::DEFAULT_EVIDENCE_RETENTION;
use storage::evidence::Evidence;
use storage::model::Certificate;
use storage::model::ChallengeStart;
use storage::model::OrderGuards;
use time::Duration;
use time::OffsetDateTime;

use crate::harness;
use crate::harness::Begun;
use crate::harness::Created;
use crate::harness::VALID_FOR;
use crate::harness::t0;

crate::both_backends!(
    evidence_is_kept_with_the_certificate_and_outlives_pruning,
    a_reused_authorization_carries_its_evidence,
    evidence_is_kept_at_least_as_long_as_the_certificate,
);

fn evidence_for(name: &str) -> Evidence {
    Evidence {
        addresses: vec!["127.0.0.1:5002".to_owned()],
        observed: format!(
            "key authorization matched at http://{name}:5002/.well-known/acme-challenge/t (HTTP 200)"
        ),
        caa: vec![format!("{name}. CAA 0 issue \"ca.test\"")],
    }
}

/// Validates `authz` through its first challenge with the worker's path (started, then the
/// verdict with evidence); the challenge's method.
async fn validate_queued(s: &Storage, authz: AuthzId, name: &str, now: OffsetDateTime) -> String {
    let authz = s.authorization(authz, now).await.unwrap().unwrap();
    let challenge = &authz.challenges[0];
    s.start_challenge(challenge.id, now).await.unwrap();
    s.record_validation_with_evidence(challenge.id, Ok(&evidence_for(name)), VALID_FOR, now, None)
        .await
        .unwrap();
    challenge.kind.as_str().to_owned()
}

/// Validates `authz` as a request that validated at once does.
async fn validate_at_once(s: &Storage, authz: AuthzId, name: &str, now: OffsetDateTime) -> String {
    let authz = s.authorization(authz, now).await.unwrap().unwrap();
    let challenge = &authz.challenges[1];
    let started = s
        .record_valid_at_once_with_evidence(challenge.id, &evidence_for(name), VALID_FOR, now)
        .await
        .unwrap();
    assert!(
        matches!(started, ChallengeStart::Started { .. }),
        "{started:?}"
    );
    challenge.kind.as_str().to_owned()
}

/// Finalizes the ready order `order` with certificate `serial`.
async fn finalize(
    s: &Storage,
    order: acme_core::ids::OrderId,
    serial: u8,
    now: OffsetDateTime,
) -> Certificate {
    s.begin_finalize(order, b"csr", None, now)
        .await
        .unwrap()
        .begun();
    harness::complete(s, order, harness::new_cert(serial, now), now, None).await
}

async fn settle_jobs(s: &Storage, now: OffsetDateTime) {
    while let Some(job) = s.claim_job(now, Duration::minutes(1), 10).await.unwrap() {
        s.complete_job(&job).await.unwrap();
    }
}

async fn evidence_is_kept_with_the_certificate_and_outlives_pruning(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let names = ["a.evidence.example", "b.evidence.example"];
    let order = harness::pending_order(s, acct.id, &names, now).await;
    let first = validate_queued(s, order.authz_ids[0], names[0], now).await;
    let second = validate_at_once(s, order.authz_ids[1], names[1], now).await;
    let cert = finalize(s, order.id, 41, now).await;
    settle_jobs(s, now).await;

    let records = s.certificate_evidence(&cert.serial).await.unwrap();
    assert_eq!(records.len(), 2, "{records:?}");
    for (record, (name, method)) in records.iter().zip([(names[0], first), (names[1], second)]) {
        assert_eq!(record.identifier, name);
        assert_eq!(record.method, method);
        assert_eq!(record.validated_at, now);
        assert_eq!(record.addresses, ["127.0.0.1:5002"]);
        assert!(record.observed.contains(name), "{}", record.observed);
        assert_eq!(record.caa, [format!("{name}. CAA 0 issue \"ca.test\"")]);
        assert_eq!(
            record.kept_until,
            cert.not_after + DEFAULT_EVIDENCE_RETENTION
        );
    }
    let digest = storage::evidence::digest(&records);
    assert_eq!(digest.len(), 64);
    assert!(digest.bytes().all(|b| b.is_ascii_hexdigit()));

    // Past the authorizations' expiry and the prune retention: they and their challenges go,
    // the evidence stays (and says the same).
    let later = now + Duration::days(120);
    let pruned = s.prune(later, DEFAULT_PRUNE_AFTER, 100).await.unwrap();
    assert_eq!(pruned.authorizations, 2, "{pruned:?}");
    assert!(pruned.challenges >= 2, "{pruned:?}");
    assert_eq!(pruned.evidence, 0, "{pruned:?}");
    for authz in &order.authz_ids {
        assert!(s.authorization(*authz, later).await.unwrap().is_none());
    }
    let kept = s.certificate_evidence(&cert.serial).await.unwrap();
    assert_eq!(kept, records);
    assert_eq!(storage::evidence::digest(&kept), digest);

    // A second before kept_until it stays; past it the pruner deletes it.
    let kept_until = records[0].kept_until;
    let pruned = s
        .prune(kept_until - Duration::seconds(1), DEFAULT_PRUNE_AFTER, 100)
        .await
        .unwrap();
    assert_eq!(pruned.evidence, 0, "{pruned:?}");
    assert_eq!(s.certificate_evidence(&cert.serial).await.unwrap().len(), 2);
    let pruned = s
        .prune(kept_until + Duration::seconds(1), DEFAULT_PRUNE_AFTER, 100)
        .await
        .unwrap();
    assert_eq!(pruned.evidence, 2, "{pruned:?}");
    assert!(
        s.certificate_evidence(&cert.serial)
            .await
            .unwrap()
            .is_empty()
    );
    // The certificate itself is never pruned.
    assert!(
        s.certificate_by_serial(&cert.serial)
            .await
            .unwrap()
            .is_some()
    );
}

async fn a_reused_authorization_carries_its_evidence(s: &Storage) {
    let now = t0();
    let acct: AccountId = harness::account(s, now).await.id;
    let name = "reused.evidence.example";
    let order = harness::pending_order(s, acct, &[name], now).await;
    let method = validate_queued(s, order.authz_ids[0], name, now).await;
    let first = finalize(s, order.id, 42, now).await;

    // A second order an hour later reuses the valid authorization: no new validation.
    let later = now + Duration::hours(1);
    let again = s
        .create_order(
            harness::new_order(acct, &[name], later, true),
            &OrderGuards::default(),
            later,
        )
        .await
        .unwrap()
        .created();
    assert_eq!(
        again.authz_ids, order.authz_ids,
        "the authorization is reused"
    );
    let second = finalize(s, again.id, 43, later).await;

    let records = s.certificate_evidence(&second.serial).await.unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].identifier, name);
    assert_eq!(records[0].method, method);
    assert_eq!(
        records[0].validated_at, now,
        "when it was validated, not reused"
    );
    assert_eq!(records[0].observed, evidence_for(name).observed);
    assert_eq!(
        records[0].kept_until,
        second.not_after + DEFAULT_EVIDENCE_RETENTION
    );
    let of_first = s.certificate_evidence(&first.serial).await.unwrap();
    assert_eq!(of_first[0].observed, records[0].observed);
    assert_eq!(
        of_first[0].kept_until,
        first.not_after + DEFAULT_EVIDENCE_RETENTION
    );
}

async fn evidence_is_kept_at_least_as_long_as_the_certificate(s: &Storage) {
    let now = t0();
    let short = s.clone().with_evidence_retention(Duration::days(1));
    let acct = harness::account(&short, now).await;
    let name = "short.evidence.example";
    let order = harness::pending_order(&short, acct.id, &[name], now).await;
    validate_queued(&short, order.authz_ids[0], name, now).await;
    let cert = finalize(&short, order.id, 44, now).await;
    let records = short.certificate_evidence(&cert.serial).await.unwrap();
    assert_eq!(records.len(), 1);
    // The retention is a day, counted from the certificate's expiry, not from its issuance.
    assert_eq!(records[0].kept_until, cert.not_after + Duration::days(1));
    let pruned = short
        .prune(now + Duration::days(30), DEFAULT_PRUNE_AFTER, 100)
        .await
        .unwrap();
    assert_eq!(pruned.evidence, 0);
    assert_eq!(
        short
            .certificate_evidence(&cert.serial)
            .await
            .unwrap()
            .len(),
        1
    );
}
