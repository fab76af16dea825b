//! SQLite on rusqlite: one writer connection and a few readers, statements run in place.
//!
//! A statement on SQLite takes microseconds once its pages are cached, far less than handing it
//! to another thread and waking the caller when it is done (what a driver with a thread per
//! connection does for every statement). So statements run on the calling task, and the only
//! waiting is for a connection. Writers queue for the single writer connection in FIFO order in
//! this process, instead of colliding on the database lock and backing off in SQLite's busy
//! handler (which sleeps up to 100 ms at a time); readers never wait for writers (WAL).

use std::path::Path;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::Connection;
use rusqlite::OpenFlags;
use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::Semaphore;

use crate::Result;
use crate::error::Error;
use crate::sql::Synchronous;
use crate::sql::row::LiteRow;
use crate::sql::row::Row;
use crate::sql::statement::Output;
use crate::sql::statement::Query;
use crate::sql::statement::Want;

/// How long a statement waits for a lock held by another process (the `certeasy` CLI, a backup
/// tool); within this process writers queue before they reach SQLite.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Prepared statements kept per connection: the storage code has about 130 distinct texts.
const STATEMENT_CACHE: usize = 256;

/// The connections of one database file.
#[derive(Debug)]
pub(crate) struct LiteDb {
    pub(crate) writer: Arc<LitePool>,
    pub(crate) readers: Arc<LitePool>,
}

impl LiteDb {
    pub(crate) fn open(path: &Path, readers: usize, synchronous: Synchronous) -> Result<Self> {
        let writer = open_connection(path, synchronous, false)?;
        // The journal mode is a property of the file: the writer sets it once. Checkpoints stay
        // with the committing writer at SQLite's default of 1,000 pages: a checkpointer thread
        // gained 13 % new-order throughput but tripled p99 latency on two cores (the copy
        // competes with requests for CPU and the WAL locks), see docs/performance.md.
        writer.pragma_update(None, "journal_mode", "WAL")?;
        let mut reader_conns = Vec::with_capacity(readers);
        for _ in 0..readers.max(1) {
            reader_conns.push(open_connection(path, synchronous, true)?);
        }
        Ok(Self {
            writer: LitePool::new(vec![writer]),
            readers: LitePool::new(reader_conns),
        })
    }

    pub(crate) fn size(&self) -> usize {
        self.writer.size + self.readers.size
    }

    pub(crate) fn close(&self) {
        self.writer.permits.close();
        self.readers.permits.close();
        self.writer.drain();
        self.readers.drain();
    }
}

fn open_connection(path: &Path, synchronous: Synchronous, reader: bool) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.pragma_update(None, "synchronous", synchronous.pragma())?;
    if reader {
        // A reader that tried to write would take the database lock behind the writer's back.
        conn.pragma_update(None, "query_only", "ON")?;
    }
    Ok(conn)
}

/// A fixed set of connections handed out one task at a time, in the order tasks asked.
#[derive(Debug)]
pub(crate) struct LitePool {
    idle: Mutex<Vec<Connection>>,
    permits: Arc<Semaphore>,
    size: usize,
}

impl LitePool {
    fn new(conns: Vec<Connection>) -> Arc<Self> {
        let size = conns.len();
        Arc::new(Self {
            idle: Mutex::new(conns),
            permits: Arc::new(Semaphore::new(size)),
            size,
        })
    }

    pub(crate) async fn lease(self: &Arc<Self>) -> Result<Lease> {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| Error::Closed)?;
        let conn = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop()
            // A permit is only granted while a connection is idle: one permit per connection.
            .ok_or(Error::Closed)?;
        Ok(Lease {
            conn: Some(conn),
            pool: Arc::clone(self),
            _permit: permit,
        })
    }

    /// The connection if one is idle and no task is queued for it, without waiting.
    pub(crate) fn try_lease(self: &Arc<Self>) -> Option<Lease> {
        let permit = Arc::clone(&self.permits).try_acquire_owned().ok()?;
        let conn = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop()?;
        Some(Lease {
            conn: Some(conn),
            pool: Arc::clone(self),
            _permit: permit,
        })
    }

    fn drain(&self) {
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    }
}

