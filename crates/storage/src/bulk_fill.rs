//! Bulk fill (feature `bulk-fill`, turned on only by the load generator's `fill`): months of
//! history written in large transactions, so that a benchmark can start a server on a database
//! the size of a CA that has run for half a year.
//!
//! A filled database must be one the server could have written, or the benchmark measures
//! something else. So the rows that outlive an ACME exchange go through the functions the server
//! writes them with, in the caller's transaction: the certificate through finalization's
//! `store_certificate` (and whatever it writes with the certificate), its serial through
//! `reservation_rows::insert` and `mark_issued`, its validation evidence through
//! `evidence::copy_in`, the new authorizations and their challenges through
//! `orders::insert_authz`, a revocation through `certificates::mark_revoked` (which counts it in
//! its CRL shard), and each issuance's and revocation's audit record through `audit::append_in`.
//! Accounts are created by [`Storage::create_account`] itself, one transaction each. What a
//! finished exchange leaves behind is then pruned by the real pruner ([`Storage::prune`]) as the
//! caller's simulated clock moves on, so what is left is what pruning leaves.
//!
//! Three statements are this module's own, because the server's are private to the request
//! paths that hold them (`orders/create.rs` plans an order's authorizations inside its insert,
//! `authz.rs` decides a validation under the authorization's lock): the order row (inserted as
//! the finalize request leaves it: processing, with the CSR and the client's address), its links
//! to its authorizations, and the outcome of the validation (challenge and authorization valid,
//! with the evidence). Their columns are those the request paths write.

use std::net::IpAddr;

use acme_core::identifier::Identifier;
use acme_core::ids::AccountId;
use acme_core::ids::CertificateId;
use acme_core::ids::OrderId;
use acme_core::status::ChallengeType;
use acme_core::status::RevocationReason;
use time::OffsetDateTime;

use crate::Backend;
use crate::Result;
use crate::Storage;
use crate::audit;
use crate::audit::AuditEvent;
use crate::certificates;
use crate::codec;
use crate::error::Error;
use crate::evidence;
use crate::evidence::Evidence;
use crate::evidence::EvidenceRecord;
use crate::issuer_chains;
use crate::model::NewAuthz;
use crate::model::NewCertificate;
use crate::model::NewReservation;
use crate::orders;
use crate::reservation_rows;
use crate::sql;

/// One issuance of the history: an order for `identifiers`, one new authorization per
/// identifier validated with its first challenge, and the certificate signed for it.
#[derive(Debug, Clone)]
pub struct FillIssuance {
    pub account: AccountId,
    pub identifiers: Vec<Identifier>,
    /// `acme_core::identifier::canonical_set_hash` of the identifiers.
    pub set_hash: String,
    pub profile: String,
    /// One per identifier, same order: the challenges offered (type, token); the first is the
    /// one validated.
    pub challenges: Vec<Vec<(ChallengeType, String)>>,
    /// What the validation of every identifier saw.
    pub evidence: Evidence,
    pub ordered_at: OffsetDateTime,
    /// The order's expiry as created.
    pub order_expires_at: OffsetDateTime,
    /// A pending authorization's expiry as created.
    pub pending_authz_expires_at: OffsetDateTime,
    pub validated_at: OffsetDateTime,
    /// The valid authorizations' expiry.
    pub valid_authz_expires_at: OffsetDateTime,
    /// The finalize request: its time, its CSR and the client's address.
    pub finalized_at: OffsetDateTime,
    pub csr_der: Vec<u8>,
    pub client_ip: Option<IpAddr>,
    pub issued_at: OffsetDateTime,
    /// The configured name of the issuer that signed it.
    pub issuer: String,
    pub certificate: NewCertificate,
    /// The `certificate_issued` audit record; the order's id and the evidence digest are added
    /// here, as finalization adds the digest.
    pub audit: AuditEvent,
}

/// A certificate the fill stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilledCertificate {
    pub id: CertificateId,
    pub order: OrderId,
}

