//! Knobs of the job runner and the issuance policy it applies.

use acme_core::account_uri::AccountUris;
use issuance::Profiles;
use ra::attempts::RetryPolicy;
use time::Duration;

/// Default of `validation.job-lease`: how long a claimed job stays reserved without a heartbeat.
/// Short, because the holder renews it every third of a lease while the attempt runs: a crashed
/// worker's job is picked up again within one lease, and a long attempt keeps its lease anyway.
pub const DEFAULT_JOB_LEASE: Duration = Duration::seconds(30);

/// Default of `validation.retries`: attempts after the first for a challenge whose attempt failed
/// because its dns-01 record may still be propagating (`validation::Retry::Propagation`); no
/// other failure is ever retried (see `validation::failure`). One retry catches a client whose
/// hook returned as soon as its DNS provider took the record, before every authoritative server
/// served it; a record still missing after that is the client's to wait for.
pub const DEFAULT_VALIDATION_RETRIES: u32 = 1;

/// Default of `validation.retry-backoff`: the wait before the first retry; each further retry
/// waits twice as long as the previous one, at most [`ra::attempts::MAX_RETRY_BACKOFF`]. Three
/// seconds: the verdict then reaches a client that polls with `Retry-After` (certbot, lego's
/// backoff from it) well within 15 s.
pub const DEFAULT_RETRY_BACKOFF: Duration = Duration::seconds(3);

/// Default of `validation.retry-window`: a retry is scheduled only if it starts at most this long
/// after the challenge's first attempt failed, so a challenge never stays `processing` for
/// retries longer than this, whatever `retries` and `retry-backoff` say. Clients give up polling
/// after about 30 s (certbot 2.1 with "All authorizations were not finalized by the CA") and must
/// see the real problem before then.
pub const DEFAULT_RETRY_WINDOW: Duration = Duration::seconds(10);

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
    /// The URIs of accounts as the API hands them out: what CAA `accounturi` parameters are
    /// compared with (RFC 8657), at validation and at issuance.
    pub account_uris: AccountUris,
    /// CAA is checked again before signing for every authorization of the order validated more
    /// than this long before (`ra::caa`); only when the validator checks CAA at all.
    pub caa_recheck_after: Duration,
    /// Attempts after the first for a challenge whose dns-01 record may still be propagating
    /// (`validation::Retry::Propagation`); every other failure is the verdict at once. Retries
    /// are scheduled only within `retry_window`, while the authorization outlives them, and
    /// while the validation hook grants them (`ra::verdicts::ValidationHook::grants_retry`: a
    /// pair with a recent failure gets none).
    pub validation_retries: u32,
    /// Wait before the first retry; doubled for each further one, capped at
    /// [`ra::attempts::MAX_RETRY_BACKOFF`].
    pub retry_backoff: Duration,
    /// The latest a retry may start, counted from the end of the challenge's first attempt.
    pub retry_window: Duration,
    /// `acme.valid-authorization-lifetime`: a validated authorization expires this long after
    /// the verdict that made it valid (the policy layer's setting, which storage is told with
    /// every verdict).
    pub valid_authorization_lifetime: Duration,
    /// Test mode only (`certeasy serve --test-mode --always-valid`): every challenge is recorded
    /// valid without any network traffic (no HTTP, TLS or DNS query, and no CAA check), like
    /// Pebble's `PEBBLE_VA_ALWAYS_VALID`, so a client's CI needs no challenge responder.
    pub always_valid: bool,
    /// Which issuer signs new certificates, read from the database (issuer rotation); `None`:
    /// always the implicit issuer, without a read.
    pub active_issuer: Option<std::sync::Arc<ra::issuers::ActiveIssuer>>,
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

    /// The retry settings `ra::attempts::decide` applies, for a validator whose attempts take at
    /// most `worst_attempt` (`Validator::worst_case_attempt`).
    pub fn retry_policy(&self, worst_attempt: std::time::Duration) -> RetryPolicy {
        RetryPolicy {
            retries: self.validation_retries,
            backoff: self.retry_backoff,
            window: self.retry_window,
            worst_attempt,
        }
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

/// Default of `validation.max-attempts`: claims of one job that may end without a verdict (a
/// crash, a database error, the backstop) before the job is given up.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;

/// The ACME listener's port unless `server.listen` says otherwise. Kept here, below the binary,
/// because the account URIs' default base URL names it too.
pub const DEFAULT_ACME_PORT: u16 = 14000;

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            concurrency: DEFAULT_CONCURRENCY,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            lease: DEFAULT_JOB_LEASE,
            attempt_timeout: None,
            poll_interval: std::time::Duration::from_secs(1),
            profiles: Profiles::shipped(),
            backdate: ra::settings::DEFAULT_BACKDATE,
            // The default `server.external-url`: the default listener on localhost.
            account_uris: AccountUris::new(&format!("https://localhost:{DEFAULT_ACME_PORT}")),
            caa_recheck_after: ra::caa::DEFAULT_RECHECK_AFTER,
            validation_retries: DEFAULT_VALIDATION_RETRIES,
            retry_backoff: DEFAULT_RETRY_BACKOFF,
            retry_window: DEFAULT_RETRY_WINDOW,
            valid_authorization_lifetime: ra::settings::DEFAULT_VALID_AUTHORIZATION_LIFETIME,
            always_valid: false,
            active_issuer: None,
        }
    }
}
