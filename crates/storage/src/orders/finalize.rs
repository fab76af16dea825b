//! Finalizing an order: ready → processing (also for `reservations.rs`, which reserves the
//! serial in the same transaction), the certificate stored against its reservation (SQLite and
//! the PostgreSQL function side by side), and a failed order.

use std::net::IpAddr;

use acme_core::ids::AuthzId;
use acme_core::ids::CertificateId;
use acme_core::ids::OrderId;
use acme_core::ids::Serial;
use acme_core::problem::Problem;
use acme_core::status::AccountStatus;
use acme_core::status::OrderStatus;
use time::Duration;
use time::OffsetDateTime;

use crate::Backend;
use crate::Result;
use crate::Storage;
use crate::audit;
use crate::audit::AuditEvent;
use crate::codec;
use crate::error::Error;
use crate::evidence;
use crate::issuer_chains;
use crate::model::Certificate;
use crate::model::Finalizing;
use crate::model::Job;
use crate::model::JobKind;
use crate::model::NewCertificate;
use crate::model::Order;
use crate::model::StatusChange;
use crate::reservation_rows;
use crate::rows;
use crate::sql;
use crate::sql::Conn;
use crate::state;

impl Storage {
    /// ready → processing, storing the CSR and the address of the client that asked
    /// (`client_ip`, [`Order::finalize_client_ip`]) and enqueuing a `Finalize` job in one
    /// transaction. `NotReady(status)` when the order is not ready (an expired one, or one with
    /// an expired authorization, is first made invalid).
    pub async fn begin_finalize(
        &self,
        id: OrderId,
        csr_der: &[u8],
        client_ip: Option<IpAddr>,
        now: OffsetDateTime,
    ) -> Result<Finalizing> {
        begin_finalize(self, id, csr_der, client_ip, now, None).await
    }

    /// [`Storage::begin_finalize`] with the `Finalize` job claimed by the caller, as
    /// [`Storage::start_challenge_claimed`] does.
    pub async fn begin_finalize_claimed(
        &self,
        id: OrderId,
        csr_der: &[u8],
        client_ip: Option<IpAddr>,
        now: OffsetDateTime,
        lease: Duration,
    ) -> Result<Finalizing> {
        begin_finalize(self, id, csr_der, client_ip, now, Some(lease)).await
    }

    /// Stores the certificate signed from the open reservation of its serial (which must match
    /// it exactly) and moves the order processing → valid; the reservation becomes `issued`.
    /// Nothing is checked again: the checks ran when the serial was reserved, and a signed
    /// certificate is kept. Idempotent: an order that is already valid returns its
    /// certificate. `settle` as for [`Storage::record_validation`]. `Error::Corrupt` when the
    /// serial is not the order's open reservation or the order is neither processing nor
    /// valid: only the holder of its `Finalize` job stores its certificate. `audit` (the
    /// issuance) is recorded in the same transaction when this call stores the certificate, with
    /// `evidence_sha256` (`evidence::digest` of the evidence kept with it) added to its detail;
    /// a repeat records nothing.
    pub async fn complete_order(
        &self,
        id: OrderId,
        cert: NewCertificate,
        now: OffsetDateTime,
        settle: Option<&Job>,
        audit: &AuditEvent,
    ) -> Result<Certificate> {
        complete(self, id, cert, now, settle, audit).await
    }

    /// processing → invalid with the problem; `settle` as for [`Storage::record_validation`].
    /// `Unchanged` for an order that is not processing; the job is settled all the same when
    /// the order is already invalid (a repeated failure report).
    pub async fn fail_order(
        &self,
        id: OrderId,
        problem: Problem,
        now: OffsetDateTime,
        settle: Option<&Job>,
    ) -> Result<StatusChange<Order>> {
        fail(self, id, problem, now, settle).await
    }
}