/// One revocation of the history.
#[derive(Debug, Clone)]
pub struct FillRevocation {
    pub certificate: CertificateId,
    pub reason: RevocationReason,
    pub at: OffsetDateTime,
    pub audit: AuditEvent,
}

impl Storage {
    /// Writes `batch` in one transaction, each issuance as the server writes it (module doc);
    /// the stored certificates in the batch's order. All or nothing.
    pub async fn fill_issuances(&self, batch: &[FillIssuance]) -> Result<Vec<FilledCertificate>> {
        let mut chain_ids = Vec::with_capacity(batch.len());
        for issuance in batch {
            chain_ids
                .push(issuer_chains::id_of(self, &issuance.certificate.issuer_chain_pem).await?);
        }
        let mut tx = self.begin_write().await?;
        let mut stored = Vec::with_capacity(batch.len());
        for (issuance, chain_id) in batch.iter().zip(chain_ids) {
            stored.push(self.fill_one(&mut tx, issuance, chain_id).await?);
        }
        tx.commit().await?;
        Ok(stored)
    }

    /// Revokes `batch` in one transaction through the server's revocation write, which counts
    /// each in its CRL shard; how many were revoked (a certificate already revoked keeps its
    /// first revocation and is not counted).
    pub async fn fill_revocations(&self, batch: &[FillRevocation]) -> Result<u64> {
        let mut tx = self.begin_write().await?;
        let mut revoked = 0;
        for revocation in batch {
            if certificates::mark_revoked(
                &mut tx,
                revocation.certificate,
                revocation.reason,
                revocation.at,
            )
            .await?
            {
                audit::append_in(&mut tx, &revocation.audit, revocation.at).await?;
                revoked += 1;
            }
        }
        tx.commit().await?;
        Ok(revoked)
    }

    /// Gives PostgreSQL's planner the statistics of what is written so far (`ANALYZE` of the
    /// whole database, which also makes every connection plan its prepared statements again);
    /// nothing on SQLite, whose planner needs none (`statistics.rs`). The caller runs it as the
    /// tables grow and once at the end, so that the dataset is kept with its statistics.
    ///
    /// The server analyzes a young database when its order creation counts 100, 1,000, ...
    /// orders (`statistics.rs`); the fill creates none that way, and autovacuum may be off (it
    /// is on the development server) or a minute late. Without statistics the join of
    /// `evidence::copy_in`, planned and cached while the tables were empty, scanned all of
    /// `challenges` for every issuance: 2,000 issuances read 9 million challenge rows, and the
    /// fill slowed down as the tables grew.
    pub async fn fill_analyze(&self) -> Result<()> {
        if self.backend == Backend::Postgres {
            sql::query("ANALYZE").execute(&*self.db).await?;
        }
        Ok(())
    }

