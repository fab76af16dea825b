//! Transitions shared by several operations (RFC 8555 §7.1.6), each run inside the caller's
//! transaction so that an authorization and the orders that hold it always move together.

use crate::sql;
use crate::sql::Conn;
use acme_core::ids::AuthzId;
use acme_core::ids::JobId;
use acme_core::ids::OrderId;
use acme_core::problem::Problem;
use time::Duration;
use time::OffsetDateTime;

use crate::Backend;
use crate::Result;
use crate::codec;
use crate::model::Job;
use crate::model::JobKind;

/// A pending or ready order past its expiry becomes invalid.
pub(crate) async fn expire_order(conn: &mut Conn, id: OrderId, now: i64) -> Result<()> {
    sql::query(
        "UPDATE orders SET status = 'invalid', updated_at = $2 \
         WHERE id = $1 AND status IN ('pending', 'ready') AND expires_at <= $2",
    )
    .bind(id.0)
    .bind(now)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// A pending or valid authorization past its expiry becomes expired, and so do (as invalid) the
/// unfinished orders that hold it. Returns whether it expired now.
pub(crate) async fn expire_authz(conn: &mut Conn, id: AuthzId, now: i64) -> Result<bool> {
    let expired = sql::query(
        "UPDATE authorizations SET status = 'expired' \
         WHERE id = $1 AND status IN ('pending', 'valid') AND expires_at <= $2",
    )
    .bind(id.0)
    .bind(now)
    .execute(&mut *conn)
    .await?
    .rows_affected()
        > 0;
    if expired {
        invalidate_orders_holding(conn, id, now, None).await?;
    }
    Ok(expired)
}

/// Pending and ready orders that hold the authorization become invalid, with the problem if any.
pub(crate) async fn invalidate_orders_holding(
    conn: &mut Conn,
    authz: AuthzId,
    now: i64,
    problem: Option<&Problem>,
) -> Result<()> {
    let (error_type, error_detail) = codec::problem_columns(problem);
    sql::query(
        "UPDATE orders SET status = 'invalid', error_type = $3, error_detail = $4, updated_at = $2 \
         WHERE status IN ('pending', 'ready') \
         AND id IN (SELECT order_id FROM order_authorizations WHERE authz_id = $1)",
    )
    .bind(authz.0)
    .bind(now)
    .bind(error_type)
    .bind(error_detail)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Unfinished orders holding the authorization expire no later than `expires` (unix seconds):
/// an order never outlives its authorizations.
pub(crate) async fn cap_orders_expiry(conn: &mut Conn, authz: AuthzId, expires: i64) -> Result<()> {
    sql::query(
        "UPDATE orders SET expires_at = $2 \
         WHERE status IN ('pending', 'ready') AND expires_at > $2 \
         AND id IN (SELECT order_id FROM order_authorizations WHERE authz_id = $1)",
    )
    .bind(authz.0)
    .bind(expires)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Pending, unexpired orders holding the authorization become ready once all their
/// authorizations are valid.
pub(crate) async fn promote_orders_holding(
    conn: &mut Conn,
    authz: AuthzId,
    now: i64,
) -> Result<()> {
    sql::query(
        "UPDATE orders SET status = 'ready', updated_at = $2 \
         WHERE status = 'pending' AND expires_at > $2 \
         AND id IN (SELECT order_id FROM order_authorizations WHERE authz_id = $1) \
         AND NOT EXISTS (SELECT 1 FROM order_authorizations oa \
             JOIN authorizations a ON a.id = oa.authz_id \
             WHERE oa.order_id = orders.id AND a.status <> 'valid')",
    )
    .bind(authz.0)
    .bind(now)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// On PostgreSQL, row-locks the orders that hold the authorization, in id order.
///
/// Without it two validations of one order's authorizations, committing concurrently under READ
/// COMMITTED, would each still see the other authorization pending and neither would make the
/// order ready. SQLite write transactions are already serial.
pub(crate) async fn lock_orders_holding(
    conn: &mut Conn,
    backend: Backend,
    authz: AuthzId,
) -> Result<()> {
    if backend == Backend::Postgres {
        sql::query(
            "SELECT id FROM orders WHERE id IN \
             (SELECT order_id FROM order_authorizations WHERE authz_id = $1) ORDER BY id FOR UPDATE",
        )
        .bind(authz.0)
        .fetch_all(&mut *conn)
        .await?;
    }
    Ok(())
}

/// Durable work kinds as stored in `jobs.kind`.
pub(crate) const JOB_VALIDATE: &str = "validate";
pub(crate) const JOB_FINALIZE: &str = "finalize";

/// Enqueues a job due now; a second request for the same work is absorbed by UNIQUE(kind, target).
///
/// With `claim` (a lease), the job is inserted already claimed (its first attempt counted, leased
/// for that long) and returned: the request that enqueues it runs it at once, and the queue's
/// workers pass over it unless the lease runs out (the process died), so nothing accepted is
/// lost and nothing runs twice while its holder lives. `None` when the job existed already.
pub(crate) async fn enqueue_job(
    conn: &mut Conn,
    kind: JobKind,
    now: OffsetDateTime,
    claim: Option<Duration>,
) -> Result<Option<Job>> {
    let now_s = codec::unix(now);
    let (name, target) = match kind {
        JobKind::Validate(id) => (JOB_VALIDATE, id.0),
        JobKind::Finalize(id) => (JOB_FINALIZE, id.0),
    };
    let Some(until) = claim.map(|lease| codec::lease_end(now, lease)) else {
        sql::query(
            "INSERT INTO jobs (kind, target_id, run_at, attempts, created_at) VALUES ($1, $2, $3, 0, $3) \
             ON CONFLICT (kind, target_id) DO NOTHING",
        )
        .bind(name)
        .bind(target)
        .bind(now_s)
        .execute(&mut *conn)
        .await?;
        return Ok(None);
    };
    let id: Option<i64> = sql::query_scalar(
        "INSERT INTO jobs (kind, target_id, run_at, attempts, lease_until, created_at) \
         VALUES ($1, $2, $3, 1, $4, $3) ON CONFLICT (kind, target_id) DO NOTHING RETURNING id",
    )
    .bind(name)
    .bind(target)
    .bind(now_s)
    .bind(until)
    .fetch_optional(&mut *conn)
    .await?;
    id.map(|id| {
        Ok(Job {
            id: JobId(id),
            kind,
            attempts: 1,
            retries: 0,
            lease_until: codec::time_from_unix(until)?,
            exhausted: false,
        })
    })
    .transpose()
}

/// Deletes the job in the transaction that records its outcome, if this claim still holds it:
/// the outcome and the end of the job commit together, one commit instead of two. A claim that
/// was overtaken (its lease ran out and another worker holds the job) leaves the job to its new
/// holder, which finds the object settled and ends it. Returns whether the job was deleted.
pub(crate) async fn settle_job(conn: &mut Conn, job: &Job) -> Result<bool> {
    Ok(
        sql::query("DELETE FROM jobs WHERE id = $1 AND attempts = $2")
            .bind(job.id.0)
            .bind(i64::from(job.attempts))
            .execute(&mut *conn)
            .await?
            .rows_affected()
            > 0,
    )
}
