//! CRL shards: the revoked certificates of a shard, each shard's published CRL, and publishing
//! one with compare-and-set on its number. Shards are per issuer (migration 0020): each issuer's
//! CRLs list only the certificates it signed, since a CRL speaks for the key that signs it.
//!
//! Several instances share the database and may build the same shard at the same time; only the
//! one whose `number` still matches stores its CRL, the others' work is discarded. Every instance
//! serves the stored bytes, so relying parties see one CRL per shard and number, whichever
//! instance answers.
//!
//! A shard's CRL lists its revoked certificates and the serials reserved in it that were
//! possibly signed and then abandoned (`serial_reservations`, migration 0014): the issuing key
//! may have signed them, no certificate row exists to revoke, so the CRL revokes the serial.

use acme_core::ids::Serial;
use acme_core::status::RevocationReason;
use time::OffsetDateTime;

use crate::Result;
use crate::Storage;
use crate::ca_state::DEFAULT_ISSUER;
use crate::codec;
use crate::error::Error;
use crate::issuer_chains;
use crate::rows;
use crate::sql;
use crate::sql::Conn;
use crate::sql::Row;

/// What is known of one shard: its last published CRL and whether revocations came since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrlShardState {
    /// The issuer whose CRL this is (`ca_state::DEFAULT_ISSUER` for the implicit one).
    pub issuer: String,
    pub shard: u16,
    /// The number of the last published CRL; 0 before the first.
    pub number: u64,
    /// Revocations recorded in the shard so far (a counter, never lowered).
    pub revocations: u64,
    /// The value of `revocations` the last published CRL was built after.
    pub published_revocations: u64,
    /// `thisUpdate` of the last published CRL.
    pub this_update: Option<OffsetDateTime>,
}

impl CrlShardState {
    /// A revocation has been recorded since the last CRL was built.
    pub fn is_stale(&self) -> bool {
        self.number == 0 || self.revocations != self.published_revocations
    }
}

/// One revoked certificate to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevokedCertificate {
    pub serial: Serial,
    pub revoked_at: OffsetDateTime,
    pub reason: RevocationReason,
}

/// A CRL to store, or as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedCrl {
    pub number: u64,
    pub der: Vec<u8>,
    pub this_update: OffsetDateTime,
    pub next_update: OffsetDateTime,
}

