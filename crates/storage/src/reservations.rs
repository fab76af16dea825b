//! Serial reservations (migration 0014): what a certificate is to be, recorded and committed
//! before the issuing key signs it, so that every certificate the key ever signed is in the
//! database even when the certificate itself is never stored.
//!
//! A finalization reserves (here), signs exactly what it reserved, then stores the certificate
//! against the reservation ([`crate::orders::complete`]). Every check that can refuse the
//! issuance runs in the reserving transaction: the account is valid (share-locked on PostgreSQL,
//! so a deactivation commits before the reservation or after it), the order is ready or
//! processing, and every authorization of the order is valid and unexpired. Storing the
//! certificate then refuses nothing that was checked: the signed certificate is kept whatever
//! happened since (a deactivation after the reservation finds an issuance already decided).
//!
//! An order has at most one open (`reserved`) reservation. A job that resumes an order after a
//! crash finds it and signs the same serial and window again, counted in `signings`; if the
//! issuer changed meanwhile, the open reservation is marked `abandoned` and a new one recorded,
//! so two serials for one order are never signed without both being recorded. An order that
//! fails marks its open reservation `abandoned`.

use acme_core::ids::AccountId;
use acme_core::ids::CertificateId;
use acme_core::ids::JobId;
use acme_core::ids::OrderId;
use acme_core::ids::Serial;
use acme_core::status::AccountStatus;
use acme_core::status::OrderStatus;
use time::Duration;
use time::OffsetDateTime;

use crate::Backend;
use crate::Result;
use crate::Storage;
use crate::codec;
use crate::error::Error;
use crate::issuer_chains;
use crate::model::Job;
use crate::model::JobKind;
use crate::model::NewReservation;
use crate::model::Reservation;
use crate::model::ReservationState;
use crate::model::Reserved;
use crate::model::ReservedAtOnce;
use crate::orders;
use crate::rows;
use crate::sql;
use crate::sql::Conn;
use crate::sql::Row;
use crate::state;

/// The columns a [`Reservation`] is read from; a macro, since `concat!` takes only literals and
/// statements kept prepared are `&'static str`.
macro_rules! columns {
    () => {
        "serial, order_id, account_id, identifiers, issuer_chain_id, not_before, not_after, \
         crl_shard, reserved_at, signings, state, certificate_id"
    };
}

/// Reserves a serial for order `id`, which must be `processing`: the durable path, run by the
/// order's `Finalize` job. Its open reservation, if it has one with the same issuer, is
/// returned with `signings` counted up instead of a new one.
pub(crate) async fn reserve(
    s: &Storage,
    id: OrderId,
    intent: NewReservation,
    now: OffsetDateTime,
) -> Result<Reserved> {
    let now_s = codec::unix(now);
    let chain_id = issuer_chains::id_of(s, &intent.issuer_chain_pem).await?;
    let mut tx = s.begin_write().await?;
    let account_status = orders::account_of_order(s, &mut tx, id).await?;
    let read = match s.backend {
        Backend::Postgres => sql::query("SELECT status FROM orders WHERE id = $1 FOR UPDATE"),
        Backend::Sqlite => sql::query("SELECT status FROM orders WHERE id = $1"),
    };
    let row = read
        .bind(id.0)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound)?;
    let status: OrderStatus = codec::parse(&row.try_get::<String, _>("status")?)?;
    if status != OrderStatus::Processing {
        tx.rollback().await?;
        return Ok(Reserved::Settled(status));
    }
    if account_status != AccountStatus::Valid {
        tx.rollback().await?;
        return Ok(Reserved::AccountNotValid(account_status));
    }
    let unusable = sql::query_scalar::<i64>(
        "SELECT COUNT(*) FROM order_authorizations oa JOIN authorizations a ON a.id = oa.authz_id \
         WHERE oa.order_id = $1 AND (a.status <> 'valid' OR a.expires_at <= $2)",
    )
    .bind(id.0)
    .bind(now_s)
    .fetch_one(&mut *tx)
    .await?;
    if unusable > 0 {
        tx.rollback().await?;
        return Ok(Reserved::AuthorizationNotValid);
    }
    if let Some(open) = open_of_order(&mut tx, id).await? {
        if open.issuer_chain_id == chain_id {
            let row = sql::query(concat!(
                "UPDATE serial_reservations SET signings = signings + 1 \
                 WHERE order_id = $1 AND state = 'reserved' RETURNING ",
                columns!()
            ))
            .bind(id.0)
            .fetch_one(&mut *tx)
            .await?;
            let resumed = reservation(&row)?;
            tx.commit().await?;
            return Ok(Reserved::Reserved(Box::new(resumed)));
        }
        // Signed (perhaps) under another issuer, which this signer cannot sign again: it stays
        // recorded, marked, and the order gets a reservation of its own issuer.
        abandon_open(&mut tx, id, now).await?;
    }
    let reserved = insert(&mut tx, id, &intent, chain_id, now_s).await?;
    tx.commit().await?;
    Ok(Reserved::Reserved(Box::new(reserved)))
}

