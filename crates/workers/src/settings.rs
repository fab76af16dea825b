//! Knobs of the job runner and the issuance policy it applies.

use time::Duration;

/// How the workers run and what they issue.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// Concurrent job loops in this instance.
    pub concurrency: usize,
    /// Attempts per job before it is given up (transient errors only: a failed validation is a
    /// verdict, not an error, and is recorded at once).
    pub max_attempts: u32,
    /// How long a claimed job is reserved for its worker; after that another may take it.
    pub lease: Duration,
    /// Longest sleep between polls, so jobs enqueued by other instances are found.
    pub poll_interval: std::time::Duration,
    /// Validity of a certificate when the order did not ask for one.
    pub default_validity: Duration,
    /// notBefore is set this far in the past to tolerate client clock skew.
    pub backdate: Duration,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            concurrency: 4,
            max_attempts: 3,
            lease: Duration::seconds(60),
            poll_interval: std::time::Duration::from_secs(1),
            default_validity: Duration::days(90),
            backdate: Duration::minutes(1),
        }
    }
}
