//! PostgreSQL connections: sqlx's native driver, in a pool of our own.
//!
//! sqlx's pool makes a round trip to test a connection every time it is taken
//! (`test_before_acquire`) and again, unconditionally, every time it is given back. A statement
//! run on its own (the account read of every request, say) took three round trips where one
//! does, and PostgreSQL's cost on the issuance path is per round trip (docs/performance.md,
//! "Measured decisions"). Here a connection is tested only when it has been
//! idle long enough for a firewall or a server restart to have dropped it unseen
//! ([`PING_AFTER_IDLE`]); a connection whose statement failed below SQL (I/O, protocol, TLS) or
//! was abandoned half-way is closed instead of given back, and a transaction left open is rolled
//! back before its connection is reused.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use sqlx::Connection;
use sqlx::Executor;
use sqlx::postgres::PgConnectOptions;
use sqlx::postgres::PgConnection;
use sqlx::postgres::PgDatabaseError;
use sqlx::postgres::PgSeverity;
use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::Semaphore;

use crate::Result;
use crate::error::Error;

/// An idle connection older than this is tested with a round trip before it is used.
const PING_AFTER_IDLE: Duration = Duration::from_secs(10);

/// An idle connection older than this is closed instead of used, so that a burst's connections
/// do not hold PostgreSQL backends (a process each) for the rest of the day.
const CLOSE_AFTER_IDLE: Duration = Duration::from_secs(600);

/// The connections of one PostgreSQL database, at most `max` open at once.
#[derive(Debug)]
pub(crate) struct PgDb {
    options: PgConnectOptions,
    /// Most recently used last: a lease takes the warmest connection, so the coldest ones idle
    /// long enough to be closed once load falls.
    idle: Mutex<Vec<Idle>>,
    permits: Arc<Semaphore>,
    max: u32,
    acquire_timeout: Duration,
    ping_after_idle: Duration,
    close_after_idle: Duration,
}

#[derive(Debug)]
struct Idle {
    conn: PgConnection,
    since: Instant,
}

impl PgDb {
    /// Checks that the database answers with one connection, which the pool keeps.
    pub(crate) async fn connect(
        options: PgConnectOptions,
        max: u32,
        acquire_timeout: Duration,
    ) -> Result<Arc<Self>> {
        let db = Arc::new(Self::new(options, max, acquire_timeout));
        drop(db.lease().await?);
        Ok(db)
    }

    fn new(options: PgConnectOptions, max: u32, acquire_timeout: Duration) -> Self {
        let max = max.max(1);
        Self {
            options,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(usize::try_from(max).unwrap_or(usize::MAX))),
            max,
            acquire_timeout,
            ping_after_idle: PING_AFTER_IDLE,
            close_after_idle: CLOSE_AFTER_IDLE,
        }
    }

    pub(crate) fn max_connections(&self) -> u32 {
        self.max
    }

    /// A connection, waiting at most `acquire_timeout` for a free place and for a new
    /// connection to open.
    pub(crate) async fn lease(self: &Arc<Self>) -> Result<PgLease> {
        tokio::time::timeout(self.acquire_timeout, self.lease_now())
            .await
            .map_err(|_| Error::Database(sqlx::Error::PoolTimedOut))?
    }

    async fn lease_now(self: &Arc<Self>) -> Result<PgLease> {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| Error::Closed)?;
        while let Some(idle) = self.take_idle() {
            let idle_for = idle.since.elapsed();
            let mut conn = idle.conn;
            if idle_for > self.close_after_idle {
                close(conn);
                continue;
            }
            if idle_for > self.ping_after_idle
                && let Err(e) = conn.ping().await
            {
                tracing::info!(error = %e, "an idle PostgreSQL connection was dropped; opening another");
                continue;
            }
            return Ok(PgLease::new(conn, self, permit));
        }
        let conn = PgConnection::connect_with(&self.options).await?;
        Ok(PgLease::new(conn, self, permit))
    }

    fn take_idle(&self) -> Option<Idle> {
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop()
    }

    /// Puts `conn` on top of the idle stack and closes the connections at its bottom that have
    /// idled past `close_after_idle`: a lease only ever looks at the top, so without this sweep
    /// the connections of a past burst would stay open for as long as load stays low.
    fn give_back(&self, conn: PgConnection) {
        if self.permits.is_closed() {
            close(conn);
            return;
        }
        let mut idle = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let stale = idle
            .iter()
            .take_while(|i| i.since.elapsed() > self.close_after_idle)
            .count();
        let closing: Vec<Idle> = idle.drain(..stale).collect();
        idle.push(Idle {
            conn,
            since: Instant::now(),
        });
        drop(idle);
        for Idle { conn, .. } in closing {
            close(conn);
        }
    }

    /// Refuses new leases and closes the idle connections; leased ones close when returned.
    pub(crate) async fn close(&self) {
        self.permits.close();
        let idle = std::mem::take(
            &mut *self
                .idle
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for Idle { conn, .. } in idle {
            let _ = conn.close().await;
        }
    }
}

