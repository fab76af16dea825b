//! Pruning: what a finished ACME exchange leaves behind is deleted once it has been over for the
//! retention, so that the database grows with the certificates kept and not with every order,
//! authorization and challenge ever requested.
//!
//! Kept for good: accounts, certificates with their revocation state, and the order row of each
//! issued certificate (`certificates.order_id` names it, and a client may still fetch it), trimmed
//! of its CSR and of its authorization links. Deleted: orders that never issued, authorizations
//! and their challenges. Jobs are not pruned here because they delete themselves when they are
//! settled (done, failed or exhausted); paused pairs are policy state and stay.
//!
//! Each batch is its own short transaction over at most `batch` rows of one table, found through
//! the indexes of `migrations/*/0003_prune.sql`: a pass never holds SQLite's write lock or
//! PostgreSQL row locks for long; each batch reports the longest it held the writer
//! (`PruneReport::longest_hold`), which the background pruner steers its batch size by. On PostgreSQL the batch locks its rows with `SKIP LOCKED`, so
//! several instances pruning at once take disjoint rows, and a row a request holds is simply left
//! for the next pass. Rows a job still names (a finalization, a validation) are never taken.

use std::time::Instant;

use time::Duration;
use time::OffsetDateTime;

use crate::Backend;
use crate::Result;
use crate::Storage;
use crate::sql;
use crate::sql::Conn;
use crate::sql::Params;
use crate::sql::QueryScalar;
use crate::sql::Tx;
use crate::state;

/// Default of `database.prune-after`: how long a finished order or an authorization is kept after
/// it expired. Counted from the expiry, which already bounds every client's interest (a client
/// may poll an order until it expires, and an expired one only answers `invalid`), so the
/// retention is for the operator: a week to look into a failed order or a complaint.
pub const DEFAULT_PRUNE_AFTER: Duration = Duration::days(7);

/// Default of `database.prune-batch`: rows per table per transaction. Small enough that one
/// batch holds the SQLite write lock for milliseconds; large enough that a backlog of a million
/// rows goes in a few thousand batches.
pub const DEFAULT_PRUNE_BATCH: u32 = 500;

/// Largest `database.prune-batch`: every id of a batch is one bound parameter, and SQLite and
/// PostgreSQL both cap those well above this.
pub const MAX_PRUNE_BATCH: u32 = 10_000;

/// Rows one batch or one pass deleted (or trimmed), by table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Orders deleted: without a certificate, expired longer than the retention ago.
    pub orders: u64,
    /// Orders of issued certificates trimmed: CSR and authorization links dropped, row kept.
    pub orders_trimmed: u64,
    /// `order_authorizations` rows deleted with either of the above.
    pub order_links: u64,
    /// Authorizations deleted: expired longer than the retention ago and named by no order left.
    pub authorizations: u64,
    /// Challenges deleted with their authorizations.
    pub challenges: u64,
    /// `certificate_evidence` rows deleted: kept until before now (`evidence.rs`); they follow
    /// `database.evidence-retention`, not this pass's retention.
    pub evidence: u64,
    /// Whether a table filled its batch, so that another batch may find more.
    pub more: bool,
    /// The longest any one of the batch's transactions held the database's writer (on SQLite
    /// the only one; on PostgreSQL the rows it locked), from its first statement to its commit.
    /// What a request waiting behind pruning waits at most.
    pub longest_hold: std::time::Duration,
}

impl PruneReport {
    /// True when nothing was deleted or trimmed.
    pub fn is_empty(&self) -> bool {
        self.orders == 0
            && self.orders_trimmed == 0
            && self.order_links == 0
            && self.authorizations == 0
            && self.challenges == 0
            && self.evidence == 0
    }

