//! The storage error enum.

use acme_core::status::OrderStatus;
use time::OffsetDateTime;

/// Everything that can go wrong in storage.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The certificate was already revoked.
    #[error("certificate already revoked")]
    AlreadyRevoked,
    /// A unique key is taken; carries the id of the row that holds it.
    #[error("conflict with existing row {0}")]
    Conflict(i64),
    /// The database failed or is unreachable.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// The duplicate-certificate guard refused the order.
    #[error("{count} certificates already issued for this identifier set")]
    DuplicateCertificate {
        count: u32,
        /// When the oldest certificate in the window leaves it.
        retry_at: OffsetDateTime,
    },
    /// SQLite failed.
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// Another process holds the SQLite database (carries the path).
    #[error(
        "the database {0} is in use by another process: another `certeasy serve` on this data directory (a running server holds its database exclusively), or a tool holding a lock on it; a running server's database is copied with `certeasy admin backup`"
    )]
    InUse(String),
    /// The operation does not exist for this backend (carries what to do instead).
    #[error("{0}")]
    Unsupported(&'static str),
    /// The storage was closed while a caller waited for a connection.
    #[error("database closed")]
    Closed,
    /// Stored data could not be decoded (a bug or a manual edit).
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// Migrations could not be applied.
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The row does not exist.
    #[error("not found")]
    NotFound,
    /// The pending-authorization guard refused the order.
    #[error("{pending} pending authorizations, limit {max}")]
    PendingAuthzLimit {
        pending: u32,
        max: u32,
        /// When the soonest pending authorization expires.
        retry_at: OffsetDateTime,
    },
    /// The SQLite file could not be created or made private (carries the path).
    #[error("database file {path}: {source}")]
    File {
        path: String,
        source: std::io::Error,
    },
    /// The database URL names a backend Certeasy does not support (carries the scheme).
    #[error("unsupported database URL scheme {0:?}; use sqlite: or postgres:")]
    UnsupportedUrl(String),
    /// The object is not in a state that allows the operation.
    #[error("wrong state: {0}")]
    WrongState(String),
    /// An order is not ready for finalization.
    #[error("order is {}", .0.as_str())]
    OrderNotReady(OrderStatus),
}

impl Error {
    /// Whether a statement broke a unique constraint, on either backend.
    pub(crate) fn is_unique_violation(&self) -> bool {
        match self {
            Error::Database(e) => e
                .as_database_error()
                .is_some_and(|d| d.is_unique_violation()),
            Error::Sqlite(rusqlite::Error::SqliteFailure(e, _)) => matches!(
                e.extended_code,
                rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                    | rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
            ),
            _ => false,
        }
    }
}
