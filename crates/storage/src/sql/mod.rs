//! The one place that knows how a statement reaches each backend.
//!
//! PostgreSQL goes through sqlx's native driver, on connections of a pool of our own ([`pg`] says
//! why). SQLite goes through rusqlite, run in place on the calling task ([`lite`] says why). The
//! storage code above writes each statement once, with sqlx-like calls
//! (`query(..).bind(..).fetch_optional(..)`), and runs it against the [`Db`] or a [`Conn`].

pub(crate) mod lite;
mod params;
mod pg;
mod query;
mod row;
mod statement;
mod value;

use std::path::Path;
use std::sync::Arc;

use crate::Result;

pub(crate) use crate::sql::params::Params;
pub(crate) use crate::sql::pg::PgDb;
pub(crate) use crate::sql::query::QueryScalar;
pub(crate) use crate::sql::query::one_off_scalar;
pub(crate) use crate::sql::query::query_scalar;
pub(crate) use crate::sql::row::Row;
pub(crate) use crate::sql::statement::Query;
pub(crate) use crate::sql::statement::one_off;
pub(crate) use crate::sql::statement::query;
pub(crate) use crate::sql::statement::shaped;

/// When SQLite makes a commit durable (`database.sqlite-synchronous`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// WAL with `synchronous = NORMAL`: a commit is in the WAL file before the response, so it
    /// survives the process being killed; the WAL is synced at checkpoints, so a power loss or
    /// kernel crash may roll back the last commits (never corrupt the file).
    #[default]
    Normal,
    /// `synchronous = FULL`: every commit is synced to the disk before it returns, so it also
    /// survives a power loss, at the cost of one fsync per write transaction.
    Full,
}

impl Synchronous {
    fn pragma(self) -> &'static str {
        match self {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        }
    }
}

/// The database behind a [`crate::Storage`].
#[derive(Debug)]
pub(crate) enum Db {
    Postgres(Arc<PgDb>),
    Sqlite(Arc<lite::LiteDb>),
}

/// A connection held by the caller: for several statements in a row, or a transaction.
pub(crate) struct Conn(ConnKind);

enum ConnKind {
    /// PostgreSQL, in a transaction or not (the lease knows).
    Pg(pg::PgLease),
    /// SQLite outside a transaction: each statement takes a reader or the writer as it needs.
    LiteAny(Arc<lite::LiteDb>),
    /// SQLite's writer, inside `BEGIN IMMEDIATE`.
    Lite(lite::Lease),
}

impl Db {
    pub(crate) fn open_sqlite(
        path: &Path,
        readers: usize,
        synchronous: Synchronous,
    ) -> Result<Self> {
        Ok(Db::Sqlite(Arc::new(lite::LiteDb::open(
            path,
            readers,
            synchronous,
        )?)))
    }

    /// A connection for several statements that need not be atomic together.
    pub(crate) async fn acquire(&self) -> Result<Conn> {
        match self {
            Db::Postgres(pg) => Ok(Conn(ConnKind::Pg(pg.lease().await?))),
            Db::Sqlite(lite) => Ok(Conn(ConnKind::LiteAny(Arc::clone(lite)))),
        }
    }

    /// A transaction that writes. On SQLite it holds the writer from BEGIN (IMMEDIATE) on, so
    /// it never has to upgrade a read lock and can never meet SQLITE_BUSY from this process.
    pub(crate) async fn begin_write(&self) -> Result<Tx> {
        match self {
            Db::Postgres(pg) => {
                let mut lease = pg.lease().await?;
                lease.begin().await?;
                Ok(Tx(Conn(ConnKind::Pg(lease))))
            }
            Db::Sqlite(lite) => {
                let lease = lite.writer.lease().await?;
                lite::control(lease.conn()?, "BEGIN IMMEDIATE")?;
                Ok(Tx(Conn(ConnKind::Lite(lease))))
            }
        }
    }

    pub(crate) fn max_connections(&self) -> u32 {
        match self {
            Db::Postgres(pg) => pg.max_connections(),
            Db::Sqlite(lite) => u32::try_from(lite.size()).unwrap_or(u32::MAX),
        }
    }

    pub(crate) async fn close(&self) {
        match self {
            Db::Postgres(pg) => pg.close().await,
            Db::Sqlite(lite) => lite.close(),
        }
    }
}

impl Conn {
    /// The backend this connection talks to, for a function handed only the connection.
    pub(crate) fn backend(&self) -> crate::Backend {
        match self.0 {
            ConnKind::Pg(_) => crate::Backend::Postgres,
            ConnKind::LiteAny(_) | ConnKind::Lite(_) => crate::Backend::Sqlite,
        }
    }
}

/// A write transaction; rolled back when dropped without [`Tx::commit`].
pub(crate) struct Tx(Conn);

impl Tx {
    pub(crate) async fn commit(self) -> Result<()> {
        match self.0.0 {
            ConnKind::Pg(lease) => lease.commit().await,
            ConnKind::Lite(lease) => {
                // On failure the lease's drop rolls back.
                lite::control(lease.conn()?, "COMMIT")?;
                Ok(())
            }
            ConnKind::LiteAny(_) => Ok(()),
        }
    }
}

impl Tx {
    pub(crate) async fn rollback(self) -> Result<()> {
        match self.0.0 {
            ConnKind::Pg(lease) => lease.rollback().await,
            ConnKind::Lite(lease) => {
                lite::control(lease.conn()?, "ROLLBACK")?;
                Ok(())
            }
            ConnKind::LiteAny(_) => Ok(()),
        }
    }
}

impl std::ops::Deref for Tx {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        &self.0
    }
}

impl std::ops::DerefMut for Tx {
    fn deref_mut(&mut self) -> &mut Conn {
        &mut self.0
    }
}
