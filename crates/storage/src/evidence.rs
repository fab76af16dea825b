//! Validation evidence: what the validator reached and saw for each identifier of a certificate,
//! kept after the challenges and authorizations it came from are pruned (migration 0019).
//!
//! The evidence of an attempt is kept with its challenge when the challenge is recorded valid
//! ([`Storage::record_validation`], [`Storage::record_valid_at_once`]). When a certificate is
//! stored, in the same transaction (on PostgreSQL the same statement), the evidence of every
//! authorization of its order, reused ones included, is copied into `certificate_evidence` with
//! the identifier, the method and the time, to be kept until `kept_until`: the retention
//! ([`Storage::with_evidence_retention`]) after issuance, and never before the certificate
//! expires, because a certificate still in use must be explainable. Only the pruner deletes those
//! rows, past `kept_until`.

use acme_core::ids::CertificateId;
use acme_core::ids::OrderId;
use acme_core::ids::Serial;
use serde::Deserialize;
use serde::Serialize;
use time::Duration;
use time::OffsetDateTime;

use crate::Result;
use crate::Storage;
use crate::codec;
use crate::error::Error;
use crate::sql;
use crate::sql::Conn;

/// Default of `database.evidence-retention`: two years, how long the CA/Browser Forum's Baseline
/// Requirements (§5.4.3, §5.5.2) have a CA keep the records of its validations at the least.
pub const DEFAULT_EVIDENCE_RETENTION: Duration = Duration::days(730);

/// What one successful validation attempt established, as the validator reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    /// The addresses connected to, in order (`IP:port`; every hop of an http-01 redirect), or
    /// for dns-01 the name queried and the resolvers asked.
    pub addresses: Vec<String>,
    /// What was seen, in words ("key authorization matched at ... (HTTP 200)").
    pub observed: String,
    /// The CAA records that allowed issuance and where they were found, or why none applied.
    pub caa: Vec<String>,
}

/// The evidence kept for one identifier of a certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EvidenceRecord {
    /// The identifier's value (a DNS name or an IP address, lower case).
    pub identifier: String,
    /// `http-01`, `dns-01` or `tls-alpn-01`.
    pub method: String,
    #[serde(with = "time::serde::rfc3339")]
    pub validated_at: OffsetDateTime,
    pub addresses: Vec<String>,
    pub observed: String,
    pub caa: Vec<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub kept_until: OffsetDateTime,
}

/// The SHA-256, in lower-case hex, of the canonical JSON of `records`: a JSON array of the
/// records in the order [`Storage::certificate_evidence`] returns them, each an object with the
/// fields in declaration order (identifier, method, validated_at, addresses, observed, caa,
/// kept_until), times in RFC 3339 UTC, no whitespace. The `certificate_issued` audit record
/// carries it, so the evidence kept can be shown to be what was there at issuance.
pub fn digest(records: &[EvidenceRecord]) -> String {
    let canonical = canonical_json(records);
    hex::encode(aws_lc_rs::digest::digest(
        &aws_lc_rs::digest::SHA256,
        canonical.as_bytes(),
    ))
}

/// The canonical JSON [`digest`] hashes.
pub fn canonical_json(records: &[EvidenceRecord]) -> String {
    // Serializing strings, string lists and RFC 3339 times (years 0-9999, which every
    // certificate time is) cannot fail; an empty array would only hide a bug, never data.
    serde_json::to_string(records).unwrap_or_else(|_| "[]".to_owned())
}

/// Evidence written for a challenge that became valid without one (validated before migration
/// 0019, or by a caller that had none): the certificate's record says so instead of missing.
pub(crate) const NONE_RECORDED: &str =
    r#"{"addresses":[],"observed":"no evidence was recorded for this validation","caa":[]}"#;

impl Storage {
    /// Sets `database.evidence-retention`: how long the evidence of a certificate is kept after
    /// the certificate expires.
    #[must_use]
    pub fn with_evidence_retention(mut self, retention: Duration) -> Self {
        self.evidence_retention = retention;
        self
    }

    /// The validation evidence kept for the certificate with `serial`, one record per identifier
    /// in the order's order; empty when none is kept (an unknown serial, or past `kept_until`
    /// and pruned).
    pub async fn certificate_evidence(&self, serial: &Serial) -> Result<Vec<EvidenceRecord>> {
        let mut conn = self.db.acquire().await?;
        let rows = sql::query(
            "SELECT identifier_value, method, validated_at, evidence, kept_until \
             FROM certificate_evidence WHERE serial = $1 ORDER BY id",
        )
        .bind(serial.to_hex())
        .fetch_all(&mut conn)
        .await?;
        rows.iter()
            .map(|row| {
                let evidence: Evidence =
                    serde_json::from_str(&row.try_get::<String, _>("evidence")?)
                        .map_err(|e| Error::Corrupt(format!("evidence of {serial}: {e}")))?;
                Ok(EvidenceRecord {
                    identifier: row.try_get("identifier_value")?,
                    method: row.try_get("method")?,
                    validated_at: codec::time_from_unix(row.try_get("validated_at")?)?,
                    addresses: evidence.addresses,
                    observed: evidence.observed,
                    caa: evidence.caa,
                    kept_until: codec::time_from_unix(row.try_get("kept_until")?)?,
                })
            })
            .collect()
    }

