//! The pool against a real PostgreSQL (`CERTEASY_TEST_POSTGRES_URL`, by default the local
//! server's `postgres` database): what becomes of a connection that was abandoned in a
//! transaction, cancelled in the middle of a statement, ended by the server, or left idle. The
//! tests create nothing in the database; a transaction's advisory lock (on a key of their own)
//! shows whether it is still open.

use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use sqlx::Connection;
use sqlx::postgres::PgConnectOptions;
use sqlx::postgres::PgConnection;

use super::PgDb;
use super::PgLease;
use crate::error::Error;

const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// How long a test waits for something the pool does on a task of its own.
const PATIENCE: Duration = Duration::from_secs(5);

fn options() -> PgConnectOptions {
    std::env::var("CERTEASY_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| DEFAULT_URL.to_owned())
        .parse()
        .expect("CERTEASY_TEST_POSTGRES_URL is a PostgreSQL URL")
}

fn pool(max: u32) -> PgDb {
    PgDb::new(options(), max, Duration::from_secs(10))
}

/// A connection of the test's own, outside the pool.
async fn observer() -> PgConnection {
    PgConnection::connect_with(&options())
        .await
        .expect("PostgreSQL answers on CERTEASY_TEST_POSTGRES_URL (127.0.0.1:5432 by default)")
}

/// An advisory-lock key no other test process uses at the same time.
fn unique_key() -> i64 {
    static NEXT: AtomicI64 = AtomicI64::new(0);
    (i64::from(std::process::id()) << 20) + NEXT.fetch_add(1, Ordering::Relaxed)
}

async fn backend_pid(lease: &mut PgLease) -> crate::Result<i64> {
    lease
        .with(async |conn| {
            sqlx::query_scalar::<_, i64>("SELECT CAST(pg_backend_pid() AS BIGINT)")
                .fetch_one(conn)
                .await
        })
        .await
}

/// Whether the lease's session is outside any transaction: a transaction-scoped lock it takes
/// is free again as soon as its statement returns.
async fn outside_transaction(lease: &mut PgLease) -> bool {
    let key = unique_key();
    take_transaction_lock(lease, key).await;
    lock_is_free(&mut observer().await, key).await
}

/// Takes the advisory lock `key` for the lease's current transaction (or its statement alone).
async fn take_transaction_lock(lease: &mut PgLease, key: i64) {
    lease
        .with(async |conn| {
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(key)
                .execute(conn)
                .await
        })
        .await
        .unwrap();
}

/// Whether another session can take the advisory lock `key` (it takes and frees it at once).
async fn lock_is_free(observer: &mut PgConnection, key: i64) -> bool {
    sqlx::query_scalar::<_, bool>("SELECT pg_try_advisory_xact_lock($1)")
        .bind(key)
        .fetch_one(observer)
        .await
        .unwrap()
}

/// A lease on `db`, checked to be on another backend than `old`: the connection of `old` was not
/// handed out again.
async fn lease_on_new_backend(db: &Arc<PgDb>, old: i64) -> PgLease {
    let mut lease = db.lease().await.unwrap();
    assert_ne!(backend_pid(&mut lease).await.unwrap(), old);
    lease
}

async fn backend_exists(observer: &mut PgConnection, pid: i64) -> bool {
    sqlx::query_scalar::<_, bool>(
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = CAST($1 AS INTEGER))",
    )
    .bind(pid)
    .fetch_one(observer)
    .await
    .unwrap()
}

/// Ends the session `pid` from the server's side and waits until it is gone.
async fn terminate(pid: i64) {
    let mut observer = observer().await;
    let ended: bool = sqlx::query_scalar("SELECT pg_terminate_backend(CAST($1 AS INTEGER))")
        .bind(pid)
        .fetch_one(&mut observer)
        .await
        .unwrap();
    assert!(ended, "session {pid} was not there to end");
    wait_until_gone(&mut observer, pid).await;
}

