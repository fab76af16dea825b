//! ACME Renewal Information (RFC 9773): which order replaces a certificate, and the operator's
//! early-renewal mark.

use acme_core::ids::OrderId;
use time::OffsetDateTime;

use crate::Result;
use crate::Storage;
use crate::audit;
use crate::audit::AuditEvent;
use crate::codec;
use crate::model::RenewEarly;
use crate::sql;

impl Storage {
    /// An order that replaces the certificate of ARI identifier `cert_id` and is not invalid: valid, or still pending, ready or
    /// processing before its expiry (an order past its expiry is invalid, whatever its row says).
    pub async fn replacing_order(
        &self,
        cert_id: &str,
        now: OffsetDateTime,
    ) -> Result<Option<OrderId>> {
        let mut conn = self.db.acquire().await?;
        let id = sql::query_scalar::<i64>(
            "SELECT id FROM orders WHERE replaces = $1 \
         AND (status = 'valid' OR (status <> 'invalid' AND expires_at > $2)) LIMIT 1",
        )
        .bind(cert_id)
        .bind(codec::unix(now))
        .fetch_optional(&mut conn)
        .await?;
        Ok(id.map(OrderId))
    }

    /// Marks the unexpired, unrevoked certificates `which` names for early renewal at `now` (a mark
    /// already set stays as it was). Returns how many were newly marked. `audit` is recorded in
    /// the same transaction when any was, with the count in its detail (`"marked"`).
    pub async fn mark_renew_early(
        &self,
        which: &RenewEarly,
        now: OffsetDateTime,
        audit: &AuditEvent,
    ) -> Result<u64> {
        let mut conn = self.begin_write().await?;
        let now_s = codec::unix(now);
        let done = match which {
            RenewEarly::Serial(serial) => {
                sql::query(
                    "UPDATE certificates SET renew_early_at = $1 WHERE serial = $2 \
                 AND renew_early_at IS NULL AND revoked_at IS NULL AND not_after > $1",
                )
                .bind(now_s)
                .bind(serial.to_hex())
                .execute(&mut *conn)
                .await?
            }
            RenewEarly::Account(account) => {
                sql::query(
                    "UPDATE certificates SET renew_early_at = $1 WHERE account_id = $2 \
                 AND renew_early_at IS NULL AND revoked_at IS NULL AND not_after > $1",
                )
                .bind(now_s)
                .bind(account.0)
                .execute(&mut *conn)
                .await?
            }
        };
        let marked = done.rows_affected();
        if marked > 0 {
            let mut event = audit.clone();
            if let Some(detail) = event.detail.as_object_mut() {
                detail.insert("marked".to_owned(), marked.into());
            }
            audit::append_in(&mut conn, &event, now).await?;
        }
        conn.commit().await?;
        Ok(marked)
    }
}