/// The at-once path: ready → processing with the CSR, a `Finalize` job claimed by the caller for
/// `lease` (a crash before the certificate is stored leaves it to be resumed), and a
/// reservation, in one transaction. The account is checked (and on PostgreSQL share-locked)
/// first; `Error::OrderNotReady(status)` when the order is not ready (an expired one, or one
/// with an expired authorization, is first made invalid, and that is committed).
pub(crate) async fn reserve_ready(
    s: &Storage,
    id: OrderId,
    csr_der: &[u8],
    intent: NewReservation,
    now: OffsetDateTime,
    lease: Duration,
) -> Result<ReservedAtOnce> {
    let now_s = codec::unix(now);
    let chain_id = issuer_chains::id_of(s, &intent.issuer_chain_pem).await?;
    if s.backend == Backend::Postgres {
        return reserve_ready_pg(s, id, csr_der, &intent, chain_id, now, lease).await;
    }
    let mut tx = s.begin_write().await?;
    let account_status = orders::account_of_order(s, &mut tx, id).await?;
    if account_status != AccountStatus::Valid {
        tx.rollback().await?;
        return Ok(ReservedAtOnce::AccountNotValid(account_status));
    }
    if orders::take_ready(&mut tx, id, csr_der, now_s)
        .await?
        .is_none()
    {
        let refusal = orders::not_ready(s, &mut tx, id, now_s).await?;
        tx.commit().await?;
        return Err(refusal);
    }
    let job = state::enqueue_job(&mut tx, JobKind::Finalize(id), now, Some(lease))
        .await?
        .ok_or_else(|| Error::Corrupt(format!("order {id} was ready with a finalization job")))?;
    let reservation = insert(&mut tx, id, &intent, chain_id, now_s).await?;
    let order = rows::load_order(&mut tx, id)
        .await?
        .ok_or(Error::NotFound)?;
    tx.commit().await?;
    Ok(ReservedAtOnce::Reserved {
        order: Box::new(order),
        job,
        reservation: Box::new(reservation),
    })
}

/// [`reserve_ready`] on PostgreSQL: the same transaction, lock for lock, as the function
/// `certeasy_reserve_ready` (migration 0014), in one round trip, and the order read after it.
/// When the order was not ready the function wrote nothing; why is then persisted and told in a
/// transaction of its own, as a request that came a moment later would find it.
async fn reserve_ready_pg(
    s: &Storage,
    id: OrderId,
    csr_der: &[u8],
    intent: &NewReservation,
    chain_id: i64,
    now: OffsetDateTime,
    lease: Duration,
) -> Result<ReservedAtOnce> {
    let now_s = codec::unix(now);
    let lease_until = codec::lease_end(now, lease);
    let row =
        sql::query("SELECT * FROM certeasy_reserve_ready($1, $2, $3, $4, $5, $6, $7, $8, $9)")
            .bind(id.0)
            .bind(csr_der)
            .bind(now_s)
            .bind(lease_until)
            .bind(intent.serial.to_hex())
            .bind(chain_id)
            .bind(codec::unix(intent.not_before))
            .bind(codec::unix(intent.not_after))
            .bind(intent.crl_shard.map(i64::from))
            .fetch_optional(&s.db)
            .await?
            .ok_or(Error::NotFound)?;
    match row.try_get::<String, _>("outcome")?.as_str() {
        "reserved" => {
            let job = Job {
                id: JobId(row.try_get("job_id")?),
                kind: JobKind::Finalize(id),
                attempts: 1,
                retries: 0,
                lease_until: codec::time_from_unix(lease_until)?,
                exhausted: false,
            };
            let reservation = reservation(&row)?;
            let mut conn = s.db.acquire().await?;
            let order = rows::load_order(&mut conn, id)
                .await?
                .ok_or(Error::NotFound)?;
            Ok(ReservedAtOnce::Reserved {
                order: Box::new(order),
                job,
                reservation: Box::new(reservation),
            })
        }
        "account" => Ok(ReservedAtOnce::AccountNotValid(codec::parse(
            &row.try_get::<String, _>("account_status")?,
        )?)),
        "not_ready" => {
            let mut tx = s.begin_write().await?;
            let refusal = orders::not_ready(s, &mut tx, id, now_s).await?;
            tx.commit().await?;
            Err(refusal)
        }
        other => Err(Error::Corrupt(format!(
            "certeasy_reserve_ready answered {other}"
        ))),
    }
}

