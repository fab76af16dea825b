//! The audit log (migration 0018): who changed what, when and why, one record per decision,
//! written in the same transaction as the change it records, so that a change without its record
//! (or a record of a change that did not happen) cannot be committed.
//!
//! **The chain.** Records are numbered `seq` = 1, 2, 3, … with no gap. Each carries `prev_hash`,
//! the `hash` of the record before it (64 zeros for record 1), and its own `hash`:
//!
//! ```text
//! hash = SHA-256( prev_hash (32 raw bytes) || seq (8 bytes, big-endian) || body )
//! body = "certeasy.audit.v1\n" || at_ms (i64 BE) || str(kind) || str(actor_kind) || str(actor)
//!        || opt(operator) || opt(client_ip) || opt_i64(account_id) || opt(serial)
//!        || str(names) || str(reason) || str(detail)
//! str(s) = len(s) as u32 BE || s          opt(None) = 0x00   opt(Some(s)) = 0x01 || str(s)
//! opt_i64(None) = 0x00                    opt_i64(Some(n)) = 0x01 || n as i64 BE
//! ```
//!
//! over the columns exactly as stored (`detail` is the stored JSON text, not a re-serialization),
//! so verification recomputes every hash from the row and any edit of any column is detected.
//! The version is the `format` column (1 = the encoding above); a future encoding gets a new
//! number and old records keep verifying with theirs. The one-row `audit_head` holds the last seq
//! and hash: deleting the newest records leaves it pointing past them, and its row lock keeps
//! concurrent appenders on one chain. Rewriting the whole chain from an edited record on
//! (and the head with it) is only detectable against a head hash kept elsewhere, which is why
//! `admin audit verify` prints it and takes `--expect-head`.
//!
//! **Appending on SQLite.** A write transaction already holds the only writer (`BEGIN
//! IMMEDIATE`), so [`append_in`] reads the head, inserts the record and moves the head: three
//! in-process statements with nothing to race.
//!
//! **Appending on PostgreSQL** is in two steps, so that no audited transaction holds a lock
//! another one needs. [`append_in`] inserts the record into `audit_pending` (migration 0021),
//! without seq or hash, in the caller's transaction: the record commits with the change or not
//! at all, and taking no shared lock, concurrent commits are flushed to disk together. (The
//! first version appended to the chain in the caller's transaction; the head's row lock was then
//! held until each commit reached the disk, so audited commits in the whole cluster went one at
//! a time, and issuance at 32 concurrent lost 15 %.) [`Storage::seal_audit`], the sealer, then
//! chains what has committed: under the head's row lock (so one sealer at a time in the
//! cluster, and never a fork), it deletes a batch of pending rows, numbers them in `id` order
//! after the head, hashes each onto the one before, inserts them into `audit_log` and moves the
//! head, in one transaction. `seq` is therefore the order records were sealed in: `id` order
//! within a batch, but a record whose transaction committed late joins a later batch, after
//! records with higher ids; it says which record came before which in the chain, not which
//! commit came first (`at_ms` says when each was decided).
//!
//! Every instance runs the sealer four times a second (`workers::audit_sealer`), once more when
//! it stops, and every read of the log runs it first; so while sealing works, a list, a show or
//! a verify sees every committed record. A crash between a commit and its sealing leaves the
//! record pending for the next sealer of any instance. The price: until it is sealed, a
//! committed record is not covered by the chain, so an edit or deletion of a pending row by
//! someone with write access to the database is not detected. Verification reports what is
//! pending and fails when a record has waited longer than [`STALE_PENDING`] (a sealer that
//! fails, or a record of a format this version cannot hash, which it leaves pending rather than
//! stopping at). [`Storage::append_audit`], a record in a transaction of its own, seals what is
//! pending and then appends after it, under the same lock.
//!
//! Records are never pruned: `prune.rs` does not touch `audit_log` or `audit_head`, and must not
//! (a gap in `seq` is exactly what verification reports as a deletion).

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use acme_core::ids::AccountId;
use acme_core::ids::Serial;
use time::OffsetDateTime;

use crate::Backend;
use crate::Result;
use crate::Storage;
use crate::codec;
use crate::error::Error;
use crate::sql;
use crate::sql::Conn;
use crate::sql::Params;
use crate::sql::Row;

/// The hash before record 1.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The only encoding so far (see the module doc).
const FORMAT_V1: i64 = 1;
const MAGIC_V1: &[u8] = b"certeasy.audit.v1\n";

/// The records a page holds when the filter says nothing.
const DEFAULT_LIMIT: u32 = 100;
/// The most a page holds.
pub const MAX_LIMIT: u32 = 10_000;
/// The records verification reads per statement.
const VERIFY_PAGE: i64 = 2_000;

/// What was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuditKind {
    AccountCreated,
    AccountContactsUpdated,
    AccountKeyChanged,
    AccountDeactivated,
    CertificateIssued,
    CertificateRevoked,
    EabKeyCreated,
    EabKeyBound,
    EabKeyRevoked,
    AccountPaused,
    AccountUnpaused,
    LimitsChanged,
    ConfigReloaded,
    AdminAction,
    IssuerActivated,
    KeyBlocked,
    KeyUnblocked,
}