    /// Adds another batch's counts; `more` is the other's.
    pub fn add(&mut self, other: &Self) {
        self.orders += other.orders;
        self.orders_trimmed += other.orders_trimmed;
        self.order_links += other.order_links;
        self.authorizations += other.authorizations;
        self.challenges += other.challenges;
        self.evidence += other.evidence;
        self.more = other.more;
        self.longest_hold = self.longest_hold.max(other.longest_hold);
    }
}

impl Storage {
    /// One batch of each kind, each in its own transaction: at most `batch` orders deleted, `batch`
    /// issued orders trimmed and `batch` authorizations (with their challenges) deleted, of those
    /// that expired before `now - retention`. `more` tells whether to call again.
    pub async fn prune_batch(
        &self,
        now: OffsetDateTime,
        retention: Duration,
        batch: u32,
    ) -> Result<PruneReport> {
        let cutoff = now
            .unix_timestamp()
            .saturating_sub(retention.whole_seconds().max(0));
        let limit = batch.clamp(1, MAX_PRUNE_BATCH);
        let mut report = PruneReport::default();
        // Orders first: their links go with them, which frees their authorizations below.
        let (taken, links, hold) = self.delete_orders(cutoff, limit).await?;
        report.orders = taken;
        report.order_links = links;
        report.longest_hold = hold;
        let (trimmed, links, hold) = self.trim_issued_orders(cutoff, limit).await?;
        report.orders_trimmed = trimmed;
        report.order_links += links;
        report.longest_hold = report.longest_hold.max(hold);
        let (taken_authz, challenges, hold) = self.delete_authorizations(cutoff, limit).await?;
        report.authorizations = taken_authz;
        report.challenges = challenges;
        report.longest_hold = report.longest_hold.max(hold);
        let (evidence, hold) = self.prune_evidence(now, limit).await?;
        report.evidence = evidence;
        report.longest_hold = report.longest_hold.max(hold);
        let full = u64::from(limit);
        report.more =
            taken == full || trimmed == full || taken_authz == full || report.evidence == full;
        Ok(report)
    }

    /// Batches until none is full: everything prunable at `now` is gone when it returns. Yields
    /// between batches; the background pruner paces itself instead (see `workers::pruner`).
    pub async fn prune(
        &self,
        now: OffsetDateTime,
        retention: Duration,
        batch: u32,
    ) -> Result<PruneReport> {
        let mut total = PruneReport::default();
        loop {
            let report = self.prune_batch(now, retention, batch).await?;
            total.add(&report);
            if !report.more {
                return Ok(total);
            }
            tokio::task::yield_now().await;
        }
    }

    /// Orders without a certificate that expired before `cutoff`, with their links. An order in
    /// processing, or one a finalization job names, stays: its job will settle it first.
    async fn delete_orders(
        &self,
        cutoff: i64,
        limit: u32,
    ) -> Result<(u64, u64, std::time::Duration)> {
        let sql = format!(
            "SELECT id FROM orders WHERE certificate_id IS NULL AND expires_at < $1 \
             AND status <> 'processing' \
             AND NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.kind = $2 AND jobs.target_id = orders.id) \
             AND NOT EXISTS (SELECT 1 FROM certificates c WHERE c.order_id = orders.id) \
             LIMIT $3{}",
            self.skip_locked()
        );
        let select = sql::one_off_scalar(sql)
            .bind(cutoff)
            .bind(state::JOB_FINALIZE)
            .bind(i64::from(limit));
        let (links, orders, hold) = self
            .batch(
                select,
                "DELETE FROM order_authorizations WHERE order_id IN",
                "DELETE FROM orders WHERE id IN",
            )
            .await?;
        Ok((orders, links, hold))
    }

