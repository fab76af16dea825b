//! `/admin/audit…`: the audit log (`storage::audit`) for `certeasy admin audit
//! list|show|export|verify`, and the documents these routes answer.
//!
//! Reading the log changes nothing, so these routes record nothing. `verify` recomputes the whole
//! hash chain on the server, next to the database, and answers 200 with `ok: false` and the
//! first broken record when the chain does not hold: a broken chain is a finding, not a refusal.
//! The documents' field order is fixed by the structs below, and `export` prints one
//! [`AuditRecordDoc`] per line, so a SIEM reads the same fields in the same order every time.

use acme_core::clock::SharedClock;
use axum::Json;
use axum::extract::Path;
use axum::extract::Query;
use axum::extract::State;
use axum::extract::rejection::PathRejection;
use axum::extract::rejection::QueryRejection;
use serde::Deserialize;
use serde::Serialize;
use storage::Storage;
use storage::audit::Actor;
use storage::audit::AuditFilter;
use storage::audit::AuditKind;
use storage::audit::AuditRecord;
use time::OffsetDateTime;

use crate::admin_error::AdminError;
use crate::admin_wire::parse_serial;
use crate::admin_wire::parse_time;

/// What the audit routes need of the admin state: the database.
#[derive(Clone)]
pub struct AuditAdmin {
    pub storage: Storage,
    /// What "now" is when verify judges how long records have waited unchained.
    pub clock: SharedClock,
}

type Answer<T> = Result<Json<T>, AdminError>;

/// `GET /admin/audit` query: the filters of `storage::audit::AuditFilter`, times as RFC 3339.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Oldest first, after this seq (an export's pages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_seq: Option<i64>,
    /// Newest first, before this seq (a listing's next page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_seq: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

impl AuditQuery {
    fn filter(&self) -> Result<AuditFilter, String> {
        let time = |what: &str, t: &Option<String>| {
            t.as_deref()
                .map(|t| parse_time(t).map_err(|e| format!("{what}: {e}")))
                .transpose()
        };
        Ok(AuditFilter {
            since: time("since", &self.since)?,
            until: time("until", &self.until)?,
            account: self.account.map(acme_core::ids::AccountId),
            name: self.name.as_deref().map(|n| {
                // `dns:`/`ip:` prefixes as elsewhere in the admin API; the log keeps the value.
                let n = n.trim();
                n.strip_prefix("dns:")
                    .or_else(|| n.strip_prefix("ip:"))
                    .unwrap_or(n)
                    .to_lowercase()
            }),
            serial: self
                .serial
                .as_deref()
                .map(|s| parse_serial(s).map_err(|e| format!("serial: {e}")))
                .transpose()?,
            kind: self
                .kind
                .as_deref()
                .map(|k| {
                    k.replace('-', "_").parse::<AuditKind>().map_err(|e| {
                        let known: Vec<&str> = AuditKind::ALL.iter().map(|k| k.as_str()).collect();
                        format!("{e}; one of {}", known.join(", "))
                    })
                })
                .transpose()?,
            after_seq: self.after_seq,
            before_seq: self.before_seq,
            limit: self.limit.unwrap_or(0),
        })
    }
}

/// Who acted: `type` is `account`, `admin`, `operator`, `system` or `certificate_key`; `id` the
/// account id, the admin token's identity (`sha256:…`), the operator's name or the RFC 7638
/// thumbprint of the certificate key that signed the request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActorDoc {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
}

/// One record, its fields in a fixed order (the export's JSON lines).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecordDoc {
    pub seq: i64,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    pub kind: String,
    pub actor: ActorDoc,
    pub client_ip: Option<String>,
    pub account: Option<i64>,
    /// Lower-case hex.
    pub serial: Option<String>,
    pub names: Vec<String>,
    pub reason: String,
    pub detail: serde_json::Value,
    pub prev_hash: String,
    pub hash: String,
}

impl AuditRecordDoc {
    pub fn new(record: &AuditRecord) -> Self {
        let e = &record.event;
        let actor = match &e.actor {
            Actor::Account(id) => ActorDoc {
                kind: "account".into(),
                id: Some(id.0.to_string()),
                operator: None,
            },
            Actor::Admin { token, operator } => ActorDoc {
                kind: "admin".into(),
                id: Some(token.clone()),
                operator: operator.clone(),
            },
            Actor::Operator(name) => ActorDoc {
                kind: "operator".into(),
                id: Some(name.clone()),
                operator: None,
            },
            Actor::System => ActorDoc {
                kind: "system".into(),
                id: None,
                operator: None,
            },
            Actor::CertificateKey(thumbprint) => ActorDoc {
                kind: "certificate_key".into(),
                id: Some(thumbprint.clone()),
                operator: None,
            },
        };
        Self {
            seq: record.seq,
            at: record.at,
            kind: e.kind.as_str().to_owned(),
            actor,
            client_ip: e.client_ip.map(|ip| ip.to_string()),
            account: e.account.map(|a| a.0),
            serial: e.serial.as_ref().map(acme_core::ids::Serial::to_hex),
            names: e.names.clone(),
            reason: e.reason.clone(),
            detail: e.detail.clone(),
            prev_hash: record.prev_hash.clone(),
            hash: record.hash.clone(),
        }
    }
}

/// The chain head: the last seq and its hash, what an operator keeps elsewhere.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditHeadDoc {
    pub seq: i64,
    pub hash: String,
}

