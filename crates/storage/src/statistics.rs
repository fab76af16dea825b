//! PostgreSQL's planner statistics while the tables are young.
//!
//! A fresh database has no statistics, and autovacuum analyzes a table at most once a minute.
//! Until it does, the planner guesses, and a plan it caches for a prepared statement while a
//! table holds a handful of rows (a sequential scan of `orders` to find the orders of one
//! authorization, say) stays in use while the table grows: every validation then reads the
//! whole table. Measured on a fresh database under load, that made `orders` and
//! `authorizations` the most scanned tables, read from start to end several times per issuance.
//! So the process analyzes the tables that grow with issuance itself when the orders it has
//! created reach 100, 1,000, 10,000 and 100,000: ANALYZE gives the planner the real sizes and
//! invalidates the cached plans. Later growth is autovacuum's. SQLite's planner needs none of
//! this: it always uses an index that fits.
//!
//! Only a table the planner still believes smaller than what this process has added is
//! analyzed: a process started on a database of months, whose statistics are in place, counts
//! its orders from zero too, and analyzing its tables at 100 and 1,000 orders read 370,000 heap
//! pages of a 1.4 GB database within the first seconds of load (200,000 certificates,
//! `bench year`), to learn nothing new.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use crate::sql;
use crate::sql::Db;

/// Orders created by this process at which the tables are analyzed.
const ANALYZE_AT: [u64; 4] = [100, 1_000, 10_000, 100_000];

/// The tables whose size follows issuance.
const TABLES: [&str; 7] = [
    "orders",
    "order_authorizations",
    "authorizations",
    "challenges",
    "certificates",
    "accounts",
    "jobs",
];

/// Counts created orders and analyzes at the thresholds.
#[derive(Debug, Default)]
pub(crate) struct YoungTables {
    orders: AtomicU64,
}

impl YoungTables {
    /// Called once per created order, on PostgreSQL. The ANALYZE runs on a task of its own; a
    /// failure only leaves the statistics to autovacuum.
    pub(crate) fn order_created(&self, db: &Arc<Db>) {
        let n = self.orders.fetch_add(1, Ordering::Relaxed) + 1;
        if !ANALYZE_AT.contains(&n) {
            return;
        }
        let db = Arc::clone(db);
        tokio::spawn(async move {
            match analyze_young(&db, n).await {
                Ok(tables) if tables.is_empty() => {}
                Ok(tables) => tracing::debug!(orders = n, ?tables, "analyzed the growing tables"),
                Err(e) => tracing::warn!(error = %e, "ANALYZE failed; autovacuum will do it"),
            }
        });
    }
}

/// Analyzes those of [`TABLES`] whose row estimate (`pg_class.reltuples`, -1 before any
/// statistics) is below `orders`, the orders this process has created; returns them.
async fn analyze_young(db: &Db, orders: u64) -> crate::Result<Vec<String>> {
    let names = TABLES
        .iter()
        .map(|t| format!("'{t}'::regclass"))
        .collect::<Vec<_>>()
        .join(", ");
    let young: Vec<String> = sql::one_off_scalar(format!(
        "SELECT relname::text FROM pg_class WHERE oid IN ({names}) AND reltuples::bigint < $1 \
         ORDER BY relname"
    ))
    .bind(i64::try_from(orders).unwrap_or(i64::MAX))
    .fetch_all(db)
    .await?;
    if !young.is_empty() {
        sql::one_off(format!("ANALYZE {}", young.join(", ")))
            .execute(db)
            .await?;
    }
    Ok(young)
}
