//! SQLite on rusqlite: one writer connection and a few readers, statements run in place.
//!
//! A statement on SQLite takes microseconds once its pages are cached, far less than handing it
//! to another thread and waking the caller when it is done (what a driver with a thread per
//! connection does for every statement). So statements run on the calling task, and the only
//! waiting is for a connection. Writers queue for the single writer connection in FIFO order in
//! this process, instead of colliding on the database lock and backing off in SQLite's busy
//! handler (which sleeps up to 100 ms at a time); readers never wait for writers (WAL).
//!
//! Write transactions begin with `BEGIN IMMEDIATE`, so they hold the writer from their first
//! statement. A statement outside a transaction takes the writer when nobody holds or awaits it
//! (its page cache is current, while every commit makes a reader's stale), a reader otherwise,
//! and the writer only when it writes; a reader is released before the writer is awaited, so no
//! task holds one connection while waiting for the other. A writing statement is always stepped
//! to its end, since SQLite calls the WAL hook only for a statement that finishes.
//!
//! Checkpoints do not run in the writer's commits ([`Checkpointer`]): the writer's WAL hook notes
//! the WAL's size, and once it reaches 1,000 pages a checkpoint copies it on a connection of its
//! own on a blocking thread while commits go on, again until little is left, then copies the rest
//! with the writer held, so the WAL is wholly copied and starts again. If these fall behind, the
//! writer checkpoints in its commit at 10,000 pages, as SQLite would.
//!
//! The connections open the file through SQLite's `unix-excl` VFS: the first lock is an
//! exclusive one held until the process closes the database, and this process's connections
//! coordinate in memory (the WAL index is in the heap, no lock call reaches the kernel). So while
//! a server runs it is the only process that can open its database: a second server on the same
//! data directory stops at start with `Error::InUse` naming the file ([`check_not_in_use`]), and
//! backups are written by the server (`Storage::backup_into`). That exclusivity is also what
//! makes the account cache (`account_cache.rs`) sound.

use std::cell::Cell;
use std::ffi::c_int;
use std::path::Path;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicI32;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rusqlite::Connection;
use rusqlite::OpenFlags;
use rusqlite::hooks::Wal;
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

/// SQLite's VFS that takes an exclusive lock on the database file when a connection first locks
/// it, keeps it until the last connection of the process closes, and coordinates this process's
/// connections in memory: the WAL index lives in the heap instead of a shared `-shm` mapping, and
/// none of the POSIX lock calls a transaction makes reach the kernel (`fcntl` was 56 of the 217
/// system calls an issuance made on SQLite's files, and 3 % of the server's CPU). No other process
/// can open the database while the server runs: a second server on the same data directory
/// fails to start instead of sharing it, and online backups go through the server
/// (`certeasy admin backup`). It is also what makes the account cache (`account_cache.rs`)
/// sound: the server is the database's only writer.
const VFS: &str = "unix-excl";

/// WAL size, in pages, at which a checkpoint starts beside the writer: SQLite's own interval,
/// so each one copies as many pages as the writer's checkpoints in its commits used to.
const CHECKPOINT_PAGES: c_int = 1000;

/// What a checkpoint beside the writer may leave for its last copy, the one made with the writer
/// held so that the WAL is wholly copied and starts again; more, and it copies again without the
/// writer first. A few milliseconds of copying: that copy's two `fsync`s cost more.
const HELD_COPY_PAGES: u64 = 256;

/// Copies without the writer before the held one, however far they fall behind: under a write
/// rate faster than the disk copies, the held copy (and at worst the backstop) bounds the WAL.
const MAX_UNHELD_COPIES: usize = 8;

/// WAL size at which the writer checkpoints in its own commit after all, as SQLite does by
/// default. Reached only if checkpoints beside it fall behind the commits; it bounds the WAL.
const CHECKPOINT_BACKSTOP_PAGES: c_int = 10 * CHECKPOINT_PAGES;

thread_local! {
    /// The WAL's size after the last commit made on this thread, written by the writer's WAL hook
    /// (which SQLite calls inside COMMIT, on the committing thread) and taken when the writer is
    /// given back.
    static WAL_PAGES: Cell<c_int> = const { Cell::new(0) };
}

/// The connections of one database file.
#[derive(Debug)]
pub(crate) struct LiteDb {
    pub(crate) writer: Arc<LitePool>,
    pub(crate) readers: Arc<LitePool>,
    path: std::path::PathBuf,
    synchronous: Synchronous,
}

impl LiteDb {
    pub(crate) fn open(path: &Path, readers: usize, synchronous: Synchronous) -> Result<Self> {
        Self::open_exclusive(path, readers, synchronous).map_err(|e| match e {
            // Another process took the file between `check_not_in_use` and here.
            Error::Sqlite(rusqlite::Error::SqliteFailure(f, _))
                if f.code == rusqlite::ErrorCode::DatabaseBusy =>
            {
                Error::InUse(path.display().to_string())
            }
            other => other,
        })
    }

