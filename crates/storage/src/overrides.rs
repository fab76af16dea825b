//! Rate-limit overrides kept in the database (migration 0023): one row per (limit, bucket), as
//! `certeasy admin overrides add` wrote it. Storage keeps the rows and their change marker;
//! `ra::overrides` validates them (with the parser of the overrides file) and decides which are
//! in force, and the limiter applies them.
//!
//! Rows are inserted and deleted, never updated, and their ids are never reused, so
//! [`OverridesVersion`] (how many rows, the highest id) changes with every change: each instance
//! asks for it every few seconds and reads the rows only when it moved.

use std::time::Duration;

use time::OffsetDateTime;

use crate::Result;
use crate::Storage;
use crate::audit;
use crate::audit::AuditEvent;
use crate::codec;
use crate::error::Error;
use crate::sql;
use crate::sql::Row;

/// An override as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredOverride {
    pub id: i64,
    /// The limit's name (`order-creation`, ...), as `ratelimits::LimitName` writes it.
    pub limit: String,
    /// The bucket id's canonical text (`ratelimits::overrides::OverrideId`'s `Display`).
    pub bucket: String,
    pub burst: Option<u64>,
    pub count: Option<u64>,
    pub period: Option<Duration>,
    /// Why (never empty: `ra` refuses an override without one).
    pub comment: String,
    /// When it stops applying; never when `None`.
    pub expires_at: Option<OffsetDateTime>,
    pub created_at: OffsetDateTime,
    /// Who added it, in words (the operator's name and the admin token's identity).
    pub created_by: String,
}

impl StoredOverride {
    /// Whether it has stopped applying at `now`.
    pub fn expired_at(&self, now: OffsetDateTime) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }
}

/// An override to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOverride {
    pub limit: String,
    pub bucket: String,
    pub burst: Option<u64>,
    pub count: Option<u64>,
    pub period: Option<Duration>,
    pub comment: String,
    pub expires_at: Option<OffsetDateTime>,
    pub created_by: String,
}

/// What changes with every insert and delete of `rate_limit_overrides`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OverridesVersion {
    pub rows: i64,
    pub last_id: i64,
}

/// The columns [`stored`] reads, as a literal so that each statement's text stays `'static`.
macro_rules! columns {
    () => {
        "id, limit_name, bucket, burst, count, period_ns, comment, expires_at, created_at, created_by"
    };
}

fn number(row: &Row, column: &str) -> Result<Option<u64>> {
    let value: Option<i64> = row.try_get(column)?;
    value
        .map(|v| u64::try_from(v).map_err(|_| Error::Corrupt(format!("override {column} {v} < 0"))))
        .transpose()
}

fn stored(row: &Row) -> Result<StoredOverride> {
    Ok(StoredOverride {
        id: row.try_get("id")?,
        limit: row.try_get("limit_name")?,
        bucket: row.try_get("bucket")?,
        burst: number(row, "burst")?,
        count: number(row, "count")?,
        period: number(row, "period_ns")?.map(Duration::from_nanos),
        comment: row.try_get("comment")?,
        expires_at: codec::opt_time_from_unix(row.try_get("expires_at")?)?,
        created_at: codec::time_from_unix(row.try_get("created_at")?)?,
        created_by: row.try_get("created_by")?,
    })
}

/// A number as the BIGINT column holds it; the limiter refuses anything near `i64::MAX` anyway.
fn column(value: Option<u64>) -> Option<i64> {
    value.map(|v| i64::try_from(v).unwrap_or(i64::MAX))
}

