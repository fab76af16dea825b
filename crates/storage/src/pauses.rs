//! Paused (account, identifier) pairs: zombie clients whose validations fail again and again.
//!
//! A pause is a row with `unpaused_at` NULL. Unpausing keeps the row and stamps `unpaused_at`, so
//! that a failure streak straight after a self-service unpause does not pause the pair again
//! within the grace period. Statements that take many identifiers are built for a chunk of them
//! at a time, so that no statement exceeds the bind-parameter limits of either backend and no
//! identifier costs a round trip of its own.

use std::collections::HashMap;

use crate::sql;
use crate::sql::Conn;
use crate::sql::Params;
use crate::sql::Row;
use crate::sql::one_off;
use acme_core::identifier::Identifier;
use acme_core::ids::AccountId;
use time::Duration;
use time::OffsetDateTime;

use crate::Backend;
use crate::Result;
use crate::Storage;
use crate::audit;
use crate::audit::AuditEvent;
use crate::codec;
use crate::model::PauseOutcome;
use crate::model::PausedPair;

/// Identifiers per statement: at most four parameters each (20,000), well below SQLite's 32,766 and
/// PostgreSQL's 65,535 bind parameters, and few statements even for 50,000 identifiers.
const CHUNK: usize = 5_000;

/// Lookups of up to this many identifiers (every order of a normal client) are padded to a power
/// of two by repeating the last identifier, so that they take one of five shapes that stay
/// prepared; every new order runs one. Longer lists are prepared for one use.
const PADDED_UP_TO: usize = 16;

/// Rows per UPDATE of an account-wide unpause: large enough that 50,000 pairs take five
/// statements, small enough that no single statement holds the write lock for long.
const UNPAUSE_BATCH: u32 = 10_000;

impl Storage {
    /// Pauses each distinct identifier for the account, in one transaction: a new pair is paused,
    /// a paused one stays as it is, one unpaused less than `grace` ago is left alone (the
    /// subscriber's unpause is recent), and one unpaused longer ago is paused again from `now`.
    /// Outcomes come in input order. `audit` is recorded in the same transaction when a pair
    /// is paused (or paused again), naming those pairs.
    pub async fn pause_identifiers(
        &self,
        account: AccountId,
        identifiers: &[Identifier],
        grace: Duration,
        now: OffsetDateTime,
        audit: &AuditEvent,
    ) -> Result<Vec<(Identifier, PauseOutcome)>> {
        let wanted = distinct(identifiers);
        let now_s = codec::unix(now);
        let grace_s = codec::seconds_ceil(grace);
        let mut tx = self.begin_write().await?;
        let mut existing = HashMap::new();
        for (kind, chunk) in chunks_by_kind(&wanted) {
            existing.extend(unpaused_at_of(self, &mut tx, account, kind, &chunk, true).await?);
        }
        let mut outcomes = Vec::with_capacity(wanted.len());
        let mut fresh = Vec::new();
        let mut again = Vec::new();
        for id in &wanted {
            let outcome = match existing.get(&key(id)) {
                None => {
                    fresh.push(*id);
                    PauseOutcome::Paused
                }
                Some(None) => PauseOutcome::AlreadyPaused,
                Some(Some(unpaused)) if now_s.saturating_sub(*unpaused) < grace_s => {
                    PauseOutcome::SkippedGrace
                }
                Some(Some(_)) => {
                    again.push(*id);
                    PauseOutcome::Repaused
                }
            };
            outcomes.push(((*id).clone(), outcome));
        }
        for chunk in fresh.chunks(CHUNK) {
            insert_pauses(self, &mut tx, account, chunk, now_s).await?;
        }
        for (kind, chunk) in chunks_by_kind(&again) {
            repause(self, &mut tx, account, kind, &chunk, now_s).await?;
        }
        if !fresh.is_empty() || !again.is_empty() {
            let paused = fresh.iter().chain(&again).copied();
            audit::append_in(&mut tx, &naming(audit, account, paused), now).await?;
        }
        tx.commit().await?;
        Ok(outcomes)
    }

    /// The pause row of one pair, paused or unpaused.
    pub async fn pause_state(
        &self,
        account: AccountId,
        identifier: &Identifier,
    ) -> Result<Option<PausedPair>> {
        let row = sql::query(
        "SELECT account_id, identifier_type, identifier_value, paused_at, unpaused_at FROM paused \
         WHERE account_id = $1 AND identifier_type = $2 AND identifier_value = $3",
    )
    .bind(account.0)
    .bind(identifier.kind().as_str())
    .bind(identifier.value())
    .fetch_optional(&self.db)
    .await?;
        row.as_ref().map(pair).transpose()
    }