    async fn fill_one(
        &self,
        conn: &mut sql::Conn,
        issuance: &FillIssuance,
        chain_id: i64,
    ) -> Result<FilledCertificate> {
        if issuance.challenges.len() != issuance.identifiers.len() {
            return Err(Error::Corrupt(
                "an issuance of the fill needs one challenge list per identifier".to_owned(),
            ));
        }
        let ordered_s = codec::unix(issuance.ordered_at);
        let finalized_s = codec::unix(issuance.finalized_at);
        let order_id: i64 = sql::query_scalar(
            "INSERT INTO orders (account_id, status, identifiers, set_hash, expires_at, \
             created_at, updated_at, profile, csr, finalize_client_ip) \
             VALUES ($1, 'processing', $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
        )
        .bind(issuance.account.0)
        .bind(codec::encode_identifiers(&issuance.identifiers))
        .bind(&issuance.set_hash)
        .bind(codec::unix(issuance.order_expires_at))
        .bind(ordered_s)
        .bind(finalized_s)
        .bind(&issuance.profile)
        .bind(issuance.csr_der.as_slice())
        .bind(issuance.client_ip.map(|ip| ip.to_string()))
        .fetch_one(&mut *conn)
        .await?;
        let order = OrderId(order_id);
        let evidence_json = evidence::encode(&issuance.evidence);
        let validated_s = codec::unix(issuance.validated_at);
        for (position, (identifier, challenges)) in issuance
            .identifiers
            .iter()
            .zip(&issuance.challenges)
            .enumerate()
        {
            let new = NewAuthz {
                identifier: identifier.clone(),
                expires_at: issuance.pending_authz_expires_at,
                challenges: challenges.clone(),
            };
            let authz = orders::insert_authz(conn, issuance.account, &new, ordered_s).await?;
            sql::query(
                "INSERT INTO order_authorizations (order_id, authz_id, position) VALUES ($1, $2, $3)",
            )
            .bind(order_id)
            .bind(authz)
            .bind(i64::try_from(position).map_err(|_| Error::Corrupt("too many identifiers".into()))?)
            .execute(&mut *conn)
            .await?;
            if let Some((kind, _)) = challenges.first() {
                sql::query(
                    "UPDATE challenges SET status = 'valid', validated_at = $3, evidence = $4 \
                     WHERE authz_id = $1 AND type = $2",
                )
                .bind(authz)
                .bind(kind.as_str())
                .bind(validated_s)
                .bind(&evidence_json)
                .execute(&mut *conn)
                .await?;
            }
            sql::query("UPDATE authorizations SET status = 'valid', expires_at = $2 WHERE id = $1")
                .bind(authz)
                .bind(codec::unix(issuance.valid_authz_expires_at))
                .execute(&mut *conn)
                .await?;
        }
        let cert = &issuance.certificate;
        let intent = NewReservation {
            serial: cert.serial.clone(),
            not_before: cert.not_before,
            not_after: cert.not_after,
            issuer_chain_pem: cert.issuer_chain_pem.clone(),
            issuer: issuance.issuer.clone(),
            crl_shard: cert.crl_shard,
        };
        reservation_rows::insert(conn, order, &intent, chain_id, finalized_s).await?;
        let issued_s = codec::unix(issuance.issued_at);
        let kept_until = self.evidence_kept_until(cert.not_after);
        let stored = orders::Stored {
            account_id: issuance.account.0,
            set_hash: &issuance.set_hash,
            chain_id,
            now_s: issued_s,
        };
        let certificate = orders::store_certificate(conn, order, stored, cert.clone()).await?;
        reservation_rows::mark_issued(conn, &cert.serial, certificate.id, issuance.issued_at)
            .await?;
        evidence::copy_in(
            conn,
            order,
            certificate.id,
            &cert.serial,
            issued_s,
            kept_until,
        )
        .await?;
        let kept_until = codec::time_from_unix(kept_until)?;
        let records = issuance
            .identifiers
            .iter()
            .zip(&issuance.challenges)
            .filter_map(|(identifier, challenges)| {
                challenges.first().map(|(kind, _)| EvidenceRecord {
                    identifier: identifier.value().to_owned(),
                    method: kind.as_str().to_owned(),
                    validated_at: issuance.validated_at,
                    addresses: issuance.evidence.addresses.clone(),
                    observed: issuance.evidence.observed.clone(),
                    caa: issuance.evidence.caa.clone(),
                    kept_until,
                })
            })
            .collect::<Vec<_>>();
        let mut event = issuance.audit.clone();
        if !event.detail.is_object() {
            event.detail = serde_json::json!({});
        }
        if let Some(detail) = event.detail.as_object_mut() {
            detail.insert("order_id".to_owned(), order_id.into());
            detail.insert(
                "evidence_sha256".to_owned(),
                evidence::digest(&records).into(),
            );
        }
        audit::append_in(conn, &event, issuance.issued_at).await?;
        Ok(FilledCertificate {
            id: certificate.id,
            order,
        })
    }
}
