//! The audit log: append, list with each filter, get; the hash chain verifies clean when intact
//! and names the first broken record after an edit of any column, the deletion of a middle or
//! the newest record, or an edit of the head; on PostgreSQL, two instances appending at once
//! build one chain.

use std::net::IpAddr;
use std::time::Instant;

use acme_core::ids::AccountId;
use acme_core::ids::Serial;
use serde_json::json;
use sqlx::AnyConnection;
use sqlx::Connection;
use storage::Storage;
use storage::audit::Actor;
use storage::audit::AuditEvent;
use storage::audit::AuditFilter;
use storage::audit::AuditKind;
use storage::audit::ChainCheck;
use storage::audit::GENESIS_HASH;
use testkit::postgres::PgDatabase;
use time::Duration;

use crate::harness;
use crate::harness::t0;

crate::both_backends!(append_list_filter_and_get, intact_chain_verifies_clean);

fn issued(account: i64, serial: &str, names: &[&str]) -> AuditEvent {
    let mut event = AuditEvent::new(
        AuditKind::CertificateIssued,
        Actor::Account(AccountId(account)),
        "authorized: holder of the account",
    );
    event.account = Some(AccountId(account));
    event.serial = Serial::from_hex(serial);
    event.names = names.iter().map(|n| (*n).to_owned()).collect();
    event.client_ip = Some("192.0.2.7".parse::<IpAddr>().unwrap());
    event.detail = json!({ "evidence_sha256": "ab".repeat(32), "order": 12 });
    event
}

fn admin(kind: AuditKind, reason: &str) -> AuditEvent {
    let mut event = AuditEvent::new(
        kind,
        Actor::Admin {
            token: storage::audit::admin_token_identity("secret-token"),
            operator: Some("alice".into()),
        },
        reason,
    );
    event.client_ip = Some("2001:db8::1".parse::<IpAddr>().unwrap());
    event
}

/// Five records of assorted kinds, one second apart from `t0`.
async fn five_records(s: &Storage) -> Vec<AuditEvent> {
    let mut reload = AuditEvent::new(AuditKind::ConfigReloaded, Actor::System, "SIGHUP");
    reload.detail = json!({ "changed": ["limits"] });
    let events = vec![
        issued(1, "0a0b0c", &["a.example", "www.a.example"]),
        admin(AuditKind::AccountPaused, "abuse report 17"),
        reload,
        issued(2, "0d0e0f", &["b.example", "192.0.2.1"]),
        AuditEvent::new(
            AuditKind::KeyBlocked,
            Actor::Operator("root@ca1".into()),
            "key compromise",
        ),
    ];
    for (i, event) in events.iter().enumerate() {
        let at = t0() + Duration::seconds(i as i64) + Duration::milliseconds(250);
        let seq = s.append_audit(event, at).await.unwrap();
        assert_eq!(seq, i as i64 + 1);
    }
    events
}