    /// The identifiers among `identifiers` that are currently paused for the account, at most
    /// `limit`: what a new order must be refused for, capped so the problem detail stays short.
    pub async fn paused_among(
        &self,
        account: AccountId,
        identifiers: &[Identifier],
        limit: u32,
    ) -> Result<Vec<Identifier>> {
        let wanted = distinct(identifiers);
        let mut conn = self.db.acquire().await?;
        let mut rows = HashMap::new();
        for (kind, chunk) in chunks_by_kind(&wanted) {
            rows.extend(unpaused_at_of(self, &mut conn, account, kind, &chunk, false).await?);
        }
        // Filtered here rather than in SQL, so the lookup stays on the primary key (see the index).
        Ok(wanted
            .into_iter()
            .filter(|id| matches!(rows.get(&key(id)), Some(None)))
            .take(limit as usize)
            .cloned()
            .collect())
    }

    /// Currently paused identifiers of the account, oldest pause first, at most `limit`.
    pub async fn paused_for_account(
        &self,
        account: AccountId,
        limit: u32,
    ) -> Result<Vec<Identifier>> {
        let rows = sql::query(
            "SELECT identifier_type, identifier_value FROM paused \
         WHERE account_id = $1 AND unpaused_at IS NULL \
         ORDER BY paused_at, identifier_type, identifier_value LIMIT $2",
        )
        .bind(account.0)
        .bind(i64::from(limit))
        .fetch_all(&self.db)
        .await?;
        rows.iter().map(identifier_of).collect()
    }

    /// Lifts up to `max` current pauses of the account in batched UPDATEs and returns the
    /// identifiers it unpaused, so the caller can reset their failure counts. Fewer than `max`
    /// means nothing is left paused. Each batch records `audit`, naming its pairs, in its own
    /// transaction.
    pub async fn unpause_account(
        &self,
        account: AccountId,
        max: u32,
        now: OffsetDateTime,
        audit: &AuditEvent,
    ) -> Result<Vec<Identifier>> {
        let now_s = codec::unix(now);
        let mut unpaused = Vec::new();
        let mut left = max;
        // Each batch is its own transaction (the UPDATE and its record) and commits alone, as the
        // pause rows are independent: a
        // failure half-way leaves some pairs unpaused, and clicking again finishes the job. The batch
        // is picked by physical row id, which both backends look up directly whatever their table
        // statistics say: joining on the key let PostgreSQL, with a fresh table's estimates, rescan
        // the batch once per row (minutes for 50,000 rows). On PostgreSQL the rows are locked as they
        // are picked, so a concurrent unpause waits and then finds them already unpaused.
        while left > 0 {
            let batch = left.min(UNPAUSE_BATCH);
            let query = match self.backend {
                Backend::Postgres => sql::query(
                    "UPDATE paused SET unpaused_at = $2 \
                 WHERE ctid = ANY(ARRAY(SELECT ctid FROM paused \
                     WHERE account_id = $1 AND unpaused_at IS NULL LIMIT $3 FOR UPDATE)) \
                 AND unpaused_at IS NULL \
                 RETURNING identifier_type, identifier_value",
                ),
                Backend::Sqlite => sql::query(
                    "UPDATE paused SET unpaused_at = $2 \
                 WHERE rowid IN (SELECT rowid FROM paused \
                     WHERE account_id = $1 AND unpaused_at IS NULL LIMIT $3) \
                 RETURNING identifier_type, identifier_value",
                ),
            };
            let mut tx = self.begin_write().await?;
            let rows = query
                .bind(account.0)
                .bind(now_s)
                .bind(i64::from(batch))
                .fetch_all(&mut *tx)
                .await?;
            let done = rows.iter().map(identifier_of).collect::<Result<Vec<_>>>()?;
            if !done.is_empty() {
                audit::append_in(&mut tx, &naming(audit, account, done.iter()), now).await?;
            }
            tx.commit().await?;
            unpaused.extend(done);
            if rows.len() < batch as usize {
                break;
            }
            left -= batch;
        }
        Ok(unpaused)
    }