impl Storage {
    /// Stores an override, recording `audit` in the same transaction. An expired override of the
    /// same bucket is replaced (deleted in the same transaction); one still in force is returned
    /// as `Err` and nothing is written or recorded.
    pub async fn add_override(
        &self,
        new: &NewOverride,
        now: OffsetDateTime,
        audit: &AuditEvent,
    ) -> Result<std::result::Result<StoredOverride, StoredOverride>> {
        let mut tx = self.begin_write().await?;
        sql::query(
            "DELETE FROM rate_limit_overrides WHERE limit_name = $1 AND bucket = $2 \
             AND expires_at IS NOT NULL AND expires_at <= $3",
        )
        .bind(new.limit.as_str())
        .bind(new.bucket.as_str())
        .bind(codec::unix(now))
        .execute(&mut *tx)
        .await?;
        let inserted = sql::query(concat!(
            "INSERT INTO rate_limit_overrides \
             (limit_name, bucket, burst, count, period_ns, comment, expires_at, created_at, created_by) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (limit_name, bucket) DO NOTHING RETURNING ",
            columns!()
        ))
        .bind(new.limit.as_str())
        .bind(new.bucket.as_str())
        .bind(column(new.burst))
        .bind(column(new.count))
        .bind(column(
            new.period
                .map(|p| u64::try_from(p.as_nanos()).unwrap_or(u64::MAX)),
        ))
        .bind(new.comment.as_str())
        .bind(new.expires_at.map(codec::unix))
        .bind(codec::unix(now))
        .bind(new.created_by.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = inserted else {
            let existing = sql::query(concat!(
                "SELECT ",
                columns!(),
                " FROM rate_limit_overrides WHERE limit_name = $1 AND bucket = $2"
            ))
            .bind(new.limit.as_str())
            .bind(new.bucket.as_str())
            .fetch_one(&mut *tx)
            .await?;
            tx.rollback().await?;
            return Ok(Err(stored(&existing)?));
        };
        let added = stored(&row)?;
        audit::append_in(&mut tx, audit, now).await?;
        tx.commit().await?;
        Ok(Ok(added))
    }

    /// Deletes the override of (limit, bucket), recording `audit` in the same transaction;
    /// `None` when there is none (nothing recorded).
    pub async fn remove_override(
        &self,
        limit: &str,
        bucket: &str,
        now: OffsetDateTime,
        audit: &AuditEvent,
    ) -> Result<Option<StoredOverride>> {
        let mut tx = self.begin_write().await?;
        let deleted = sql::query(concat!(
            "DELETE FROM rate_limit_overrides WHERE limit_name = $1 AND bucket = $2 RETURNING ",
            columns!()
        ))
        .bind(limit)
        .bind(bucket)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = deleted else {
            tx.rollback().await?;
            return Ok(None);
        };
        let removed = stored(&row)?;
        audit::append_in(&mut tx, audit, now).await?;
        tx.commit().await?;
        Ok(Some(removed))
    }

    /// The override of (limit, bucket), expired or not.
    pub async fn override_of(&self, limit: &str, bucket: &str) -> Result<Option<StoredOverride>> {
        let row = sql::query(concat!(
            "SELECT ",
            columns!(),
            " FROM rate_limit_overrides WHERE limit_name = $1 AND bucket = $2"
        ))
        .bind(limit)
        .bind(bucket)
        .fetch_optional(&self.db)
        .await?;
        row.as_ref().map(stored).transpose()
    }

    /// Every override, expired ones too, oldest first.
    pub async fn overrides(&self) -> Result<Vec<StoredOverride>> {
        let rows = sql::query(concat!(
            "SELECT ",
            columns!(),
            " FROM rate_limit_overrides ORDER BY id"
        ))
        .fetch_all(&self.db)
        .await?;
        rows.iter().map(stored).collect()
    }

    /// The change marker of the overrides: one aggregate over the table's primary key.
    pub async fn overrides_version(&self) -> Result<OverridesVersion> {
        let row = sql::query(
            "SELECT COUNT(*) AS n, COALESCE(MAX(id), 0) AS last_id FROM rate_limit_overrides",
        )
        .fetch_one(&self.db)
        .await?;
        Ok(OverridesVersion {
            rows: row.try_get("n")?,
            last_id: row.try_get("last_id")?,
        })
    }
}