    fn open_exclusive(path: &Path, readers: usize, synchronous: Synchronous) -> Result<Self> {
        let writer = open_connection(path, synchronous, false)?;
        // The journal mode is a property of the file: the writer sets it once.
        writer.pragma_update(None, "journal_mode", "WAL")?;
        // Replaces SQLite's automatic checkpoint in the commit, see [`Checkpointer`].
        writer.wal_hook(Some(note_commit));
        let checkpointer = Checkpointer {
            conn: Mutex::new(Some(open_connection(path, synchronous, false)?)),
            running: AtomicBool::new(false),
            wal_pages: AtomicI32::new(0),
        };
        let mut reader_conns = Vec::with_capacity(readers);
        for _ in 0..readers.max(1) {
            reader_conns.push(open_connection(path, synchronous, true)?);
        }
        Ok(Self {
            writer: LitePool::new(vec![writer], Some(Arc::new(checkpointer))),
            readers: LitePool::new(reader_conns, None),
            path: path.to_owned(),
            synchronous,
        })
    }

    /// Writes a consistent copy of the database into `dest`, an empty file the caller created:
    /// `VACUUM INTO` on a connection of its own, which reads one snapshot (writers go on, WAL)
    /// and writes the copy compacted, without free pages. Blocking: the caller runs it off the
    /// runtime's threads.
    pub(crate) fn copy_into(&self, dest: &Path) -> Result<()> {
        // Not `query_only`, which also refuses the writes VACUUM INTO makes to the copy.
        let conn = open_connection(&self.path, self.synchronous, false)?;
        let dest = dest.to_str().ok_or_else(|| Error::File {
            path: dest.display().to_string(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the path is not UTF-8, which VACUUM INTO needs",
            ),
        })?;
        conn.execute("VACUUM INTO ?1", [dest])?;
        Ok(())
    }

    pub(crate) fn size(&self) -> usize {
        self.writer.size + self.readers.size
    }

    pub(crate) fn close(&self) {
        self.writer.permits.close();
        self.readers.permits.close();
        self.writer.drain();
        self.readers.drain();
        if let Some(checkpointer) = &self.writer.checkpointer {
            checkpointer.lock().take();
        }
    }
}

/// The WAL hook of the writer: notes the WAL's size for [`Lease`]'s drop, which starts a
/// checkpoint beside the writer when it is due.
fn note_commit(wal: &Wal, pages: c_int) -> rusqlite::Result<()> {
    WAL_PAGES.set(pages);
    if pages >= CHECKPOINT_BACKSTOP_PAGES {
        // As SQLite's own hook does, a failed checkpoint is not the commit's failure: the commit
        // is done, and an error here would make COMMIT report one.
        match wal.checkpoint() {
            Ok(()) => count_checkpoint("commit"),
            Err(e) => tracing::warn!(error = %e, pages, "checkpoint in the commit failed"),
        }
    }
    Ok(())
}

/// Checkpoints that run beside the writer instead of inside its commits.
///
/// A checkpoint copies the WAL's pages into the database file and syncs both files. SQLite runs
/// it inside the commit that fills the WAL, so every writer queued behind that commit waits for
/// the copy and the two `fsync`s. Here the copy runs on a connection of its own on a blocking
/// thread while commits go on, and again while more than [`HELD_COPY_PAGES`] were committed
/// meanwhile; only that rest is copied with the writer held (were commits let in then, the WAL
/// would never be wholly copied and would grow without end), and the next commit starts the WAL
/// again from its beginning. Against checkpoints in the
/// commit, alternated: new-order ×8 +5 % with its p99 from 4.1 to 3.7 ms, full issuance ×8 +5 %,
/// new-account ×32 +3 % (docs/performance.md, "Measured decisions"). Measured before the
/// exclusive VFS, a checkpointer of its own cost CPU per issuance; it no longer does.
#[derive(Debug)]
struct Checkpointer {
    conn: Mutex<Option<Connection>>,
    running: AtomicBool,
    /// The WAL's size after the writer's last commit, in pages: what a copy made meanwhile left
    /// to copy is this less what it copied (its own count of the WAL's pages is the size when it
    /// began).
    wal_pages: AtomicI32,
}