    /// Lifts the pauses of the given identifiers of the account; returns those that were paused.
    /// `audit` is recorded in the same transaction when any was, naming them.
    pub async fn unpause_identifiers(
        &self,
        account: AccountId,
        identifiers: &[Identifier],
        now: OffsetDateTime,
        audit: &AuditEvent,
    ) -> Result<Vec<Identifier>> {
        let wanted = distinct(identifiers);
        let now_s = codec::unix(now);
        let mut tx = self.begin_write().await?;
        let mut rows = HashMap::new();
        for (kind, chunk) in chunks_by_kind(&wanted) {
            rows.extend(unpaused_at_of(self, &mut tx, account, kind, &chunk, true).await?);
        }
        // The rows are locked (or, on SQLite, the database is): what was read as paused still is.
        let paused: Vec<&Identifier> = wanted
            .into_iter()
            .filter(|id| matches!(rows.get(&key(id)), Some(None)))
            .collect();
        for (kind, chunk) in chunks_by_kind(&paused) {
            let mut p = Params::new(self.backend);
            let (at, acct, kind_p, values) = (p.one(), p.one(), p.one(), p.many(chunk.len()));
            let sql = format!(
                "UPDATE paused SET unpaused_at = {at} \
             WHERE account_id = {acct} AND identifier_type = {kind_p} AND identifier_value IN ({values})"
            );
            let mut query = one_off(sql).bind(now_s).bind(account.0).bind(kind);
            for id in &chunk {
                query = query.bind(id.value());
            }
            query.execute(&mut *tx).await?;
        }
        if !paused.is_empty() {
            audit::append_in(
                &mut tx,
                &naming(audit, account, paused.iter().copied()),
                now,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(paused.into_iter().cloned().collect())
    }

    /// Pause rows, newest pause first, of every account or of one; lifted pauses only when
    /// `include_unpaused`; at most `limit`.
    pub async fn list_pauses(
        &self,
        account: Option<AccountId>,
        include_unpaused: bool,
        limit: u32,
    ) -> Result<Vec<PausedPair>> {
        // Only fixed fragments and placeholders are joined into the statement; values are bound.
        let mut p = Params::new(self.backend);
        let mut conditions = Vec::new();
        if account.is_some() {
            conditions.push(format!("account_id = {}", p.one()));
        }
        if !include_unpaused {
            conditions.push("unpaused_at IS NULL".to_owned());
        }
        let filter = if conditions.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", conditions.join(" AND "))
        };
        let sql = format!(
            "SELECT account_id, identifier_type, identifier_value, paused_at, unpaused_at FROM paused \
         {filter} ORDER BY paused_at DESC, account_id, identifier_type, identifier_value \
         LIMIT {}",
            p.one()
        );
        let mut query = one_off(sql);
        if let Some(account) = account {
            query = query.bind(account.0);
        }
        query = query.bind(i64::from(limit));
        let rows = query.fetch_all(&self.db).await?;
        rows.iter().map(pair).collect()
    }

    /// Inserts never-paused pairs as paused at `now` without reading first; pairs that already
    /// have a row are left alone. Only for tests that need accounts with tens of thousands of
    /// pauses; production code uses `pause_identifiers`.
    #[doc(hidden)]
    pub async fn bulk_insert_pauses_for_tests(
        &self,
        account: AccountId,
        identifiers: &[Identifier],
        now: OffsetDateTime,
    ) -> Result<()> {
        let wanted = distinct(identifiers);
        let mut tx = self.begin_write().await?;
        for chunk in wanted.chunks(CHUNK) {
            insert_pauses(self, &mut tx, account, chunk, codec::unix(now)).await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

/// `audit` for `account`, naming the pairs a pause or an unpause changed (known only here).
fn naming<'a>(
    audit: &AuditEvent,
    account: AccountId,
    changed: impl Iterator<Item = &'a Identifier>,
) -> AuditEvent {
    let mut event = audit.clone();
    event.account = Some(account);
    event.names = changed.map(|id| id.value().to_owned()).collect();
    event
}

/// The first occurrence of each identifier, in input order.
fn distinct(identifiers: &[Identifier]) -> Vec<&Identifier> {
    let mut seen = std::collections::HashSet::with_capacity(identifiers.len());
    identifiers.iter().filter(|id| seen.insert(*id)).collect()
}

fn key(id: &Identifier) -> (String, String) {
    (id.kind().as_str().to_owned(), id.value().to_owned())
}

/// The identifiers grouped by type and cut into statement-sized chunks, so that each statement
/// can use the primary key as (account, type, value IN list). A plain IN list rather than an OR of
/// pairs: SQLite caps expression depth at 1,000, and PostgreSQL plans long OR chains slowly.
fn chunks_by_kind<'a>(ids: &[&'a Identifier]) -> Vec<(&'static str, Vec<&'a Identifier>)> {
    let mut by_kind: Vec<(&'static str, Vec<&'a Identifier>)> = Vec::new();
    for id in ids {
        let kind = id.kind().as_str();
        match by_kind
            .iter_mut()
            .find(|(k, group)| *k == kind && group.len() < CHUNK)
        {
            Some((_, group)) => group.push(id),
            None => by_kind.push((kind, vec![id])),
        }
    }
    by_kind
}

/// `unpaused_at` of the rows that exist among `ids` (all of type `kind`), keyed by (type, value).
/// With `lock`, PostgreSQL locks the rows until the transaction ends, so that a decision taken on
/// what was read cannot race a concurrent pause or unpause (SQLite writers hold the database).
async fn unpaused_at_of(
    s: &Storage,
    conn: &mut Conn,
    account: AccountId,
    kind: &str,
    ids: &[&Identifier],
    lock: bool,
) -> Result<HashMap<(String, String), Option<i64>>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let lock_clause = match s.backend {
        Backend::Postgres if lock => " FOR UPDATE",
        _ => "",
    };
    let padded = ids.len() <= PADDED_UP_TO;
    let width = if padded {
        ids.len().next_power_of_two()
    } else {
        ids.len()
    };
    let mut p = Params::new(s.backend);
    let (acct, kind_p, values) = (p.one(), p.one(), p.many(width));
    let sql = format!(
        "SELECT identifier_type, identifier_value, unpaused_at FROM paused \
         WHERE account_id = {acct} AND identifier_type = {kind_p} \
         AND identifier_value IN ({values}){lock_clause}"
    );
    let mut query = if padded {
        sql::shaped(sql)
    } else {
        one_off(sql)
    };
    query = query.bind(account.0).bind(kind);
    // `ids` is not empty (checked above); the padding repeats its last value, which `IN` ignores.
    let last = ids.len() - 1;
    for i in 0..width {
        query = query.bind(ids[i.min(last)].value());
    }
    let mut existing = HashMap::new();
    for row in query.fetch_all(&mut *conn).await? {
        existing.insert(
            (
                row.try_get("identifier_type")?,
                row.try_get("identifier_value")?,
            ),
            row.try_get::<Option<i64>, _>("unpaused_at")?,
        );
    }
    Ok(existing)
}

