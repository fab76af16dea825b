//! The background pruner: every `database.prune-interval`, deletes what finished ACME exchanges
//! left behind once it has been expired for `database.prune-after` (see `storage::Storage::prune_batch`
//! for what goes and what is kept), so that the database stays bounded.
//!
//! A pass runs batches until none comes back full. Between two batches it rests as long as the
//! last batch took, so that pruning a large backlog (the first pass on a database that was never
//! pruned) takes at most half of the database's write time and requests always get their turn.
//! Several instances may prune the same PostgreSQL database: each batch skips rows another holds,
//! and deleting what is already gone deletes nothing.

use std::time::Duration;
use std::time::Instant;

use acme_core::clock::SharedClock;
use storage::PruneReport;
use storage::Storage;
use tokio_util::sync::CancellationToken;

/// Default of `database.prune-interval`: a pass a minute keeps each pass small (a minute's worth
/// of expiries) while costing an idle server three indexed probes a minute.
pub const DEFAULT_PRUNE_INTERVAL: Duration = Duration::from_secs(60);

/// What to prune, how often, and in which batches.
#[derive(Debug, Clone)]
pub struct PrunerSettings {
    /// Rows are pruned once they have been expired this long.
    pub retention: time::Duration,
    /// Pause between the end of one pass and the start of the next.
    pub interval: Duration,
    /// Rows per table per transaction.
    pub batch: u32,
}

impl Default for PrunerSettings {
    fn default() -> Self {
        Self {
            retention: storage::DEFAULT_PRUNE_AFTER,
            interval: DEFAULT_PRUNE_INTERVAL,
            batch: storage::DEFAULT_PRUNE_BATCH,
        }
    }
}

/// Prunes every `interval` until `shutdown` is cancelled; the first pass runs at once. A failed
/// batch is logged and counted and the pass ends; the next pass starts over.
pub async fn run(
    storage: Storage,
    clock: SharedClock,
    settings: PrunerSettings,
    shutdown: CancellationToken,
) {
    loop {
        if let Some((report, took)) = pass(&storage, &clock, &settings, &shutdown).await {
            record(&report, took);
        }
        tokio::select! {
            () = tokio::time::sleep(settings.interval) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// One pass: batches until none is full, one fails, or shutdown. Returns what it deleted and how
/// long it took, or `None` when it deleted nothing.
async fn pass(
    storage: &Storage,
    clock: &SharedClock,
    settings: &PrunerSettings,
    shutdown: &CancellationToken,
) -> Option<(PruneReport, Duration)> {
    let started = Instant::now();
    let mut total = PruneReport::default();
    loop {
        let batch_started = Instant::now();
        // `now` is read per batch: a pass over a large backlog may last minutes.
        let batch = storage
            .prune_batch(clock.now(), settings.retention, settings.batch)
            .await;
        let report = match batch {
            Ok(report) => report,
            Err(e) => {
                metrics::counter!("certeasy_worker_errors_total", "stage" => "prune").increment(1);
                tracing::warn!(error = %e, "pruning failed; the next pass tries again");
                break;
            }
        };
        total.add(&report);
        count(&report);
        if !report.more {
            break;
        }
        tokio::select! {
            () = tokio::time::sleep(batch_started.elapsed()) => {}
            () = shutdown.cancelled() => break,
        }
    }
    (!total.is_empty()).then(|| (total, started.elapsed()))
}

/// Counts each batch as it commits, so that the metric moves during a long pass.
fn count(report: &PruneReport) {
    let tables = [
        ("orders", report.orders),
        ("orders_trimmed", report.orders_trimmed),
        ("order_authorizations", report.order_links),
        ("authorizations", report.authorizations),
        ("challenges", report.challenges),
        ("certificate_evidence", report.evidence),
    ];
    for (table, rows) in tables {
        if rows > 0 {
            metrics::counter!("certeasy_pruned_rows_total", "table" => table).increment(rows);
        }
    }
}

fn record(report: &PruneReport, took: Duration) {
    tracing::info!(
        orders = report.orders,
        orders_trimmed = report.orders_trimmed,
        order_links = report.order_links,
        authorizations = report.authorizations,
        challenges = report.challenges,
        certificate_evidence = report.evidence,
        took_ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
        "pruned expired rows"
    );
}
