use acme_core::ids::AuthzId;
use acme_core::ids::ChallengeId;
use acme_core::ids::OrderId;
use acme_core::status::ChallengeType;
use sqlx::AnyConnection;
use sqlx::Connection;
use storage::Storage;
use storage::error::Error;

use crate::harness;
use crate::harness::Created;
use crate::harness::t0;

#[tokio::test]
async fn sqlite_file_is_created_in_wal_mode_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fresh.db");
    let url = format!("sqlite://{}", path.display());
    let s = Storage::connect(&url).await.unwrap();
    assert!(path.exists());
    let acct = harness::account(&s, t0()).await;
    s.close().await;

    // Reopening applies no migration twice and keeps the data.
    let s = Storage::connect(&url).await.unwrap();
    assert_eq!(s.account(acct.id).await.unwrap(), Some(acct));
    s.close().await;

    let mode: String = scalar(&url, "PRAGMA journal_mode").await;
    assert_eq!(mode, "wal");
}

/// `.cargo/config.toml` builds the bundled SQLite without the global mutexes of memory
/// management and memory statistics; a build that lost the setting would be slower without
/// failing anything else.
#[tokio::test]
async fn bundled_sqlite_has_no_global_page_cache_or_statistics_mutex() {
    sqlx::any::install_default_drivers();
    let mut conn = AnyConnection::connect("sqlite::memory:").await.unwrap();
    let options: Vec<String> = sqlx::query_scalar("PRAGMA compile_options")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    assert!(options.iter().any(|o| o == "THREADSAFE=1"), "{options:?}");
    assert!(
        !options.iter().any(|o| o == "ENABLE_MEMORY_MANAGEMENT"),
        "{options:?}"
    );
    assert!(
        options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"),
        "{options:?}"
    );
}

#[tokio::test]
async fn unsupported_url_is_refused() {
    assert!(
        matches!(Storage::connect("mysql://127.0.0.1/db").await, Err(Error::UnsupportedUrl(s)) if s == "mysql")
    );
}

#[cfg(unix)]
#[tokio::test]
async fn a_new_sqlite_database_and_its_wal_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("private.db");
    let s = Storage::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    harness::account(&s, t0()).await;
    // The WAL index is in memory (unix-excl), so only the migrations' connection may have left a
    // -shm file; whatever exists is private.
    for suffix in ["", "-wal", "-shm"] {
        let file = dir.path().join(format!("private.db{suffix}"));
        if suffix == "-shm" && !file.exists() {
            continue;
        }
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", file.display());
    }
    s.close().await;

    // A file an older version left world-readable is made private when opened.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let s = Storage::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    s.close().await;
}

/// SQLite: one writer and readers up to `max-connections` less one, no more than the CPUs.
#[tokio::test]
async fn pool_settings_size_the_pool() {
    let cpus = std::thread::available_parallelism().unwrap().get();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("pool.db").display());
    let s = Storage::connect(&url).await.unwrap();
    let default = storage::PoolSettings::default().max_connections as usize;
    assert_eq!(s.max_connections() as usize, 1 + (default - 1).min(cpus));
    s.close().await;
    for (max, readers) in [(3, 2.min(cpus)), (2, 1), (1, 1)] {
        let settings = storage::PoolSettings {
            max_connections: max,
            sqlite_synchronous: storage::Synchronous::Full,
        };
        let s = Storage::connect_with(&url, settings).await.unwrap();
        assert_eq!(s.max_connections() as usize, 1 + readers, "max {max}");
        s.ping().await.unwrap();
        s.close().await;
    }
}

/// PostgreSQL: once this process has created 100 orders, the tables that grow with issuance
/// have planner statistics, without waiting for autovacuum (statistics.rs says why).
#[tokio::test]
async fn postgres_young_tables_are_analyzed_early() {
    harness::postgres_at(|s, url| async move {
        let now = t0();
        let acct = harness::account(&s, now).await;
        for i in 0..100 {
            let name = format!("stats{i}.example.com");
            s.create_order(
                harness::new_order(acct.id, &[name.as_str()], now, false),
                &storage::model::OrderGuards::default(),
                now,
            )
            .await
            .unwrap().created();
        }
        let mut conn = AnyConnection::connect(&url)
            .await
            .unwrap();
        for _ in 0..100 {
            let analyzed: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM pg_stat_user_tables \
                 WHERE relname IN ('orders', 'authorizations', 'order_authorizations', 'challenges') \
                 AND last_analyze IS NOT NULL",
            )
            .fetch_one(&mut conn)
            .await
            .unwrap();
            if analyzed == 4 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("the growing tables were not analyzed after 100 orders");
    })
    .await;
}

/// The tables that grow with issuance, each with the time of its last ANALYZE.
const GROWN_ANALYZED: &str = "SELECT relname::text, COALESCE(last_analyze::text, '') \
    FROM pg_stat_user_tables \
    WHERE relname IN ('orders', 'authorizations', 'order_authorizations', 'challenges') \
    ORDER BY relname";

/// `accounts`, with the time of its last ANALYZE.
const ACCOUNTS_ANALYZED: &str = "SELECT relname::text, COALESCE(last_analyze::text, '') \
    FROM pg_stat_user_tables WHERE relname = 'accounts'";

/// What `sql` returns, through `psql`: a blocking call kept out of the futures (the sqlx `Any`
/// driver's query futures are not `Send` for every lifetime a spawned test future asks for).
fn last_analyzed(url: &str, sql: &str) -> String {
    testkit::postgres::psql(url, sql).unwrap()
}

