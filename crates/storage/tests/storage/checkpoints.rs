//! SQLite's WAL stays near the checkpoint interval however many commits come, whatever kind of
//! statement makes them, and every commit is in the database when it is opened again. The
//! checkpoints run beside the writer (`Checkpointer` in `sql/lite.rs`); were they not started,
//! the WAL would grow to the backstop of 10 intervals at which the writer checkpoints itself, and
//! every checkpoint would be one in a commit.

use metrics::SharedString;
use metrics::Unit;
use metrics_util::CompositeKey;
use metrics_util::debugging::DebugValue;
use metrics_util::debugging::DebuggingRecorder;
use storage::model::NewAccount;

use crate::harness;
use crate::harness::ev;
use crate::harness::t0;

/// 1,000 pages, SQLite's interval and ours, of 1 KiB each with their 24-byte frame headers.
const INTERVAL_BYTES: u64 = 1000 * (1024 + 24);

/// `certeasy_sqlite_checkpoints_total` by its `where` label, from one snapshot: taking a
/// snapshot resets the debugging recorder's counters, so a second one would read 0 for the rest.
fn checkpoints(
    snapshot: &[(CompositeKey, Option<Unit>, Option<SharedString>, DebugValue)],
    place: &str,
) -> u64 {
    snapshot
        .iter()
        .filter(|(key, ..)| {
            key.key().name() == "certeasy_sqlite_checkpoints_total"
                && key
                    .key()
                    .labels()
                    .any(|l| l.key() == "where" && l.value() == place)
        })
        .map(|(.., value)| match value {
            DebugValue::Counter(n) => *n,
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
    // Some 28 intervals were written. Without checkpoints beside the writer the WAL would grow to
    // the backstop and every checkpoint would be in a commit. With them, each one that finishes
    // lets the WAL start again; how far it grows meanwhile is how many commits came during one
    // copy, which a loaded machine (CI runs the suite in parallel on two cores) stretches: the
    // WAL was seen at 6.75 intervals there. What does not depend on timing is the bound: the
    // WAL never passes the backstop (plus the commit that reaches it), and most checkpoints run
    // beside the writer.
    let snapshot = snapshotter.snapshot().into_vec();
    let beside = checkpoints(&snapshot, "beside");
    let in_commit = checkpoints(&snapshot, "commit");
    assert!(
        beside >= 2 && beside > in_commit,
        "{beside} checkpoints beside the writer, {in_commit} in a commit"
    );
    // Each checkpoint beside the writer says how long its last copy held the writer.
    let held: Vec<f64> = snapshot
        .iter()
        .filter(|(key, ..)| key.key().name() == "certeasy_sqlite_checkpoint_writer_hold_seconds")
        .flat_map(|(.., value)| match value {
            DebugValue::Histogram(samples) => {
                samples.iter().map(|s| s.into_inner()).collect::<Vec<f64>>()
            }
            other => panic!("not a histogram: {other:?}"),
        })
        .collect();
    assert_eq!(held.len() as u64, beside, "{held:?}");
    assert!(held.iter().all(|s| *s > 0.0 && *s < 5.0), "{held:?}");
    // The WAL file keeps the largest size it ever reached.
    let wal = std::fs::metadata(dir.path().join("certeasy.db-wal"))
        .unwrap()
        .len();
    assert!(
        wal < 11 * INTERVAL_BYTES,
        "the WAL grew to {wal} bytes, past the backstop of 10 intervals"
    );
    if in_commit == 0 {
        assert!(
            wal < 10 * INTERVAL_BYTES,
            "the WAL grew to {wal} bytes without reaching the backstop"
        );
    }
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