async fn append_list_filter_and_get(s: &Storage) {
    let (seq, hash) = s.audit_head().await.unwrap();
    assert_eq!((seq, hash.as_str()), (0, GENESIS_HASH));
    let events = five_records(s).await;

    let one = s.audit_record(1).await.unwrap().unwrap();
    assert_eq!(one.event, events[0], "every field survives the round trip");
    assert_eq!(
        one.at,
        t0() + Duration::milliseconds(250),
        "milliseconds kept"
    );
    assert_eq!(one.prev_hash, GENESIS_HASH);
    let two = s.audit_record(2).await.unwrap().unwrap();
    assert_eq!(
        two.prev_hash, one.hash,
        "each record carries the hash before it"
    );
    assert_eq!(two.event, events[1]);
    assert!(s.audit_record(6).await.unwrap().is_none());

    let seqs = |records: Vec<storage::audit::AuditRecord>| -> Vec<i64> {
        records.iter().map(|r| r.seq).collect()
    };
    let all = s.audit_records(&AuditFilter::default()).await.unwrap();
    assert_eq!(seqs(all.clone()), vec![5, 4, 3, 2, 1], "newest first");
    assert_eq!(all[0].event, events[4]);

    let filter = |f: AuditFilter| async move { seqs(s.audit_records(&f).await.unwrap()) };
    assert_eq!(
        filter(AuditFilter {
            account: Some(AccountId(2)),
            ..Default::default()
        })
        .await,
        vec![4]
    );
    assert_eq!(
        filter(AuditFilter {
            serial: Serial::from_hex("0A0B0C"),
            ..Default::default()
        })
        .await,
        vec![1]
    );
    assert_eq!(
        filter(AuditFilter {
            kind: Some(AuditKind::CertificateIssued),
            ..Default::default()
        })
        .await,
        vec![4, 1]
    );
    // A whole identifier, in any case; not a part of one.
    assert_eq!(
        filter(AuditFilter {
            name: Some("WWW.A.example".into()),
            ..Default::default()
        })
        .await,
        vec![1]
    );
    assert_eq!(
        filter(AuditFilter {
            name: Some("a.example".into()),
            ..Default::default()
        })
        .await,
        vec![1]
    );
    assert!(
        filter(AuditFilter {
            name: Some("example".into()),
            ..Default::default()
        })
        .await
        .is_empty()
    );
    assert_eq!(
        filter(AuditFilter {
            name: Some("192.0.2.1".into()),
            ..Default::default()
        })
        .await,
        vec![4]
    );
    // Time: since inclusive, until inclusive.
    assert_eq!(
        filter(AuditFilter {
            since: Some(t0() + Duration::seconds(1)),
            until: Some(t0() + Duration::milliseconds(3_250)),
            ..Default::default()
        })
        .await,
        vec![4, 3, 2]
    );
    // Paging: oldest first after a seq (export), newest first before one (list).
    assert_eq!(
        filter(AuditFilter {
            after_seq: Some(2),
            limit: 2,
            ..Default::default()
        })
        .await,
        vec![3, 4]
    );
    assert_eq!(
        filter(AuditFilter {
            before_seq: Some(4),
            limit: 2,
            ..Default::default()
        })
        .await,
        vec![3, 2]
    );
    // Filters combine.
    assert_eq!(
        filter(AuditFilter {
            kind: Some(AuditKind::CertificateIssued),
            since: Some(t0() + Duration::seconds(1)),
            ..Default::default()
        })
        .await,
        vec![4]
    );

    let head = s.audit_head().await.unwrap();
    assert_eq!(head, (5, all[0].hash.clone()));
    assert_eq!(s.audit_seq_of_hash(&all[2].hash).await.unwrap(), Some(3));
    assert_eq!(
        s.audit_seq_of_hash(&all[2].hash.to_uppercase())
            .await
            .unwrap(),
        Some(3)
    );
    assert_eq!(s.audit_seq_of_hash(&"ff".repeat(32)).await.unwrap(), None);
}

async fn intact_chain_verifies_clean(s: &Storage) {
    let empty = s.verify_audit_chain(&|_| {}).await.unwrap();
    assert_eq!(
        empty,
        ChainCheck {
            records: 0,
            head_seq: 0,
            head_hash: GENESIS_HASH.into(),
            first_broken: None,
            pending: storage::audit::Pending::default(),
        }
    );
    five_records(s).await;
    let seen = std::sync::Mutex::new(Vec::new());
    let check = s
        .verify_audit_chain(&|n| seen.lock().unwrap().push(n))
        .await
        .unwrap();
    assert_eq!(check.first_broken, None, "{check:?}");
    assert_eq!(check.records, 5);
    assert_eq!(check.head_seq, 5);
    assert_eq!(
        check.head_hash,
        s.audit_record(5).await.unwrap().unwrap().hash
    );
    assert_eq!(*seen.lock().unwrap(), vec![5], "progress after each page");
}

/// A database of either backend that a test can open, close, and change beside the storage API.
enum Db {
    Lite(tempfile::TempDir),
    Pg(PgDatabase),
}

impl Db {
    fn sqlite() -> Self {
        Db::Lite(tempfile::tempdir().unwrap())
    }

    fn postgres() -> Self {
        sqlx::any::install_default_drivers();
        Db::Pg(PgDatabase::create("certeasy_test_").unwrap())
    }

