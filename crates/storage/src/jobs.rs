//! The durable work queue: leased claims renewed by their holder, retries with a new due time,
//! completion by deletion.

use acme_core::ids::ChallengeId;
use acme_core::ids::JobId;
use acme_core::ids::OrderId;
use acme_core::problem::Problem;
use time::Duration;
use time::OffsetDateTime;

use crate::Backend;
use crate::Result;
use crate::Storage;
use crate::codec;
use crate::error::Error;
use crate::model::ChallengeAttempt;
use crate::model::Job;
use crate::model::JobBacklog;
use crate::model::JobKind;
use crate::sql;
use crate::state;

impl Storage {
    /// Claims the oldest due job whose lease is free, leasing it until `now + lease` and counting
    /// the claim. Safe with several workers and several instances. A job claimed more than
    /// `max_attempts` times comes back `exhausted`: settle it, never run it.
    pub async fn claim_job(
        &self,
        now: OffsetDateTime,
        lease: Duration,
        max_attempts: u32,
    ) -> Result<Option<Job>> {
        let now_s = codec::unix(now);
        let lease_until = codec::lease_end(now, lease);
        // One statement: on SQLite an UPDATE takes the write lock before it reads, so two claimers
        // are serialised; on PostgreSQL SKIP LOCKED lets each claimer pass over rows another holds.
        let query = match self.backend {
            Backend::Postgres => sql::query(
                "UPDATE jobs SET lease_until = $2, attempts = attempts + 1 \
             WHERE id = (SELECT id FROM jobs WHERE run_at <= $1 AND (lease_until IS NULL OR lease_until <= $1) \
                 ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) \
             AND run_at <= $1 AND (lease_until IS NULL OR lease_until <= $1) \
             RETURNING id, kind, target_id, attempts, retries, lease_until",
            ),
            Backend::Sqlite => sql::query(
                "UPDATE jobs SET lease_until = $2, attempts = attempts + 1 \
             WHERE id = (SELECT id FROM jobs WHERE run_at <= $1 AND (lease_until IS NULL OR lease_until <= $1) \
                 ORDER BY run_at, id LIMIT 1) \
             RETURNING id, kind, target_id, attempts, retries, lease_until",
            ),
        };
        let Some(row) = query
            .bind(now_s)
            .bind(lease_until)
            .fetch_optional(&self.db)
            .await?
        else {
            return Ok(None);
        };
        let kind: String = row.try_get("kind")?;
        let target: i64 = row.try_get("target_id")?;
        let kind = match kind.as_str() {
            state::JOB_VALIDATE => JobKind::Validate(ChallengeId(target)),
            state::JOB_FINALIZE => JobKind::Finalize(OrderId(target)),
            other => return Err(Error::Corrupt(format!("job kind {other:?}"))),
        };
        // Every claim counts, so a claim past the allowance is recognised here, in one place: such a
        // job is handed out only to be settled, never to run a further attempt.
        // Claims that ended in a scheduled validation retry do not count: they ended with a verdict.
        let attempts = codec::count(row.try_get("attempts")?)?;
        let retries = codec::count(row.try_get("retries")?)?;
        Ok(Some(Job {
            id: JobId(row.try_get("id")?),
            kind,
            attempts,
            retries,
            lease_until: codec::time_from_unix(row.try_get("lease_until")?)?,
            exhausted: attempts.saturating_sub(retries) > max_attempts,
        }))
    }

    /// Extends the lease of a job its caller still holds: same claim (`attempts` unchanged since) and
    /// not released. A lease never shrinks. `None` when another worker claimed the job since or it
    /// is gone: the caller no longer holds it.
    pub async fn renew_job_lease(
        &self,
        job: &Job,
        now: OffsetDateTime,
        lease: Duration,
    ) -> Result<Option<OffsetDateTime>> {
        let until = codec::lease_end(now, lease);
        let renewed: Option<i64> = sql::query_scalar(
            "UPDATE jobs SET lease_until = CASE WHEN lease_until > $3 THEN lease_until ELSE $3 END \
         WHERE id = $1 AND attempts = $2 AND lease_until IS NOT NULL \
         RETURNING lease_until",
        )
        .bind(job.id.0)
        .bind(i64::from(job.attempts))
        .bind(until)
        .fetch_optional(&self.db)
        .await?;
        codec::opt_time_from_unix(renewed)
    }

    /// Removes a finished job, if this claim still holds it. `Err(NotFound)` when another worker
    /// has claimed it since (it will finish it; recording is idempotent) or it is gone.
    pub async fn complete_job(&self, job: &Job) -> Result<()> {
        let mut conn = self.db.acquire().await?;
        if state::settle_job(&mut conn, job).await? {
            Ok(())
        } else {
            Err(Error::NotFound)
        }
    }

    /// Releases the lease and schedules another attempt at `run_at`, recording the error, if this
    /// claim still holds the job: a stale holder must not release a lease another worker holds,
    /// which would let a third worker run the job at the same time. `Err(NotFound)` otherwise.
    pub async fn retry_job(&self, job: &Job, run_at: OffsetDateTime, error: &str) -> Result<()> {
        let updated = sql::query(
            "UPDATE jobs SET run_at = $3, lease_until = NULL, last_error = $4 \
         WHERE id = $1 AND attempts = $2",
        )
        .bind(job.id.0)
        .bind(i64::from(job.attempts))
        .bind(codec::unix(run_at))
        .bind(error)
        .execute(&self.db)
        .await?
        .rows_affected();
        if updated == 0 {
            Err(Error::NotFound)
        } else {
            Ok(())
        }
    }