impl Checkpointer {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Connection>> {
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts a checkpoint unless one is running or there is no runtime to run it on (then the
    /// backstop in [`note_commit`] still bounds the WAL).
    fn start(self: &Arc<Self>, writer: &Arc<LitePool>) {
        if self.running.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.running.store(false, Ordering::Release);
            return;
        };
        let this = Arc::clone(self);
        let writer = Arc::clone(writer);
        runtime.spawn(async move {
            match Arc::clone(&this).run(&writer).await {
                // The database closed meanwhile; closing checkpoints what is left.
                Ok(()) | Err(Error::Closed) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "WAL checkpoint failed; the next commit tries again");
                }
            }
            this.running.store(false, Ordering::Release);
        });
    }

    async fn run(self: Arc<Self>, writer: &Arc<LitePool>) -> Result<()> {
        // Copies without the writer until what is left for the held copy is small: the held
        // copy's time is a stall for every request that writes. The first copy on a large file
        // whose pages are not cached can take hundreds of milliseconds, during which a pruning
        // pass committed 12,000 pages; copied with the writer held, they held it 118 ms.
        for _ in 0..MAX_UNHELD_COPIES {
            let this = Arc::clone(&self);
            let copied = match tokio::task::spawn_blocking(move || this.copy()).await {
                Ok(copied) => copied?,
                // Not a storage error: nobody waits for this task. The writer still checkpoints
                // in its commit at the backstop.
                Err(e) => {
                    tracing::error!(error = %e, "the WAL checkpoint task panicked");
                    return Ok(());
                }
            };
            let wal = u64::try_from(self.wal_pages.load(Ordering::Acquire)).unwrap_or(0);
            if wal.saturating_sub(copied) <= HELD_COPY_PAGES {
                break;
            }
        }
        let lease = writer.lease().await?;
        let held = std::time::Instant::now();
        checkpoint(lease.conn()?)?;
        drop(lease);
        metrics::histogram!("certeasy_sqlite_checkpoint_writer_hold_seconds")
            .record(held.elapsed().as_secs_f64());
        count_checkpoint("beside");
        Ok(())
    }

    /// Copies the pages the WAL holds now, while commits go on; returns how many of the WAL's
    /// pages have been copied.
    fn copy(&self) -> Result<u64> {
        let guard = self.lock();
        match guard.as_ref() {
            Some(conn) => checkpoint(conn),
            // The database was closed.
            None => Ok(0),
        }
    }
}

/// `certeasy_sqlite_checkpoints_total{where}`: `beside` the writer, as they should be, or in a
/// `commit` at the backstop, which says the checkpoints beside it fell behind the writes (a
/// disk slower than the commits).
fn count_checkpoint(place: &'static str) {
    metrics::counter!("certeasy_sqlite_checkpoints_total", "where" => place).increment(1);
}

/// `PRAGMA wal_checkpoint(PASSIVE)`: copies what no reader still needs from the WAL, without
/// waiting for any lock; a no-op when everything is copied already. Returns how many of the
/// WAL's pages are copied (the third column of its row: busy, the WAL's pages when the copy
/// began, the pages copied; -1 when not in WAL mode).
fn checkpoint(conn: &Connection) -> Result<u64> {
    let copied: i64 = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| row.get(2))?;
    Ok(u64::try_from(copied).unwrap_or(0))
}

/// Fails with [`Error::InUse`] when another process holds the database: a server on the same
/// data directory (which holds it exclusively, see [`VFS`]), or a tool in a transaction that
/// does not end within a second. A connection of this process's own VFS would wait
/// [`BUSY_TIMEOUT`] and then report `database is locked`, which names neither the file nor the
/// likely cause.
pub(crate) fn check_not_in_use(path: &Path) -> Result<()> {
    // Read-write, because a read-only connection cannot open a WAL database whose -shm file is
    // missing (the state every clean shutdown leaves); it only reads.
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(Duration::from_secs(1))?;
    match conn.query_row("PRAGMA schema_version", [], |row| row.get::<_, i64>(0)) {
        Ok(_) => Ok(()),
        Err(rusqlite::Error::SqliteFailure(e, _))
            if e.code == rusqlite::ErrorCode::DatabaseBusy =>
        {
            Err(Error::InUse(path.display().to_string()))
        }
        Err(e) => Err(e.into()),
    }
}

fn open_connection(path: &Path, synchronous: Synchronous, reader: bool) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags_and_vfs(path, flags, VFS)?;
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
    /// The writer's: started when a lease is given back after a commit filled the WAL.
    checkpointer: Option<Arc<Checkpointer>>,
}

impl LitePool {
    fn new(conns: Vec<Connection>, checkpointer: Option<Arc<Checkpointer>>) -> Arc<Self> {
        let size = conns.len();
        Arc::new(Self {
            idle: Mutex::new(conns),
            permits: Arc::new(Semaphore::new(size)),
            size,
            checkpointer,
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
            if let Some(checkpointer) = &self.pool.checkpointer {
                let pages = WAL_PAGES.take();
                if pages > 0 {
                    checkpointer.wal_pages.store(pages, Ordering::Release);
                }
                if pages >= CHECKPOINT_PAGES {
                    checkpointer.start(&self.pool);
                }
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
    // A statement that writes runs to its end even when only its first row is wanted (an
    // `INSERT … RETURNING`): outside a transaction SQLite commits it when it is reset, but calls
    // the WAL hook, which checkpoints, only when a statement finishes. Reset early, a stream of
    // such inserts (new-account) never checkpointed, and the WAL grew by some 3 MB a second.
    let writes = !stmt.readonly();
    let mut rows = stmt.raw_query();
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        if want == Want::Done || (want == Want::First && !out.is_empty()) {
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
        if want == Want::First && !writes {
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
