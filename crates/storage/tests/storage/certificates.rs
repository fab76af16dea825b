use acme_core::ids::CertificateId;
use acme_core::ids::Serial;
use acme_core::status::RevocationReason;
use storage::Storage;
use storage::error::Error;
use storage::model::StatusChange;
use time::Duration;

use crate::harness;
use crate::harness::Changed;
use crate::harness::ev;
use crate::harness::t0;

crate::both_backends!(revocation);

async fn revocation(s: &Storage) {
    let now = t0();
    let acct = harness::account(s, now).await;
    let cert = harness::issue(s, acct.id, &["a.example.com"], 7, now).await;
    let at = now + Duration::days(1);
    let revoked = s
        .revoke_certificate(cert.id, RevocationReason::KeyCompromise, at, &ev())
        .await
        .unwrap()
        .changed();
    assert_eq!(revoked.revoked_at, Some(at));
    assert_eq!(
        revoked.revocation_reason,
        Some(RevocationReason::KeyCompromise)
    );
    assert_eq!(revoked.serial, cert.serial);
    assert_eq!(
        s.certificate_by_serial(&cert.serial).await.unwrap(),
        Some(revoked.clone())
    );

    // The first revocation stands.
    let again = s
        .revoke_certificate(
            cert.id,
            RevocationReason::Superseded,
            at + Duration::days(1),
            &ev(),
        )
        .await;
    assert!(
        matches!(&again, Ok(StatusChange::Unchanged(c)) if *c == revoked),
        "{again:?}"
    );
    assert_eq!(s.certificate(cert.id).await.unwrap(), Some(revoked));

    let missing = s
        .revoke_certificate(
            CertificateId(cert.id.0 + 1000),
            RevocationReason::Unspecified,
            at,
            &ev(),
        )
        .await;
    assert!(matches!(missing, Err(Error::NotFound)), "{missing:?}");
    assert_eq!(
        s.certificate(CertificateId(cert.id.0 + 1000))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        s.certificate_by_serial(&Serial::from_bytes(vec![1, 2, 3]))
            .await
            .unwrap(),
        None
    );
}