/// Records `intent` for order `id` with the order's account and identifiers.
async fn insert(
    conn: &mut Conn,
    id: OrderId,
    intent: &NewReservation,
    chain_id: i64,
    now_s: i64,
) -> Result<Reservation> {
    let row = sql::query(concat!(
        "INSERT INTO serial_reservations (serial, order_id, account_id, identifiers, \
         issuer_chain_id, not_before, not_after, crl_shard, reserved_at, signings, state) \
         SELECT $2, o.id, o.account_id, o.identifiers, $3, $4, $5, $6, $7, 1, 'reserved' \
         FROM orders o WHERE o.id = $1 RETURNING ",
        columns!()
    ))
    .bind(id.0)
    .bind(intent.serial.to_hex())
    .bind(chain_id)
    .bind(codec::unix(intent.not_before))
    .bind(codec::unix(intent.not_after))
    .bind(intent.crl_shard.map(i64::from))
    .bind(now_s)
    .fetch_optional(&mut *conn)
    .await?
    .ok_or(Error::NotFound)?;
    reservation(&row)
}

/// The open reservation of order `id`, if any.
async fn open_of_order(conn: &mut Conn, id: OrderId) -> Result<Option<Reservation>> {
    let row = sql::query(concat!(
        "SELECT ",
        columns!(),
        " FROM serial_reservations WHERE order_id = $1 AND state = 'reserved'"
    ))
    .bind(id.0)
    .fetch_optional(&mut *conn)
    .await?;
    row.as_ref().map(reservation).transpose()
}

/// The open reservation of `serial` for order `id`: what a certificate about to be stored must
/// have been signed from. `None` when there is none (never reserved, or abandoned since).
pub(crate) async fn open_for(
    conn: &mut Conn,
    id: OrderId,
    serial: &Serial,
) -> Result<Option<Reservation>> {
    Ok(open_of_order(conn, id)
        .await?
        .filter(|open| &open.serial == serial))
}

/// Marks the reservation of `serial` issued with its stored certificate.
pub(crate) async fn mark_issued(
    conn: &mut Conn,
    serial: &Serial,
    certificate: CertificateId,
    now: OffsetDateTime,
) -> Result<()> {
    sql::query(
        "UPDATE serial_reservations SET state = 'issued', certificate_id = $2, settled_at = $3 \
         WHERE serial = $1 AND state = 'reserved'",
    )
    .bind(serial.to_hex())
    .bind(certificate.0)
    .bind(codec::unix(now))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Marks the open reservation of order `id` abandoned (the order failed, or it is replaced).
pub(crate) async fn abandon_open(conn: &mut Conn, id: OrderId, now: OffsetDateTime) -> Result<()> {
    let abandoned = sql::query(
        "UPDATE serial_reservations SET state = 'abandoned', settled_at = $2 \
         WHERE order_id = $1 AND state = 'reserved'",
    )
    .bind(id.0)
    .bind(codec::unix(now))
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if abandoned > 0 {
        tracing::warn!(order_id = %id, "a reserved serial was never stored; marked abandoned");
    }
    Ok(())
}

/// Every reservation of order `id`, oldest first.
pub(crate) async fn of_order(s: &Storage, id: OrderId) -> Result<Vec<Reservation>> {
    let rows = sql::query(concat!(
        "SELECT ",
        columns!(),
        " FROM serial_reservations WHERE order_id = $1 ORDER BY id"
    ))
    .bind(id.0)
    .fetch_all(&s.db)
    .await?;
    rows.iter().map(reservation).collect()
}

/// Reservations still open that were made before `before`, oldest first, at most `limit`: serials
/// that may have been signed and are not stored (yet), for operators.
pub(crate) async fn open_before(
    s: &Storage,
    before: OffsetDateTime,
    limit: u32,
) -> Result<Vec<Reservation>> {
    let rows = sql::query(concat!(
        "SELECT ",
        columns!(),
        " FROM serial_reservations WHERE state = 'reserved' AND reserved_at < $1 \
         ORDER BY id LIMIT $2"
    ))
    .bind(codec::unix(before))
    .bind(i64::from(limit))
    .fetch_all(&s.db)
    .await?;
    rows.iter().map(reservation).collect()
}

fn reservation(row: &Row) -> Result<Reservation> {
    let crl_shard = row
        .try_get::<Option<i64>, _>("crl_shard")?
        .map(|shard| {
            u16::try_from(shard).map_err(|_| Error::Corrupt(format!("reservation shard {shard}")))
        })
        .transpose()?;
    let signings: i64 = row.try_get("signings")?;
    Ok(Reservation {
        serial: rows::serial_column(row)?,
        order_id: OrderId(row.try_get("order_id")?),
        account_id: AccountId(row.try_get("account_id")?),
        identifiers: codec::decode_identifiers(&row.try_get::<String, _>("identifiers")?)?,
        issuer_chain_id: row.try_get("issuer_chain_id")?,
        not_before: codec::time_from_unix(row.try_get("not_before")?)?,
        not_after: codec::time_from_unix(row.try_get("not_after")?)?,
        crl_shard,
        reserved_at: codec::time_from_unix(row.try_get("reserved_at")?)?,
        signings: codec::count(signings)?,
        state: codec::parse::<ReservationState>(&row.try_get::<String, _>("state")?)?,
        certificate_id: row
            .try_get::<Option<i64>, _>("certificate_id")?
            .map(CertificateId),
    })
}