/// ready → processing with the CSR stored, when the order is still ready: of two concurrent
/// finalizations only one can see `ready`, and an order whose authorization is no longer valid
/// (expired since it became ready) is not finalized even if its own expiry has not come yet.
/// The finalize request's `client_ip` is kept with the order for the issuance's audit record.
/// Returns the order's account and identifier-set hash when it moved.
pub(crate) async fn take_ready(
    conn: &mut Conn,
    id: OrderId,
    csr_der: &[u8],
    client_ip: Option<IpAddr>,
    now_s: i64,
) -> Result<Option<(i64, String)>> {
    let row = sql::query(
        "UPDATE orders SET status = 'processing', csr = $2, updated_at = $3, \
         finalize_client_ip = $4 \
         WHERE id = $1 AND status = 'ready' AND expires_at > $3 \
         AND NOT EXISTS (SELECT 1 FROM order_authorizations oa \
             JOIN authorizations a ON a.id = oa.authz_id \
             WHERE oa.order_id = orders.id AND (a.status <> 'valid' OR a.expires_at <= $3)) \
         RETURNING account_id, set_hash",
    )
    .bind(id.0)
    .bind(csr_der)
    .bind(now_s)
    .bind(client_ip.map(|ip| ip.to_string()))
    .fetch_optional(&mut *conn)
    .await?;
    row.map(|row| Ok((row.try_get("account_id")?, row.try_get("set_hash")?)))
        .transpose()
}

/// Persists why an order is not ready: expired authorizations expire (and invalidate the
/// order), then the order's own expiry. Returns what the order now is; `Error::NotFound` when
/// there is no such order.
pub(crate) async fn not_ready(
    s: &Storage,
    conn: &mut Conn,
    id: OrderId,
    now_s: i64,
) -> Result<OrderStatus> {
    let authz_ids =
        sql::query_scalar::<i64>("SELECT authz_id FROM order_authorizations WHERE order_id = $1")
            .bind(id.0)
            .fetch_all(&mut *conn)
            .await?;
    for authz in authz_ids {
        let authz = AuthzId(authz);
        // Orders before the authorization, as every other path takes them.
        state::lock_orders_holding(conn, s.backend, authz).await?;
        state::expire_authz(conn, authz, now_s).await?;
    }
    state::expire_order(conn, id, now_s).await?;
    match rows::load_order(conn, id).await? {
        Some(order) => Ok(order.status),
        None => Err(Error::NotFound),
    }
}

/// `claim`: as for [`crate::authz::start_challenge`].
async fn begin_finalize(
    s: &Storage,
    id: OrderId,
    csr_der: &[u8],
    client_ip: Option<IpAddr>,
    now: OffsetDateTime,
    claim: Option<Duration>,
) -> Result<Finalizing> {
    let now_s = codec::unix(now);
    let mut tx = s.begin_write().await?;
    if take_ready(&mut tx, id, csr_der, client_ip, now_s)
        .await?
        .is_none()
    {
        let status = not_ready(s, &mut tx, id, now_s).await?;
        tx.commit().await?;
        return Ok(Finalizing::NotReady(status));
    }
    let job = state::enqueue_job(&mut tx, JobKind::Finalize(id), now, claim).await?;
    let order = rows::load_order(&mut tx, id)
        .await?
        .ok_or(Error::NotFound)?;
    tx.commit().await?;
    Ok(Finalizing::Begun {
        order: Box::new(order),
        job,
    })
}

/// The status of the account that owns order `id`, locked before the order in the order account
/// deactivation takes them, so the two cannot deadlock. FOR SHARE makes a concurrent
/// deactivation wait for this commit (or this read wait for its commit): a serial is never
/// reserved, so nothing is signed, for an account that was deactivated first. SQLite's IMMEDIATE transaction already
/// serialises writers.
pub(crate) async fn account_of_order(
    s: &Storage,
    conn: &mut Conn,
    id: OrderId,
) -> Result<AccountStatus> {
    let account = match s.backend {
        Backend::Postgres => sql::query_scalar::<String>(
            "SELECT a.status FROM accounts a WHERE a.id = (SELECT account_id FROM orders WHERE id = $1) FOR SHARE",
        ),
        Backend::Sqlite => sql::query_scalar::<String>(
            "SELECT a.status FROM accounts a WHERE a.id = (SELECT account_id FROM orders WHERE id = $1)",
        ),
    };
    codec::parse(
        &account
            .bind(id.0)
            .fetch_optional(&mut *conn)
            .await?
            .ok_or(Error::NotFound)?,
    )
}