impl AuditKind {
    /// Every kind, in the order of the list above.
    pub const ALL: [AuditKind; 17] = [
        AuditKind::AccountCreated,
        AuditKind::AccountContactsUpdated,
        AuditKind::AccountKeyChanged,
        AuditKind::AccountDeactivated,
        AuditKind::CertificateIssued,
        AuditKind::CertificateRevoked,
        AuditKind::EabKeyCreated,
        AuditKind::EabKeyBound,
        AuditKind::EabKeyRevoked,
        AuditKind::AccountPaused,
        AuditKind::AccountUnpaused,
        AuditKind::LimitsChanged,
        AuditKind::ConfigReloaded,
        AuditKind::AdminAction,
        AuditKind::IssuerActivated,
        AuditKind::KeyBlocked,
        AuditKind::KeyUnblocked,
    ];

    /// The stored and printed name (snake_case).
    pub fn as_str(self) -> &'static str {
        match self {
            AuditKind::AccountCreated => "account_created",
            AuditKind::AccountContactsUpdated => "account_contacts_updated",
            AuditKind::AccountKeyChanged => "account_key_changed",
            AuditKind::AccountDeactivated => "account_deactivated",
            AuditKind::CertificateIssued => "certificate_issued",
            AuditKind::CertificateRevoked => "certificate_revoked",
            AuditKind::EabKeyCreated => "eab_key_created",
            AuditKind::EabKeyBound => "eab_key_bound",
            AuditKind::EabKeyRevoked => "eab_key_revoked",
            AuditKind::AccountPaused => "account_paused",
            AuditKind::AccountUnpaused => "account_unpaused",
            AuditKind::LimitsChanged => "limits_changed",
            AuditKind::ConfigReloaded => "config_reloaded",
            AuditKind::AdminAction => "admin_action",
            AuditKind::IssuerActivated => "issuer_activated",
            AuditKind::KeyBlocked => "key_blocked",
            AuditKind::KeyUnblocked => "key_unblocked",
        }
    }
}

impl fmt::Display for AuditKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AuditKind {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        AuditKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("unknown audit record kind {s:?}"))
    }
}

/// Who did it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    /// An ACME account, through the ACME API.
    Account(AccountId),
    /// A caller of the admin API: the token's identity ([`admin_token_identity`]), never the
    /// token, and the operator's name when the caller gave one.
    Admin {
        token: String,
        operator: Option<String>,
    },
    /// A command run locally with no admin API (its operator's name).
    Operator(String),
    /// The server itself: workers, a reload, the pruner.
    System,
    /// The holder of a certificate's private key, who is no account (RFC 8555 §7.6: a
    /// revocation signed with the certificate's own key), by the RFC 7638 thumbprint of that
    /// key as a JWK. Stored as `actor_kind` `certificate_key` with the thumbprint as `actor`:
    /// the hash covers both columns as strings, so this variant needs no new record format.
    CertificateKey(String),
}

impl Actor {
    /// The stored `actor_kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            Actor::Account(_) => "account",
            Actor::Admin { .. } => "admin",
            Actor::Operator(_) => "operator",
            Actor::System => "system",
            Actor::CertificateKey(_) => "certificate_key",
        }
    }

    /// The stored `actor` and `operator` columns.
    fn columns(&self) -> (String, Option<String>) {
        match self {
            Actor::Account(id) => (id.0.to_string(), None),
            Actor::Admin { token, operator } => (token.clone(), operator.clone()),
            Actor::Operator(name) => (name.clone(), None),
            Actor::System => (String::new(), None),
            Actor::CertificateKey(thumbprint) => (thumbprint.clone(), None),
        }
    }

    fn from_columns(kind: &str, actor: &str, operator: Option<String>) -> Result<Self> {
        Ok(match kind {
            "account" => {
                Actor::Account(AccountId(actor.parse::<i64>().map_err(|e| {
                    Error::Corrupt(format!("audit actor account {actor:?}: {e}"))
                })?))
            }
            "admin" => Actor::Admin {
                token: actor.to_owned(),
                operator,
            },
            "operator" => Actor::Operator(actor.to_owned()),
            "system" => Actor::System,
            "certificate_key" => Actor::CertificateKey(actor.to_owned()),
            other => return Err(Error::Corrupt(format!("audit actor kind {other:?}"))),
        })
    }
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Actor::Account(id) => write!(f, "account {id}"),
            Actor::Admin {
                token,
                operator: Some(op),
            } => write!(f, "admin {op} ({token})"),
            Actor::Admin {
                token,
                operator: None,
            } => write!(f, "admin ({token})"),
            Actor::Operator(name) => write!(f, "operator {name}"),
            Actor::System => f.write_str("system"),
            Actor::CertificateKey(thumbprint) => write!(f, "certificate key {thumbprint}"),
        }
    }
}

