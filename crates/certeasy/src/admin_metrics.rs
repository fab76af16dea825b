//! What the admin listener's `/metrics` shows beyond the counters the components keep: the
//! series dashboards and alerts name, registered at zero before their first event, and the facts
//! read at each scrape (the job queue, certificate expiry).
//!
//! A series that appears only after its first event is a trap: an alert on the rate of failures
//! sees "no data", not zero, until the first failure, and a dashboard shows nothing. So the
//! series that `contrib/grafana` and `contrib/prometheus` name are registered when the server
//! starts ([`register`]). Facts that no event announces (how long the oldest job has waited,
//! when a certificate expires) are read when Prometheus asks ([`collect`]): one small query and
//! a few in-memory reads per scrape, and always current.
//!
//! `crates/certeasy/tests/it/metrics_named.rs` scrapes a running server and checks that every
//! metric the dashboard and the alert rules name is there.

use acme_core::clock::SharedClock;
use storage::Storage;

use crate::admin_issuers::IssuersAdmin;
use crate::reload::Reloader;

/// What a scrape reads, borrowed from the admin listener's context (which calls [`collect`]; a
/// struct of its own keeps this module below `admin` rather than beside it in a cycle).
pub struct Sources<'a> {
    pub storage: &'a Storage,
    pub clock: &'a SharedClock,
    pub reloader: &'a Reloader,
    pub issuers: &'a IssuersAdmin,
}

/// Metric (gauge, by `kind`): jobs due and held by no worker.
pub const JOBS_WAITING: &str = "certeasy_jobs_waiting";
/// Metric (gauge, by `kind`): seconds the longest-waiting due job has waited; 0 with none.
pub const JOBS_WAITING_OLDEST: &str = "certeasy_jobs_waiting_oldest_seconds";
/// Metric (gauge, unix seconds): notAfter of the ACME listener's certificate.
pub const LISTENER_EXPIRY: &str = "certeasy_listener_certificate_expiry_timestamp_seconds";
/// Metric (gauge, unix seconds, by `issuer`): notAfter of each loaded issuing CA.
pub const ISSUER_EXPIRY: &str = "certeasy_issuer_certificate_expiry_timestamp_seconds";
/// Metric (gauge, by `issuer`): 1 for the issuer that signs new certificates, 0 for the others.
pub const ISSUER_ACTIVE: &str = "certeasy_issuer_active";
/// Metric (gauge, seconds): the longest profile validity. An issuer with less time left than
/// this can no longer sign for that profile (a certificate never outlives its issuer).
pub const LONGEST_VALIDITY: &str = "certeasy_issuance_longest_validity_seconds";

/// The job kinds of `storage`'s queue.
const JOB_KINDS: [&str; 2] = ["validate", "finalize"];
/// The challenge types every server offers, and the outcomes `workers` counts.
const CHALLENGE_TYPES: [&str; 3] = ["http-01", "dns-01", "tls-alpn-01"];
const VALIDATION_OUTCOMES: [&str; 3] = ["valid", "invalid", "retried"];
const JOB_OUTCOMES: [&str; 4] = ["done", "error", "lease_lost", "exhausted"];
const WORKER_STAGES: [&str; 4] = ["claim", "heartbeat", "prune", "audit_seal"];
/// Why `certeasy::listener` closes a connection.
const CLOSE_REASONS: [&str; 4] = [
    "per_ip_limit",
    "handshake_timeout",
    "header_timeout",
    "idle_timeout",
];

/// Registers, at zero, the series that would otherwise appear with their first event. Call
/// after the recorder is installed; adding zero leaves a series that already counts alone.
pub fn register() {
    for name in [
        "certeasy_accounts_created_total",
        "certeasy_orders_created_total",
        "certeasy_certificates_signed_total",
        "certeasy_certificates_issued_total",
        "certeasy_certificates_revoked_total",
        "certeasy_finalizations_failed_total",
        "certeasy_crl_failures_total",
        "certeasy_crl_refresh_failures_total",
        "certeasy_ratelimit_redis_errors_total",
        "certeasy_audit_records_sealed_total",
    ] {
        metrics::counter!(name).increment(0);
    }
    for kind in CHALLENGE_TYPES {
        for outcome in VALIDATION_OUTCOMES {
            metrics::counter!("certeasy_validations_total", "type" => kind, "outcome" => outcome)
                .increment(0);
        }
    }
    for kind in JOB_KINDS {
        for outcome in JOB_OUTCOMES {
            metrics::counter!("certeasy_jobs_total", "kind" => kind, "outcome" => outcome)
                .increment(0);
        }
    }
    for kind in JOB_KINDS {
        // Registering is the point: the handle itself is not needed.
        let _ = metrics::histogram!("certeasy_job_seconds", "kind" => kind);
    }
    for listener in ["acme", "crl", "admin"] {
        metrics::gauge!(format!("certeasy_{listener}_connections")).increment(0.0);
        for reason in CLOSE_REASONS {
            metrics::counter!(format!("certeasy_{listener}_connections_closed_total"), "reason" => reason)
                .increment(0);
        }
    }
    for stage in WORKER_STAGES {
        metrics::counter!("certeasy_worker_errors_total", "stage" => stage).increment(0);
    }
    // Set by the audit sealer on PostgreSQL only; on SQLite nothing is ever pending.
    metrics::gauge!("certeasy_audit_pending_records").increment(0.0);
    metrics::gauge!("certeasy_audit_pending_oldest_seconds").increment(0.0);
}

/// Reads the facts of this scrape into their gauges. A failed read leaves the last values and
/// is logged: the scrape itself still answers.
pub async fn collect(ctx: Sources<'_>) {
    let now = ctx.clock.now();
    match ctx.storage.job_backlog(now).await {
        Ok(kinds) => {
            for (kind, backlog) in kinds {
                #[allow(clippy::cast_precision_loss)] // a count far below 2^52
                metrics::gauge!(JOBS_WAITING, "kind" => kind).set(backlog.waiting as f64);
                let waited = backlog
                    .oldest_due
                    .map_or(0.0, |due| (now - due).as_seconds_f64().max(0.0));
                metrics::gauge!(JOBS_WAITING_OLDEST, "kind" => kind).set(waited);
            }
        }
        Err(e) => tracing::warn!(error = %e, "reading the job backlog for /metrics"),
    }
    if let Some(not_after) = ctx.reloader.listener_cert().not_after() {
        metrics::gauge!(LISTENER_EXPIRY).set(unix_seconds(not_after));
    }
    let issuers = ctx.issuers;
    let active = issuers.active.current().await;
    let ca = issuers.ca.current();
    for issuer in ca.issuers() {
        let name = issuer.name().as_str().to_owned();
        metrics::gauge!(ISSUER_EXPIRY, "issuer" => name.clone())
            .set(unix_seconds(issuer.issuing_not_after()));
        let is_active = if issuer.name() == &active { 1.0 } else { 0.0 };
        metrics::gauge!(ISSUER_ACTIVE, "issuer" => name).set(is_active);
    }
    metrics::gauge!(LONGEST_VALIDITY).set(issuers.longest_validity.as_seconds_f64());
}

#[allow(clippy::cast_precision_loss)] // unix seconds, far below 2^52
fn unix_seconds(at: time::OffsetDateTime) -> f64 {
    at.unix_timestamp() as f64
}