/// Closes a connection politely (a Terminate message) on a task of its own, or just drops the
/// socket outside a runtime.
fn close(conn: PgConnection) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            let _ = conn.close().await;
        });
    }
}

/// A connection on loan; it goes back to the pool when dropped (see the module comment for when
/// it is closed or rolled back instead).
#[derive(Debug)]
pub(crate) struct PgLease {
    conn: Option<PgConnection>,
    db: Arc<PgDb>,
    permit: Option<OwnedSemaphorePermit>,
    /// Inside `BEGIN` … `COMMIT`/`ROLLBACK`.
    in_transaction: bool,
    /// A statement was started and has not returned, or failed below SQL: the connection's
    /// state is unknown.
    unsound: bool,
}

impl PgLease {
    fn new(conn: PgConnection, db: &Arc<PgDb>, permit: OwnedSemaphorePermit) -> Self {
        Self {
            conn: Some(conn),
            db: Arc::clone(db),
            permit: Some(permit),
            in_transaction: false,
            unsound: false,
        }
    }

    /// Runs `f` on the connection, keeping track of whether it came back sound.
    pub(crate) async fn with<T, F>(&mut self, f: F) -> Result<T>
    where
        F: AsyncFnOnce(&mut PgConnection) -> std::result::Result<T, sqlx::Error>,
    {
        let conn = self.conn.as_mut().ok_or(Error::Closed)?;
        self.unsound = true;
        let result = f(conn).await;
        self.unsound = result.as_ref().is_err_and(breaks_connection);
        Ok(result?)
    }

    pub(crate) async fn begin(&mut self) -> Result<()> {
        self.control("BEGIN").await?;
        self.in_transaction = true;
        Ok(())
    }

    pub(crate) async fn commit(mut self) -> Result<()> {
        let outcome = self.control("COMMIT").await;
        // After a failed COMMIT PostgreSQL has ended the transaction (rolled back); if the
        // connection broke instead, it is closed on drop.
        self.in_transaction = false;
        outcome
    }

    pub(crate) async fn rollback(mut self) -> Result<()> {
        let outcome = self.control("ROLLBACK").await;
        self.in_transaction = false;
        outcome
    }

    async fn control(&mut self, sql: &'static str) -> Result<()> {
        self.with(async |conn| conn.execute(sql).await.map(|_| ()))
            .await
    }
}

/// Whether an error leaves the connection unusable or in an unknown state, as opposed to an
/// error PostgreSQL reported on a sound connection (a constraint, a serialization failure). A
/// `FATAL` error is PostgreSQL ending the session (`pg_terminate_backend`, a shutdown).
fn breaks_connection(e: &sqlx::Error) -> bool {
    if let sqlx::Error::Database(d) = e {
        return d
            .try_downcast_ref::<PgDatabaseError>()
            .is_some_and(|pg| matches!(pg.severity(), PgSeverity::Fatal | PgSeverity::Panic));
    }
    !matches!(
        e,
        sqlx::Error::RowNotFound
            | sqlx::Error::ColumnNotFound(_)
            | sqlx::Error::ColumnIndexOutOfBounds { .. }
            | sqlx::Error::ColumnDecode { .. }
            | sqlx::Error::TypeNotFound { .. }
    )
}

impl Drop for PgLease {
    fn drop(&mut self) {
        let (Some(mut conn), Some(permit)) = (self.conn.take(), self.permit.take()) else {
            return;
        };
        if self.unsound {
            close(conn);
            return;
        }
        if !self.in_transaction {
            self.db.give_back(conn);
            return;
        }
        // A task that errored or was cancelled in the middle of a transaction: roll it back
        // now, so that its row locks do not wait for the connection's next use. The place in
        // the pool stays taken until the rollback is done.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let db = Arc::clone(&self.db);
        runtime.spawn(async move {
            match conn.execute("ROLLBACK").await {
                Ok(_) => db.give_back(conn),
                Err(e) => {
                    tracing::warn!(error = %e, "rolling back an abandoned PostgreSQL transaction");
                    close(conn);
                }
            }
            drop(permit);
        });
    }
}

#[cfg(test)]
mod tests;
