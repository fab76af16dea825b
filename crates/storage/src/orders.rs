//! Orders: creation under the database-backed guards, expiry, finalization and its outcome.

use acme_core::ids::AccountId;
use acme_core::ids::CertificateId;
use acme_core::ids::OrderId;
use acme_core::problem::Problem;
use acme_core::status::AccountStatus;
use acme_core::status::OrderStatus;
use sqlx::AnyConnection;
use sqlx::Row;
use time::OffsetDateTime;

use crate::Backend;
use crate::Result;
use crate::Storage;
use crate::codec;
use crate::error::Error;
use crate::model::Completion;
use crate::model::NewCertificate;
use crate::model::NewOrder;
use crate::model::Order;
use crate::model::OrderGuards;
use crate::rows;
use crate::state;

pub(crate) async fn create(
    s: &Storage,
    new: NewOrder,
    guards: &OrderGuards,
    now: OffsetDateTime,
) -> Result<Order> {
    let now_s = codec::unix(now);
    let mut tx = s.begin_write().await?;
    // The account row lock serialises the guards of one account on PostgreSQL; on SQLite the
    // IMMEDIATE transaction already holds the database write lock.
    let lock = match s.backend {
        Backend::Postgres => {
            sqlx::query_scalar::<_, String>("SELECT status FROM accounts WHERE id = $1 FOR UPDATE")
        }
        Backend::Sqlite => {
            sqlx::query_scalar::<_, String>("SELECT status FROM accounts WHERE id = $1")
        }
    };
    let status = lock
        .bind(new.account_id.0)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound)?;
    if status != "valid" {
        return Err(Error::WrongState(format!("account is {status}")));
    }

    let mut reused = Vec::with_capacity(new.authorizations.len());
    for authz in &new.authorizations {
        let existing = if new.reuse_valid_authz {
            reusable_authz(
                &mut tx,
                new.account_id,
                authz.identifier.kind().as_str(),
                authz.identifier.value(),
                now_s,
            )
            .await?
        } else {
            None
        };
        reused.push(existing);
    }
    let fresh = reused.iter().filter(|r| r.is_none()).count();
    check_pending_authz(&mut tx, new.account_id, guards, fresh, now, now_s).await?;
    check_duplicates(&mut tx, &new, guards, now).await?;

    let status = if fresh == 0 && !new.authorizations.is_empty() {
        OrderStatus::Ready
    } else {
        OrderStatus::Pending
    };
    let order_id: i64 = sqlx::query_scalar(
        "INSERT INTO orders (account_id, status, identifiers, set_hash, not_before, not_after, expires_at, \
         created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) RETURNING id",
    )
    .bind(new.account_id.0)
    .bind(status.as_str())
    .bind(codec::encode_identifiers(&new.identifiers))
    .bind(&new.set_hash)
    .bind(new.not_before.map(codec::unix))
    .bind(new.not_after.map(codec::unix))
    .bind(codec::unix(new.expires_at))
    .bind(now_s)
    .fetch_one(&mut *tx)
    .await?;

    for (position, (authz, existing)) in new.authorizations.iter().zip(reused).enumerate() {
        let authz_id = match existing {
            Some(id) => id,
            None => insert_authz(&mut tx, new.account_id, authz, now_s).await?,
        };
        sqlx::query(
            "INSERT INTO order_authorizations (order_id, authz_id, position) VALUES ($1, $2, $3)",
        )
        .bind(order_id)
        .bind(authz_id)
        .bind(
            i64::try_from(position)
                .map_err(|_| Error::Corrupt("too many authorizations".into()))?,
        )
        .execute(&mut *tx)
        .await?;
    }
    let order = rows::load_order(&mut tx, OrderId(order_id))
        .await?
        .ok_or(Error::NotFound)?;
    tx.commit().await?;
    Ok(order)
}

async fn reusable_authz(
    conn: &mut AnyConnection,
    account: AccountId,
    kind: &str,
    value: &str,
    now: i64,
) -> Result<Option<i64>> {
    Ok(sqlx::query_scalar::<_, i64>(
        "SELECT id FROM authorizations WHERE account_id = $1 AND identifier_type = $2 \
         AND identifier_value = $3 AND status = 'valid' AND expires_at > $4 \
         ORDER BY expires_at DESC, id DESC LIMIT 1",
    )
    .bind(account.0)
    .bind(kind)
    .bind(value)
    .bind(now)
    .fetch_optional(&mut *conn)
    .await?)
}

async fn insert_authz(
    conn: &mut AnyConnection,
    account: AccountId,
    authz: &crate::model::NewAuthz,
    now: i64,
) -> Result<i64> {
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO authorizations (account_id, identifier_type, identifier_value, status, expires_at, created_at) \
         VALUES ($1, $2, $3, 'pending', $4, $5) RETURNING id",
    )
    .bind(account.0)
    .bind(authz.identifier.kind().as_str())
    .bind(authz.identifier.value())
    .bind(codec::unix(authz.expires_at))
    .bind(now)
    .fetch_one(&mut *conn)
    .await?;
    for (kind, token) in &authz.challenges {
        sqlx::query(
            "INSERT INTO challenges (authz_id, type, token, status) VALUES ($1, $2, $3, 'pending')",
        )
        .bind(id)
        .bind(kind.as_str())
        .bind(token)
        .execute(&mut *conn)
        .await?;
    }
    Ok(id)
}