    async fn open(&self) -> Storage {
        match self {
            Db::Lite(dir) => harness::sqlite_in(dir).await,
            Db::Pg(pg) => Storage::connect(pg.url()).await.unwrap(),
        }
    }

    /// Runs `sql` on a connection of its own. SQLite's file is held exclusively by an open
    /// `Storage`, so the caller closes it first.
    async fn tamper(&self, sql: &str) {
        let url = match self {
            Db::Lite(dir) => format!("sqlite://{}", dir.path().join("certeasy.db").display()),
            Db::Pg(pg) => pg.url().to_owned(),
        };
        sqlx::any::install_default_drivers();
        let mut conn = AnyConnection::connect(&url).await.unwrap();
        let done = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&mut conn)
            .await
            .unwrap();
        assert!(done.rows_affected() > 0, "{sql} changed nothing");
        conn.close().await.unwrap();
    }

    /// Tampers with `sql` and returns what verification finds then.
    async fn verify_after(&self, sql: &str) -> ChainCheck {
        self.tamper(sql).await;
        let s = self.open().await;
        let check = s.verify_audit_chain(&|_| {}).await.unwrap();
        s.close().await;
        check
    }
}

/// The broken seq and why, or a panic naming the tampering that went unseen.
fn broken(check: &ChainCheck, what: &str) -> (i64, String) {
    let link = check
        .first_broken
        .clone()
        .unwrap_or_else(|| panic!("{what}: not detected ({check:?})"));
    (link.seq, link.why)
}

/// Each column of record 3 in turn: changed (verify names 3), then changed back (clean again).
async fn every_column_edit_is_named(db: Db) {
    let s = db.open().await;
    five_records(&s).await;
    s.close().await;
    let edits: [(&str, &str, &str); 14] = [
        ("format", "format = 2", "format = 1"),
        ("at_ms", "at_ms = at_ms + 1", "at_ms = at_ms - 1"),
        ("kind", "kind = 'admin_action'", "kind = 'config_reloaded'"),
        (
            "actor_kind",
            "actor_kind = 'operator'",
            "actor_kind = 'system'",
        ),
        ("actor", "actor = 'x'", "actor = ''"),
        ("operator", "operator = 'mallory'", "operator = NULL"),
        ("client_ip", "client_ip = '192.0.2.66'", "client_ip = NULL"),
        ("account_id", "account_id = 7", "account_id = NULL"),
        ("serial", "serial = '01'", "serial = NULL"),
        ("names", "names = 'evil.example'", "names = ''"),
        ("reason", "reason = 'routine'", "reason = 'SIGHUP'"),
        (
            "detail",
            "detail = '{\"changed\":[\"nothing\"]}'",
            "detail = '{\"changed\":[\"limits\"]}'",
        ),
        (
            "prev_hash",
            "prev_hash = upper(prev_hash)",
            "prev_hash = lower(prev_hash)",
        ),
        ("hash", "hash = upper(hash)", "hash = lower(hash)"),
    ];
    for (column, edit, undo) in edits {
        let check = db
            .verify_after(&format!("UPDATE audit_log SET {edit} WHERE seq = 3"))
            .await;
        let (seq, why) = broken(&check, column);
        // A rewritten hash is seen at the record that links to it, or at the head for the last.
        assert_eq!(seq, 3, "{column}: {why}");
        let check = db
            .verify_after(&format!("UPDATE audit_log SET {undo} WHERE seq = 3"))
            .await;
        assert_eq!(check.first_broken, None, "{column} restored");
    }
}

