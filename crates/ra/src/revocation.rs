//! Revocation (RFC 8555 §7.6): who may revoke a certificate, and with which reasons.

use acme_core::ids::AccountId;
use acme_core::ids::CertificateId;
use acme_core::ids::Serial;
use acme_core::problem::ProblemType;
use acme_core::status::RevocationReason;
use acme_jose::Jwk;
use storage::model::Certificate;
use storage::model::StatusChange;
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;

use std::net::IpAddr;

use crate::Ra;
use crate::audit;
use crate::audit::AuditEvent;
use crate::audit::Requester;
use crate::error::Error;
use crate::error::Refusal;
use crate::error::StateRefusal;

/// Who asks for a revocation.
#[derive(Debug, Clone)]
pub enum Revoker {
    /// An account, by its `kid`: it must hold the certificate.
    Account(AccountId),
    /// The holder of the certificate's own key, by the RFC 7638 thumbprint of the `jwk` that
    /// signed the request.
    CertificateKey(String),
}

impl Ra {
    /// Revokes the certificate `der` for `revoker`, whose request came from `client_ip`, with
    /// reason `reason` (an RFC 5280 code, unspecified when absent). A certificate this CA did
    /// not issue is not found. Recorded with who revoked it and how that was authorized; a
    /// refused request records nothing.
    pub async fn revoke(
        &self,
        revoker: Revoker,
        der: &[u8],
        reason: Option<i64>,
        client_ip: IpAddr,
    ) -> Result<Certificate, Error> {
        let reason = reason_from_code(reason)?;
        let (serial, spki) = {
            let (_, parsed) = X509Certificate::from_der(der).map_err(|_| {
                Refusal::malformed("\"certificate\" is not a DER X.509 certificate")
            })?;
            (
                Serial::from_bytes(parsed.raw_serial().to_vec()),
                parsed.public_key().raw.to_vec(),
            )
        };
        let cert = match self.inner.storage.certificate_by_serial(&serial).await? {
            Some(c) if c.der == der => c,
            _ => {
                return Err(Refusal::NotFound("certificate (it was not issued by this CA)").into());
            }
        };
        let authorized = match &revoker {
            Revoker::Account(account) => *account == cert.account_id,
            Revoker::CertificateKey(thumbprint) => {
                Jwk::from_spki_der(&spki).is_ok_and(|k| k.thumbprint() == *thumbprint)
            }
        };
        if !authorized {
            return Err(Refusal::unauthorized(
                "revocation must be signed by the account that holds the certificate or by the certificate's own key",
            )
            .into());
        }
        let audit = match &revoker {
            Revoker::Account(account) => audit::revoked(
                &Requester::account(*account, client_ip),
                &cert,
                reason,
                "by the account holding it (the request was signed by the account's key)",
            ),
            Revoker::CertificateKey(thumbprint) => {
                let mut event = audit::revoked(
                    &Requester::certificate_key(thumbprint.clone(), client_ip),
                    &cert,
                    reason,
                    &format!(
                        "by the holder of the certificate's private key (the request was \
                         signed by it, JWK thumbprint {thumbprint})"
                    ),
                );
                if let Some(detail) = event.detail.as_object_mut() {
                    detail.insert(
                        "certificate_key_thumbprint".to_owned(),
                        thumbprint.clone().into(),
                    );
                }
                event
            }
        };
        self.revoke_recorded(&cert, reason, &audit).await
    }

    /// A certificate of this account; other accounts' certificates are indistinguishable from
    /// missing ones.
    pub async fn certificate_of(
        &self,
        account: AccountId,
        id: CertificateId,
    ) -> Result<Certificate, Error> {
        match self.inner.storage.certificate(id).await? {
            Some(cert) if cert.account_id == account => Ok(cert),
            _ => Err(Refusal::NotFound("certificate").into()),
        }
    }

    /// Revokes a stored certificate for `requester`, recorded as revoked by them.
    pub async fn revoke_stored(
        &self,
        cert: &Certificate,
        reason: RevocationReason,
        requester: &Requester,
    ) -> Result<Certificate, Error> {
        let how = format!("by {}", requester.who());
        let audit = audit::revoked(requester, cert, reason, &how);
        self.revoke_recorded(cert, reason, &audit).await
    }

    /// Revokes a stored certificate, recording `audit` with it; the ACME path and an
    /// operator's command end here.
    pub(crate) async fn revoke_recorded(
        &self,
        cert: &Certificate,
        reason: RevocationReason,
        audit: &AuditEvent,
    ) -> Result<Certificate, Error> {
        let revoked = match self
            .inner
            .storage
            .revoke_certificate(cert.id, reason, self.now(), audit)
            .await?
        {
            StatusChange::Changed(revoked) => revoked,
            StatusChange::Unchanged(_) => return Err(StateRefusal::AlreadyRevoked.into()),
        };
        tracing::info!(serial = %revoked.serial, reason = reason.as_str(), "certificate revoked");
        metrics::counter!("certeasy_certificates_revoked_total").increment(1);
        Ok(revoked)
    }
}

/// The reason of a revocation request: absent is unspecified; codes RFC 8555 clients may not
/// use (or that do not exist) are `badRevocationReason`.
pub fn reason_from_code(code: Option<i64>) -> Result<RevocationReason, Refusal> {
    match code {
        None => Ok(RevocationReason::Unspecified),
        Some(code) => RevocationReason::from_code(code).ok_or_else(|| {
            Refusal::problem(
                ProblemType::BadRevocationReason,
                format!(
                    "reason code {code} is not allowed; use 0 (unspecified), 1 (keyCompromise), 3, 4 or 5"
                ),
            )
        }),
    }
}
