//! Not a benchmark: database size per issuance with and without pruning (docs/performance.md,
//! "Database size and pruning"). A bench target so that it builds in release mode and never runs
//! under `cargo test`.
//!
//! Writes `CERTEASY_DB_SIZE_N` (default 5,000) full issuance footprints through the storage API,
//! as the server does: an order for one name, its authorization with three challenges, the
//! validation job claimed and completed, the CSR stored, the finalization job claimed and
//! completed, the certificate (DER of a realistic ECDSA size, with one shared issuer chain) stored; one account per
//! 100 issuances. Then as many failed orders (validation refused, with its problem detail): what
//! zombie clients leave behind. It measures after each phase, prunes as the server would once
//! everything has been expired longer than the default retention, and measures again. Sizes are
//! of the compacted data, so that free pages never count: SQLite's `VACUUM INTO` a scratch file,
//! PostgreSQL's relations after `VACUUM FULL` (when `CERTEASY_DB_SIZE_POSTGRES_URL` names an
//! admin URL: a scratch database is created and dropped).
//!
//! `cargo bench -p storage --bench db_size`
#![allow(clippy::expect_used, clippy::unwrap_used)] // A measurement that cannot set itself up stops loudly.

use acme_core::identifier::Identifier;
use acme_core::identifier::canonical_set_hash;
use acme_core::ids::AccountId;
use acme_core::ids::Serial;
use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use acme_core::status::ChallengeType;
use std::path::Path;

use sqlx::AnyConnection;
use sqlx::AssertSqlSafe;
use sqlx::Connection;
use storage::Backend;
use storage::Storage;
use storage::model::Authorization;
use storage::model::NewAccount;
use storage::model::NewAuthz;
use storage::model::NewCertificate;
use storage::model::NewOrder;
use storage::model::NewReservation;
use storage::model::Order;
use storage::model::OrderCreation;
use storage::model::OrderGuards;
use storage::model::Reserved;
use time::Duration;
use time::OffsetDateTime;

/// The audit record each write takes; the size of the log is part of what is measured.
fn ev() -> storage::audit::AuditEvent {
    storage::audit::AuditEvent::new(
        storage::audit::AuditKind::AdminAction,
        storage::audit::Actor::System,
        "db_size bench",
    )
}

const ISSUANCES_PER_ACCOUNT: u64 = 100;
/// A P-256 leaf with one SAN is about 700 bytes of DER; the PEM of a P-256 intermediate about
/// 1,000 characters. Every certificate has the same intermediate, stored once (migration 0012).
const LEAF_DER_BYTES: usize = 700;
const ISSUER_CHAIN_PEM_CHARS: usize = 1_000;
/// A P-256 CSR with one SAN.
const CSR_BYTES: usize = 300;
const TABLES: [&str; 8] = [
    "accounts",
    "orders",
    "authorizations",
    "order_authorizations",
    "challenges",
    "jobs",
    "certificates",
    "issuer_chains",
];

fn main() {
    let n: u64 = std::env::var("CERTEASY_DB_SIZE_N")
        .ok()
        .map(|v| v.parse().expect("CERTEASY_DB_SIZE_N is a count"))
        .unwrap_or(5_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        sqlx::any::install_default_drivers();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("size.db");
        let url = format!("sqlite://{}", path.display());
        measure("sqlite", &url, n).await;
        if let Ok(admin_url) = std::env::var("CERTEASY_DB_SIZE_POSTGRES_URL") {
            let mut admin = AnyConnection::connect(&admin_url).await.unwrap();
            let name = format!("certeasy_db_size_{}", std::process::id());
            sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&mut admin)
                .await
                .unwrap();
            let base = admin_url.rsplit_once('/').unwrap().0;
            measure("postgres", &format!("{base}/{name}"), n).await;
            sqlx::query(AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
            )))
            .execute(&mut admin)
            .await
            .unwrap();
        }
    });
}