impl Storage {
    /// Creates the rows of `issuer`'s shards `0..shards` that do not exist yet, so that
    /// revocations always find their shard's counter.
    pub async fn ensure_crl_shards(&self, issuer: &str, shards: u16) -> Result<()> {
        let mut tx = self.db.begin_write().await?;
        for shard in 0..shards {
            sql::query(
                "INSERT INTO crl_shards (issuer, shard) VALUES ($1, $2) \
                 ON CONFLICT (issuer, shard) DO NOTHING",
            )
            .bind(issuer)
            .bind(i64::from(shard))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await
    }

    /// Every CRL shard's state, of every issuer, by issuer and shard.
    pub async fn crl_shard_states(&self) -> Result<Vec<CrlShardState>> {
        let rows = sql::query(
            "SELECT issuer, shard, number, revocations, published_revocations, this_update \
         FROM crl_shards ORDER BY issuer, shard",
        )
        .fetch_all(&self.db)
        .await?;
        rows.iter().map(state).collect()
    }

    /// The revoked certificates `issuer` signed in `shard` that have not expired at `now` (a NULL
    /// issuer is [`DEFAULT_ISSUER`]), with the serials of the
    /// issuer `issuer_chain_pem` heads that were reserved, possibly signed and abandoned (see
    /// `abandoned_signed`). Certificates issued before CRLs were published have no shard and are
    /// listed in shard 0, and so are reservations made while no CRL was published.
    ///
    /// Abandoned serials are listed only under their own issuer chain too, since a CRL speaks for
    /// the key that signs it (RFC 5280 §5) and a serial another issuer signed is not this
    /// issuer's to revoke.
    pub async fn revoked_in_crl_shard(
        &self,
        issuer: &str,
        shard: u16,
        issuer_chain_pem: &str,
        now: OffsetDateTime,
    ) -> Result<Vec<RevokedCertificate>> {
        let chain_id = issuer_chains::id_of(self, issuer_chain_pem).await?;
        // Written as the expressions migration 0027's covering index holds, in its order: the
        // entries come from the index alone, already sorted. (`crl_shard = $1 OR ($1 = 0 AND
        // crl_shard IS NULL)` made SQLite walk every certificate in serial order instead.)
        let rows = sql::query(
            "SELECT serial, revoked_at, revocation_reason FROM certificates \
         WHERE revoked_at IS NOT NULL AND COALESCE(issuer, 'default') = $3 \
         AND COALESCE(crl_shard, 0) = $1 AND not_after > $2 ORDER BY serial",
        )
        .bind(i64::from(shard))
        .bind(codec::unix(now))
        .bind(issuer)
        .fetch_all(&self.db)
        .await?;
        let mut listed = rows
            .iter()
            .map(|row| {
                Ok(RevokedCertificate {
                    serial: rows::serial_column(row)?,
                    revoked_at: codec::time_from_unix(row.try_get("revoked_at")?)?,
                    reason: rows::revocation_reason_column(row)?
                        .unwrap_or(RevocationReason::Unspecified),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        listed.extend(abandoned_signed(self, shard, chain_id, now).await?);
        // A serial is in one list at most: a certificate is stored only against an open
        // reservation, and an abandoned one is never reopened.
        listed.sort_by(|a, b| a.serial.as_bytes().cmp(b.serial.as_bytes()));
        Ok(listed)
    }

    /// Stores `crl` as `issuer`'s shard `shard`'s CRL if the shard's number is still `expected`
    /// (what the caller built after). Returns whether it was stored; `false` means another
    /// instance published first.
    pub async fn publish_crl(
        &self,
        issuer: &str,
        shard: u16,
        expected: u64,
        revocations: u64,
        crl: &PublishedCrl,
    ) -> Result<bool> {
        let stored = sql::query(
            "UPDATE crl_shards SET number = $3, der = $4, this_update = $5, next_update = $6, \
         published_revocations = $7 WHERE shard = $1 AND number = $2 AND issuer = $8",
        )
        .bind(i64::from(shard))
        .bind(stored(expected)?)
        .bind(stored(crl.number)?)
        .bind(crl.der.as_slice())
        .bind(codec::unix(crl.this_update))
        .bind(codec::unix(crl.next_update))
        .bind(stored(revocations)?)
        .bind(issuer)
        .execute(&self.db)
        .await?
        .rows_affected();
        Ok(stored > 0)
    }

    /// `issuer`'s shard `shard`'s published CRL, if one has been published.
    pub async fn published_crl(&self, issuer: &str, shard: u16) -> Result<Option<PublishedCrl>> {
        let row = sql::query(
            "SELECT number, der, this_update, next_update FROM crl_shards \
         WHERE shard = $1 AND number > 0 AND issuer = $2",
        )
        .bind(i64::from(shard))
        .bind(issuer)
        .fetch_optional(&self.db)
        .await?;
        row.map(|row| {
            Ok(PublishedCrl {
                number: column(row.try_get::<i64, _>("number")?)?,
                der: row.try_get("der")?,
                this_update: codec::time_from_unix(row.try_get("this_update")?)?,
                next_update: codec::time_from_unix(row.try_get("next_update")?)?,
            })
        })
        .transpose()
    }
}

fn state(row: &Row) -> Result<CrlShardState> {
    Ok(CrlShardState {
        issuer: row.try_get("issuer")?,
        shard: column(row.try_get::<i64, _>("shard")?)?,
        number: column(row.try_get::<i64, _>("number")?)?,
        revocations: column(row.try_get::<i64, _>("revocations")?)?,
        published_revocations: column(row.try_get::<i64, _>("published_revocations")?)?,
        this_update: codec::opt_time_from_unix(row.try_get("this_update")?)?,
    })
}

/// The reason an abandoned serial is revoked with: [`RevocationReason::Unspecified`], which a
/// CRL writes as no reasonCode at all (RFC 5280 §5.3.1).
///
/// Why not cessationOfOperation: RFC 5280 gives it for a certificate "no longer needed for the
/// purpose for which it was issued", and the Baseline Requirements and Mozilla's root store
/// policy tie it to the subscriber's side (the site closed, the names given up): it asserts
/// something about the subscriber, who neither asked for this revocation nor ever received the
/// certificate. Nor superseded (nothing replaced it for the subscriber), nor any other reason,
/// each of which names a cause. This cause is the CA's own: it recorded a serial, may have
/// signed it, and never stored the certificate; both documents have the reasonCode omitted
/// when none of the listed reasons applies, which is this case.
pub const ABANDONED_SERIAL_REASON: RevocationReason = RevocationReason::Unspecified;

/// Serial reservations of `shard` (NULL: shard 0) under issuer chain `chain_id` that were
/// marked abandoned after signing was begun (`signings > 0`) and have not expired at `now`:
/// serials the issuing key may have signed that have no certificate row, so nothing else could
/// revoke them. Each is revoked as of the moment it was abandoned.
async fn abandoned_signed(
    s: &Storage,
    shard: u16,
    chain_id: i64,
    now: OffsetDateTime,
) -> Result<Vec<RevokedCertificate>> {
    let rows = sql::query(
        "SELECT serial, COALESCE(settled_at, reserved_at) AS revoked_at \
         FROM serial_reservations WHERE state = 'abandoned' AND signings > 0 \
         AND (crl_shard = $1 OR ($1 = 0 AND crl_shard IS NULL)) \
         AND issuer_chain_id = $3 AND not_after > $2",
    )
    .bind(i64::from(shard))
    .bind(codec::unix(now))
    .bind(chain_id)
    .fetch_all(&s.db)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(RevokedCertificate {
                serial: rows::serial_column(row)?,
                revoked_at: codec::time_from_unix(row.try_get("revoked_at")?)?,
                reason: ABANDONED_SERIAL_REASON,
            })
        })
        .collect()
}

/// Counts one more revocation in the shard of certificate `id` (shard 0 for a certificate
/// without one) of its issuer, in the revocation's own transaction. The shard's row is created
/// if it is not there yet: the CRL worker creates the configured shards at its first tick, and
/// a revocation that came before it (just after a start, or for a shard beyond a count since
/// lowered) would otherwise be counted nowhere, and its shard not seen stale.
pub(crate) async fn count_revocation(conn: &mut Conn, id: i64) -> Result<()> {
    // `WHERE true`: SQLite needs it to read `ON CONFLICT` as the upsert, not a join's.
    sql::query(
        "INSERT INTO crl_shards (issuer, shard, revocations) \
         SELECT COALESCE(issuer, 'default'), COALESCE(crl_shard, 0), 1 FROM certificates \
         WHERE id = $1 AND true \
         ON CONFLICT (issuer, shard) DO UPDATE SET revocations = crl_shards.revocations + 1",
    )
    .bind(id)
    .execute(conn)
    .await?;
    Ok(())
}

/// Counts one more revocation in shard `shard` (NULL: shard 0, where such serials are listed)
/// for a reservation marked abandoned after signing was begun, in the transaction that marks
/// it: its serial is listed from then on ([`revoked`]), so the shard's CRL is stale. Raised
/// in the reservation's issuer's shard (NULL: [`DEFAULT_ISSUER`]).
pub(crate) async fn count_abandoned(
    conn: &mut Conn,
    issuer: Option<&str>,
    shard: Option<i64>,
) -> Result<()> {
    // Created if missing, as in [`count_revocation`].
    sql::query(
        "INSERT INTO crl_shards (issuer, shard, revocations) VALUES ($1, $2, 1) \
         ON CONFLICT (issuer, shard) DO UPDATE SET revocations = crl_shards.revocations + 1",
    )
    .bind(issuer.unwrap_or(DEFAULT_ISSUER))
    .bind(shard.unwrap_or(0))
    .execute(conn)
    .await?;
    Ok(())
}

/// A non-negative integer column as the type it was stored from.
fn column<T: TryFrom<i64>>(n: i64) -> Result<T> {
    T::try_from(n).map_err(|_| Error::Corrupt(format!("crl_shards value {n}")))
}

/// A counter as the database stores it.
fn stored(n: u64) -> Result<i64> {
    i64::try_from(n).map_err(|_| Error::Corrupt(format!("crl_shards value {n} out of range")))
}