/// What a certificate row takes besides the certificate.
pub(crate) struct Stored<'a> {
    pub(crate) account_id: i64,
    pub(crate) set_hash: &'a str,
    /// The row of `cert.issuer_chain_pem` ([`issuer_chains::id_of`]).
    pub(crate) chain_id: i64,
    pub(crate) now_s: i64,
}

/// Stores the certificate of order `id` and makes the order valid with it. RETURNING the whole
/// row: the caller gets the stored certificate without reading it back. The row's `chain_pem`
/// stays empty: the download is assembled from the leaf and the issuer chain (migration 0012).
/// `bulk_fill.rs` writes its certificates through it too, so a filled database holds exactly
/// what finalization writes.
pub(crate) async fn store_certificate(
    conn: &mut Conn,
    id: OrderId,
    stored: Stored<'_>,
    cert: NewCertificate,
) -> Result<Certificate> {
    let Stored {
        account_id,
        set_hash,
        chain_id,
        now_s,
    } = stored;
    let row = sql::query(concat!(
        "INSERT INTO certificates (account_id, order_id, serial, der, chain_pem, issuer_chain_id, \
         set_hash, not_before, not_after, issued_at, crl_shard, issuer) \
         VALUES ($1, $2, $3, $4, '', $5, $6, $7, $8, $9, $10, (SELECT r.issuer FROM \
         serial_reservations r WHERE r.serial = $3 AND r.state = 'reserved')) RETURNING ",
        rows::certificate_cols!()
    ))
    .bind(account_id)
    .bind(id.0)
    .bind(cert.serial.to_hex())
    .bind(cert.der)
    .bind(chain_id)
    .bind(set_hash)
    .bind(codec::unix(cert.not_before))
    .bind(codec::unix(cert.not_after))
    .bind(now_s)
    .bind(cert.crl_shard.map(i64::from))
    .fetch_one(&mut *conn)
    .await?;
    let certificate = rows::certificate_stored(&row, Some(&cert.issuer_chain_pem))?;
    let identifiers = sql::query_scalar::<String>(
        "UPDATE orders SET status = 'valid', certificate_id = $2, updated_at = $3 WHERE id = $1 \
         RETURNING identifiers",
    )
    .bind(id.0)
    .bind(certificate.id.0)
    .bind(now_s)
    .fetch_optional(&mut *conn)
    .await?
    .ok_or(Error::NotFound)?;
    store_names(conn, certificate.id, &identifiers).await?;
    Ok(certificate)
}

