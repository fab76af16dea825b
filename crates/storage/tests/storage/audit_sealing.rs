//! The sealer (PostgreSQL): an audited transaction leaves its record pending, taking no lock on
//! the chain head, and `seal_audit` chains what has committed. Under concurrent audited writes
//! from two instances with a sealer running in each, the chain is one, with no gap, no fork and
//! no record twice or lost; records left pending by an instance that stopped are chained by
//! another; every read of the log, and a record appended in a transaction of its own, seals
//! first, and a read still answers where it cannot seal. On SQLite records are chained as they are
//! written and there is nothing to seal.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;

use sqlx::AnyConnection;
use sqlx::Connection;
use storage::Storage;
use storage::audit::Actor;
use storage::audit::AuditEvent;
use storage::audit::AuditFilter;
use storage::audit::AuditKind;
use testkit::postgres::PgDatabase;

use crate::harness;
use crate::harness::t0;

fn blocked(task: u32, i: u32) -> AuditEvent {
    let mut event = AuditEvent::new(
        AuditKind::KeyBlocked,
        Actor::Operator(format!("task{task}")),
        format!("block {task}/{i}"),
    );
    event.detail = serde_json::json!({ "task": task, "i": i });
    event
}

/// A distinct key digest per (task, i).
fn key(task: u32, i: u32) -> [u8; 32] {
    let mut k = [0_u8; 32];
    k[..4].copy_from_slice(&task.to_be_bytes());
    k[4..8].copy_from_slice(&i.to_be_bytes());
    k
}

async fn count(url: &str, table: &str) -> i64 {
    let mut conn = AnyConnection::connect(url).await.unwrap();
    let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}")))
        .fetch_one(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    n
}

/// A committed audited change is pending, not chained, until a sealer runs; reading the log
/// seals it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_records_wait_pending_and_reads_seal_them() {
    sqlx::any::install_default_drivers();
    let pg = PgDatabase::create("certeasy_test_").unwrap();
    let s = Storage::connect(pg.url()).await.unwrap();
    s.block_key(&key(0, 0), "compromised", t0(), &blocked(0, 0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(count(pg.url(), "audit_pending").await, 1);
    assert_eq!(count(pg.url(), "audit_log").await, 0);
    assert_eq!(s.seal_audit().await.unwrap(), 1);
    assert_eq!(count(pg.url(), "audit_pending").await, 0);
    assert_eq!(s.seal_audit().await.unwrap(), 0, "nothing left to seal");

    // A read seals first: the list shows a record committed a moment ago.
    s.block_key(&key(0, 1), "compromised", t0(), &blocked(0, 1))
        .await
        .unwrap()
        .unwrap();
    let listed = s.audit_records(&AuditFilter::default()).await.unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].seq, 2);
    assert_eq!(listed[0].event, blocked(0, 1));
    assert_eq!(listed[1].prev_hash, storage::audit::GENESIS_HASH);
    assert_eq!(listed[0].prev_hash, listed[1].hash);
    let check = s.verify_audit_chain(&|_| {}).await.unwrap();
    assert_eq!(check.first_broken, None, "{check:?}");
    assert_eq!(check.records, 2);
}

