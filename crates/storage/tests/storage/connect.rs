use sqlx::AnyConnection;
use sqlx::Connection;
use storage::Storage;
use storage::error::Error;

use crate::harness;
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

    let mut conn = AnyConnection::connect(&url).await.unwrap();
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(mode, "wal");
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
    for suffix in ["", "-wal", "-shm"] {
        let file = dir.path().join(format!("private.db{suffix}"));
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
            .unwrap();
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