/// One multi-row INSERT. `ON CONFLICT DO NOTHING` covers a concurrent pause of the same pair
/// on PostgreSQL, where it would otherwise abort the transaction; that pair is paused either way.
async fn insert_pauses(
    s: &Storage,
    conn: &mut Conn,
    account: AccountId,
    ids: &[&Identifier],
    now_s: i64,
) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let mut p = Params::new(s.backend);
    let rows = (0..ids.len())
        .map(|_| format!("({})", p.many(4)))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "INSERT INTO paused (account_id, identifier_type, identifier_value, paused_at) \
         VALUES {rows} ON CONFLICT DO NOTHING"
    );
    let mut query = one_off(sql);
    for id in ids {
        query = query
            .bind(account.0)
            .bind(id.kind().as_str())
            .bind(id.value())
            .bind(now_s);
    }
    query.execute(&mut *conn).await?;
    Ok(())
}

async fn repause(
    s: &Storage,
    conn: &mut Conn,
    account: AccountId,
    kind: &str,
    ids: &[&Identifier],
    now_s: i64,
) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let mut p = Params::new(s.backend);
    let (at, acct, kind_p, values) = (p.one(), p.one(), p.one(), p.many(ids.len()));
    let sql = format!(
        "UPDATE paused SET paused_at = {at}, unpaused_at = NULL \
         WHERE account_id = {acct} AND identifier_type = {kind_p} AND identifier_value IN ({values})"
    );
    let mut query = one_off(sql).bind(now_s).bind(account.0).bind(kind);
    for id in ids {
        query = query.bind(id.value());
    }
    query.execute(&mut *conn).await?;
    Ok(())
}

fn identifier_of(row: &Row) -> Result<Identifier> {
    codec::identifier(
        &row.try_get::<String, _>("identifier_type")?,
        &row.try_get::<String, _>("identifier_value")?,
    )
}

fn pair(row: &Row) -> Result<PausedPair> {
    Ok(PausedPair {
        account_id: AccountId(row.try_get("account_id")?),
        identifier: identifier_of(row)?,
        paused_at: codec::time_from_unix(row.try_get("paused_at")?)?,
        unpaused_at: codec::opt_time_from_unix(row.try_get("unpaused_at")?)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_group_by_kind_and_cap_their_size() {
        let names: Vec<Identifier> = (0..CHUNK + 1)
            .map(|i| Identifier::dns(&format!("h{i}.example")).unwrap())
            .collect();
        let ip = Identifier::ip("192.0.2.1").unwrap();
        let mut refs: Vec<&Identifier> = names.iter().collect();
        refs.insert(1, &ip);
        let chunks = chunks_by_kind(&refs);
        let shape: Vec<(&str, usize)> = chunks.iter().map(|(k, c)| (*k, c.len())).collect();
        assert_eq!(shape, vec![("dns", CHUNK), ("ip", 1), ("dns", 1)]);
    }

    #[test]
    fn distinct_keeps_first_occurrences_in_order() {
        let a = Identifier::dns("a.example").unwrap();
        let b = Identifier::dns("b.example").unwrap();
        let input = [a.clone(), b.clone(), a.clone()];
        assert_eq!(distinct(&input), vec![&a, &b]);
    }
}