/// How an admin token is named in the log: `sha256:` and the first 16 hex digits of the
/// SHA-256 of the token. Enough to tell tokens apart and to match one the operator holds,
/// useless for calling the API.
pub fn admin_token_identity(token: &str) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, token.as_bytes());
    let hex = hex::encode(digest.as_ref());
    format!("sha256:{}", &hex[..16])
}

/// One decision to record.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEvent {
    pub kind: AuditKind,
    pub actor: Actor,
    pub client_ip: Option<IpAddr>,
    pub account: Option<AccountId>,
    pub serial: Option<Serial>,
    /// The identifiers concerned (lower-case DNS names, IP addresses as text).
    pub names: Vec<String>,
    /// Why: the verdict in words.
    pub reason: String,
    /// Anything else (an EAB key id, a limit before and after, an evidence digest, …).
    pub detail: serde_json::Value,
}

impl AuditEvent {
    /// An event with nothing but its kind, actor and reason; set the other fields as needed.
    pub fn new(kind: AuditKind, actor: Actor, reason: impl Into<String>) -> Self {
        Self {
            kind,
            actor,
            client_ip: None,
            account: None,
            serial: None,
            names: Vec::new(),
            reason: reason.into(),
            detail: serde_json::Value::Null,
        }
    }
}

/// A stored record.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRecord {
    pub seq: i64,
    pub at: OffsetDateTime,
    pub event: AuditEvent,
    /// Lower-case hex.
    pub prev_hash: String,
    /// Lower-case hex.
    pub hash: String,
}

/// Which records to list. Newest first, unless `after_seq` is set: then oldest first from
/// there (the order an export pages in).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditFilter {
    pub since: Option<OffsetDateTime>,
    pub until: Option<OffsetDateTime>,
    pub account: Option<AccountId>,
    /// Records naming this identifier (exact, compared in lower case).
    pub name: Option<String>,
    pub serial: Option<Serial>,
    pub kind: Option<AuditKind>,
    /// Records after this seq, oldest first.
    pub after_seq: Option<i64>,
    /// Records before this seq, newest first (the next page of a listing).
    pub before_seq: Option<i64>,
    /// At most this many (0: 100; never more than [`MAX_LIMIT`]).
    pub limit: u32,
}

/// The first record at which the chain does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokenLink {
    pub seq: i64,
    pub why: String,
}

/// What verification found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainCheck {
    /// Records read.
    pub records: u64,
    /// The chain head as the database holds it.
    pub head_seq: i64,
    pub head_hash: String,
    pub first_broken: Option<BrokenLink>,
    /// Records committed on PostgreSQL but not chained when verification ended, which it did
    /// not cover: normally none, or those of the last fraction of a second.
    pub pending: Pending,
}

/// Records committed but not yet chained (PostgreSQL).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pending {
    pub records: u64,
    /// When the oldest of them was decided.
    pub oldest: Option<OffsetDateTime>,
}

/// How long a committed record may stay unchained before verification fails: far beyond the
/// sealer's quarter-second pass, so only a sealer that fails (a record it cannot hash, a
/// database refusing writes, no instance running) trips it.
pub const STALE_PENDING: time::Duration = time::Duration::minutes(1);

impl Pending {
    /// Whether a record has waited longer than [`STALE_PENDING`] at `now`.
    pub fn is_stale(&self, now: OffsetDateTime) -> bool {
        self.oldest
            .is_some_and(|oldest| now - oldest > STALE_PENDING)
    }
}

/// A record's stored columns other than `seq` and the hashes, exactly as stored: what the hash
/// covers.
struct Columns {
    format: i64,
    at_ms: i64,
    kind: String,
    actor_kind: String,
    actor: String,
    operator: Option<String>,
    client_ip: Option<String>,
    account_id: Option<i64>,
    serial: Option<String>,
    names: String,
    reason: String,
    detail: String,
}

const COLUMNS: &str = "seq, format, at_ms, kind, actor_kind, actor, operator, client_ip, \
                       account_id, serial, names, reason, detail, prev_hash, hash";

impl Columns {
    fn of(event: &AuditEvent, now: OffsetDateTime) -> Result<Self> {
        let (actor, operator) = event.actor.columns();
        let detail = serde_json::to_string(&event.detail)
            .map_err(|e| Error::Corrupt(format!("audit detail: {e}")))?;
        Ok(Self {
            format: FORMAT_V1,
            at_ms: unix_ms(now),
            kind: event.kind.as_str().to_owned(),
            actor_kind: event.actor.kind().to_owned(),
            actor,
            operator,
            client_ip: event.client_ip.map(|ip| ip.to_string()),
            account_id: event.account.map(|a| a.0),
            serial: event.serial.as_ref().map(Serial::to_hex),
            names: codec::encode_list(&event.names),
            reason: event.reason.clone(),
            detail,
        })
    }

