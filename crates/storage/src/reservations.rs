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
//! fails marks its open reservation `abandoned`. An abandoned serial may have been signed and has
//! no certificate row, so it is revoked on its CRL shard's CRL instead (`Storage::revoked_in_crl_shard`, the
//! shard's counter raised where it is marked).

use std::net::IpAddr;

use acme_core::ids::JobId;
use acme_core::ids::OrderId;
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
use crate::model::Reserved;
use crate::model::ReservedAtOnce;
use crate::orders;
use crate::reservation_rows::abandon_open;
use crate::reservation_rows::columns;
use crate::reservation_rows::insert;
use crate::reservation_rows::open_of_order;
use crate::reservation_rows::reservation;
use crate::rows;
use crate::sql;
use crate::state;

impl Storage {
    /// The at-once path of a finalization, before anything is signed: ready → processing with
    /// the CSR, a `Finalize` job claimed by the caller for `lease`, and the serial reserved with
    /// what the certificate is to be (`intent`), all in one transaction that checks the account
    /// first (on PostgreSQL share-locked, so a deactivation commits before or after it) and that
    /// the order is ready with every authorization valid. The caller then signs exactly the
    /// reservation and stores it with [`Storage::complete_order`], settling the job; after a
    /// crash the job resumes it ([`Storage::reserve_serial`]). `NotReady(status)` when the order
    /// is no longer ready (expiry applied first, as in [`Storage::begin_finalize`]).
    /// `client_ip`, the finalize request's, is kept with the order as `begin_finalize` keeps it.
    pub async fn reserve_ready_order(
        &self,
        id: OrderId,
        csr_der: &[u8],
        client_ip: Option<IpAddr>,
        intent: NewReservation,
        now: OffsetDateTime,
        lease: Duration,
    ) -> Result<ReservedAtOnce> {
        let now_s = codec::unix(now);
        let chain_id = issuer_chains::id_of(self, &intent.issuer_chain_pem).await?;
        if self.backend == Backend::Postgres {
            let request = ReadyRequest {
                id,
                csr_der,
                client_ip,
                now,
                lease,
            };
            return reserve_ready_pg(self, request, &intent, chain_id).await;
        }
        let mut tx = self.begin_write().await?;
        let account_status = orders::account_of_order(self, &mut tx, id).await?;
        if account_status != AccountStatus::Valid {
            tx.rollback().await?;
            return Ok(ReservedAtOnce::AccountNotValid(account_status));
        }
        if orders::take_ready(&mut tx, id, csr_der, client_ip, now_s)
            .await?
            .is_none()
        {
            let status = orders::not_ready(self, &mut tx, id, now_s).await?;
            tx.commit().await?;
            return Ok(ReservedAtOnce::NotReady(status));
        }
        let job = state::enqueue_job(&mut tx, JobKind::Finalize(id), now, Some(lease))
            .await?
            .ok_or_else(|| {
                Error::Corrupt(format!("order {id} was ready with a finalization job"))
            })?;
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

    /// Records what the certificate of order `id` (in `processing`) is to be before it is
    /// signed, after checking in the same transaction that the account and every
    /// authorization of the order are still valid. An open reservation of the order (a job
    /// resumed after a crash) is returned instead, to be signed again exactly, unless its
    /// issuer differs: it is then marked abandoned and a new one recorded.
    pub async fn reserve_serial(
        &self,
        id: OrderId,
        intent: NewReservation,
        now: OffsetDateTime,
    ) -> Result<Reserved> {
        let now_s = codec::unix(now);
        let chain_id = issuer_chains::id_of(self, &intent.issuer_chain_pem).await?;
        let mut tx = self.begin_write().await?;
        let account_status = orders::account_of_order(self, &mut tx, id).await?;
        let read = match self.backend {
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
            if open.issuer_chain_id == chain_id && open.issuer == intent.issuer {
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
}

/// What [`Storage::reserve_ready_order`] was asked, as its PostgreSQL form takes it.
struct ReadyRequest<'a> {
    id: OrderId,
    csr_der: &'a [u8],
    client_ip: Option<IpAddr>,
    now: OffsetDateTime,
    lease: Duration,
}

/// [`reserve_ready`] on PostgreSQL: the same transaction, lock for lock, as the function
/// `certeasy_reserve_ready` (migration 0022), in one round trip, and the order read after it.
/// When the order was not ready the function wrote nothing; why is then persisted and told in a
/// transaction of its own, as a request that came a moment later would find it.
async fn reserve_ready_pg(
    s: &Storage,
    request: ReadyRequest<'_>,
    intent: &NewReservation,
    chain_id: i64,
) -> Result<ReservedAtOnce> {
    let ReadyRequest {
        id,
        csr_der,
        client_ip,
        now,
        lease,
    } = request;
    let now_s = codec::unix(now);
    let lease_until = codec::lease_end(now, lease);
    let row = sql::query(
        "SELECT * FROM certeasy_reserve_ready($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind(id.0)
    .bind(csr_der)
    .bind(now_s)
    .bind(lease_until)
    .bind(intent.serial.to_hex())
    .bind(chain_id)
    .bind(codec::unix(intent.not_before))
    .bind(codec::unix(intent.not_after))
    .bind(intent.crl_shard.map(i64::from))
    .bind(&intent.issuer)
    .bind(client_ip.map(|ip| ip.to_string()))
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
            let status = orders::not_ready(s, &mut tx, id, now_s).await?;
            tx.commit().await?;
            Ok(ReservedAtOnce::NotReady(status))
        }
        other => Err(Error::Corrupt(format!(
            "certeasy_reserve_ready answered {other}"
        ))),
    }
}