    /// Issued orders that expired before `cutoff` and still hold their CSR: the CSR and the links
    /// go, the row stays for its certificate. Trimmed orders leave the `orders_untrimmed` index,
    /// so later passes never read them again.
    async fn trim_issued_orders(
        &self,
        cutoff: i64,
        limit: u32,
    ) -> Result<(u64, u64, std::time::Duration)> {
        let sql = format!(
            "SELECT id FROM orders WHERE csr IS NOT NULL AND certificate_id IS NOT NULL \
             AND expires_at < $1 LIMIT $2{}",
            self.skip_locked()
        );
        let select = sql::one_off_scalar(sql).bind(cutoff).bind(i64::from(limit));
        let (links, trimmed, hold) = self
            .batch(
                select,
                "DELETE FROM order_authorizations WHERE order_id IN",
                "UPDATE orders SET csr = NULL WHERE id IN",
            )
            .await?;
        Ok((trimmed, links, hold))
    }

    /// Authorizations that expired before `cutoff` and that no order names any more, with their
    /// challenges. One with a validation job on a challenge stays until the job is settled. The
    /// job check goes challenge by challenge through `jobs (kind, target_id)`: a join from `jobs`
    /// would read every pending validation for each authorization.
    async fn delete_authorizations(
        &self,
        cutoff: i64,
        limit: u32,
    ) -> Result<(u64, u64, std::time::Duration)> {
        let sql = format!(
            "SELECT id FROM authorizations WHERE expires_at < $1 \
             AND NOT EXISTS (SELECT 1 FROM order_authorizations oa WHERE oa.authz_id = authorizations.id) \
             AND NOT EXISTS (SELECT 1 FROM challenges c WHERE c.authz_id = authorizations.id \
                 AND EXISTS (SELECT 1 FROM jobs j WHERE j.kind = $2 AND j.target_id = c.id)) \
             LIMIT $3{}",
            self.skip_locked()
        );
        let select = sql::one_off_scalar(sql)
            .bind(cutoff)
            .bind(state::JOB_VALIDATE)
            .bind(i64::from(limit));
        let (challenges, authorizations, hold) = self
            .batch(
                select,
                "DELETE FROM challenges WHERE authz_id IN",
                "DELETE FROM authorizations WHERE id IN",
            )
            .await?;
        Ok((authorizations, challenges, hold))
    }

    /// One batch in a write transaction of its own: the ids `select` returns, then
    /// `children (ids)` and `parent (ids)` (each a statement head ending in `IN`), committed
    /// together; the rows each changed, and how long the transaction held the writer.
    async fn batch(
        &self,
        select: QueryScalar<i64>,
        children: &str,
        parent: &str,
    ) -> Result<(u64, u64, std::time::Duration)> {
        let mut tx: Tx = self.begin_write().await?;
        // The hold starts once the writer is ours: waiting for it holds nobody up.
        let held = Instant::now();
        let ids = select.fetch_all(&mut *tx).await?;
        if ids.is_empty() {
            tx.rollback().await?;
            return Ok((0, 0, held.elapsed()));
        }
        let children = self.by_ids(&mut tx, children, &ids).await?;
        let parent = self.by_ids(&mut tx, parent, &ids).await?;
        tx.commit().await?;
        Ok((children, parent, held.elapsed()))
    }

    /// PostgreSQL: lock the rows taken and pass over those another transaction holds (a request,
    /// or another instance's pruner). SQLite's write transaction already excludes both.
    fn skip_locked(&self) -> &'static str {
        match self.backend {
            Backend::Postgres => " FOR UPDATE SKIP LOCKED",
            Backend::Sqlite => "",
        }
    }

    /// Runs `head (id, id, ...)` with the ids bound, returning the rows affected. The ids are
    /// those the batch selected (and, on PostgreSQL, locked), not a second subquery that could
    /// see a different set under READ COMMITTED.
    async fn by_ids(&self, conn: &mut Conn, head: &str, ids: &[i64]) -> Result<u64> {
        let placeholders = Params::new(self.backend).many(ids.len());
        let mut query = sql::one_off(format!("{head} ({placeholders})"));
        for id in ids {
            query = query.bind(*id);
        }
        Ok(query.execute(&mut *conn).await?.rows_affected())
    }
}