/// An order that creates no new authorization is never refused by this guard: it adds nothing
/// to the pending count.
async fn check_pending_authz(
    conn: &mut AnyConnection,
    account: AccountId,
    guards: &OrderGuards,
    fresh: usize,
    now: OffsetDateTime,
    now_s: i64,
) -> Result<()> {
    let Some(max) = guards.max_pending_authz else {
        return Ok(());
    };
    if fresh == 0 {
        return Ok(());
    }
    let row = sqlx::query(
        "SELECT COUNT(*) AS n, MIN(expires_at) AS soonest FROM authorizations \
         WHERE account_id = $1 AND status = 'pending' AND expires_at > $2",
    )
    .bind(account.0)
    .bind(now_s)
    .fetch_one(&mut *conn)
    .await?;
    let pending = codec::count(row.try_get("n")?)?;
    let fresh = u64::try_from(fresh).unwrap_or(u64::MAX);
    if u64::from(pending).saturating_add(fresh) > u64::from(max) {
        let retry_at = match row.try_get::<Option<i64>, _>("soonest")? {
            Some(secs) => codec::time_from_unix(secs)?,
            None => now,
        };
        return Err(Error::PendingAuthzLimit {
            pending,
            max,
            retry_at,
        });
    }
    Ok(())
}

async fn check_duplicates(
    conn: &mut AnyConnection,
    new: &NewOrder,
    guards: &OrderGuards,
    now: OffsetDateTime,
) -> Result<()> {
    let Some(guard) = guards.duplicate_certificates else {
        return Ok(());
    };
    let row = sqlx::query(
        "SELECT COUNT(*) AS n, MIN(issued_at) AS oldest FROM certificates \
         WHERE account_id = $1 AND set_hash = $2 AND revoked_at IS NULL AND issued_at >= $3",
    )
    .bind(new.account_id.0)
    .bind(&new.set_hash)
    .bind(codec::unix(guard.since))
    .fetch_one(&mut *conn)
    .await?;
    let count = codec::count(row.try_get("n")?)?;
    if count >= guard.max {
        // The window is (now - since) long; the oldest certificate leaves it that long after issue.
        let retry_at = match row.try_get::<Option<i64>, _>("oldest")? {
            Some(secs) => codec::time_from_unix(secs)? + (now - guard.since),
            None => now,
        };
        return Err(Error::DuplicateCertificate { count, retry_at });
    }
    Ok(())
}

pub(crate) async fn get(s: &Storage, id: OrderId, now: OffsetDateTime) -> Result<Option<Order>> {
    let mut conn = s.pool.acquire().await?;
    let Some(order) = rows::load_order(&mut conn, id).await? else {
        return Ok(None);
    };
    let expired = matches!(order.status, OrderStatus::Pending | OrderStatus::Ready)
        && order.expires_at <= now;
    if !expired {
        return Ok(Some(order));
    }
    // A single conditional statement: safe without a transaction, and a no-op if a concurrent
    // request already moved the order on.
    state::expire_order(&mut conn, id, codec::unix(now)).await?;
    rows::load_order(&mut conn, id).await
}

pub(crate) async fn of_account(
    s: &Storage,
    account: AccountId,
    after: Option<OrderId>,
    limit: u32,
) -> Result<Vec<OrderId>> {
    let ids = sqlx::query_scalar::<_, i64>(
        "SELECT id FROM orders WHERE account_id = $1 AND id > $2 ORDER BY id LIMIT $3",
    )
    .bind(account.0)
    .bind(after.map_or(0, |o| o.0))
    .bind(i64::from(limit))
    .fetch_all(&s.pool)
    .await?;
    Ok(ids.into_iter().map(OrderId).collect())
}

pub(crate) async fn begin_finalize(
    s: &Storage,
    id: OrderId,
    csr_der: &[u8],
    now: OffsetDateTime,
) -> Result<Order> {
    let now_s = codec::unix(now);
    let mut tx = s.begin_write().await?;
    // Conditional update: of two concurrent finalizations only one can see `ready`.
    let moved = sqlx::query(
        "UPDATE orders SET status = 'processing', csr = $2, updated_at = $3 \
         WHERE id = $1 AND status = 'ready' AND expires_at > $3",
    )
    .bind(id.0)
    .bind(csr_der)
    .bind(now_s)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        > 0;
    if moved {
        state::enqueue_job(&mut tx, state::JOB_FINALIZE, id.0, now_s).await?;
    } else {
        state::expire_order(&mut tx, id, now_s).await?;
    }
    let order = rows::load_order(&mut tx, id).await?;
    tx.commit().await?;
    match order {
        Some(order) if moved => Ok(order),
        Some(order) => Err(Error::OrderNotReady(order.status)),
        None => Err(Error::NotFound),
    }
}

