//! The rows of `serial_reservations` (migration 0014): reading, inserting and settling one
//! reservation inside a caller's transaction. The transactions that decide when to reserve are
//! in `reservations.rs`; storing a certificate (`orders.rs`) settles its reservation here. This
//! module imports neither, so both can use it.

use acme_core::ids::AccountId;
use acme_core::ids::CertificateId;
use acme_core::ids::OrderId;
use acme_core::ids::Serial;
use time::OffsetDateTime;

use crate::Result;
use crate::Storage;
use crate::ca_state::DEFAULT_ISSUER;
use crate::codec;
use crate::crls;
use crate::error::Error;
use crate::model::NewReservation;
use crate::model::Reservation;
use crate::model::ReservationState;
use crate::rows;
use crate::sql;
use crate::sql::Conn;
use crate::sql::Row;

/// The columns a [`Reservation`] is read from; a macro, since `concat!` takes only literals and
/// statements kept prepared are `&'static str`.
macro_rules! columns {
    () => {
        "serial, order_id, account_id, identifiers, issuer_chain_id, not_before, not_after, \
         crl_shard, reserved_at, signings, state, certificate_id, issuer"
    };
}
pub(crate) use columns;

/// Records `intent` for order `id` with the order's account and identifiers.
pub(crate) async fn insert(
    conn: &mut Conn,
    id: OrderId,
    intent: &NewReservation,
    chain_id: i64,
    now_s: i64,
) -> Result<Reservation> {
    let row = sql::query(concat!(
        "INSERT INTO serial_reservations (serial, order_id, account_id, identifiers, \
         issuer_chain_id, not_before, not_after, crl_shard, reserved_at, signings, state, \
         issuer) \
         SELECT $2, o.id, o.account_id, o.identifiers, $3, $4, $5, $6, $7, 1, 'reserved', $8 \
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
    .bind(&intent.issuer)
    .fetch_optional(&mut *conn)
    .await?
    .ok_or(Error::NotFound)?;
    reservation(&row)
}

/// The open reservation of order `id`, if any.
pub(crate) async fn open_of_order(conn: &mut Conn, id: OrderId) -> Result<Option<Reservation>> {
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
/// One whose signing was begun (`signings > 0`; every reservation is recorded with 1, since it
/// is committed just before the signature) names a serial the issuing key may have signed and
/// that no certificate row will ever hold: its CRL shard's counter is raised here, in the same
/// transaction, so the shard's next CRL lists it
/// ([`Storage::revoked_in_crl_shard`](crate::Storage::revoked_in_crl_shard)).
pub(crate) async fn abandon_open(conn: &mut Conn, id: OrderId, now: OffsetDateTime) -> Result<()> {
    let abandoned = sql::query(
        "UPDATE serial_reservations SET state = 'abandoned', settled_at = $2 \
         WHERE order_id = $1 AND state = 'reserved' RETURNING serial, crl_shard, signings, issuer",
    )
    .bind(id.0)
    .bind(codec::unix(now))
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(row) = abandoned {
        let serial = rows::serial_column(&row)?;
        let signings: i64 = row.try_get("signings")?;
        tracing::warn!(order_id = %id, %serial, signings, "a reserved serial was never stored; marked abandoned");
        if signings > 0 {
            let issuer: Option<String> = row.try_get("issuer")?;
            crls::count_abandoned(conn, issuer.as_deref(), row.try_get("crl_shard")?).await?;
        }
    }
    Ok(())
}

impl Storage {
    /// Every serial reserved for order `id`, oldest first.
    pub async fn serial_reservations(&self, id: OrderId) -> Result<Vec<Reservation>> {
        let rows = sql::query(concat!(
            "SELECT ",
            columns!(),
            " FROM serial_reservations WHERE order_id = $1 ORDER BY id"
        ))
        .bind(id.0)
        .fetch_all(&self.db)
        .await?;
        rows.iter().map(reservation).collect()
    }

    /// Reservations still open that were made before `before`, oldest first, at most `limit`: serials
    /// that may have been signed and are not stored (yet), for operators.
    pub async fn open_reservations(
        &self,
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
        .fetch_all(&self.db)
        .await?;
        rows.iter().map(reservation).collect()
    }
}

pub(crate) fn reservation(row: &Row) -> Result<Reservation> {
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
        issuer: row
            .try_get::<Option<String>, _>("issuer")?
            .unwrap_or_else(|| DEFAULT_ISSUER.to_owned()),
    })
}
