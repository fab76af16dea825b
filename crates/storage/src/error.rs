//! The storage error enum: failures and facts only. What a state or a limit forbids is never an
//! error here: storage reports what it found as an outcome (`model::OrderCreation`,
//! `model::ChallengeStart`, `model::StatusChange`, …) and the policy layer decides.

/// Everything that can go wrong in storage.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A unique key is taken; carries the id of the row that holds it.
    #[error("conflict with existing row {0}")]
    Conflict(i64),
    /// The database failed or is unreachable.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
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
    /// The SQLite file could not be created or made private (carries the path).
    #[error("database file {path}: {source}")]
    File {
        path: String,
        source: std::io::Error,
    },
    /// The database URL names a backend Certeasy does not support (carries the scheme).
    #[error("unsupported database URL scheme {0:?}; use sqlite: or postgres:")]
    UnsupportedUrl(String),
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