/// Two instances, eight writers, a sealer looping in each: every record chained exactly once,
/// seq 1..=N with no gap, and the chain verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_concurrent_writers_and_sealers_build_one_chain() {
    const TASKS: u32 = 8;
    const EACH: u32 = 60;
    sqlx::any::install_default_drivers();
    let pg = PgDatabase::create("certeasy_test_").unwrap();
    let a = Storage::connect(pg.url()).await.unwrap();
    let b = Storage::connect(pg.url()).await.unwrap();
    let writing = Arc::new(AtomicBool::new(true));
    let mut sealers = Vec::new();
    for s in [a.clone(), b.clone()] {
        let writing = Arc::clone(&writing);
        sealers.push(tokio::spawn(async move {
            let mut sealed = 0_u64;
            while writing.load(Ordering::Acquire) {
                sealed += s.seal_audit().await.unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            sealed
        }));
    }
    let mut writers = Vec::new();
    for task in 0..TASKS {
        let s = if task % 2 == 0 { a.clone() } else { b.clone() };
        writers.push(tokio::spawn(async move {
            for i in 0..EACH {
                s.block_key(&key(task, i), "compromised", t0(), &blocked(task, i))
                    .await
                    .unwrap()
                    .unwrap();
            }
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
    writing.store(false, Ordering::Release);
    let mut by_sealers = 0;
    for sealer in sealers {
        by_sealers += sealer.await.unwrap();
    }
    let last = a.seal_audit().await.unwrap();
    let total = u64::from(TASKS * EACH);
    assert_eq!(by_sealers + last, total, "each record sealed exactly once");
    assert!(
        by_sealers > 0,
        "the looping sealers chained records while writers wrote"
    );
    assert_eq!(count(pg.url(), "audit_pending").await, 0);

    let check = b.verify_audit_chain(&|_| {}).await.unwrap();
    assert_eq!(check.first_broken, None, "{check:?}");
    assert_eq!(check.records, total);
    assert_eq!(check.head_seq, i64::try_from(total).unwrap());
    let mut seen = BTreeSet::new();
    let mut after = 0;
    loop {
        let page = a
            .audit_records(&AuditFilter {
                after_seq: Some(after),
                limit: 1000,
                ..Default::default()
            })
            .await
            .unwrap();
        let Some(last) = page.last() else { break };
        after = last.seq;
        for record in &page {
            assert!(
                seen.insert(record.event.reason.clone()),
                "{} recorded twice",
                record.event.reason
            );
        }
    }
    assert_eq!(seen.len(), usize::try_from(total).unwrap());
}

/// Records an instance committed but never sealed (it stopped) are chained by the next sealer,
/// of another instance, in the order they were written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_records_left_pending_by_a_stopped_instance_are_sealed_by_another() {
    sqlx::any::install_default_drivers();
    let pg = PgDatabase::create("certeasy_test_").unwrap();
    let gone = Storage::connect(pg.url()).await.unwrap();
    for i in 0..3 {
        gone.block_key(&key(1, i), "compromised", t0(), &blocked(1, i))
            .await
            .unwrap()
            .unwrap();
    }
    gone.close().await;
    assert_eq!(count(pg.url(), "audit_pending").await, 3);

    let other = Storage::connect(pg.url()).await.unwrap();
    assert_eq!(other.seal_audit().await.unwrap(), 3);
    let chained = other
        .audit_records(&AuditFilter {
            after_seq: Some(0),
            ..Default::default()
        })
        .await
        .unwrap();
    let events: Vec<AuditEvent> = chained.into_iter().map(|r| r.event).collect();
    assert_eq!(events, (0..3).map(|i| blocked(1, i)).collect::<Vec<_>>());
}

/// Where sealing fails (here the log refuses inserts, as a broken or read-only database
/// would), reads still answer with what is chained, and verification counts the records it
/// could not cover; once sealing works again they are chained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_verify_reports_what_sealing_could_not_chain() {
    sqlx::any::install_default_drivers();
    let pg = PgDatabase::create("certeasy_test_").unwrap();
    let s = Storage::connect(pg.url()).await.unwrap();
    s.block_key(&key(3, 0), "compromised", t0(), &blocked(3, 0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.seal_audit().await.unwrap(), 1);
    execute(
        pg.url(),
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql \
         AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$; \
         CREATE TRIGGER refuse BEFORE INSERT ON audit_log \
         FOR EACH ROW EXECUTE FUNCTION refuse();",
    )
    .await;
    s.block_key(&key(3, 1), "compromised", t0(), &blocked(3, 1))
        .await
        .unwrap()
        .unwrap();
    assert!(s.seal_audit().await.is_err(), "the log refuses the insert");
    let check = s.verify_audit_chain(&|_| {}).await.unwrap();
    assert_eq!(check.first_broken, None, "{check:?}");
    assert_eq!(
        (check.records, check.head_seq, check.pending.records),
        (1, 1, 1)
    );
    assert_eq!(check.pending.oldest, Some(t0()));
    assert!(check.pending.is_stale(t0() + time::Duration::minutes(2)));
    assert!(!check.pending.is_stale(t0() + time::Duration::seconds(5)));
    assert_eq!(
        s.audit_records(&AuditFilter::default())
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        count(pg.url(), "audit_pending").await,
        1,
        "the record still waits"
    );

    execute(pg.url(), "DROP TRIGGER refuse ON audit_log").await;
    let check = s.verify_audit_chain(&|_| {}).await.unwrap();
    assert_eq!(check.first_broken, None, "{check:?}");
    assert_eq!((check.records, check.pending.records), (2, 0));
}

/// A pending record this version cannot hash (format 2: a newer version's, or written by hand)
/// does not stop sealing: the records after it are chained, it stays pending, and once it has
/// waited past `STALE_PENDING` verification says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_record_of_an_unknown_format_waits_without_blocking_the_rest() {
    sqlx::any::install_default_drivers();
    let pg = PgDatabase::create("certeasy_test_").unwrap();
    let s = Storage::connect(pg.url()).await.unwrap();
    execute(
        pg.url(),
        "INSERT INTO audit_pending (format, at_ms, kind, actor_kind, actor, names, reason, detail) \
         VALUES (2, 1700000000000, 'admin_action', 'system', '', '', 'from the future', 'null')",
    )
    .await;
    s.block_key(&key(4, 0), "compromised", t0(), &blocked(4, 0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.seal_audit().await.unwrap(), 1);
    let check = s.verify_audit_chain(&|_| {}).await.unwrap();
    assert_eq!(check.first_broken, None, "{check:?}");
    assert_eq!((check.records, check.pending.records), (1, 1));
    assert_eq!(check.pending.oldest, Some(t0()));
    assert!(check.pending.is_stale(t0() + time::Duration::minutes(5)));
}

/// A record in a transaction of its own (a reload, an admin action) comes after every record
/// committed before it: `append_audit` seals what is pending first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_record_of_its_own_follows_what_was_pending() {
    sqlx::any::install_default_drivers();
    let pg = PgDatabase::create("certeasy_test_").unwrap();
    let s = Storage::connect(pg.url()).await.unwrap();
    for i in 0..2 {
        s.block_key(&key(5, i), "compromised", t0(), &blocked(5, i))
            .await
            .unwrap()
            .unwrap();
    }
    let own = AuditEvent::new(AuditKind::ConfigReloaded, Actor::System, "SIGHUP");
    assert_eq!(s.append_audit(&own, t0()).await.unwrap(), 3);
    assert_eq!(count(pg.url(), "audit_pending").await, 0);
    let newest = s.audit_records(&AuditFilter::default()).await.unwrap();
    let events: Vec<AuditEvent> = newest.into_iter().rev().map(|r| r.event).collect();
    assert_eq!(events, [blocked(5, 0), blocked(5, 1), own]);
}

/// A new account and its record are one statement on PostgreSQL: the record names the new id
/// as actor and account, exactly as the transaction on SQLite does; an already registered key
/// creates nothing and records nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_account_and_its_record_are_written_together() {
    sqlx::any::install_default_drivers();
    let pg = PgDatabase::create("certeasy_test_").unwrap();
    let s = Storage::connect(pg.url()).await.unwrap();
    let new = || storage::model::NewAccount {
        jwk_json: r#"{"kty":"EC","x":"k1"}"#.to_owned(),
        thumbprint: "k1".to_owned(),
        contacts: vec!["mailto:ops@example.com".to_owned()],
        tos_agreed: true,
    };
    let mut event = AuditEvent::new(
        AuditKind::AccountCreated,
        Actor::Account(acme_core::ids::AccountId(0)),
        "created by the holder of its key",
    );
    event.client_ip = Some("192.0.2.9".parse().unwrap());
    let account = s.create_account(new(), t0(), &event).await.unwrap();
    let again = s.create_account(new(), t0(), &event).await;
    assert!(
        matches!(again, Err(storage::error::Error::Conflict(id)) if id == account.id.0),
        "{again:?}"
    );
    let records = s.audit_records(&AuditFilter::default()).await.unwrap();
    let [record] = records.as_slice() else {
        panic!("one record, got {records:#?}");
    };
    let mut expected = event.clone();
    expected.actor = Actor::Account(account.id);
    expected.account = Some(account.id);
    assert_eq!(record.event, expected);
    let check = s.verify_audit_chain(&|_| {}).await.unwrap();
    assert_eq!(check.first_broken, None, "{check:?}");
}

async fn execute(url: &str, sql: &str) {
    let mut conn = AnyConnection::connect(url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
}

/// SQLite chains as it writes: nothing is ever pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_chains_as_it_writes() {
    harness::sqlite(|s| async move {
        s.block_key(&key(2, 0), "compromised", t0(), &blocked(2, 0))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(s.seal_audit().await.unwrap(), 0);
        let records = s.audit_records(&AuditFilter::default()).await.unwrap();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].seq, 1);
    })
    .await;
}
