//! Knobs of the job runner and the issuance policy it applies.

use issuance::Profiles;
use time::Duration;

/// Default of `validation.job-lease`: how long a claimed job stays reserved without a heartbeat.
/// Short, because the holder renews it every third of a lease while the attempt runs: a crashed
/// worker's job is picked up again within one lease, and a long attempt keeps its lease anyway.
pub const DEFAULT_JOB_LEASE: Duration = Duration::seconds(30);

/// How the workers run and what they issue.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// Concurrent job loops in this instance.
    pub concurrency: usize,
    /// Attempts per job before it is given up (transient errors only: a failed validation is a
    /// verdict, not an error, and is recorded at once). A job whose worker died on its last
    /// attempt is settled, never run again.
    pub max_attempts: u32,
    /// How long a claimed job is reserved for its worker without a heartbeat; the running attempt
    /// renews it every `lease / 3`, so it only runs out when the worker is gone or stuck.
    pub lease: Duration,
    /// Backstop on one attempt (validation or finalization, recording included). The validator
    /// bounds an attempt itself; this only catches what escapes it, so that no job can hold a
    /// worker (and, through the heartbeat, its lease) forever. A timed-out attempt is retried.
    /// `None`: [`WorkerSettings::attempt_backstop`] of the validator's worst case.
    pub attempt_timeout: Option<std::time::Duration>,
    /// Longest sleep between polls, so jobs enqueued by other instances are found.
    pub poll_interval: std::time::Duration,
    /// The certificate profiles: an order is signed with the usages and validity of the one it
    /// was created under.
    pub profiles: Profiles,
    /// notBefore is set this far in the past to tolerate client clock skew.
    pub backdate: Duration,
    /// Test mode only (`certeasy serve --test-mode --always-valid`): every challenge is recorded
    /// valid without any network traffic (no HTTP, TLS or DNS query, and no CAA check), like
    /// Pebble's `PEBBLE_VA_ALWAYS_VALID`, so a client's CI needs no challenge responder.
    pub always_valid: bool,
}

impl WorkerSettings {
    /// The attempt backstop for a validator whose calls return within `worst_case_attempt`
    /// (`Validator::worst_case_attempt`): twice that and five seconds, so the validator's own
    /// deadline, which yields a proper verdict, always fires first, with room for the hook and
    /// the recording transaction.
    pub fn attempt_backstop(worst_case_attempt: std::time::Duration) -> std::time::Duration {
        worst_case_attempt
            .saturating_mul(2)
            .saturating_add(std::time::Duration::from_secs(5))
    }

    /// How often a running attempt renews its lease: three chances before it would run out.
    pub(crate) fn heartbeat_every(&self) -> std::time::Duration {
        std::time::Duration::try_from(self.lease / 3)
            .unwrap_or_default()
            .max(std::time::Duration::from_millis(100))
    }
}

/// Workers per instance unless `validation.workers` says otherwise. A validation mostly waits
/// (DNS, a connection, up to `validation.timeout` for a silent target), so a few slow targets
/// must not hold up everyone else's orders; an idle worker costs a parked task and one due-time
/// query per `poll_interval`.
pub const DEFAULT_CONCURRENCY: usize = 32;

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            concurrency: DEFAULT_CONCURRENCY,
            max_attempts: 3,
            lease: DEFAULT_JOB_LEASE,
            attempt_timeout: None,
            poll_interval: std::time::Duration::from_secs(1),
            profiles: Profiles::shipped(),
            backdate: Duration::minutes(1),
            always_valid: false,
        }
    }
}
