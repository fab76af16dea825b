//! Revocation (RFC 8555 §7.6): who may revoke, with which reasons, and only once.

use acme_core::problem::ProblemType;
use acme_core::status::RevocationReason;
use acme_jose::Jwk;
use ra::Refusal;
use ra::audit::Actor;
use ra::audit::AuditKind;
use ra::error::StateRefusal;
use ra::revocation::Revoker;
use ra::revocation::reason_from_code;

use rcgen::PublicKeyData;
use storage::audit::AuditFilter;

use crate::harness::client_ip;
use crate::harness::harness;
use crate::harness::problem_kind;
use crate::harness::refusal;

#[tokio::test]
async fn the_account_holding_a_certificate_may_revoke_it_with_a_reason() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    h.advance(time::Duration::hours(1));
    let revoked =
        h.ra.revoke(
            Revoker::Account(account.id),
            &cert.der,
            Some(4),
            client_ip(),
        )
        .await
        .unwrap();
    assert_eq!(revoked.id, cert.id);
    assert_eq!(revoked.revoked_at, Some(h.now()));
    assert_eq!(
        revoked.revocation_reason,
        Some(RevocationReason::Superseded)
    );
}

#[tokio::test]
async fn the_holder_of_the_certificates_key_may_revoke_it_without_an_account() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (cert, key) = h.issue(&account, &["a.example.com"]).await;
    let thumbprint = Jwk::from_spki_der(&key.subject_public_key_info())
        .unwrap()
        .thumbprint();
    let revoked =
        h.ra.revoke(
            Revoker::CertificateKey(thumbprint.clone()),
            &cert.der,
            Some(1),
            client_ip(),
        )
        .await
        .unwrap();
    assert_eq!(
        revoked.revocation_reason,
        Some(RevocationReason::KeyCompromise)
    );
    // Recorded as done by the key's holder, named by the key's thumbprint: not the server,
    // not the account that holds the certificate (which is still the record's account).
    let records = h
        .storage
        .audit_records(&AuditFilter {
            kind: Some(AuditKind::CertificateRevoked),
            ..AuditFilter::default()
        })
        .await
        .unwrap();
    let [record] = records.as_slice() else {
        panic!("one revocation record, got {records:#?}");
    };
    assert_eq!(
        record.event.actor,
        Actor::CertificateKey(thumbprint.clone())
    );
    assert_eq!(record.event.actor.kind(), "certificate_key");
    assert_eq!(record.event.client_ip, Some(client_ip()));
    assert_eq!(record.event.account, Some(account.id));
    assert_eq!(
        record.event.names,
        ["a.example.com"],
        "the names it certified"
    );
    assert_eq!(
        record.event.reason,
        format!(
            "revoked by the holder of the certificate's private key (the request was signed by \
             it, JWK thumbprint {thumbprint}), reason keyCompromise"
        )
    );
    assert_eq!(
        record.event.detail["certificate_key_thumbprint"],
        thumbprint.as_str()
    );
    // The chain verifies with the new actor kind in it.
    let check = h.storage.verify_audit_chain(&|_| {}).await.unwrap();
    assert_eq!(check.first_broken, None);
}

#[tokio::test]
async fn another_account_may_not_revoke_a_certificate_it_does_not_hold() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (other, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    assert_eq!(
        problem_kind(
            h.ra.revoke(Revoker::Account(other.id), &cert.der, None, client_ip())
                .await
        ),
        ProblemType::Unauthorized
    );
    let stored = h.storage.certificate(cert.id).await.unwrap().unwrap();
    assert_eq!(stored.revoked_at, None);
}

#[tokio::test]
async fn another_key_than_the_certificates_may_not_revoke_it() {
    let h = harness().build().await;
    let (account, account_key) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    // The account's key is not the certificate's key.
    let revoker = Revoker::CertificateKey(account_key.public_jwk().thumbprint());
    assert_eq!(
        problem_kind(h.ra.revoke(revoker, &cert.der, None, client_ip()).await),
        ProblemType::Unauthorized
    );
}

#[tokio::test]
async fn a_certificate_is_revoked_once_and_a_second_revocation_is_already_revoked() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    h.ra.revoke(
        Revoker::Account(account.id),
        &cert.der,
        Some(1),
        client_ip(),
    )
    .await
    .unwrap();
    h.advance(time::Duration::hours(1));
    assert!(matches!(
        refusal(
            h.ra.revoke(
                Revoker::Account(account.id),
                &cert.der,
                Some(4),
                client_ip()
            )
            .await
        ),
        Refusal::State(StateRefusal::AlreadyRevoked)
    ));
    // The first revocation's time and reason stand.
    let stored = h.storage.certificate(cert.id).await.unwrap().unwrap();
    assert_eq!(stored.revoked_at, Some(h.now() - time::Duration::hours(1)));
    assert_eq!(
        stored.revocation_reason,
        Some(RevocationReason::KeyCompromise)
    );
}

#[tokio::test]
async fn a_reason_code_clients_may_not_use_is_bad_revocation_reason() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    for code in [2, 6, 7, 8, 9, 10, 11, -1] {
        assert_eq!(
            problem_kind(
                h.ra.revoke(
                    Revoker::Account(account.id),
                    &cert.der,
                    Some(code),
                    client_ip()
                )
                .await
            ),
            ProblemType::BadRevocationReason,
            "reason {code}"
        );
    }
    assert_eq!(
        reason_from_code(None).unwrap(),
        RevocationReason::Unspecified
    );
}

#[tokio::test]
async fn bytes_that_are_not_a_certificate_are_malformed() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    assert_eq!(
        problem_kind(
            h.ra.revoke(Revoker::Account(account.id), b"not DER", None, client_ip())
                .await
        ),
        ProblemType::Malformed
    );
}

#[tokio::test]
async fn a_certificate_this_ca_did_not_issue_is_not_found() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    // A certificate of another CA, with its own database.
    let other = harness().build().await;
    let (other_account, _) = other.account().await;
    let (foreign, _) = other.issue(&other_account, &["a.example.com"]).await;
    assert!(matches!(
        refusal(
            h.ra.revoke(
                Revoker::Account(account.id),
                &foreign.der,
                None,
                client_ip()
            )
            .await
        ),
        Refusal::NotFound(_)
    ));
    let stored = h.storage.certificate(cert.id).await.unwrap().unwrap();
    assert_eq!(stored.revoked_at, None);
}