async fn measure(label: &str, url: &str, n: u64) {
    let s = Storage::connect(url).await.unwrap();
    // A running server holds its SQLite database alone: its size is measured on the copy it
    // writes (`backup_into`), PostgreSQL's on the database.
    let mut pg = match s.backend() {
        Backend::Postgres => Some(AnyConnection::connect(url).await.unwrap()),
        Backend::Sqlite => None,
    };
    let scratch = tempfile::tempdir().unwrap();
    let empty = live_bytes(&s, pg.as_mut(), scratch.path()).await;
    let t0 = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
    let started = std::time::Instant::now();
    let mut account = AccountId(0);
    for i in 0..n {
        let now = t0 + Duration::seconds(i64::try_from(i).unwrap());
        if i % ISSUANCES_PER_ACCOUNT == 0 {
            account = new_account(&s, i, now).await;
        }
        issue(&s, account, i, now).await;
    }
    let wrote = started.elapsed();
    let issued = live_bytes(&s, pg.as_mut(), scratch.path()).await;
    for i in 0..n {
        let now = t0 + Duration::seconds(i64::try_from(i).unwrap());
        fail(&s, account, n + i, now).await;
    }
    let failed = live_bytes(&s, pg.as_mut(), scratch.path()).await;
    // Everything expired (valid authorizations live 30 days) longer than the default retention ago.
    let late = t0 + Duration::days(30) + storage::DEFAULT_PRUNE_AFTER + Duration::days(2);
    let pruned_at = std::time::Instant::now();
    let report = s
        .prune(
            late,
            storage::DEFAULT_PRUNE_AFTER,
            storage::DEFAULT_PRUNE_BATCH,
        )
        .await
        .unwrap();
    let pruning = pruned_at.elapsed();
    let kept = live_bytes(&s, pg.as_mut(), scratch.path()).await;
    let per = |bytes: u64| bytes as f64 / n as f64;
    let gb_per_million = |bytes: u64| per(bytes) * 1_000_000.0 / 1e9;
    println!(
        "RESULT {label} n={n} write_issuances_s={:.1} prune_s={:.1} pruned={report:?}",
        wrote.as_secs_f64(),
        pruning.as_secs_f64()
    );
    println!("RESULT {label} empty_schema_bytes={empty}");
    println!(
        "RESULT {label} issued_certificate_without_pruning: {:.0} B each = {:.2} GB per million",
        per(issued - empty),
        gb_per_million(issued - empty)
    );
    println!(
        "RESULT {label} failed_order_without_pruning: {:.0} B each = {:.2} GB per million",
        per(failed - issued),
        gb_per_million(failed - issued)
    );
    println!(
        "RESULT {label} issued_certificate_kept_after_pruning: {:.0} B each = {:.2} GB per million \
         (failed orders: 0)",
        per(kept.saturating_sub(empty)),
        gb_per_million(kept.saturating_sub(empty))
    );
    let mut conn = match pg {
        Some(conn) => conn,
        None => AnyConnection::connect(&format!(
            "sqlite://{}",
            compact_copy(scratch.path()).display()
        ))
        .await
        .unwrap(),
    };
    for table in TABLES {
        let rows: i64 = sqlx::query_scalar(AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}")))
            .fetch_one(&mut conn)
            .await
            .unwrap();
        println!("RESULT {label} rows_after_pruning {table}={rows}");
    }
    conn.close().await.unwrap();
    s.close().await;
}

/// Where [`live_bytes`] puts the compacted copy of a SQLite database.
fn compact_copy(scratch: &Path) -> std::path::PathBuf {
    scratch.join("compact.db")
}

/// Bytes the data takes once compacted, so that sizes compare whatever the free space: for
/// SQLite the copy the storage writes with `VACUUM INTO` (`Storage::backup_into`), for
/// PostgreSQL (`pg` given) its relations (tables, indexes, TOAST) after `VACUUM FULL` rewrote
/// them without dead tuples.
async fn live_bytes(s: &Storage, pg: Option<&mut AnyConnection>, scratch: &Path) -> u64 {
    match pg {
        None => {
            let copy = compact_copy(scratch);
            let _ = std::fs::remove_file(&copy);
            s.backup_into(&copy).await.unwrap()
        }
        Some(conn) => {
            sqlx::query("VACUUM FULL")
                .execute(&mut *conn)
                .await
                .unwrap();
            let list = TABLES.map(|t| format!("'{t}'")).join(", ");
            let bytes: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
                "SELECT CAST(SUM(pg_total_relation_size(c.oid)) AS BIGINT) FROM pg_class c \
                 WHERE c.relkind = 'r' AND c.relname IN ({list})"
            )))
            .fetch_one(&mut *conn)
            .await
            .unwrap();
            u64::try_from(bytes).unwrap()
        }
    }
}

async fn new_account(s: &Storage, i: u64, now: OffsetDateTime) -> AccountId {
    // A P-256 JWK and its thumbprint, at their real lengths.
    let thumbprint = format!("{i:043}");
    s.create_account(
        NewAccount {
            jwk_json: format!(
                r#"{{"crv":"P-256","kty":"EC","x":"{i:043}","y":"{:043}"}}"#,
                i + 1
            ),
            thumbprint,
            contacts: vec![format!("mailto:ops{i}@example.com")],
            tos_agreed: true,
        },
        now,
        &ev(),
    )
    .await
    .unwrap()
    .id
}

/// Pseudo-random bytes (xorshift), distinct per issuance: keys, signatures and their base64 do
/// not compress, and a periodic filler would let PostgreSQL's TOAST compression flatter the
/// figures.
fn filler(i: u64, len: usize) -> Vec<u8> {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}

