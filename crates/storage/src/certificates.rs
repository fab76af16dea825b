//! Issued certificates: lookup and revocation.

use acme_core::ids::CertificateId;
use acme_core::ids::Serial;
use acme_core::status::RevocationReason;
use time::OffsetDateTime;

use crate::Result;
use crate::Storage;
use crate::audit;
use crate::audit::AuditEvent;
use crate::codec;
use crate::crls;
use crate::error::Error;
use crate::model::Certificate;
use crate::model::StatusChange;
use crate::rows;
use crate::sql;
use crate::sql::Conn;

impl Storage {
    pub async fn certificate(&self, id: CertificateId) -> Result<Option<Certificate>> {
        let mut conn = self.db.acquire().await?;
        rows::load_certificate(&mut conn, id).await
    }

    pub async fn certificate_by_serial(&self, serial: &Serial) -> Result<Option<Certificate>> {
        let mut conn = self.db.acquire().await?;
        rows::load_certificate_by_serial(&mut conn, serial).await
    }

    /// Marks a certificate revoked; `Unchanged` if it was, the first revocation standing.
    /// `audit` is recorded in the same transaction when this call revokes it.
    pub async fn revoke_certificate(
        &self,
        id: CertificateId,
        reason: RevocationReason,
        now: OffsetDateTime,
        audit: &AuditEvent,
    ) -> Result<StatusChange<Certificate>> {
        let mut tx = self.db.begin_write().await?;
        let revoked = mark_revoked(&mut tx, id, reason, now).await?;
        let cert = rows::load_certificate(&mut tx, id)
            .await?
            .ok_or(Error::NotFound)?;
        if revoked {
            audit::append_in(&mut tx, audit, now).await?;
        }
        tx.commit().await?;
        Ok(if revoked {
            StatusChange::Changed(cert)
        } else {
            StatusChange::Unchanged(cert)
        })
    }
}

/// Marks certificate `id` revoked in the caller's transaction and counts the revocation in its
/// CRL shard; whether it was revoked by this call. Conditional on `revoked_at IS NULL`, so the
/// first revocation's time and reason stand. `bulk_fill.rs` revokes through it too, so the
/// shards' counters of a filled database are what revocations leave.
pub(crate) async fn mark_revoked(
    conn: &mut Conn,
    id: CertificateId,
    reason: RevocationReason,
    now: OffsetDateTime,
) -> Result<bool> {
    let revoked = sql::query(
        "UPDATE certificates SET revoked_at = $2, revocation_reason = $3 WHERE id = $1 AND revoked_at IS NULL",
    )
    .bind(id.0)
    .bind(codec::unix(now))
    .bind(reason.code())
    .execute(&mut *conn)
    .await?
    .rows_affected()
        > 0;
    if revoked {
        // In the same transaction: a committed revocation always makes its CRL shard stale.
        crls::count_revocation(conn, id.0).await?;
    }
    Ok(revoked)
}
