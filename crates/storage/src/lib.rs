//! Durable state of Certeasy: SQLite (default, a file with WAL, on rusqlite) or PostgreSQL (sqlx).
//!
//! This crate knows SQL and nothing of HTTP or ACME wire formats. Every multi-row state change of
//! RFC 8555 §7.1.6 happens in one transaction here, so the state machine can never be observed
//! half-applied, and durable work (validation, finalization) is enqueued in the same transaction
//! that makes it necessary: nothing accepted is lost on a crash.

mod account_cache;
mod accounts;
mod admin_queries;
pub mod audit;
mod authz;
mod backup;
pub mod blocked_keys;
#[cfg(feature = "bulk-fill")]
pub mod bulk_fill;
pub mod ca_state;
mod certificates;
mod codec;
mod connect;
pub mod crls;
mod eab;
pub mod error;
pub mod evidence;
mod issuer_chains;
mod jobs;
pub mod model;
mod orders;
pub mod overrides;
mod pauses;
mod pre_authz;
mod private_file;
mod prune;
mod renewals;
mod reservation_rows;
mod reservations;
mod rows;
mod sql;
mod state;
mod statistics;

use crate::error::Error;

/// `Result` with this crate's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub use crate::connect::PoolSettings;
pub use crate::prune::DEFAULT_PRUNE_AFTER;
pub use crate::prune::DEFAULT_PRUNE_BATCH;
pub use crate::prune::MAX_PRUNE_BATCH;
pub use crate::prune::PruneReport;
use crate::sql::Db;
pub use crate::sql::Synchronous;
use crate::sql::Tx;

/// Which database is behind the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

/// Handle to the database; cheap to clone.
#[derive(Debug, Clone)]
pub struct Storage {
    db: std::sync::Arc<Db>,
    backend: Backend,
    /// PostgreSQL only: analyzes the tables while they are young (`statistics.rs`).
    young_tables: std::sync::Arc<statistics::YoungTables>,
    /// SQLite only: the accounts read, kept while nothing changes them (`account_cache.rs`).
    accounts: Option<std::sync::Arc<account_cache::AccountCache>>,
    /// The ids of the issuer chains stored or found (`issuer_chains.rs`).
    issuer_chains: std::sync::Arc<issuer_chains::IssuerChains>,
    /// `database.evidence-retention` (`evidence.rs`).
    evidence_retention: time::Duration,
}

impl Storage {
    /// Connects (`sqlite://path` or `postgres://...`), creating a SQLite file if missing, and
    /// applies the migrations of `migrations/<backend>/`.
    pub async fn connect(url: &str) -> Result<Self> {
        connect::connect(url, PoolSettings::default()).await
    }

    /// [`Storage::connect`] with a pool sized by `settings` (`database.max-connections`).
    pub async fn connect_with(url: &str, settings: PoolSettings) -> Result<Self> {
        connect::connect(url, settings).await
    }

    /// The most connections the pool opens.
    pub fn max_connections(&self) -> u32 {
        self.db.max_connections()
    }

    /// The backend in use.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// A cheap round trip for health checks.
    pub async fn ping(&self) -> Result<()> {
        sql::query("SELECT 1").fetch_optional(&self.db).await?;
        Ok(())
    }

    /// Closes the pool, waiting for connections to be returned; lets a caller (or a test) drop
    /// the database afterwards.
    pub async fn close(&self) {
        self.db.close().await;
    }

    /// Starts a transaction that writes. On SQLite it takes the write lock at BEGIN: a deferred
    /// transaction that reads first and then upgrades can fail with SQLITE_BUSY at once, without
    /// waiting, when another writer got in between.
    async fn begin_write(&self) -> Result<Tx> {
        self.db.begin_write().await
    }
}
