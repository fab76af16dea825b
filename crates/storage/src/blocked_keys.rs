//! Keys the operator blocked (migration 0015): each a row named by the SHA-256 of the key's
//! SubjectPublicKeyInfo. Storage only keeps the list; `ra` decides what a blocked key is refused.

use time::OffsetDateTime;

use crate::Result;
use crate::Storage;
use crate::audit;
use crate::audit::AuditEvent;
use crate::codec;
use crate::error::Error;
use crate::sql;
use crate::sql::Row;

/// A blocked key as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockedKey {
    /// SHA-256 of the key's SubjectPublicKeyInfo DER.
    pub spki_sha256: [u8; 32],
    /// Why the operator blocked it (free text, may be empty).
    pub reason: String,
    pub created_at: OffsetDateTime,
}

fn blocked_key(row: &Row) -> Result<BlockedKey> {
    let text: String = row.try_get("spki_sha256")?;
    let bytes =
        hex::decode(&text).map_err(|e| Error::Corrupt(format!("blocked key {text:?}: {e}")))?;
    let spki_sha256 = <[u8; 32]>::try_from(bytes.as_slice())
        .map_err(|_| Error::Corrupt(format!("blocked key {text:?} is not 32 bytes")))?;
    Ok(BlockedKey {
        spki_sha256,
        reason: row.try_get("reason")?,
        created_at: codec::time_from_unix(row.try_get("created_at")?)?,
    })
}

impl Storage {
    /// Blocks a key, recording `audit` in the same transaction. `None` when the key is already
    /// blocked: the first reason stays, and nothing is recorded.
    pub async fn block_key(
        &self,
        spki_sha256: &[u8; 32],
        reason: &str,
        now: OffsetDateTime,
        audit: &AuditEvent,
    ) -> Result<Option<BlockedKey>> {
        let mut tx = self.begin_write().await?;
        let inserted = sql::query(
            "INSERT INTO blocked_keys (spki_sha256, reason, created_at) VALUES ($1, $2, $3)",
        )
        .bind(hex::encode(spki_sha256))
        .bind(reason)
        .bind(codec::unix(now))
        .execute(&mut *tx)
        .await;
        match inserted {
            Ok(_) => {}
            Err(e) if e.is_unique_violation() => return Ok(None),
            Err(e) => return Err(e),
        }
        audit::append_in(&mut tx, audit, now).await?;
        tx.commit().await?;
        Ok(Some(BlockedKey {
            spki_sha256: *spki_sha256,
            reason: reason.to_owned(),
            created_at: codec::time_from_unix(codec::unix(now))?,
        }))
    }

    /// Lifts the block on a key, recording `audit` in the same transaction; `false` when it
    /// was not blocked (nothing recorded).
    pub async fn unblock_key(
        &self,
        spki_sha256: &[u8; 32],
        now: OffsetDateTime,
        audit: &AuditEvent,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let deleted = sql::query("DELETE FROM blocked_keys WHERE spki_sha256 = $1")
            .bind(hex::encode(spki_sha256))
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if deleted > 0 {
            audit::append_in(&mut tx, audit, now).await?;
        }
        tx.commit().await?;
        Ok(deleted > 0)
    }

    /// Whether the key is blocked: one lookup by primary key.
    pub async fn is_key_blocked(&self, spki_sha256: &[u8; 32]) -> Result<bool> {
        let row = sql::query("SELECT 1 AS blocked FROM blocked_keys WHERE spki_sha256 = $1")
            .bind(hex::encode(spki_sha256))
            .fetch_optional(&self.db)
            .await?;
        Ok(row.is_some())
    }

    /// Every blocked key, oldest first.
    pub async fn blocked_keys(&self) -> Result<Vec<BlockedKey>> {
        let rows = sql::query(
            "SELECT spki_sha256, reason, created_at FROM blocked_keys \
             ORDER BY created_at, spki_sha256",
        )
        .fetch_all(&self.db)
        .await?;
        rows.iter().map(blocked_key).collect()
    }
}