async fn deletions_and_head_edits_are_named(db: Db) {
    let s = db.open().await;
    five_records(&s).await;
    let last_hash = s.audit_record(5).await.unwrap().unwrap().hash;
    s.close().await;

    // The head moved back a record: the newest is beyond it.
    let check = db.verify_after("UPDATE audit_head SET seq = seq - 1").await;
    let (seq, why) = broken(&check, "head moved back");
    assert_eq!(seq, 5, "{why}");
    db.tamper("UPDATE audit_head SET seq = seq + 1").await;

    // The head's hash edited.
    let check = db
        .verify_after("UPDATE audit_head SET hash = upper(hash)")
        .await;
    let (seq, why) = broken(&check, "head hash edited");
    assert_eq!(seq, 5, "{why}");
    assert!(why.contains("head"), "{why}");
    db.tamper("UPDATE audit_head SET hash = lower(hash)").await;
    let s = db.open().await;
    assert_eq!(
        s.verify_audit_chain(&|_| {}).await.unwrap().first_broken,
        None
    );
    s.close().await;

    // The newest record deleted: the head says more than the rows.
    let check = db.verify_after("DELETE FROM audit_log WHERE seq = 5").await;
    let (seq, why) = broken(&check, "tail deleted");
    assert_eq!(seq, 5, "{why}");
    assert!(why.contains("deleted"), "{why}");
    assert_eq!(check.records, 4);
    assert_eq!(
        check.head_hash, last_hash,
        "the head still names the lost record"
    );

    // A middle record deleted: the gap is named.
    let check = db.verify_after("DELETE FROM audit_log WHERE seq = 2").await;
    let (seq, why) = broken(&check, "middle deleted");
    assert_eq!(seq, 2, "{why}");
    assert!(why.contains("missing"), "{why}");

    // Appending still works after the damage, and the damage stays reported.
    let s = db.open().await;
    let seq = s
        .append_audit(
            &AuditEvent::new(AuditKind::AdminAction, Actor::System, "after"),
            t0(),
        )
        .await
        .unwrap();
    assert_eq!(seq, 6);
    let check = s.verify_audit_chain(&|_| {}).await.unwrap();
    assert_eq!(broken(&check, "still broken").0, 2);
    s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_every_column_edit_is_named() {
    every_column_edit_is_named(Db::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_every_column_edit_is_named() {
    every_column_edit_is_named(Db::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_deletions_and_head_edits_are_named() {
    deletions_and_head_edits_are_named(Db::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_deletions_and_head_edits_are_named() {
    deletions_and_head_edits_are_named(Db::postgres()).await;
}

/// Two instances on one PostgreSQL database, eight tasks between them, 200 appends each: one
/// chain, seq 1..=1600 with no gap and no fork, and it verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_instances_append_one_chain() {
    const TASKS: i64 = 8;
    const EACH: i64 = 200;
    let db = Db::postgres();
    let a = db.open().await;
    let b = db.open().await;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let s = if task % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for i in 0..EACH {
                let mut event = AuditEvent::new(
                    AuditKind::AdminAction,
                    Actor::Operator(format!("task{task}")),
                    format!("append {i}"),
                );
                event.detail = json!({ "task": task, "i": i });
                seqs.push(s.append_audit(&event, t0()).await.unwrap());
            }
            seqs
        }));
    }
    let mut seqs = Vec::new();
    for task in tasks {
        seqs.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed();
    seqs.sort_unstable();
    assert_eq!(
        seqs,
        (1..=TASKS * EACH).collect::<Vec<_>>(),
        "no seq twice, none skipped"
    );
    let check = a.verify_audit_chain(&|_| {}).await.unwrap();
    assert_eq!(check.first_broken, None, "{check:?}");
    assert_eq!(check.records, (TASKS * EACH) as u64);
    assert_eq!(check.head_seq, TASKS * EACH);
    // Each task's records are in its own order in the chain.
    for task in 0..TASKS {
        let mut filter_after = 0;
        let mut last_i = -1;
        loop {
            let page = a
                .audit_records(&AuditFilter {
                    after_seq: Some(filter_after),
                    limit: 1000,
                    ..Default::default()
                })
                .await
                .unwrap();
            if page.is_empty() {
                break;
            }
            for record in &page {
                if record.event.actor == Actor::Operator(format!("task{task}")) {
                    let i = record.event.detail["i"].as_i64().unwrap();
                    assert_eq!(i, last_i + 1, "task {task} out of order");
                    last_i = i;
                }
            }
            filter_after = page.last().unwrap().seq;
        }
        assert_eq!(last_i, EACH - 1);
    }
    eprintln!(
        "{} appends from {TASKS} tasks on two instances in {elapsed:?}: {:.0} appends/s",
        TASKS * EACH,
        (TASKS * EACH) as f64 / elapsed.as_secs_f64()
    );
    a.close().await;
    b.close().await;
}
