//! The audit sealer: on PostgreSQL an audited transaction leaves its record in `audit_pending`
//! (so that no two audited commits wait for each other), and this task chains those records
//! into the audit log a few times a second (`storage::Storage::seal_audit`, whose module doc
//! gives the design). Every instance runs it; sealers in a cluster take turns on the chain
//! head's lock, so running several costs an idle probe each and never forks the chain. On
//! SQLite records are chained as they are written and the task returns at once.

use std::time::Duration;

use acme_core::clock::SharedClock;
use storage::Backend;
use storage::Storage;
use tokio_util::sync::CancellationToken;

/// How long a committed record may wait to be chained: short, because until it is chained an
/// edit of it is not detected, and long enough that a sealing transaction chains the records of
/// many commits at 100s of issuances a second.
pub const SEAL_INTERVAL: Duration = Duration::from_millis(250);

/// Seals every [`SEAL_INTERVAL`] until `shutdown`. A failed pass is logged and counted; the
/// next one tries again (the records wait, committed, in the meantime). What requests and
/// workers still commit while the server drains is sealed by `serve`'s last pass after they
/// stop, or else by the next sealer of any instance.
pub async fn run(storage: Storage, clock: SharedClock, shutdown: CancellationToken) {
    if storage.backend() != Backend::Postgres {
        return;
    }
    loop {
        tokio::select! {
            () = tokio::time::sleep(SEAL_INTERVAL) => {}
            () = shutdown.cancelled() => return,
        }
        seal(&storage, &clock).await;
    }
}

/// One pass: seals what is pending, counts it, and sets the gauges of what still waits
/// (`certeasy_audit_pending_records`, `certeasy_audit_pending_oldest_seconds`: a sealer that
/// keeps failing shows as an age that grows).
async fn seal(storage: &Storage, clock: &SharedClock) {
    match storage.seal_audit().await {
        Ok(0) => {}
        Ok(sealed) => {
            metrics::counter!("certeasy_audit_records_sealed_total").increment(sealed);
        }
        Err(e) => {
            metrics::counter!("certeasy_worker_errors_total", "stage" => "audit_seal").increment(1);
            tracing::warn!(error = %e, "sealing audit records failed; the next pass tries again");
        }
    }
    match storage.audit_pending().await {
        Ok(pending) => {
            #[allow(clippy::cast_precision_loss)] // a count far below 2^52
            metrics::gauge!("certeasy_audit_pending_records").set(pending.records as f64);
            let age = pending
                .oldest
                .map_or(0.0, |oldest| (clock.now() - oldest).as_seconds_f64());
            metrics::gauge!("certeasy_audit_pending_oldest_seconds").set(age.max(0.0));
        }
        Err(e) => tracing::debug!(error = %e, "reading the pending audit records failed"),
    }
}
