//! SQLite's WAL stays near the checkpoint interval however many commits come, whatever kind of
//! statement makes them, and every commit is in the database when it is opened again. The
//! checkpoints run beside the writer (`Checkpointer` in `sql/lite.rs`); were they not started,
//! the WAL would grow to the backstop of 10 intervals at which the writer checkpoints itself.

use storage::Storage;
use storage::model::NewAccount;

use crate::harness::t0;

async fn sqlite_in(dir: &tempfile::TempDir) -> Storage {
    Storage::connect(&format!(
        "sqlite://{}",
        dir.path().join("certeasy.db").display()
    ))
    .await
    .unwrap()
}

/// 1,000 pages, SQLite's interval and ours, of 1 KiB each with their 24-byte frame headers.
const INTERVAL_BYTES: u64 = 1000 * (1024 + 24);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_stays_near_the_interval_while_commits_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let s = sqlite_in(&dir).await;
    // Each `INSERT … RETURNING` commits on its own; some 4.7 pages per account (its row of half
    // a page, an index entry on a random leaf, the splits), 28 intervals in all.
    let accounts = 6_000;
    let padding = "x".repeat(500);
    for i in 0..accounts {
        s.create_account(
            NewAccount {
                jwk_json: format!("{{\"kty\":\"EC\",\"n\":{i},\"pad\":\"{padding}\"}}"),
                thumbprint: format!("thumbprint-{i}"),
                contacts: Vec::new(),
                tos_agreed: true,
            },
            t0(),
        )
        .await
        .unwrap();
    }
    // The WAL file keeps the largest size it ever reached.
    let wal = std::fs::metadata(dir.path().join("certeasy.db-wal"))
        .unwrap()
        .len();
    assert!(
        wal < 5 * INTERVAL_BYTES,
        "the WAL grew to {wal} bytes: it was not checkpointed as commits came"
    );
    s.close().await;

    let s = sqlite_in(&dir).await;
    for i in 0..accounts {
        let account = s
            .account_by_thumbprint(&format!("thumbprint-{i}"))
            .await
            .unwrap();
        assert!(account.is_some(), "account {i} was lost");
    }
    s.close().await;
}
