//! Opening the database: backend detection, per-connection settings, migrations.

use std::time::Duration;

use sqlx::ConnectOptions;
use sqlx::Connection;
use sqlx::any::AnyPoolOptions;
use sqlx::migrate::Migrator;
use sqlx::postgres::PgConnectOptions;

use crate::Backend;
use crate::Result;
use crate::Storage;
use crate::error::Error;
use crate::sql::Db;
use crate::sql::Synchronous;

static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("../../migrations/sqlite");
static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("../../migrations/postgres");

/// Page size of a new SQLite database. Every page a write transaction touches is appended whole
/// to the WAL and copied again by the next checkpoint, and an order touches about fifteen pages
/// (its rows and their index entries) for a few hundred bytes of data. At 1 KiB instead of
/// SQLite's 4 KiB default, the server writes a third of the bytes per issuance (measured in
/// docs/performance.md, "Measured decisions"). Takes effect only when the file is created: an existing
/// database keeps its page size.
const SQLITE_PAGE_SIZE: &str = "PRAGMA page_size = 1024";

/// How long a caller waits for a database connection (a free place and, if none is open, a new
/// connection) before its request fails.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// Prepared statements kept per PostgreSQL connection: the storage code has about 130 distinct
/// texts, more than sqlx's default of 100, which would evict and prepare again on a busy path.
const PG_STATEMENT_CACHE: usize = 256;

/// How the database is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    /// The most connections open at once (API and workers of one instance share them). On
    /// SQLite: one writer, and readers up to this less one, but no more than the CPUs, since
    /// statements run on the runtime's threads and more readers than threads would only idle.
    pub max_connections: u32,
    /// SQLite's commit durability; ignored by PostgreSQL.
    pub sqlite_synchronous: Synchronous,
}

impl Default for PoolSettings {
    /// Enough for the API and the workers of one instance; PostgreSQL pays memory per
    /// connection, so more would mostly add waiting.
    fn default() -> Self {
        Self {
            max_connections: 16,
            sqlite_synchronous: Synchronous::default(),
        }
    }
}

impl PoolSettings {
    /// Readers a SQLite database gets with these settings.
    fn sqlite_readers(&self) -> usize {
        let cpus = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
        let allowed = usize::try_from(self.max_connections.saturating_sub(1)).unwrap_or(1);
        allowed.min(cpus).max(1)
    }
}

pub(crate) async fn connect(url: &str, settings: PoolSettings) -> Result<Storage> {
    sqlx::any::install_default_drivers();
    let backend = backend_of(url)?;
    let max = settings.max_connections.max(1);
    let db = match backend {
        Backend::Postgres => {
            let options = url
                .parse::<PgConnectOptions>()?
                .statement_cache_capacity(PG_STATEMENT_CACHE);
            // On a connection of its own, closed before the server's connections open.
            let mut conn = tokio::time::timeout(ACQUIRE_TIMEOUT, options.connect())
                .await
                .map_err(|_| Error::Database(sqlx::Error::PoolTimedOut))??;
            POSTGRES_MIGRATIONS.run(&mut conn).await?;
            conn.close().await?;
            Db::Postgres(crate::sql::PgDb::connect(options, max, ACQUIRE_TIMEOUT).await?)
        }
        Backend::Sqlite => {
            let path = crate::private_file::sqlite_path(url).ok_or_else(|| {
                Error::UnsupportedUrl(format!(
                    "{url} (an in-memory or percent-encoded SQLite path; name a file)"
                ))
            })?;
            // The file holds account keys and EAB keys: it is created 0600 before SQLite opens
            // it, and SQLite gives its -wal and -shm files the mode of the database file.
            crate::private_file::create_private(&path)?;
            crate::sql::lite::check_not_in_use(&path)?;
            migrate_sqlite(url).await?;
            let db = Db::open_sqlite(
                &path,
                settings.sqlite_readers(),
                settings.sqlite_synchronous,
            )?;
            crate::private_file::restrict_sqlite_files(&path);
            db
        }
    };
    Ok(Storage {
        db: std::sync::Arc::new(db),
        backend,
        young_tables: std::sync::Arc::default(),
        accounts: (backend == Backend::Sqlite).then(std::sync::Arc::default),
        issuer_chains: std::sync::Arc::default(),
        evidence_retention: crate::evidence::DEFAULT_EVIDENCE_RETENTION,
    })
}

/// Applies the migrations through sqlx's migrator (which keeps its own ledger table), on one
/// connection that is closed before the server's own connections open.
async fn migrate_sqlite(url: &str) -> Result<()> {
    let pool = AnyPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .after_connect(|conn, _meta| {
            Box::pin(async move {
                // busy_timeout first: switching to WAL may itself wait for the file lock.
                sqlx::query("PRAGMA busy_timeout = 5000")
                    .execute(&mut *conn)
                    .await?;
                // Before WAL mode: in WAL mode the page size can no longer change.
                sqlx::query(SQLITE_PAGE_SIZE).execute(&mut *conn).await?;
                sqlx::query("PRAGMA journal_mode = WAL")
                    .execute(&mut *conn)
                    .await?;
                sqlx::query("PRAGMA foreign_keys = ON")
                    .execute(&mut *conn)
                    .await?;
                Ok(())
            })
        })
        .connect(&with_create_mode(url))
        .await?;
    let outcome = SQLITE_MIGRATIONS.run(&pool).await;
    pool.close().await;
    Ok(outcome?)
}

fn backend_of(url: &str) -> Result<Backend> {
    if url.starts_with("sqlite:") {
        Ok(Backend::Sqlite)
    } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        Ok(Backend::Postgres)
    } else {
        let scheme = url.split(':').next().unwrap_or_default();
        Err(Error::UnsupportedUrl(scheme.to_owned()))
    }
}

/// Adds `mode=rwc` so that a missing database file is created, unless the URL chose a mode.
fn with_create_mode(url: &str) -> String {
    if url.contains("mode=") {
        url.to_owned()
    } else if url.contains('?') {
        format!("{url}&mode=rwc")
    } else {
        format!("{url}?mode=rwc")
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_backend_and_adds_create_mode() {
        assert_eq!(backend_of("sqlite:///tmp/x.db").unwrap(), Backend::Sqlite);
        assert_eq!(backend_of("postgres://u@h/db").unwrap(), Backend::Postgres);
        assert_eq!(
            backend_of("postgresql://u@h/db").unwrap(),
            Backend::Postgres
        );
        assert!(
            matches!(backend_of("mysql://h/db"), Err(Error::UnsupportedUrl(s)) if s == "mysql")
        );
        assert_eq!(
            with_create_mode("sqlite:///tmp/x.db"),
            "sqlite:///tmp/x.db?mode=rwc"
        );
        assert_eq!(
            with_create_mode("sqlite:///tmp/x.db?cache=shared"),
            "sqlite:///tmp/x.db?cache=shared&mode=rwc"
        );
        assert_eq!(
            with_create_mode("sqlite:///tmp/x.db?mode=ro"),
            "sqlite:///tmp/x.db?mode=ro"
        );
    }
}