    fn read(row: &Row) -> Result<Self> {
        Ok(Self {
            format: row.try_get("format")?,
            at_ms: row.try_get("at_ms")?,
            kind: row.try_get("kind")?,
            actor_kind: row.try_get("actor_kind")?,
            actor: row.try_get("actor")?,
            operator: row.try_get("operator")?,
            client_ip: row.try_get("client_ip")?,
            account_id: row.try_get("account_id")?,
            serial: row.try_get("serial")?,
            names: row.try_get("names")?,
            reason: row.try_get("reason")?,
            detail: row.try_get("detail")?,
        })
    }

    /// The canonical encoding the hash covers (the module doc gives it).
    fn body(&self) -> Result<Vec<u8>> {
        if self.format != FORMAT_V1 {
            return Err(Error::Corrupt(format!(
                "audit record format {} (this version knows 1)",
                self.format
            )));
        }
        let mut out = Vec::with_capacity(
            128 + self.names.len() + self.reason.len() + self.detail.len() + self.actor.len(),
        );
        out.extend_from_slice(MAGIC_V1);
        out.extend_from_slice(&self.at_ms.to_be_bytes());
        put_str(&mut out, &self.kind)?;
        put_str(&mut out, &self.actor_kind)?;
        put_str(&mut out, &self.actor)?;
        put_opt(&mut out, self.operator.as_deref())?;
        put_opt(&mut out, self.client_ip.as_deref())?;
        match self.account_id {
            Some(id) => {
                out.push(1);
                out.extend_from_slice(&id.to_be_bytes());
            }
            None => out.push(0),
        }
        put_opt(&mut out, self.serial.as_deref())?;
        put_str(&mut out, &self.names)?;
        put_str(&mut out, &self.reason)?;
        put_str(&mut out, &self.detail)?;
        Ok(out)
    }