/// A connection on loan; it goes back to its pool when dropped, with any open transaction rolled
/// back (a task cancelled in the middle of one leaves nothing half done).
#[derive(Debug)]
pub(crate) struct Lease {
    conn: Option<Connection>,
    pool: Arc<LitePool>,
    _permit: OwnedSemaphorePermit,
}

impl Lease {
    pub(crate) fn conn(&self) -> Result<&Connection> {
        self.conn.as_ref().ok_or(Error::Closed)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if !conn.is_autocommit()
                && let Err(e) = conn.execute_batch("ROLLBACK")
            {
                tracing::warn!(error = %e, "rolling back an abandoned SQLite transaction");
            }
            if !self.pool.permits.is_closed() {
                self.pool
                    .idle
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(conn);
            }
        }
    }
}

/// Runs one statement on `conn` to completion.
pub(crate) fn run(conn: &Connection, query: &Query, want: Want) -> Result<Output> {
    if query.persistent() {
        let mut stmt = conn.prepare_cached(query.sql())?;
        run_prepared(conn, &mut stmt, query, want)
    } else {
        run_prepared(conn, &mut conn.prepare(query.sql())?, query, want)
    }
}

/// Runs a transaction statement (`BEGIN IMMEDIATE`, `COMMIT`, `ROLLBACK`) kept prepared: every
/// write transaction runs two, and parsing them anew each time showed in the profile.
pub(crate) fn control(conn: &Connection, sql: &'static str) -> Result<()> {
    conn.prepare_cached(sql)?.execute([])?;
    Ok(())
}

/// Whether `sql` only reads (`sqlite3_stmt_readonly`), deciding whether it may run on a reader.
pub(crate) fn is_read_only(conn: &Connection, query: &Query) -> Result<bool> {
    if query.persistent() {
        Ok(conn.prepare_cached(query.sql())?.readonly())
    } else {
        Ok(conn.prepare(query.sql())?.readonly())
    }
}

fn run_prepared(
    conn: &Connection,
    stmt: &mut rusqlite::Statement<'_>,
    query: &Query,
    want: Want,
) -> Result<Output> {
    bind(stmt, query)?;
    let names: Arc<[String]> = if want == Want::Done {
        Arc::from(Vec::new())
    } else {
        stmt.column_names()
            .iter()
            .map(|n| (*n).to_owned())
            .collect()
    };
    let width = stmt.column_count();
    let mut rows = stmt.raw_query();
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        if want == Want::Done {
            continue;
        }
        let mut values = Vec::with_capacity(width);
        for i in 0..width {
            values.push(row.get::<_, rusqlite::types::Value>(i)?);
        }
        out.push(Row::Lite(LiteRow {
            names: Arc::clone(&names),
            values,
        }));
        if want == Want::First {
            break;
        }
    }
    drop(rows);
    Ok(match want {
        Want::Done => Output::Done(conn.changes()),
        Want::First | Want::All => Output::Rows(out),
    })
}

/// Binds the arguments: `$n` placeholders by name (SQLite numbers named parameters in order of
/// first appearance, which need not be `n`), anonymous `?` by position.
fn bind(stmt: &mut rusqlite::Statement<'_>, query: &Query) -> Result<()> {
    let args = query.args();
    let expected = stmt.parameter_count();
    if args.len() != expected {
        return Err(Error::Corrupt(format!(
            "statement takes {expected} parameters, {} bound: {}",
            args.len(),
            query.sql()
        )));
    }
    let named = expected > 0 && stmt.parameter_name(1).is_some();
    for (i, value) in args.iter().enumerate() {
        let index = if named {
            let name = format!("${}", i + 1);
            stmt.parameter_index(&name)?.ok_or_else(|| {
                Error::Corrupt(format!(
                    "statement has no parameter {name}: {}",
                    query.sql()
                ))
            })?
        } else {
            i + 1
        };
        stmt.raw_bind_parameter(index, value)?;
    }
    Ok(())
}
