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