/// Base64 text of `len` characters, as in a PEM body.
fn base64_text(i: u64, len: usize) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    filler(i, len)
        .iter()
        .map(|b| char::from(ALPHABET[usize::from(b % 64)]))
        .collect()
}

/// An order for one name with its authorization and three challenges, as the API creates it.
async fn new_order(s: &Storage, account: AccountId, i: u64, now: OffsetDateTime) -> Order {
    let identifier = Identifier::dns(&format!("host{i}.customer{}.example.com", i / 7)).unwrap();
    let identifiers = vec![identifier.clone()];
    // Tokens are 43 base64url characters, as the API makes them.
    let token = |kind: &str| format!("{kind}{i:042}");
    match s
        .create_order(
            NewOrder {
                account_id: account,
                set_hash: canonical_set_hash(&identifiers),
                identifiers,
                not_before: None,
                not_after: None,
                expires_at: now + Duration::days(7),
                authorizations: vec![NewAuthz {
                    identifier,
                    expires_at: now + Duration::days(7),
                    challenges: vec![
                        (ChallengeType::Http01, token("h")),
                        (ChallengeType::Dns01, token("d")),
                        (ChallengeType::TlsAlpn01, token("t")),
                    ],
                }],
                reuse_valid_until: None,
                replaces: None,
                profile: "tls-server".to_owned(),
                valid_authz_lifetime: None,
                reuse_challenge_types: Vec::new(),
            },
            &OrderGuards::default(),
            now,
        )
        .await
        .unwrap()
    {
        OrderCreation::Created { order, .. } => *order,
        other => panic!("the order was not created: {other:?}"),
    }
}

/// A new order whose http-01 challenge was started and whose validation job a worker took and
/// settled, ready for the verdict to be recorded.
async fn validating_order(
    s: &Storage,
    account: AccountId,
    i: u64,
    now: OffsetDateTime,
) -> (Order, Authorization) {
    let order = new_order(s, account, i, now).await;
    let authz = s
        .authorization(order.authz_ids[0], now)
        .await
        .unwrap()
        .unwrap();
    s.start_challenge(authz.challenges[0].id, now)
        .await
        .unwrap();
    settle_job(s, now).await;
    (order, authz)
}

/// An order whose validation fails, with the problem a failed http-01 fetch records.
async fn fail(s: &Storage, account: AccountId, i: u64, now: OffsetDateTime) {
    let (_, authz) = validating_order(s, account, i, now).await;
    let challenge = authz.challenges[0].id;
    let problem = Problem::new(
        ProblemType::Connection,
        format!(
            "fetching http://{}/.well-known/acme-challenge/{}: connection refused",
            authz.identifier.value(),
            authz.challenges[0].token
        ),
    )
    .with_identifier(authz.identifier.clone());
    s.record_validation(challenge, Err(problem), Duration::days(30), now, None)
        .await
        .unwrap();
}

async fn issue(s: &Storage, account: AccountId, i: u64, now: OffsetDateTime) {
    let (order, authz) = validating_order(s, account, i, now).await;
    s.record_validation(
        authz.challenges[0].id,
        Ok(()),
        Duration::days(30),
        now,
        None,
    )
    .await
    .unwrap();
    s.begin_finalize(order.id, &filler(i, CSR_BYTES), None, now)
        .await
        .unwrap();
    settle_job(s, now).await;
    let mut serial = vec![0x01];
    serial.extend_from_slice(&i.to_be_bytes());
    serial.extend_from_slice(&filler(i.wrapping_add(1 << 41), 7));
    let cert = NewCertificate {
        serial: Serial::from_bytes(serial),
        der: filler(i, LEAF_DER_BYTES),
        issuer_chain_pem: base64_text(1 << 40, ISSUER_CHAIN_PEM_CHARS),
        not_before: now,
        not_after: now + Duration::days(90),
        crl_shard: None,
    };
    // As a worker does: the serial is reserved before it is signed, then stored against it.
    let reserved = s
        .reserve_serial(
            order.id,
            NewReservation {
                serial: cert.serial.clone(),
                not_before: cert.not_before,
                not_after: cert.not_after,
                issuer_chain_pem: cert.issuer_chain_pem.clone(),
                crl_shard: cert.crl_shard,
                issuer: storage::ca_state::DEFAULT_ISSUER.to_owned(),
            },
            now,
        )
        .await
        .unwrap();
    assert!(matches!(reserved, Reserved::Reserved(_)));
    s.complete_order(order.id, cert, now, None, &ev())
        .await
        .unwrap();
}

/// Claims and completes the job just enqueued, as a worker would once it ran.
async fn settle_job(s: &Storage, now: OffsetDateTime) {
    let job = s
        .claim_job(now, Duration::minutes(1), 3)
        .await
        .unwrap()
        .expect("a job is due");
    s.complete_job(&job).await.unwrap();
}