/// One `certificate_names` row per name of the order's list (migration 0026), for the
/// operator's `--name` filter; written with the certificate, as the PostgreSQL statement of
/// [`complete_pg`] does. The list is the column as stored (`type:value` lines), so a row's name
/// is byte for byte the line the listing shows. A name repeated in the list is one row.
async fn store_names(conn: &mut Conn, certificate: CertificateId, identifiers: &str) -> Result<()> {
    for name in identifiers.split('\n').filter(|n| !n.is_empty()) {
        sql::query(
            "INSERT INTO certificate_names (name, certificate_id) VALUES ($1, $2) \
             ON CONFLICT DO NOTHING",
        )
        .bind(name)
        .bind(certificate.0)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// Stores the certificate signed from the open reservation of its serial and makes the order
/// valid with it; the reservation becomes `issued`. Nothing checked when the serial was reserved
/// is checked again (the certificate exists now, and must be kept). `settle`: as for
/// [`crate::authz::record_validation`]. A repeat (an order already valid) returns the stored
/// certificate.
async fn complete(
    s: &Storage,
    id: OrderId,
    cert: NewCertificate,
    now: OffsetDateTime,
    settle: Option<&Job>,
    audit: &AuditEvent,
) -> Result<Certificate> {
    let now_s = codec::unix(now);
    let chain_id = issuer_chains::id_of(s, &cert.issuer_chain_pem).await?;
    if s.backend == Backend::Postgres {
        return complete_pg(s, id, cert, chain_id, now, settle, audit).await;
    }
    let mut tx = s.begin_write().await?;
    let read = match s.backend {
        Backend::Postgres => sql::query(
            "SELECT status, account_id, set_hash, certificate_id FROM orders WHERE id = $1 FOR UPDATE",
        ),
        Backend::Sqlite => sql::query(
            "SELECT status, account_id, set_hash, certificate_id FROM orders WHERE id = $1",
        ),
    };
    let row = read
        .bind(id.0)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound)?;
    let status: OrderStatus = codec::parse(&row.try_get::<String, _>("status")?)?;
    let mut issued = None;
    let certificate = match status {
        OrderStatus::Valid => {
            let existing: Option<i64> = row.try_get("certificate_id")?;
            let cert_id =
                CertificateId(existing.ok_or_else(|| {
                    Error::Corrupt(format!("valid order {id} without certificate"))
                })?);
            rows::load_certificate(&mut tx, cert_id)
                .await?
                .ok_or(Error::NotFound)?
        }
        OrderStatus::Processing => {
            let reserved = reservation_rows::open_for(&mut tx, id, &cert.serial)
                .await?
                .ok_or_else(|| not_reserved(id, &cert.serial))?;
            if (
                reserved.not_before,
                reserved.not_after,
                reserved.issuer_chain_id,
                reserved.crl_shard,
            ) != (cert.not_before, cert.not_after, chain_id, cert.crl_shard)
            {
                return Err(Error::Corrupt(format!(
                    "the certificate of serial {} differs from its reservation",
                    cert.serial.to_hex()
                )));
            }
            let account_id: i64 = row.try_get("account_id")?;
            let set_hash: String = row.try_get("set_hash")?;
            let stored = Stored {
                account_id,
                set_hash: &set_hash,
                chain_id,
                now_s,
            };
            let serial = cert.serial.clone();
            let kept_until = s.evidence_kept_until(cert.not_after);
            let certificate = store_certificate(&mut tx, id, stored, cert).await?;
            reservation_rows::mark_issued(&mut tx, &serial, certificate.id, now).await?;
            evidence::copy_in(&mut tx, id, certificate.id, &serial, now_s, kept_until).await?;
            let digest = evidence_digest(&mut tx, id, now_s, kept_until).await?;
            issued = Some(with_evidence(audit, &digest));
            certificate
        }
        other => return Err(not_processing(id, other.as_str())),
    };
    if let Some(job) = settle {
        state::settle_job(&mut tx, job).await?;
    }
    if let Some(event) = &issued {
        audit::append_in(&mut tx, event, now).await?;
    }
    tx.commit().await?;
    Ok(certificate)
}

/// `audit` with the digest of the certificate's evidence in its detail.
fn with_evidence(audit: &AuditEvent, digest: &str) -> AuditEvent {
    let mut event = audit.clone();
    if !event.detail.is_object() {
        event.detail = serde_json::json!({});
    }
    if let Some(detail) = event.detail.as_object_mut() {
        detail.insert("evidence_sha256".to_owned(), digest.into());
    }
    event
}

/// [`evidence::digest`] of the records the certificate of order `id`, stored at `now_s`, keeps
/// (or is about to keep): the same rows, in the same order, as [`evidence::copy_in`] copies
/// (and `certeasy_complete_reserved`'s statement on PostgreSQL), read from the challenges they
/// are copied from. Their evidence does not change once valid, so the digest read before the
/// copy (PostgreSQL, where the copy and the record are one statement) is the copy's.
async fn evidence_digest(
    conn: &mut Conn,
    id: OrderId,
    now_s: i64,
    kept_until: i64,
) -> Result<String> {
    let rows = sql::query(
        "SELECT a.identifier_value, c.type, COALESCE(c.validated_at, $2) AS validated_at, COALESCE(c.evidence, $3) AS evidence FROM order_authorizations oa JOIN authorizations a ON a.id = oa.authz_id JOIN challenges c ON c.authz_id = a.id AND c.status = 'valid' WHERE oa.order_id = $1 ORDER BY oa.position",
    )
    .bind(id.0)
    .bind(now_s)
    .bind(evidence::NONE_RECORDED)
    .fetch_all(&mut *conn)
    .await?;
    let kept_until = codec::time_from_unix(kept_until)?;
    let records = rows
        .iter()
        .map(|row| {
            let seen: evidence::Evidence =
                serde_json::from_str(&row.try_get::<String, _>("evidence")?)
                    .map_err(|e| Error::Corrupt(format!("evidence of order {id}: {e}")))?;
            Ok(evidence::EvidenceRecord {
                identifier: row.try_get("identifier_value")?,
                method: row.try_get("type")?,
                validated_at: codec::time_from_unix(row.try_get("validated_at")?)?,
                addresses: seen.addresses,
                observed: seen.observed,
                caa: seen.caa,
                kept_until,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(evidence::digest(&records))
}

/// [`complete`] on PostgreSQL: the same transaction, lock for lock, as the function
/// `certeasy_complete_reserved` (migration 0014), in one round trip; a repeat (the order already
/// valid) reads its certificate after it. The issuance's audit record is inserted for the
/// sealer by the same statement (the CTE `l`, `audit::append_in`'s insert, `$13` to `$24`),
/// only when the function stored the certificate; the evidence digest it carries is read just
/// before.
async fn complete_pg(
    s: &Storage,
    id: OrderId,
    cert: NewCertificate,
    chain_id: i64,
    now: OffsetDateTime,
    settle: Option<&Job>,
    audit: &AuditEvent,
) -> Result<Certificate> {
    let now_s = codec::unix(now);
    let kept_until = s.evidence_kept_until(cert.not_after);
    let digest = {
        let mut conn = s.db.acquire().await?;
        evidence_digest(&mut conn, id, now_s, kept_until).await?
    };
    // The evidence is copied in the same statement (so the same transaction) as the function
    // stores the certificate, as `evidence::copy_in` does on SQLite: `$11` stands for missing
    // evidence, `$12` is `kept_until`. The function changes no row the copy reads. The names
    // (CTE `n`) likewise, as `store_names` writes them on SQLite: the order's `identifiers`,
    // which the function does not change, read from the statement's snapshot.
    let row = sql::query(
        "WITH r AS (SELECT * FROM certeasy_complete_reserved($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)), \
         e AS (INSERT INTO certificate_evidence (certificate_id, serial, identifier_type, \
             identifier_value, method, validated_at, evidence, kept_until) \
             SELECT r.id, r.serial, a.identifier_type, a.identifier_value, c.type, \
             COALESCE(c.validated_at, $8), COALESCE(c.evidence, $11), $12 \
             FROM r JOIN order_authorizations oa ON oa.order_id = r.order_id \
             JOIN authorizations a ON a.id = oa.authz_id \
             JOIN challenges c ON c.authz_id = a.id AND c.status = 'valid' \
             WHERE r.outcome = 'issued' ORDER BY oa.position), \
         n AS (INSERT INTO certificate_names (name, certificate_id) \
             SELECT DISTINCT x.name, r.id FROM r JOIN orders o ON o.id = r.order_id \
             CROSS JOIN LATERAL unnest(string_to_array(o.identifiers, chr(10))) AS x (name) \
             WHERE r.outcome = 'issued' AND x.name <> '' ON CONFLICT DO NOTHING), \
         l AS (INSERT INTO audit_pending (format, at_ms, kind, actor_kind, actor, operator, \
             client_ip, account_id, serial, names, reason, detail) \
             SELECT $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24 \
             WHERE EXISTS (SELECT 1 FROM r WHERE r.outcome = 'issued')) \
         SELECT * FROM r",
    )
    .bind(id.0)
    .bind(cert.serial.to_hex())
    .bind(cert.der)
    .bind(chain_id)
    .bind(codec::unix(cert.not_before))
    .bind(codec::unix(cert.not_after))
    .bind(cert.crl_shard.map(i64::from))
    .bind(now_s)
    .bind(settle.map(|job| job.id.0))
    .bind(settle.map(|job| i64::from(job.attempts)))
    .bind(evidence::NONE_RECORDED)
    .bind(kept_until);
    let row = audit::bind_pg_append(row, &with_evidence(audit, &digest), now)?
        .fetch_optional(&s.db)
        .await?
        .ok_or(Error::NotFound)?;
    match row.try_get::<String, _>("outcome")?.as_str() {
        "issued" => rows::certificate_stored(&row, Some(&cert.issuer_chain_pem)),
        "valid" => {
            let existing: Option<i64> = row.try_get("id")?;
            let cert_id =
                CertificateId(existing.ok_or_else(|| {
                    Error::Corrupt(format!("valid order {id} without certificate"))
                })?);
            let mut conn = s.db.acquire().await?;
            rows::load_certificate(&mut conn, cert_id)
                .await?
                .ok_or(Error::NotFound)
        }
        "not_reserved" => Err(not_reserved(id, &cert.serial)),
        "mismatch" => Err(Error::Corrupt(format!(
            "the certificate of serial {} differs from its reservation",
            cert.serial.to_hex()
        ))),
        "state" => Err(not_processing(
            id,
            &row.try_get::<String, _>("order_status")?,
        )),
        other => Err(Error::Corrupt(format!(
            "certeasy_complete_reserved answered {other}"
        ))),
    }
}

/// A certificate whose serial the order has no open reservation of. Only the holder of the
/// order's `Finalize` job stores its certificate, and only one it reserved, so this is a broken
/// invariant (a bug or a manual edit), not a state a caller decides on.
fn not_reserved(id: OrderId, serial: &Serial) -> Error {
    Error::Corrupt(format!(
        "serial {} is not reserved for order {id}",
        serial.to_hex()
    ))
}

/// A certificate stored for an order that is neither processing nor valid: as for
/// [`not_reserved`], the job that stores it held the order in processing.
fn not_processing(id: OrderId, status: &str) -> Error {
    Error::Corrupt(format!(
        "order {id} is {status}: no certificate can be stored for it"
    ))
}

async fn fail(
    s: &Storage,
    id: OrderId,
    problem: Problem,
    now: OffsetDateTime,
    settle: Option<&Job>,
) -> Result<StatusChange<Order>> {
    let (error_type, error_detail) = codec::problem_columns(Some(&problem));
    let mut tx = s.begin_write().await?;
    let moved = sql::query(
        "UPDATE orders SET status = 'invalid', error_type = $2, error_detail = $3, updated_at = $4 \
         WHERE id = $1 AND status = 'processing'",
    )
    .bind(id.0)
    .bind(error_type)
    .bind(error_detail)
    .bind(codec::unix(now))
    .execute(&mut *tx)
    .await?
    .rows_affected()
        > 0;
    let order = rows::load_order(&mut tx, id)
        .await?
        .ok_or(Error::NotFound)?;
    if moved {
        reservation_rows::abandon_open(&mut tx, id, now).await?;
    }
    // A repeated failure report (a retried job) finds the order already invalid, and settles
    // the job all the same. An order in another state is left as it is, job and all.
    if moved || order.status == OrderStatus::Invalid {
        if let Some(job) = settle {
            state::settle_job(&mut tx, job).await?;
        }
        tx.commit().await?;
    }
    Ok(if moved {
        StatusChange::Changed(order)
    } else {
        StatusChange::Unchanged(order)
    })
}