pub(crate) async fn csr(s: &Storage, id: OrderId) -> Result<Option<Vec<u8>>> {
    let csr = sqlx::query_scalar::<_, Option<Vec<u8>>>("SELECT csr FROM orders WHERE id = $1")
        .bind(id.0)
        .fetch_optional(&s.pool)
        .await?;
    Ok(csr.flatten())
}

pub(crate) async fn complete(
    s: &Storage,
    id: OrderId,
    cert: NewCertificate,
    now: OffsetDateTime,
) -> Result<Completion> {
    let now_s = codec::unix(now);
    let mut tx = s.begin_write().await?;
    // The account is locked before the order, in the order account deactivation takes them, so
    // the two cannot deadlock. FOR SHARE makes a concurrent deactivation wait for this commit (or
    // this read wait for its commit): a certificate is never stored for an account that was
    // deactivated first. SQLite's IMMEDIATE transaction already serialises writers.
    let account = match s.backend {
        Backend::Postgres => sqlx::query_scalar::<_, String>(
            "SELECT a.status FROM accounts a WHERE a.id = (SELECT account_id FROM orders WHERE id = $1) FOR SHARE",
        ),
        Backend::Sqlite => sqlx::query_scalar::<_, String>(
            "SELECT a.status FROM accounts a WHERE a.id = (SELECT account_id FROM orders WHERE id = $1)",
        ),
    };
    let account_status: AccountStatus = codec::parse(
        &account
            .bind(id.0)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(Error::NotFound)?,
    )?;
    let read = match s.backend {
        Backend::Postgres => sqlx::query(
            "SELECT status, account_id, set_hash, certificate_id FROM orders WHERE id = $1 FOR UPDATE",
        ),
        Backend::Sqlite => sqlx::query(
            "SELECT status, account_id, set_hash, certificate_id FROM orders WHERE id = $1",
        ),
    };
    let row = read
        .bind(id.0)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound)?;
    let status: OrderStatus = codec::parse(&row.try_get::<String, _>("status")?)?;
    let cert_id = match status {
        OrderStatus::Valid => {
            let existing: Option<i64> = row.try_get("certificate_id")?;
            CertificateId(
                existing.ok_or_else(|| {
                    Error::Corrupt(format!("valid order {id} without certificate"))
                })?,
            )
        }
        OrderStatus::Processing if account_status != AccountStatus::Valid => {
            tx.rollback().await?;
            return Ok(Completion::AccountNotValid(account_status));
        }
        OrderStatus::Processing => {
            let cert_id: i64 = sqlx::query_scalar(
                "INSERT INTO certificates (account_id, order_id, serial, der, chain_pem, set_hash, \
                 not_before, not_after, issued_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
            )
            .bind(row.try_get::<i64, _>("account_id")?)
            .bind(id.0)
            .bind(cert.serial.to_hex())
            .bind(cert.der)
            .bind(cert.chain_pem)
            .bind(row.try_get::<String, _>("set_hash")?)
            .bind(codec::unix(cert.not_before))
            .bind(codec::unix(cert.not_after))
            .bind(now_s)
            .fetch_one(&mut *tx)
            .await?;
            sqlx::query("UPDATE orders SET status = 'valid', certificate_id = $2, updated_at = $3 WHERE id = $1")
                .bind(id.0)
                .bind(cert_id)
                .bind(now_s)
                .execute(&mut *tx)
                .await?;
            CertificateId(cert_id)
        }
        other => return Err(Error::WrongState(format!("order is {}", other.as_str()))),
    };
    let certificate = rows::load_certificate(&mut tx, cert_id)
        .await?
        .ok_or(Error::NotFound)?;
    tx.commit().await?;
    Ok(Completion::Issued(certificate))
}

pub(crate) async fn fail(
    s: &Storage,
    id: OrderId,
    problem: Problem,
    now: OffsetDateTime,
) -> Result<Order> {
    let (error_type, error_detail) = codec::problem_columns(Some(&problem));
    let mut conn = s.pool.acquire().await?;
    let moved = sqlx::query(
        "UPDATE orders SET status = 'invalid', error_type = $2, error_detail = $3, updated_at = $4 \
         WHERE id = $1 AND status = 'processing'",
    )
    .bind(id.0)
    .bind(error_type)
    .bind(error_detail)
    .bind(codec::unix(now))
    .execute(&mut *conn)
    .await?
    .rows_affected()
        > 0;
    let order = rows::load_order(&mut conn, id)
        .await?
        .ok_or(Error::NotFound)?;
    // A repeated failure report (a retried job) finds the order already invalid.
    if moved || order.status == OrderStatus::Invalid {
        Ok(order)
    } else {
        Err(Error::WrongState(format!(
            "order is {}",
            order.status.as_str()
        )))
    }
}
