//! The background pruner: every `database.prune-interval`, deletes what finished ACME exchanges
//! left behind once it has been expired for `database.prune-after` (see `storage::Storage::prune_batch`
//! for what goes and what is kept), so that the database stays bounded.
//!
//! A pass runs batches until none comes back full. Between two batches it rests as long as the
//! last batch took, so that pruning a large backlog (the first pass on a database that was never
//! pruned) takes at most half of the database's write time and requests always get their turn.
//! Several instances may prune the same PostgreSQL database: each batch skips rows another holds,
//! and deleting what is already gone deletes nothing.
//!
//! The batch size is steered by how long each batch held the database's writer
//! (`BatchSize`): a fixed row count that takes milliseconds on an empty database can take far
//! longer on one holding millions of certificates, and on SQLite every request that writes waits
//! for the pruner's transaction to end. `database.prune-batch` is the most a batch may take.

use std::time::Duration;
use std::time::Instant;

use acme_core::clock::SharedClock;
use storage::PruneReport;
use storage::Storage;
use tokio_util::sync::CancellationToken;

/// Default of `database.prune-interval`: a pass a minute keeps each pass small (a minute's worth
/// of expiries) while costing an idle server three indexed probes a minute.
pub const DEFAULT_PRUNE_INTERVAL: Duration = Duration::from_secs(60);

/// The longest one pruning transaction should hold the database's writer: a request arriving
/// behind it waits at most this long. Batches aim at half of it, so that a batch that finds
/// slower rows than the last one still ends within it.
pub const MAX_WRITER_HOLD: Duration = Duration::from_millis(50);

/// The smallest batch: below it a batch's fixed cost (its transaction, its index probes)
/// outweighs the rows it deletes, and any database answers ten rows within the budget.
const MIN_BATCH: u32 = 10;

/// The first batch of the first pass: small enough to stay within the budget on a database of
/// any size; the size doubles from there while batches stay short.
const FIRST_BATCH: u32 = 100;

/// The rows a batch takes, steered by the writer hold of the batches before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSize {
    current: u32,
    max: u32,
}

impl BatchSize {
    /// Starts small and may grow up to `max` (`database.prune-batch`).
    pub fn new(max: u32) -> Self {
        let max = max.max(1);
        Self {
            current: FIRST_BATCH.min(max),
            max,
        }
    }

    /// The rows the next batch takes.
    pub fn current(&self) -> u32 {
        self.current
    }

    /// Adjusts after a batch that held the writer for `hold`: above the aim (half the budget)
    /// the size shrinks in proportion, at once; a full batch well below it doubles the size, so
    /// that a backlog goes in as few transactions as the budget allows.
    pub fn after(&mut self, hold: Duration, full: bool) {
        let aim = MAX_WRITER_HOLD / 2;
        if hold > aim {
            let scaled = u128::from(self.current) * aim.as_micros() / hold.as_micros().max(1);
            let scaled = u32::try_from(scaled).unwrap_or(self.current);
            self.current = scaled.clamp(MIN_BATCH.min(self.max), self.max);
        } else if full && hold < aim / 2 {
            self.current = self.current.saturating_mul(2).min(self.max);
        }
    }
}

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
    let mut size = BatchSize::new(settings.batch);
    loop {
        if let Some((report, took)) = pass(&storage, &clock, &settings, &mut size, &shutdown).await
        {
            record(&report, took);
        }
        tokio::select! {
            () = tokio::time::sleep(settings.interval) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// One pass: batches until none is full, one fails, or shutdown, each sized by `size` (which
/// carries over to the next pass). Returns what it deleted and how long it took, or `None` when
/// it deleted nothing. Public for the load generator's measurement of pruning at scale.
pub async fn pass(
    storage: &Storage,
    clock: &SharedClock,
    settings: &PrunerSettings,
    size: &mut BatchSize,
    shutdown: &CancellationToken,
) -> Option<(PruneReport, Duration)> {
    let started = Instant::now();
    let mut total = PruneReport::default();
    loop {
        let batch_started = Instant::now();
        // `now` is read per batch: a pass over a large backlog may last minutes.
        let batch = storage
            .prune_batch(clock.now(), settings.retention, size.current())
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
        size.after(report.longest_hold, report.more);
        metrics::histogram!("certeasy_prune_writer_hold_seconds")
            .record(report.longest_hold.as_secs_f64());
        metrics::gauge!("certeasy_prune_batch_rows").set(f64::from(size.current()));
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
        longest_hold_ms = u64::try_from(report.longest_hold.as_millis()).unwrap_or(u64::MAX),
        "pruned expired rows"
    );
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::BatchSize;
    use super::FIRST_BATCH;
    use super::MAX_WRITER_HOLD;
    use super::MIN_BATCH;

    #[test]
    fn a_batch_over_the_aim_shrinks_in_proportion_and_never_below_the_floor() {
        let mut size = BatchSize::new(500);
        assert_eq!(size.current(), FIRST_BATCH);
        // Four times the aim (half the budget): a quarter of the rows next time.
        size.after(MAX_WRITER_HOLD * 2, true);
        assert_eq!(size.current(), FIRST_BATCH / 4);
        for _ in 0..10 {
            size.after(Duration::from_secs(5), true);
        }
        assert_eq!(size.current(), MIN_BATCH);
    }

    #[test]
    fn full_short_batches_double_up_to_the_configured_most() {
        let mut size = BatchSize::new(500);
        size.after(Duration::from_millis(1), true);
        assert_eq!(size.current(), 2 * FIRST_BATCH);
        for _ in 0..5 {
            size.after(Duration::from_millis(1), true);
        }
        assert_eq!(size.current(), 500);
        // A batch that was not full says nothing about a bigger one: the size stays.
        let mut idle = BatchSize::new(500);
        idle.after(Duration::from_millis(1), false);
        assert_eq!(idle.current(), FIRST_BATCH);
        // Between a quarter and a half of the budget: the size holds.
        let mut steady = BatchSize::new(500);
        steady.after(MAX_WRITER_HOLD * 3 / 8, true);
        assert_eq!(steady.current(), FIRST_BATCH);
    }

    #[test]
    fn a_configured_batch_below_the_floor_is_kept() {
        let mut size = BatchSize::new(2);
        assert_eq!(size.current(), 2);
        size.after(Duration::from_secs(1), true);
        assert_eq!(size.current(), 2);
        size.after(Duration::from_millis(1), true);
        assert_eq!(size.current(), 2);
    }
}