/// Creates an order of `account` for each name `again<i>.example.com` of `names`.
async fn create_orders(
    s: &Storage,
    account: acme_core::ids::AccountId,
    names: std::ops::Range<u32>,
) {
    for i in names {
        let name = format!("again{i}.example.com");
        s.create_order(
            harness::new_order(account, &[name.as_str()], t0(), false),
            &storage::model::OrderGuards::default(),
            t0(),
        )
        .await
        .unwrap()
        .created();
    }
}

/// PostgreSQL: a process started on a database whose tables already have statistics, and rows
/// enough, does not analyze them again when its own orders reach 100; only a table the planner
/// still believes smaller (here `accounts`, of one row) is.
#[tokio::test]
async fn postgres_tables_with_statistics_are_not_analyzed_again() {
    let pg = testkit::postgres::PgDatabase::create("certeasy_test_").unwrap();
    let url = pg.url().to_owned();
    {
        let s = Storage::connect(&url).await.unwrap();
        let now = t0();
        let acct = harness::account(&s, now).await;
        create_orders(&s, acct.id, 0..100).await;
        let mut first = String::new();
        for _ in 0..200 {
            first = last_analyzed(&url, GROWN_ANALYZED);
            if first.lines().count() == 4 && first.lines().all(|l| !l.ends_with('|')) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert!(
            first.lines().count() == 4 && first.lines().all(|l| !l.ends_with('|')),
            "{first}"
        );
        let accounts_first = last_analyzed(&url, ACCOUNTS_ANALYZED);
        s.close().await;

        // Another process: its count of orders starts again at zero.
        let again = Storage::connect(&url).await.unwrap();
        create_orders(&again, acct.id, 100..200).await;
        let mut accounts = accounts_first.clone();
        for _ in 0..200 {
            accounts = last_analyzed(&url, ACCOUNTS_ANALYZED);
            if accounts != accounts_first {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_ne!(
            accounts, accounts_first,
            "the one-row table was analyzed again"
        );
        assert_eq!(last_analyzed(&url, GROWN_ANALYZED), first);
        again.close().await;
    }
    drop(pg);
}

/// Migration 0005 rebuilds `challenges` (token no longer UNIQUE) and `order_authorizations`
/// (WITHOUT ROWID): a database written before it keeps every row, readable through the API.
#[tokio::test]
async fn sqlite_lean_writes_migration_keeps_existing_rows() {
    // The schema as the releases before 0005 left it.
    let dir = tempfile::tempdir().unwrap();
    let (url, mut conn) = harness::sqlite_migrated_before(dir.path(), "0005").await;
    for statement in [
        "INSERT INTO accounts (id, thumbprint, jwk, status, created_at) \
         VALUES (1, 'tp', '{}', 'valid', 1700000000)",
        "INSERT INTO orders (id, account_id, status, identifiers, set_hash, expires_at, \
         created_at, updated_at) \
         VALUES (7, 1, 'pending', 'dns:a.example', 'h', 1800000000, 1700000000, 1700000000)",
        "INSERT INTO authorizations (id, account_id, identifier_type, identifier_value, status, \
         expires_at, created_at) VALUES (3, 1, 'dns', 'a.example', 'pending', 1800000000, 1700000000)",
        "INSERT INTO order_authorizations (order_id, authz_id, position) VALUES (7, 3, 0)",
        "INSERT INTO challenges (id, authz_id, type, token, status) \
         VALUES (5, 3, 'http-01', 'tok-http', 'pending'), (6, 3, 'dns-01', 'tok-dns', 'pending')",
    ] {
        sqlx::query(statement).execute(&mut conn).await.unwrap();
    }
    conn.close().await.unwrap();

    let s = Storage::connect(&url).await.unwrap();
    let order = s.order(OrderId(7), t0()).await.unwrap().unwrap();
    assert_eq!(order.authz_ids, vec![AuthzId(3)]);
    let authz = s.authorization(AuthzId(3), t0()).await.unwrap().unwrap();
    let tokens: Vec<_> = authz.challenges.iter().map(|c| c.token.as_str()).collect();
    assert_eq!(tokens, ["tok-http", "tok-dns"]);
    let challenge = s.challenge(ChallengeId(6)).await.unwrap().unwrap();
    assert_eq!(challenge.kind, ChallengeType::Dns01);
    s.close().await;

    let without_rowid: i64 = scalar(
        &url,
        "SELECT count(*) FROM sqlite_schema WHERE name = 'order_authorizations' \
         AND sql LIKE '%WITHOUT ROWID%'",
    )
    .await;
    assert_eq!(without_rowid, 1);
    let token_indexes: i64 = scalar(
        &url,
        "SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'challenges' \
         AND name LIKE 'sqlite_autoindex%'",
    )
    .await;
    assert_eq!(token_indexes, 0);
}

/// A new SQLite database gets 1 KiB pages (`connect::SQLITE_PAGE_SIZE`): fewer bytes per commit.
#[tokio::test]
async fn a_new_sqlite_database_has_small_pages() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("pages.db").display());
    let s = Storage::connect(&url).await.unwrap();
    s.close().await;
    let page_size: i64 = scalar(&url, "PRAGMA page_size").await;
    assert_eq!(page_size, 1024);
}

/// The first column of `sql`'s first row, read on a connection of its own after the storage
/// under test has closed, so that what is checked is what reached the file.
async fn scalar<T>(url: &str, sql: &'static str) -> T
where
    T: for<'r> sqlx::Decode<'r, sqlx::Any> + sqlx::Type<sqlx::Any> + Send + Unpin,
{
    let mut conn = AnyConnection::connect(url).await.unwrap();
    let value = sqlx::query_scalar(sql).fetch_one(&mut conn).await.unwrap();
    conn.close().await.unwrap();
    value
}