/// `GET /admin/audit/verify` query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyQuery {
    /// A head hash kept elsewhere: the chain must still hold a record with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_head: Option<String>,
}

/// The first record at which the chain breaks, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokenDoc {
    pub seq: i64,
    pub why: String,
}

/// Where an expected head hash was found (`seq` absent: nowhere in the chain).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpectedHeadDoc {
    pub hash: String,
    pub seq: Option<i64>,
}

/// What verification found. `ok` is false when a record is broken or the expected head is not
/// in the chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerifyDoc {
    pub ok: bool,
    pub records: u64,
    pub head_seq: i64,
    pub head_hash: String,
    pub first_broken: Option<BrokenDoc>,
    /// Records committed but not yet chained (PostgreSQL), which this verification did not
    /// cover.
    #[serde(default)]
    pub pending: u64,
    /// When the oldest of them was decided.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub pending_oldest: Option<OffsetDateTime>,
    /// A record has waited longer than `storage::audit::STALE_PENDING`: sealing is failing, and
    /// `ok` is false.
    #[serde(default)]
    pub pending_stale: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_head: Option<ExpectedHeadDoc>,
    pub seconds: f64,
}

fn unavailable(e: storage::error::Error) -> AdminError {
    AdminError::Unavailable(e.to_string())
}

/// `GET /admin/audit`: the records the filters select, newest first (oldest first with
/// `after_seq`).
pub async fn list(
    State(ctx): State<AuditAdmin>,
    query: Result<Query<AuditQuery>, QueryRejection>,
) -> Answer<Vec<AuditRecordDoc>> {
    let Query(q) = query?;
    let filter = q.filter().map_err(AdminError::BadRequest)?;
    let records = ctx
        .storage
        .audit_records(&filter)
        .await
        .map_err(unavailable)?;
    Ok(Json(records.iter().map(AuditRecordDoc::new).collect()))
}

/// `GET /admin/audit/{seq}`.
pub async fn show(
    State(ctx): State<AuditAdmin>,
    path: Result<Path<String>, PathRejection>,
) -> Answer<AuditRecordDoc> {
    let Path(seq) = path?;
    let seq: i64 = seq
        .parse()
        .map_err(|_| AdminError::BadRequest(format!("{seq:?} is not a record number")))?;
    let record = ctx
        .storage
        .audit_record(seq)
        .await
        .map_err(unavailable)?
        .ok_or_else(|| AdminError::NotFound(format!("audit record {seq} does not exist")))?;
    Ok(Json(AuditRecordDoc::new(&record)))
}

/// `GET /admin/audit/head`.
pub async fn head(State(ctx): State<AuditAdmin>) -> Answer<AuditHeadDoc> {
    let (seq, hash) = ctx.storage.audit_head().await.map_err(unavailable)?;
    Ok(Json(AuditHeadDoc { seq, hash }))
}

/// `GET /admin/audit/verify`: the whole chain checked; 200 whatever it finds.
pub async fn verify(
    State(ctx): State<AuditAdmin>,
    query: Result<Query<VerifyQuery>, QueryRejection>,
) -> Answer<VerifyDoc> {
    let Query(q) = query?;
    let expect = q
        .expect_head
        .map(|h| {
            let h = h.trim().to_lowercase();
            if h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()) {
                Ok(h)
            } else {
                Err(AdminError::BadRequest(format!(
                    "expect-head {h:?} is not a SHA-256 in hex (64 digits)"
                )))
            }
        })
        .transpose()?;
    let started = std::time::Instant::now();
    let check = ctx
        .storage
        .verify_audit_chain(&|_| {})
        .await
        .map_err(unavailable)?;
    let expected_head = match expect {
        Some(hash) => {
            let seq = ctx
                .storage
                .audit_seq_of_hash(&hash)
                .await
                .map_err(unavailable)?;
            Some(ExpectedHeadDoc { hash, seq })
        }
        None => None,
    };
    let pending_stale = check.pending.is_stale(ctx.clock.now());
    let ok = check.first_broken.is_none()
        && !pending_stale
        && expected_head
            .as_ref()
            .is_none_or(|e| e.seq.is_some_and(|s| s <= check.head_seq));
    if !ok {
        tracing::warn!(
            first_broken = ?check.first_broken,
            expected_head = ?expected_head,
            "the audit chain does not verify"
        );
    }
    Ok(Json(VerifyDoc {
        ok,
        records: check.records,
        head_seq: check.head_seq,
        head_hash: check.head_hash,
        first_broken: check.first_broken.map(|b| BrokenDoc {
            seq: b.seq,
            why: b.why,
        }),
        pending: check.pending.records,
        pending_oldest: check.pending.oldest,
        pending_stale,
        expected_head,
        seconds: started.elapsed().as_secs_f64(),
    }))
}

/// `GET /admin/audit/evidence/{serial}`: the validation evidence kept for a certificate, as
/// `storage::evidence` stores it (empty for a certificate issued before evidence was kept).
pub async fn evidence(
    State(ctx): State<AuditAdmin>,
    path: Result<Path<String>, PathRejection>,
) -> Answer<serde_json::Value> {
    let Path(serial) = path?;
    let serial = parse_serial(&serial).map_err(AdminError::BadRequest)?;
    let records = ctx
        .storage
        .certificate_evidence(&serial)
        .await
        .map_err(unavailable)?;
    let doc = serde_json::to_value(&records)
        .map_err(|e| AdminError::Internal(format!("evidence document: {e}")))?;
    Ok(Json(doc))
}
