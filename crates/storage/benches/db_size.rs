//! Not a benchmark: database size per issuance with and without pruning (docs/performance.md,
//! "Database size and pruning"). A bench target so that it builds in release mode and never runs
//! under `cargo test`.
//!
//! Writes `CERTEASY_DB_SIZE_N` (default 5,000) full issuance footprints through the storage API,
//! as the server does: an order for one name, its authorization with three challenges, the
//! validation job claimed and completed, the CSR stored, the finalization job claimed and
//! completed, the certificate (DER and PEM chain of realistic ECDSA sizes) stored; one account per
//! 100 issuances. It then measures the data, prunes as the server would once everything expired
//! longer than the retention ago, and measures again. Sizes are of live pages (SQLite:
//! `page_count - freelist_count`, after a WAL checkpoint; the file after `VACUUM` is printed too)
//! or of relations after `VACUUM FULL` (PostgreSQL, when `CERTEASY_DB_SIZE_POSTGRES_URL` names an
//! admin URL: a scratch database is created and dropped).
//!
//! `cargo bench -p storage --bench db_size`
#![allow(clippy::expect_used, clippy::unwrap_used)] // A measurement that cannot set itself up stops loudly.

use acme_core::identifier::Identifier;
use acme_core::identifier::canonical_set_hash;
use acme_core::ids::AccountId;
use acme_core::ids::Serial;
use acme_core::status::ChallengeType;
use sqlx::AnyConnection;
use sqlx::AssertSqlSafe;
use sqlx::Connection;
use storage::Backend;
use storage::Storage;
use storage::model::Completion;
use storage::model::NewAccount;
use storage::model::NewAuthz;
use storage::model::NewCertificate;
use storage::model::NewOrder;
use storage::model::OrderGuards;
use time::Duration;
use time::OffsetDateTime;

const ISSUANCES_PER_ACCOUNT: u64 = 100;
/// A P-256 leaf with one SAN is about 700 bytes of DER; its PEM with an intermediate about 1,900.
const LEAF_DER_BYTES: usize = 700;
const CHAIN_PEM_CHARS: usize = 1_900;
/// A P-256 CSR with one SAN.
const CSR_BYTES: usize = 300;
const TABLES: [&str; 7] = [
    "accounts",
    "orders",
    "authorizations",
    "order_authorizations",
    "challenges",
    "jobs",
    "certificates",
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
    let mut conn = AnyConnection::connect(url).await.unwrap();
    let before = live_bytes(&mut conn, s.backend()).await;
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
    let after = live_bytes(&mut conn, s.backend()).await;
    let per_million = |bytes: u64| bytes as f64 * 1_000_000.0 / n as f64 / 1e9;
    println!(
        "RESULT {label} issuances={n} write_s={:.1} prune_s={:.1} pruned={report:?}",
        wrote.as_secs_f64(),
        pruning.as_secs_f64()
    );
    println!(
        "RESULT {label} without_pruning: {before} bytes = {:.0} B/issuance = {:.2} GB per million",
        before as f64 / n as f64,
        per_million(before)
    );
    println!(
        "RESULT {label} with_pruning: {after} bytes = {:.0} B/issuance = {:.2} GB per million",
        after as f64 / n as f64,
        per_million(after)
    );
    for table in TABLES {
        let rows: i64 = sqlx::query_scalar(AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}")))
            .fetch_one(&mut conn)
            .await
            .unwrap();
        println!("RESULT {label} rows_after_pruning {table}={rows}");
    }
    if s.backend() == Backend::Sqlite {
        sqlx::query("VACUUM").execute(&mut conn).await.unwrap();
        let file = std::fs::metadata(url.trim_start_matches("sqlite://"))
            .unwrap()
            .len();
        println!("RESULT {label} file_after_vacuum: {file} bytes");
    }
    conn.close().await.unwrap();
    s.close().await;
}

/// Bytes of live data: SQLite pages in use after a checkpoint; PostgreSQL relations (tables,
/// indexes, TOAST) after `VACUUM FULL` rewrote them without dead tuples.
async fn live_bytes(conn: &mut AnyConnection, backend: Backend) -> u64 {
    match backend {
        Backend::Sqlite => {
            sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                .execute(&mut *conn)
                .await
                .unwrap();
            let pages: i64 = sqlx::query_scalar("SELECT page_count - freelist_count FROM pragma_page_count(), pragma_freelist_count()")
                .fetch_one(&mut *conn)
                .await
                .unwrap();
            let page_size: i64 = sqlx::query_scalar("SELECT page_size FROM pragma_page_size()")
                .fetch_one(&mut *conn)
                .await
                .unwrap();
            u64::try_from(pages * page_size).unwrap()
        }
        Backend::Postgres => {
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
    )
    .await
    .unwrap()
    .id
}

/// Bytes that look like what they stand for, distinct per issuance.
fn filler(i: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| {
            let x = (i as usize)
                .wrapping_mul(31)
                .wrapping_add(k.wrapping_mul(7));
            u8::try_from(x % 251).unwrap()
        })
        .collect()
}

async fn issue(s: &Storage, account: AccountId, i: u64, now: OffsetDateTime) {
    let identifier = Identifier::dns(&format!("host{i}.customer{}.example.com", i / 7)).unwrap();
    let identifiers = vec![identifier.clone()];
    // Tokens are 43 base64url characters, as the API makes them.
    let token = |kind: &str| format!("{kind}{i:040}");
    let order = s
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
                reuse_valid_authz: false,
            },
            &OrderGuards::default(),
            now,
        )
        .await
        .unwrap();
    let authz = s
        .authorization(order.authz_ids[0], now)
        .await
        .unwrap()
        .unwrap();
    let challenge = authz.challenges[0].id;
    s.start_challenge(challenge, now).await.unwrap();
    settle_job(s, now).await;
    s.record_validation(challenge, Ok(()), now).await.unwrap();
    s.begin_finalize(order.id, &filler(i, CSR_BYTES), now)
        .await
        .unwrap();
    settle_job(s, now).await;
    let mut serial = vec![0x01];
    serial.extend_from_slice(&i.to_be_bytes());
    serial.extend_from_slice(&filler(i, 7));
    let chain: String = filler(i, CHAIN_PEM_CHARS)
        .iter()
        .map(|b| char::from(b'A' + b % 26))
        .collect();
    let completion = s
        .complete_order(
            order.id,
            NewCertificate {
                serial: Serial::from_bytes(serial),
                der: filler(i, LEAF_DER_BYTES),
                chain_pem: chain,
                not_before: now,
                not_after: now + Duration::days(90),
            },
            now,
        )
        .await
        .unwrap();
    assert!(matches!(completion, Completion::Issued(_)));
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