    /// When the evidence of a certificate expiring at `not_after` may go: the retention counted
    /// from the certificate's expiry, as the Baseline Requirements (§5.5.2) count it for the
    /// records of a public CA, so the evidence of a certificate outlives the certificate by
    /// the whole retention however long it was valid.
    pub(crate) fn evidence_kept_until(&self, not_after: OffsetDateTime) -> i64 {
        codec::unix(not_after).saturating_add(self.evidence_retention.whole_seconds())
    }

    /// Deletes at most `limit` evidence rows kept until before `now`; the rows deleted and how
    /// long the transaction held the writer.
    pub(crate) async fn prune_evidence(
        &self,
        now: OffsetDateTime,
        limit: u32,
    ) -> Result<(u64, std::time::Duration)> {
        let mut tx = self.begin_write().await?;
        let held = std::time::Instant::now();
        let deleted = sql::query(
            "DELETE FROM certificate_evidence WHERE id IN \
             (SELECT id FROM certificate_evidence WHERE kept_until < $1 LIMIT $2)",
        )
        .bind(codec::unix(now))
        .bind(i64::from(limit))
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok((deleted, held.elapsed()))
    }
}

/// The JSON kept in `challenges.evidence`.
pub(crate) fn encode(evidence: &Evidence) -> String {
    // A struct of strings always serializes.
    serde_json::to_string(evidence).unwrap_or_else(|_| NONE_RECORDED.to_owned())
}

/// Copies the evidence of order `order`'s authorizations for the certificate just stored, in the
/// caller's transaction (SQLite; PostgreSQL does it in `certeasy_complete_reserved`'s statement).
pub(crate) async fn copy_in(
    conn: &mut Conn,
    order: OrderId,
    certificate: CertificateId,
    serial: &Serial,
    now_s: i64,
    kept_until: i64,
) -> Result<u64> {
    // The evidence of every valid challenge of the order's authorizations: `$3` dates one with
    // no time, `$4` stands for missing evidence. PostgreSQL runs the same SELECT in the statement
    // that stores the certificate (`orders/finalize.rs`).
    Ok(sql::query(
        "INSERT INTO certificate_evidence (certificate_id, serial, identifier_type, \
         identifier_value, method, validated_at, evidence, kept_until) \
         SELECT $1, $2, a.identifier_type, a.identifier_value, c.type, \
         COALESCE(c.validated_at, $3), COALESCE(c.evidence, $4), $5 \
         FROM order_authorizations oa JOIN authorizations a ON a.id = oa.authz_id \
         JOIN challenges c ON c.authz_id = a.id AND c.status = 'valid' \
         WHERE oa.order_id = $6 ORDER BY oa.position",
    )
    .bind(certificate.0)
    .bind(serial.to_hex())
    .bind(now_s)
    .bind(NONE_RECORDED)
    .bind(kept_until)
    .bind(order.0)
    .execute(&mut *conn)
    .await?
    .rows_affected())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(identifier: &str) -> EvidenceRecord {
        EvidenceRecord {
            identifier: identifier.to_owned(),
            method: "http-01".to_owned(),
            validated_at: OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap(),
            addresses: vec!["127.0.0.1:80".to_owned()],
            observed: "key authorization matched".to_owned(),
            caa: vec!["no CAA records (climbed to the root)".to_owned()],
            kept_until: OffsetDateTime::from_unix_timestamp(1_763_072_000).unwrap(),
        }
    }

    #[test]
    fn the_digest_is_of_a_fixed_canonical_form() {
        let records = [record("a.test"), record("b.test")];
        let json = canonical_json(&records);
        assert!(
            json.starts_with(r#"[{"identifier":"a.test","method":"http-01","validated_at":"2023-11-14T22:13:20Z","addresses":["127.0.0.1:80"]"#),
            "{json}"
        );
        let digest = digest(&records);
        assert_eq!(digest.len(), 64);
        assert_eq!(digest, super::digest(&[record("a.test"), record("b.test")]));
        assert_ne!(digest, super::digest(&[record("b.test"), record("a.test")]));
        assert_ne!(digest, super::digest(&records[..1]));
    }

    #[test]
    fn evidence_round_trips_through_its_column() {
        let evidence = Evidence {
            addresses: vec!["[::1]:80".to_owned()],
            observed: "seen".to_owned(),
            caa: vec![],
        };
        let back: Evidence = serde_json::from_str(&encode(&evidence)).unwrap();
        assert_eq!(back, evidence);
        let none: Evidence = serde_json::from_str(NONE_RECORDED).unwrap();
        assert!(none.observed.contains("no evidence"));
    }
}