    /// A validation attempt of `id` failed transiently at `at`: records it as attempt
    /// `job.retries + 1` (`challenge_attempts`) and schedules the next attempt at `run_at`,
    /// releasing the lease, in one transaction. The challenge stays `processing`. Only if this
    /// claim still holds the job; `Err(NotFound)` otherwise (its new holder runs it).
    pub async fn retry_validation(
        &self,
        job: &Job,
        id: ChallengeId,
        failed: &Problem,
        at: OffsetDateTime,
        run_at: OffsetDateTime,
    ) -> Result<()> {
        let mut tx = self.begin_write().await?;
        let updated = sql::query(
        "UPDATE jobs SET run_at = $3, lease_until = NULL, last_error = $4, retries = retries + 1 \
         WHERE id = $1 AND attempts = $2 AND retries = $5",
    )
    .bind(job.id.0)
    .bind(i64::from(job.attempts))
    // Rounded up: stored in whole seconds, a backoff is never shorter than asked.
    .bind(codec::unix_ceil(run_at))
    .bind(failed.detail.as_str())
    .bind(i64::from(job.retries))
    .execute(&mut *tx)
    .await?
    .rows_affected();
        if updated == 0 {
            tx.rollback().await?;
            return Err(Error::NotFound);
        }
        // RFC 8555 §8.2 (with erratum 5732): a failed validation query adds its error to the
        // challenge, which stays processing while the retry is due; the verdict replaces it.
        sql::query(
        "UPDATE challenges SET error_type = $2, error_detail = $3 WHERE id = $1 AND status = 'processing'",
    )
    .bind(id.0)
    .bind(failed.kind.as_str())
    .bind(failed.detail.as_str())
    .execute(&mut *tx)
    .await?;
        sql::query(
        "INSERT INTO challenge_attempts (challenge_id, attempt, attempted_at, error_type, error_detail) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (challenge_id, attempt) DO NOTHING",
    )
    .bind(id.0)
    .bind(i64::from(job.retries) + 1)
    .bind(codec::unix(at))
    .bind(failed.kind.as_str())
    .bind(failed.detail.as_str())
    .execute(&mut *tx)
    .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The failed attempts of a challenge that were retried, in order (none for one decided at
    /// its first attempt).
    pub async fn challenge_attempts(&self, id: ChallengeId) -> Result<Vec<ChallengeAttempt>> {
        let rows = sql::query(
            "SELECT attempt, attempted_at, error_type, error_detail FROM challenge_attempts \
         WHERE challenge_id = $1 ORDER BY attempt",
        )
        .bind(id.0)
        .fetch_all(&self.db)
        .await?;
        rows.iter()
            .map(|row| {
                let problem = codec::decode_problem(
                    Some(row.try_get::<String, _>("error_type")?),
                    Some(row.try_get::<String, _>("error_detail")?),
                )?
                .ok_or_else(|| Error::Corrupt("challenge attempt without a problem".into()))?;
                Ok(ChallengeAttempt {
                    attempt: codec::count(row.try_get("attempt")?)?,
                    at: codec::time_from_unix(row.try_get("attempted_at")?)?,
                    problem,
                })
            })
            .collect()
    }

    /// When the next attempt of a challenge whose validation is being retried is due; `None` when
    /// no retry is scheduled (no job, or its first attempt has not ended).
    pub async fn validation_retry_at(&self, id: ChallengeId) -> Result<Option<OffsetDateTime>> {
        let due: Option<i64> = sql::query_scalar(
            "SELECT run_at FROM jobs WHERE kind = $1 AND target_id = $2 AND retries > 0",
        )
        .bind(state::JOB_VALIDATE)
        .bind(id.0)
        .fetch_optional(&self.db)
        .await?;
        codec::opt_time_from_unix(due)
    }

    /// The backlog at `now` per job kind (`validate`, `finalize`): jobs due and not leased. One
    /// small query, run by each scrape of the admin listener's `/metrics`; on a shared database
    /// every instance reports the same queue.
    pub async fn job_backlog(
        &self,
        now: OffsetDateTime,
    ) -> Result<Vec<(&'static str, JobBacklog)>> {
        let rows = sql::query(
            "SELECT kind, COUNT(*) AS waiting, MIN(run_at) AS oldest FROM jobs \
             WHERE run_at <= $1 AND (lease_until IS NULL OR lease_until <= $1) GROUP BY kind",
        )
        .bind(codec::unix(now))
        .fetch_all(&self.db)
        .await?;
        let mut backlog =
            [state::JOB_VALIDATE, state::JOB_FINALIZE].map(|kind| (kind, JobBacklog::default()));
        for row in &rows {
            let kind: String = row.try_get("kind")?;
            if let Some((_, slot)) = backlog.iter_mut().find(|(k, _)| *k == kind) {
                *slot = JobBacklog {
                    waiting: row.try_get::<i64, _>("waiting")?.unsigned_abs(),
                    oldest_due: codec::opt_time_from_unix(row.try_get("oldest")?)?,
                };
            }
        }
        Ok(backlog.into())
    }

    /// When the next job becomes due (run_at or lease expiry), so a worker can sleep until then.
    pub async fn next_job_due(&self) -> Result<Option<OffsetDateTime>> {
        let due: Option<i64> = sql::query_scalar(
        "SELECT MIN(CASE WHEN lease_until IS NOT NULL AND lease_until > run_at THEN lease_until ELSE run_at END) \
         FROM jobs",
    )
    .fetch_one(&self.db)
    .await?;
        codec::opt_time_from_unix(due)
    }
}
