//! SQLite's WAL stays near the checkpoint interval however many commits come, whatever kind of
//! statement makes them, and every commit is in the database when it is opened again. The
//! checkpoints run beside the writer (`Checkpointer` in `sql/lite.rs`); were they not started,
//! the WAL would grow to the backstop of 10 intervals at which the writer checkpoints itself.

use metrics_util::debugging::DebugValue;
use metrics_util::debugging::DebuggingRecorder;
use storage::model::NewAccount;

use crate::harness;
use crate::harness::ev;
use crate::harness::t0;

/// 1,000 pages, SQLite's interval and ours, of 1 KiB each with their 24-byte frame headers.
const INTERVAL_BYTES: u64 = 1000 * (1024 + 24);

/// `certeasy_sqlite_checkpoints_total` by its `where` label.
fn checkpoints(snapshotter: &metrics_util::debugging::Snapshotter, place: &str) -> u64 {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| {
            key.key().name() == "certeasy_sqlite_checkpoints_total"
                && key
                    .key()
                    .labels()
                    .any(|l| l.key() == "where" && l.value() == place)
        })
        .map(|(.., value)| match value {
            DebugValue::Counter(n) => n,
            other => panic!("not a counter: {other:?}"),
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_stays_near_the_interval_while_commits_go_on() {
    // The one test of this binary that installs a recorder (nextest runs each test in a
    // process of its own; under `cargo test` others' checkpoints could only add to `beside`).
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let s = harness::sqlite_in(&dir).await;
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
            &ev(),
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
    // Some 28 intervals were written: nearly all of them checkpointed beside the writer (one
    // starts only when the last is done, so a few intervals may share one), none in a commit.
    let beside = checkpoints(&snapshotter, "beside");
    assert!(beside >= 5, "{beside} checkpoints beside the writer");
    assert_eq!(checkpoints(&snapshotter, "commit"), 0);
    s.close().await;

    let s = harness::sqlite_in(&dir).await;
    for i in 0..accounts {
        let account = s
            .account_by_thumbprint(&format!("thumbprint-{i}"))
            .await
            .unwrap();
        assert!(account.is_some(), "account {i} was lost");
    }
    s.close().await;
}