async fn wait_until_gone(observer: &mut PgConnection, pid: i64) {
    let deadline = Instant::now() + PATIENCE;
    while backend_exists(observer, pid).await {
        assert!(Instant::now() < deadline, "session {pid} still exists");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_abandoned_transaction_is_rolled_back_and_its_connection_reused() {
    let db = Arc::new(pool(1));
    let key = unique_key();
    let mut lease = db.lease().await.unwrap();
    let pid = backend_pid(&mut lease).await.unwrap();
    lease.begin().await.unwrap();
    take_transaction_lock(&mut lease, key).await;
    // Dropped inside the transaction, as a task that returned an error with `?` drops it.
    drop(lease);

    // The lock belongs to the transaction: another session can take it once it has ended.
    let mut observer = observer().await;
    let deadline = Instant::now() + PATIENCE;
    while !lock_is_free(&mut observer, key).await {
        assert!(
            Instant::now() < deadline,
            "the abandoned transaction still holds its lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let mut again = db.lease().await.unwrap();
    assert_eq!(
        backend_pid(&mut again).await.unwrap(),
        pid,
        "the connection went back to the pool after its rollback"
    );
    assert!(outside_transaction(&mut again).await);
}

#[tokio::test]
async fn a_committed_or_rolled_back_transaction_leaves_a_reusable_connection() {
    let db = Arc::new(pool(1));
    for commit in [true, false] {
        let mut lease = db.lease().await.unwrap();
        let pid = backend_pid(&mut lease).await.unwrap();
        lease.begin().await.unwrap();
        if commit {
            lease.commit().await.unwrap();
        } else {
            lease.rollback().await.unwrap();
        }
        let mut again = db.lease().await.unwrap();
        assert_eq!(backend_pid(&mut again).await.unwrap(), pid);
        assert!(outside_transaction(&mut again).await, "commit: {commit}");
    }
}

#[tokio::test]
async fn an_error_postgresql_reports_keeps_the_connection() {
    let db = Arc::new(pool(1));
    let mut lease = db.lease().await.unwrap();
    let pid = backend_pid(&mut lease).await.unwrap();
    let refused = lease
        .with(async |conn| sqlx::query("SELECT 1 / 0").execute(conn).await)
        .await;
    assert!(
        matches!(&refused, Err(Error::Database(sqlx::Error::Database(_)))),
        "{refused:?}"
    );
    drop(lease);
    let mut again = db.lease().await.unwrap();
    assert_eq!(backend_pid(&mut again).await.unwrap(), pid);
}

#[tokio::test]
async fn a_statement_cancelled_half_way_closes_its_connection() {
    let db = Arc::new(pool(1));
    let mut lease = db.lease().await.unwrap();
    let pid = backend_pid(&mut lease).await.unwrap();
    let cancelled = tokio::time::timeout(
        Duration::from_millis(100),
        lease.with(async |conn| sqlx::query("SELECT pg_sleep(2)").execute(conn).await),
    )
    .await;
    assert!(cancelled.is_err(), "the statement was meant to be cut off");
    drop(lease);

    // What the connection would read next is the cancelled statement's answer: it is not reused.
    let mut next = lease_on_new_backend(&db, pid).await;
    assert!(outside_transaction(&mut next).await);
}

#[tokio::test]
async fn a_session_the_server_ended_fails_one_statement_and_is_replaced() {
    let db = Arc::new(pool(1));
    let mut lease = db.lease().await.unwrap();
    let pid = backend_pid(&mut lease).await.unwrap();
    terminate(pid).await;
    let failed = backend_pid(&mut lease).await;
    assert!(
        failed.is_err(),
        "a statement on an ended session: {failed:?}"
    );
    drop(lease);
    lease_on_new_backend(&db, pid).await;
}

#[tokio::test]
async fn an_idle_session_the_server_ended_is_replaced_unseen() {
    let mut db = pool(1);
    db.ping_after_idle = Duration::ZERO;
    let db = Arc::new(db);
    let pid = backend_pid(&mut db.lease().await.unwrap()).await.unwrap();
    terminate(pid).await;

    // The idle connection is tested before it is handed out; the caller never sees it fail.
    lease_on_new_backend(&db, pid).await;
}

#[tokio::test]
async fn a_connection_idle_too_long_is_closed_not_reused() {
    let mut db = pool(1);
    db.close_after_idle = Duration::ZERO;
    let db = Arc::new(db);
    let pid = backend_pid(&mut db.lease().await.unwrap()).await.unwrap();

    lease_on_new_backend(&db, pid).await;
    wait_until_gone(&mut observer().await, pid).await;
}

#[tokio::test]
async fn connections_left_idle_under_the_warm_one_are_closed() {
    let mut db = pool(2);
    db.close_after_idle = Duration::from_millis(300);
    let db = Arc::new(db);
    let mut cold = db.lease().await.unwrap();
    let mut warm = db.lease().await.unwrap();
    let cold_pid = backend_pid(&mut cold).await.unwrap();
    let warm_pid = backend_pid(&mut warm).await.unwrap();
    drop(cold);
    tokio::time::sleep(Duration::from_millis(400)).await;
    // Load stays low: only the warm connection is ever taken again, yet the cold one goes.
    drop(warm);
    let mut observer = observer().await;
    wait_until_gone(&mut observer, cold_pid).await;
    assert!(backend_exists(&mut observer, warm_pid).await);
    let mut again = db.lease().await.unwrap();
    assert_eq!(backend_pid(&mut again).await.unwrap(), warm_pid);
}

#[tokio::test]
async fn a_lease_waits_no_longer_than_the_acquire_timeout() {
    let db = Arc::new(PgDb::new(options(), 1, Duration::from_millis(200)));
    let held = db.lease().await.unwrap();
    let started = Instant::now();
    let refused = db.lease().await;
    assert!(
        matches!(refused, Err(Error::Database(sqlx::Error::PoolTimedOut))),
        "{refused:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(200));
    drop(held);
    assert!(db.lease().await.is_ok(), "the place is free again");
}

#[tokio::test]
async fn closing_refuses_leases_and_ends_idle_sessions() {
    let db = Arc::new(pool(2));
    let pid = backend_pid(&mut db.lease().await.unwrap()).await.unwrap();
    db.close().await;
    assert!(matches!(db.lease().await, Err(Error::Closed)));
    wait_until_gone(&mut observer().await, pid).await;
}