    fn event(&self) -> Result<AuditEvent> {
        Ok(AuditEvent {
            kind: self.kind.parse::<AuditKind>().map_err(Error::Corrupt)?,
            actor: Actor::from_columns(&self.actor_kind, &self.actor, self.operator.clone())?,
            client_ip: self
                .client_ip
                .as_deref()
                .map(|ip| {
                    ip.parse::<IpAddr>()
                        .map_err(|e| Error::Corrupt(format!("audit client_ip {ip:?}: {e}")))
                })
                .transpose()?,
            account: self.account_id.map(AccountId),
            serial: self
                .serial
                .as_deref()
                .map(|s| {
                    Serial::from_hex(s).ok_or_else(|| Error::Corrupt(format!("audit serial {s:?}")))
                })
                .transpose()?,
            names: codec::decode_list(&self.names),
            reason: self.reason.clone(),
            detail: serde_json::from_str(&self.detail)
                .map_err(|e| Error::Corrupt(format!("audit detail: {e}")))?,
        })
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) -> Result<()> {
    let len = u32::try_from(s.len())
        .map_err(|_| Error::Corrupt("an audit field longer than 4 GiB".into()))?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

fn put_opt(out: &mut Vec<u8>, s: Option<&str>) -> Result<()> {
    match s {
        Some(s) => {
            out.push(1);
            put_str(out, s)
        }
        None => {
            out.push(0);
            Ok(())
        }
    }
}

/// `SHA-256(prev_hash || seq || body)` in lower-case hex; `None` when `prev_hash` is not 32
/// bytes of hex (a stored value someone edited).
fn link_hash(prev_hash: &str, seq: i64, body: &[u8]) -> Option<String> {
    let prev = hex::decode(prev_hash).ok().filter(|b| b.len() == 32)?;
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    ctx.update(&prev);
    ctx.update(&seq.to_be_bytes());
    ctx.update(body);
    Some(hex::encode(ctx.finish().as_ref()))
}

fn unix_ms(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
}

fn time_from_ms(ms: i64) -> Result<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .map_err(|e| Error::Corrupt(format!("audit timestamp {ms}: {e}")))
}

fn record(row: &Row) -> Result<AuditRecord> {
    let columns = Columns::read(row)?;
    Ok(AuditRecord {
        seq: row.try_get("seq")?,
        at: time_from_ms(columns.at_ms)?,
        event: columns.event()?,
        prev_hash: row.try_get("prev_hash")?,
        hash: row.try_get("hash")?,
    })
}

/// Records `event` inside the caller's open write transaction, so that it commits with the
/// change it records or not at all. On SQLite it is chained at once; on PostgreSQL it waits in
/// `audit_pending` for the sealer (see the module doc), taking no lock another writer needs.
pub(crate) async fn append_in(
    conn: &mut Conn,
    event: &AuditEvent,
    now: OffsetDateTime,
) -> Result<()> {
    let columns = Columns::of(event, now)?;
    match conn.backend() {
        Backend::Postgres => {
            bind_columns(sql::query(PENDING_INSERT), columns)
                .execute(&mut *conn)
                .await?;
        }
        Backend::Sqlite => {
            let head = lock_head(conn).await?;
            chain_after(conn, head, vec![columns]).await?;
        }
    }
    Ok(())
}

/// The pending insert on PostgreSQL, `$1` to `$12` the columns from `format` to `detail`.
const PENDING_INSERT: &str = "INSERT INTO audit_pending (format, at_ms, kind, actor_kind, actor, \
     operator, client_ip, account_id, serial, names, reason, detail) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";

/// Binds the columns from `format` to `detail`, in that order.
fn bind_columns(query: sql::Query, c: Columns) -> sql::Query {
    query
        .bind(c.format)
        .bind(c.at_ms)
        .bind(c.kind)
        .bind(c.actor_kind)
        .bind(c.actor)
        .bind(c.operator)
        .bind(c.client_ip)
        .bind(c.account_id)
        .bind(c.serial)
        .bind(c.names)
        .bind(c.reason)
        .bind(c.detail)
}

/// Binds, in order, the twelve columns of a pending record (`format` to `detail`), for a
/// PostgreSQL statement that records `event` as one of its parts: storing a certificate and
/// creating an account insert their pending record in the same round trip
/// (`orders/finalize.rs`, `accounts.rs`, whose statements spell [`PENDING_INSERT`]'s insert as
/// a CTE).
pub(crate) fn bind_pg_append(
    query: sql::Query,
    event: &AuditEvent,
    now: OffsetDateTime,
) -> Result<sql::Query> {
    Ok(bind_columns(query, Columns::of(event, now)?))
}

/// The chain head: the last record's seq and hash.
struct Head {
    seq: i64,
    hash: String,
}

/// Reads the head inside the caller's write transaction; on PostgreSQL under its row lock, held
/// to the commit, so that whoever appends next builds on what this transaction appends.
async fn lock_head(conn: &mut Conn) -> Result<Head> {
    let read_head = match conn.backend() {
        Backend::Postgres => "SELECT seq, hash FROM audit_head WHERE id = 1 FOR UPDATE",
        Backend::Sqlite => "SELECT seq, hash FROM audit_head WHERE id = 1",
    };
    let head = sql::query(read_head)
        .fetch_optional(&mut *conn)
        .await?
        .ok_or_else(|| Error::Corrupt("the audit chain head row is missing".into()))?;
    Ok(Head {
        seq: head.try_get("seq")?,
        hash: head.try_get("hash")?,
    })
}

/// One record's insert: a fixed text, so that it is prepared once per connection (SQLite's
/// audited writes append one record each; re-preparing showed in profiles).
const INSERT_ONE: &str = "INSERT INTO audit_log (seq, format, at_ms, kind, actor_kind, actor, \
     operator, client_ip, account_id, serial, names, reason, detail, prev_hash, hash) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)";

/// Numbers and hashes `records`, in order, onto `head`, inserts them and moves the head; the
/// new head. The one place records are chained, whichever backend and whoever appends.
async fn chain_after(conn: &mut Conn, head: Head, records: Vec<Columns>) -> Result<Head> {
    if records.is_empty() {
        return Ok(head);
    }
    let Head { mut seq, mut hash } = head;
    let mut chained = Vec::with_capacity(records.len());
    for columns in records {
        let prev_hash = hash;
        seq += 1;
        hash = link_hash(&prev_hash, seq, &columns.body()?)
            .ok_or_else(|| Error::Corrupt(format!("the audit chain head hash {prev_hash:?}")))?;
        chained.push((seq, columns, prev_hash, hash.clone()));
    }
    let mut insert = if chained.len() == 1 {
        sql::query(INSERT_ONE)
    } else {
        let mut params = Params::new(conn.backend());
        let values: Vec<String> = chained
            .iter()
            .map(|_| format!("({})", params.many(15)))
            .collect();
        sql::one_off(format!(
            "INSERT INTO audit_log ({COLUMNS}) VALUES {}",
            values.join(", ")
        ))
    };
    let mut last_prev = String::new();
    for (seq, columns, prev_hash, hash) in chained {
        insert = bind_columns(insert.bind(seq), columns)
            .bind(prev_hash.clone())
            .bind(hash);
        last_prev = prev_hash;
    }
    insert.execute(&mut *conn).await?;
    sql::query("UPDATE audit_head SET seq = $1, prev_hash = $2, hash = $3 WHERE id = 1")
        .bind(seq)
        .bind(last_prev)
        .bind(hash.as_str())
        .execute(&mut *conn)
        .await?;
    Ok(Head { seq, hash })
}

/// PostgreSQL, inside a transaction holding the head's lock ([`lock_head`]): claims (deletes)
/// at most [`SEAL_BATCH`] committed pending records, oldest `id` first, and chains them after
/// `head`. Only records of the format this version hashes are claimed: one it cannot hash (a
/// newer version's, or a row someone wrote by hand) stays pending, counted by
/// [`Storage::audit_pending`] and failing verification once stale, instead of stopping every
/// sealer at the same row. The DELETE is a statement after the lock was granted, so its
/// snapshot holds every deletion of the sealer this one waited for.
async fn seal_batch_in(conn: &mut Conn, head: Head) -> Result<(Head, u64)> {
    let rows = sql::query(
        "DELETE FROM audit_pending WHERE id IN \
             (SELECT id FROM audit_pending WHERE format = $2 ORDER BY id LIMIT $1) \
         RETURNING id, format, at_ms, kind, actor_kind, actor, operator, client_ip, \
                   account_id, serial, names, reason, detail",
    )
    .bind(SEAL_BATCH)
    .bind(FORMAT_V1)
    .fetch_all(&mut *conn)
    .await?;
    let mut pending = rows
        .iter()
        .map(|row| Ok((row.try_get::<i64, _>("id")?, Columns::read(row)?)))
        .collect::<Result<Vec<_>>>()?;
    // RETURNING promises no order.
    pending.sort_by_key(|(id, _)| *id);
    let count = u64::try_from(pending.len()).unwrap_or(u64::MAX);
    let head = chain_after(conn, head, pending.into_iter().map(|(_, c)| c).collect()).await?;
    Ok((head, count))
}

/// PostgreSQL runs the sealer's statements under READ COMMITTED whatever the database's
/// default: the lock-then-read order above relies on each statement's fresh snapshot, which
/// REPEATABLE READ or SERIALIZABLE would replace with a serialization failure on every
/// contended pass.
async fn read_committed(conn: &mut Conn) -> Result<()> {
    if conn.backend() == Backend::Postgres {
        sql::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// The most pending records one sealing transaction chains (15 parameters each, one statement).
const SEAL_BATCH: i64 = 256;

/// Checks one stored row against the chain so far; `Err` names what is wrong with it.
fn check_row(row: &Row, seq: i64, expected_seq: i64, last_hash: &str) -> Result<(), String> {
    if seq != expected_seq {
        return Err(if expected_seq == seq - 1 {
            format!("record {expected_seq} is missing (the next stored record is {seq})")
        } else {
            format!(
                "records {expected_seq} to {} are missing (the next stored record is {seq})",
                seq - 1
            )
        });
    }
    let columns = Columns::read(row).map_err(|e| format!("unreadable: {e}"))?;
    let prev_hash: String = row
        .try_get("prev_hash")
        .map_err(|e| format!("unreadable: {e}"))?;
    let hash: String = row
        .try_get("hash")
        .map_err(|e| format!("unreadable: {e}"))?;
    let body = columns.body().map_err(|e| format!("{e}"))?;
    let recomputed = link_hash(&prev_hash, seq, &body)
        .ok_or_else(|| format!("prev_hash {prev_hash:?} is not a SHA-256 in hex"))?;
    if recomputed != hash {
        return Err(
            "its stored fields do not hash to its stored hash (a column was edited)".to_owned(),
        );
    }
    if prev_hash != last_hash {
        return Err(format!(
            "its prev_hash is not the hash of record {} (that record's hash or this prev_hash was rewritten)",
            seq - 1
        ));
    }
    // The record must also decode: a field that hashes but no longer means anything (written
    // by something else than this crate) is as broken as an edited one.
    columns.event().map_err(|e| format!("{e}"))?;
    Ok(())
}

impl Storage {
    /// Records `event` in a transaction of its own (a config reload, an admin action that
    /// changes nothing else); returns its seq.
    /// Chained at once on both backends: the transaction is the record alone, so the head's
    /// lock is held for its commit only. On PostgreSQL what is pending is sealed first, in the
    /// same transaction, so that the record follows every committed record it may be about
    /// (a reload after the change it reverts).
    pub async fn append_audit(&self, event: &AuditEvent, now: OffsetDateTime) -> Result<i64> {
        let columns = Columns::of(event, now)?;
        let mut tx = self.begin_write().await?;
        read_committed(&mut tx).await?;
        let mut head = lock_head(&mut tx).await?;
        if self.backend == Backend::Postgres {
            loop {
                let (sealed_to, count) = seal_batch_in(&mut tx, head).await?;
                head = sealed_to;
                if count < SEAL_BATCH.unsigned_abs() {
                    break;
                }
            }
        }
        let head = chain_after(&mut tx, head, vec![columns]).await?;
        tx.commit().await?;
        Ok(head.seq)
    }

    /// The sealer (PostgreSQL; nothing to do on SQLite): chains every record committed to
    /// `audit_pending` so far, in batches of one transaction each, and returns how many. Safe to
    /// run from every instance at once: the head's row lock makes sealers take turns, and each
    /// claims (deletes) its batch after taking it.
    pub async fn seal_audit(&self) -> Result<u64> {
        if self.backend != Backend::Postgres {
            return Ok(0);
        }
        let mut sealed = 0_u64;
        loop {
            let batch = self.seal_batch().await?;
            sealed += batch;
            if batch < SEAL_BATCH.unsigned_abs() {
                return Ok(sealed);
            }
        }
    }

    /// The records waiting to be chained and when the oldest of them was decided (none on
    /// SQLite).
    pub async fn audit_pending(&self) -> Result<Pending> {
        if self.backend != Backend::Postgres {
            return Ok(Pending::default());
        }
        let row = sql::query("SELECT COUNT(*) AS records, MIN(at_ms) AS oldest FROM audit_pending")
            .fetch_one(&self.db)
            .await?;
        Ok(Pending {
            records: row.try_get::<i64, _>("records")?.unsigned_abs(),
            oldest: row
                .try_get::<Option<i64>, _>("oldest")?
                .map(time_from_ms)
                .transpose()?,
        })
    }

    /// What every read of the log does first, so that it sees every committed record. A read
    /// still answers when sealing fails (a read-only standby, a copy of the database opened
    /// for an offline `verify`): the records already chained are all it shows then.
    async fn seal_before_reading(&self) {
        if let Err(e) = self.seal_audit().await {
            tracing::warn!(
                error = %e,
                "could not chain the pending audit records before reading the log; showing the chained ones"
            );
        }
    }

    /// One sealing transaction: at most [`SEAL_BATCH`] pending records, oldest `id` first.
    async fn seal_batch(&self) -> Result<u64> {
        // An idle server's probe: no transaction and no lock when nothing waits.
        let waiting = sql::query_scalar::<i64>(
            "SELECT COUNT(*) FROM (SELECT 1 FROM audit_pending WHERE format = $1 LIMIT 1) AS w",
        )
        .bind(FORMAT_V1)
        .fetch_one(&self.db)
        .await?;
        if waiting == 0 {
            return Ok(0);
        }
        let mut tx = self.begin_write().await?;
        read_committed(&mut tx).await?;
        let head = lock_head(&mut tx).await?;
        let (_, count) = seal_batch_in(&mut tx, head).await?;
        tx.commit().await?;
        Ok(count)
    }

    /// The records `filter` selects (see [`AuditFilter`] for the order). Like every read of
    /// the log, it seals what is pending first, so that it sees every committed record.
    pub async fn audit_records(&self, filter: &AuditFilter) -> Result<Vec<AuditRecord>> {
        self.seal_before_reading().await;
        let mut params = Params::new(self.backend);
        let mut conditions: Vec<String> = Vec::new();
        let mut query_args: Vec<Arg> = Vec::new();
        if let Some(since) = filter.since {
            conditions.push(format!("at_ms >= {}", params.one()));
            query_args.push(Arg::Int(unix_ms(since)));
        }
        if let Some(until) = filter.until {
            conditions.push(format!("at_ms <= {}", params.one()));
            query_args.push(Arg::Int(unix_ms(until)));
        }
        if let Some(account) = filter.account {
            conditions.push(format!("account_id = {}", params.one()));
            query_args.push(Arg::Int(account.0));
        }
        if let Some(serial) = &filter.serial {
            conditions.push(format!("serial = {}", params.one()));
            query_args.push(Arg::Text(serial.to_hex()));
        }
        if let Some(kind) = filter.kind {
            conditions.push(format!("kind = {}", params.one()));
            query_args.push(Arg::Text(kind.as_str().to_owned()));
        }
        if let Some(name) = &filter.name {
            // `names` is one identifier per line; a whole line must match.
            let within = match self.backend {
                Backend::Postgres => "strpos(chr(10) || names || chr(10), {}) > 0",
                Backend::Sqlite => "instr(char(10) || names || char(10), {}) > 0",
            };
            conditions.push(within.replace("{}", &params.one()));
            query_args.push(Arg::Text(format!("\n{}\n", name.to_lowercase())));
        }
        if let Some(after) = filter.after_seq {
            conditions.push(format!("seq > {}", params.one()));
            query_args.push(Arg::Int(after));
        }
        if let Some(before) = filter.before_seq {
            conditions.push(format!("seq < {}", params.one()));
            query_args.push(Arg::Int(before));
        }
        let order = if filter.after_seq.is_some() {
            "ASC"
        } else {
            "DESC"
        };
        let limit = match filter.limit {
            0 => DEFAULT_LIMIT,
            n => n.min(MAX_LIMIT),
        };
        let mut text = format!("SELECT {COLUMNS} FROM audit_log");
        if !conditions.is_empty() {
            text.push_str(" WHERE ");
            text.push_str(&conditions.join(" AND "));
        }
        text.push_str(&format!(" ORDER BY seq {order} LIMIT {limit}"));
        let mut query = sql::one_off(text);
        for arg in query_args {
            query = match arg {
                Arg::Int(i) => query.bind(i),
                Arg::Text(s) => query.bind(s),
            };
        }
        let rows = query.fetch_all(&self.db).await?;
        rows.iter().map(record).collect()
    }

    /// One record by its seq.
    pub async fn audit_record(&self, seq: i64) -> Result<Option<AuditRecord>> {
        self.seal_before_reading().await;
        let row = sql::query(
            "SELECT seq, format, at_ms, kind, actor_kind, actor, operator, client_ip, \
                    account_id, serial, names, reason, detail, prev_hash, hash \
             FROM audit_log WHERE seq = $1",
        )
        .bind(seq)
        .fetch_optional(&self.db)
        .await?;
        row.as_ref().map(record).transpose()
    }

    /// The seq of the record whose hash is `hash` (lower-case hex), if any: whether a head hash
    /// kept elsewhere is still in the chain.
    pub async fn audit_seq_of_hash(&self, hash: &str) -> Result<Option<i64>> {
        self.seal_before_reading().await;
        sql::query_scalar::<i64>("SELECT seq FROM audit_log WHERE hash = $1")
            .bind(hash.to_lowercase())
            .fetch_optional(&self.db)
            .await
    }

    /// The chain head: the last seq and its hash (0 and [`GENESIS_HASH`] before any record),
    /// after sealing what is pending.
    pub async fn audit_head(&self) -> Result<(i64, String)> {
        self.seal_before_reading().await;
        let row = sql::query("SELECT seq, hash FROM audit_head WHERE id = 1")
            .fetch_optional(&self.db)
            .await?
            .ok_or_else(|| Error::Corrupt("the audit chain head row is missing".into()))?;
        Ok((row.try_get("seq")?, row.try_get("hash")?))
    }

    /// Reads every record in order, recomputing each hash from its stored columns, and checks
    /// the links and the head. Reports the first record at which the chain breaks: a gap in
    /// `seq` (a deleted record), a record whose columns do not hash to its hash (an edit), a
    /// `prev_hash` that is not the previous record's hash (a rewritten hash), or a head that
    /// does not match the last record (deleted newest records, or an edited head).
    /// `progress` is told the records read so far after each page.
    pub async fn verify_audit_chain(&self, progress: &(dyn Fn(u64) + Sync)) -> Result<ChainCheck> {
        // The head first (sealing what is pending): a record appended while this runs is then beyond it and not read,
        // instead of making a clean chain look longer than its head.
        let (head_seq, head_hash) = self.audit_head().await?;
        let mut records = 0_u64;
        let mut last_seq = 0_i64;
        let mut last_hash = GENESIS_HASH.to_owned();
        let mut first_broken: Option<BrokenLink> = None;
        loop {
            let rows = sql::query(
                "SELECT seq, format, at_ms, kind, actor_kind, actor, operator, client_ip, \
                        account_id, serial, names, reason, detail, prev_hash, hash \
                 FROM audit_log WHERE seq > $1 AND seq <= $2 ORDER BY seq LIMIT $3",
            )
            .bind(last_seq)
            .bind(head_seq.max(last_seq))
            .bind(VERIFY_PAGE)
            .fetch_all(&self.db)
            .await?;
            if rows.is_empty() {
                break;
            }
            for row in &rows {
                let seq: i64 = row.try_get("seq")?;
                if first_broken.is_none()
                    && let Err(why) = check_row(row, seq, last_seq + 1, &last_hash)
                {
                    let at = if seq != last_seq + 1 {
                        last_seq + 1
                    } else {
                        seq
                    };
                    first_broken = Some(BrokenLink { seq: at, why });
                }
                records += 1;
                last_seq = seq;
                last_hash = row.try_get("hash").unwrap_or_default();
            }
            progress(records);
        }
        if first_broken.is_none() {
            first_broken = self
                .check_head(head_seq, &head_hash, last_seq, &last_hash)
                .await?;
        }
        Ok(ChainCheck {
            records,
            head_seq,
            head_hash,
            first_broken,
            pending: self.audit_pending().await?,
        })
    }

    /// The head against the last record read (all records up to the head were read).
    async fn check_head(
        &self,
        head_seq: i64,
        head_hash: &str,
        last_seq: i64,
        last_hash: &str,
    ) -> Result<Option<BrokenLink>> {
        if head_seq > last_seq {
            let why = if head_seq == last_seq + 1 {
                format!(
                    "record {head_seq} is missing: the chain head says {head_seq} records, the newest stored is {last_seq} (the newest records were deleted)"
                )
            } else {
                format!(
                    "records {} to {head_seq} are missing: the chain head says {head_seq} records, the newest stored is {last_seq} (the newest records were deleted)",
                    last_seq + 1
                )
            };
            return Ok(Some(BrokenLink {
                seq: last_seq + 1,
                why,
            }));
        }
        // Records beyond the head (the head moved back, or rows were inserted past it). Against
        // the head as it is now, in the same statement: a record appended since the head was
        // first read is beyond that one but not beyond this one.
        let beyond = sql::query_scalar::<Option<i64>>(
            "SELECT MIN(seq) FROM audit_log \
             WHERE seq > (SELECT seq FROM audit_head WHERE id = 1)",
        )
        .fetch_one(&self.db)
        .await?;
        if let Some(link) = beyond.map(|seq| BrokenLink {
            seq,
            why: format!(
                "record {seq} is beyond the chain head: the head was moved back or a record was inserted"
            ),
        }) {
            return Ok(Some(link));
        }
        if head_hash != last_hash {
            return Ok(Some(BrokenLink {
                seq: head_seq,
                why: format!(
                    "the chain head's hash {head_hash} is not the hash of record {head_seq} ({last_hash}): the head was edited"
                ),
            }));
        }
        Ok(None)
    }
}

/// A filter value, bound in the order its placeholder was written.
enum Arg {
    Int(i64),
    Text(String),
}
