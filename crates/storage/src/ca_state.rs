//! The issuers' shared state (migration 0020): which issuer signs new certificates, one row every
//! instance reads, so that `certeasy admin ca activate` switches a whole cluster without a
//! restart; and what each issuer has signed, for the operator's listing.

use time::OffsetDateTime;

use crate::Result;
use crate::Storage;
use crate::audit;
use crate::audit::AuditEvent;
use crate::codec;
use crate::error::Error;
use crate::sql;

/// The name of the implicit issuer (the generated CA's intermediate, or `ca.existing`): what a
/// NULL `issuer` column means, since it signed every certificate before migration 0020.
pub const DEFAULT_ISSUER: &str = "default";

/// The issuer an operator activated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveIssuer {
    pub name: String,
    pub changed_at: OffsetDateTime,
}

/// What one issuer has signed, as the certificates table records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerUsage {
    pub issuer: String,
    /// Certificates stored under it.
    pub certificates: u64,
    /// The latest notAfter among them: its CRLs are needed until then.
    pub last_not_after: Option<OffsetDateTime>,
}

impl Storage {
    /// The issuer activated last; `None` before any activation (the configuration decides).
    pub async fn active_issuer(&self) -> Result<Option<ActiveIssuer>> {
        let row = sql::query("SELECT active_issuer, changed_at FROM ca_state WHERE id = 1")
            .fetch_optional(&self.db)
            .await?;
        row.map(|row| {
            Ok(ActiveIssuer {
                name: row.try_get("active_issuer")?,
                changed_at: codec::time_from_unix(row.try_get("changed_at")?)?,
            })
        })
        .transpose()
    }

    /// Makes `name` the issuer of new certificates on every instance (each reads it again within
    /// its refresh interval). Whether it may be is `ra::issuers`' decision.
    pub async fn set_active_issuer(
        &self,
        name: &str,
        now: OffsetDateTime,
        audit: &AuditEvent,
    ) -> Result<()> {
        let mut tx = self.begin_write().await?;
        sql::query(
            "INSERT INTO ca_state (id, active_issuer, changed_at) VALUES (1, $1, $2) \
             ON CONFLICT (id) DO UPDATE SET active_issuer = excluded.active_issuer, \
             changed_at = excluded.changed_at",
        )
        .bind(name)
        .bind(codec::unix(now))
        .execute(&mut *tx)
        .await?;
        audit::append_in(&mut tx, audit, now).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Per issuer, how many certificates it signed and until when the last one is valid. A scan
    /// of the certificates: for the operator's listing, not for a request path.
    pub async fn issuer_usage(&self) -> Result<Vec<IssuerUsage>> {
        let rows = sql::query(
            "SELECT COALESCE(issuer, 'default') AS issuer_name, COUNT(*) AS certificates, \
             MAX(not_after) AS last_not_after FROM certificates \
             GROUP BY COALESCE(issuer, 'default') ORDER BY 1",
        )
        .fetch_all(&self.db)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(IssuerUsage {
                    issuer: row.try_get("issuer_name")?,
                    certificates: u64::try_from(row.try_get::<i64, _>("certificates")?)
                        .map_err(|_| Error::Corrupt("a negative certificate count".to_owned()))?,
                    last_not_after: codec::opt_time_from_unix(row.try_get("last_not_after")?)?,
                })
            })
            .collect()
    }
}
