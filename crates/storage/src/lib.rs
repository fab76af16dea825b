//! Durable state of Certeasy: SQLite (default, a file with WAL, on rusqlite) or PostgreSQL (sqlx).
//!
//! This crate knows SQL and nothing of HTTP or ACME wire formats. Every multi-row state change of
//! RFC 8555 §7.1.6 happens in one transaction here, so the state machine can never be observed
//! half-applied, and durable work (validation, finalization) is enqueued in the same transaction
//! that makes it necessary: nothing accepted is lost on a crash.

mod account_cache;
mod accounts;
mod admin_queries;
mod authz;
mod backup;
pub mod blocked_keys;
mod certificates;
mod codec;
mod connect;
pub mod crls;
mod eab;
pub mod error;
mod issuer_chains;
mod jobs;
pub mod model;
mod orders;
mod pauses;
mod private_file;
mod prune;
mod renewals;
mod reservation_rows;
mod reservations;
mod rows;
mod sql;
mod state;
mod statistics;

use acme_core::ids::AccountId;
use acme_core::ids::AuthzId;
use acme_core::ids::CertificateId;
use acme_core::ids::ChallengeId;
use acme_core::ids::EabKid;
use acme_core::ids::OrderId;
use acme_core::ids::Serial;
use acme_core::problem::Problem;
use acme_core::status::RevocationReason;
use time::Duration;
use time::OffsetDateTime;

use crate::error::Error;
use crate::model::Account;
use crate::model::Authorization;
use crate::model::BindOutcome;
use crate::model::Certificate;
use crate::model::Challenge;
use crate::model::ChallengeAttempt;
use crate::model::ChallengeStart;
use crate::model::EabKey;
use crate::model::Job;
use crate::model::NewAccount;
use crate::model::NewEabKey;
use crate::model::NewReservation;
use crate::model::RenewEarly;
use crate::model::Reservation;
use crate::model::Reserved;
use crate::model::ReservedAtOnce;
use crate::model::StatusChange;
use crate::model::ValidationRecorded;

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

    // ---- accounts ----

    /// Creates an account; `Error::Conflict(existing_id)` when the key is already registered.
    pub async fn create_account(&self, new: NewAccount, now: OffsetDateTime) -> Result<Account> {
        accounts::create(self, new, now).await
    }
    pub async fn account(&self, id: AccountId) -> Result<Option<Account>> {
        accounts::by_id(self, id).await
    }
    pub async fn account_by_thumbprint(&self, thumbprint: &str) -> Result<Option<Account>> {
        accounts::by_thumbprint(self, thumbprint).await
    }
    pub async fn update_account_contacts(
        &self,
        id: AccountId,
        contacts: Vec<String>,
    ) -> Result<Account> {
        accounts::update_contacts(self, id, contacts).await
    }
    /// Deactivates the account and its pending authorizations; all its pending and ready orders
    /// become invalid. `Unchanged` when the account is not valid.
    pub async fn deactivate_account(
        &self,
        id: AccountId,
        now: OffsetDateTime,
    ) -> Result<StatusChange<Account>> {
        accounts::deactivate(self, id, now).await
    }
    /// Replaces the account key `old_thumbprint` by the new one, only while it is still the
    /// account's key (a compare-and-set); [`KeyChange`](model::KeyChange) says what happened.
    /// `Error::NotFound` when there is no such account.
    pub async fn change_account_key(
        &self,
        id: AccountId,
        old_thumbprint: &str,
        jwk_json: &str,
        thumbprint: &str,
    ) -> Result<model::KeyChange> {
        accounts::change_key(self, id, old_thumbprint, jwk_json, thumbprint).await
    }

    // ---- external account binding (RFC 8555 §7.3.4) ----

    /// Stores a new EAB key; `None` when the kid is taken.
    pub async fn create_eab_key(
        &self,
        new: NewEabKey,
        now: OffsetDateTime,
    ) -> Result<Option<EabKey>> {
        eab::create(self, new, now).await
    }
    /// One EAB key, with the number of accounts bound to it.
    pub async fn eab_key(&self, kid: &EabKid) -> Result<Option<EabKey>> {
        eab::get(self, kid).await
    }
    /// Every EAB key, oldest first.
    pub async fn list_eab_keys(&self) -> Result<Vec<EabKey>> {
        eab::list(self).await
    }
    /// Revokes a key: it binds no new account. `Error::NotFound` for an unknown kid,
    /// `Unchanged` when it was already revoked.
    pub async fn revoke_eab_key(
        &self,
        kid: &EabKid,
        now: OffsetDateTime,
    ) -> Result<StatusChange<EabKey>> {
        eab::revoke(self, kid, now).await
    }
    /// The valid accounts bound with the key, oldest first.
    pub async fn valid_accounts_bound_to_eab_key(&self, kid: &EabKid) -> Result<Vec<AccountId>> {
        eab::valid_accounts_bound(self, kid).await
    }
    /// Creates the account bound to the key, in one transaction that first checks, under a lock
    /// on the key, that the key exists, is neither revoked nor expired and, when single-use,
    /// binds no account yet. The MAC must have been verified by the caller.
    pub async fn bind_eab_and_create_account(
        &self,
        kid: &EabKid,
        new: NewAccount,
        now: OffsetDateTime,
    ) -> Result<BindOutcome> {
        eab::bind_and_create(self, kid, new, now).await
    }

    // ---- orders and authorizations ----

    /// Reads an authorization with its challenges, first applying expiry (pending/valid past
    /// `expires_at` become expired, and pending orders that hold them become invalid).
    pub async fn authorization(
        &self,
        id: AuthzId,
        now: OffsetDateTime,
    ) -> Result<Option<Authorization>> {
        authz::get(self, rows::AuthzKey::Id(id), now).await
    }
    /// [`Storage::authorization`] of the authorization that holds challenge `id`, in one read:
    /// what a challenge request needs to check ownership and state.
    pub async fn authorization_of_challenge(
        &self,
        id: ChallengeId,
        now: OffsetDateTime,
    ) -> Result<Option<Authorization>> {
        authz::get(self, rows::AuthzKey::OfChallenge(id), now).await
    }
    pub async fn challenge(&self, id: ChallengeId) -> Result<Option<Challenge>> {
        authz::challenge(self, id).await
    }
    /// The client asked for validation: pending → processing and a `Validate` job, in one
    /// transaction. Idempotent for a challenge already processing, valid or invalid (`Left`).
    /// `NotStarted` when the authorization is no longer pending (expiry applied first), or when
    /// another challenge of it was already started: one validation per authorization.
    pub async fn start_challenge(
        &self,
        id: ChallengeId,
        now: OffsetDateTime,
    ) -> Result<ChallengeStart> {
        authz::start_challenge(self, id, now, None).await
    }
    /// [`Storage::start_challenge`], but the `Validate` job is inserted already claimed by the
    /// caller, leased for `lease`, and returned in `Started`, so the caller runs it at once
    /// instead of waking the queue.
    pub async fn start_challenge_claimed(
        &self,
        id: ChallengeId,
        now: OffsetDateTime,
        lease: Duration,
    ) -> Result<ChallengeStart> {
        authz::start_challenge(self, id, now, Some(lease)).await
    }
    /// A validation that succeeded before anything about it was recorded (the request that asked
    /// for it ran it at once): pending → valid in one transaction, with the checks of
    /// [`Storage::start_challenge`] and the effects of a valid verdict of
    /// [`Storage::record_validation`]. No job ever exists for it. A challenge that has already
    /// left pending (started first by another request or instance, whose outcome stands) is
    /// returned as it is (`Left`); `NotStarted` as for [`Storage::start_challenge`]. The
    /// authorization is valid for `valid_for`, as in [`Storage::record_validation`].
    pub async fn record_valid_at_once(
        &self,
        id: ChallengeId,
        valid_for: Duration,
        now: OffsetDateTime,
    ) -> Result<ChallengeStart> {
        authz::record_valid_at_once(self, id, valid_for, now).await
    }
    /// A worker's verdict: the challenge becomes valid or invalid (storing the problem), its
    /// authorization follows, and every order holding the authorization is updated (ready when
    /// all its authorizations are valid, invalid with the problem when one is invalid). A valid
    /// authorization expires `valid_for` (the policy layer's valid-authorization lifetime) after
    /// `now`, and the unfinished orders holding it expire no later. `Error::Corrupt` for a
    /// challenge never started, which no job can hold.
    ///
    /// `settle`: the job claim that produced the verdict; it is deleted in the same transaction
    /// (if the claim still holds it), so recording and finishing the job are one commit.
    pub async fn record_validation(
        &self,
        id: ChallengeId,
        outcome: std::result::Result<(), Problem>,
        valid_for: Duration,
        now: OffsetDateTime,
        settle: Option<&Job>,
    ) -> Result<ValidationRecorded> {
        authz::record_validation(self, id, outcome, valid_for, now, settle).await
    }
    /// Client deactivation of a pending or valid authorization; its pending/ready orders become
    /// invalid. `Unchanged` otherwise.
    pub async fn deactivate_authorization(
        &self,
        id: AuthzId,
        now: OffsetDateTime,
    ) -> Result<StatusChange<Authorization>> {
        authz::deactivate(self, id, now).await
    }

    // ---- finalization and certificates ----

    /// The at-once path of a finalization, before anything is signed: ready → processing with
    /// the CSR, a `Finalize` job claimed by the caller for `lease`, and the serial reserved with
    /// what the certificate is to be (`intent`), all in one transaction that checks the account
    /// first (on PostgreSQL share-locked, so a deactivation commits before or after it) and that
    /// the order is ready with every authorization valid. The caller then signs exactly the
    /// reservation and stores it with [`Storage::complete_order`], settling the job; after a
    /// crash the job resumes it ([`Storage::reserve_serial`]). `NotReady(status)` when the order
    /// is no longer ready (expiry applied first, as in [`Storage::begin_finalize`]).
    pub async fn reserve_ready_order(
        &self,
        id: OrderId,
        csr_der: &[u8],
        intent: NewReservation,
        now: OffsetDateTime,
        lease: Duration,
    ) -> Result<ReservedAtOnce> {
        reservations::reserve_ready(self, id, csr_der, intent, now, lease).await
    }
    /// Records what the certificate of order `id` (in `processing`) is to be before it is
    /// signed, after checking in the same transaction that the account and every
    /// authorization of the order are still valid. An open reservation of the order (a job
    /// resumed after a crash) is returned instead, to be signed again exactly, unless its
    /// issuer differs: it is then marked abandoned and a new one recorded.
    pub async fn reserve_serial(
        &self,
        id: OrderId,
        intent: NewReservation,
        now: OffsetDateTime,
    ) -> Result<Reserved> {
        reservations::reserve(self, id, intent, now).await
    }
    /// Every serial reserved for order `id`, oldest first.
    pub async fn serial_reservations(&self, id: OrderId) -> Result<Vec<Reservation>> {
        reservation_rows::of_order(self, id).await
    }
    /// Reservations made before `before` and still open, oldest first (at most `limit`):
    /// serials that may have been signed and whose certificates are not stored.
    pub async fn open_reservations(
        &self,
        before: OffsetDateTime,
        limit: u32,
    ) -> Result<Vec<Reservation>> {
        reservation_rows::open_before(self, before, limit).await
    }
    pub async fn certificate(&self, id: CertificateId) -> Result<Option<Certificate>> {
        certificates::by_id(self, id).await
    }
    pub async fn certificate_by_serial(&self, serial: &Serial) -> Result<Option<Certificate>> {
        certificates::by_serial(self, serial).await
    }
    /// An order that replaces the certificate of ARI identifier `cert_id` (RFC 9773) and is not
    /// invalid, if any.
    pub async fn replacing_order(
        &self,
        cert_id: &str,
        now: OffsetDateTime,
    ) -> Result<Option<OrderId>> {
        renewals::replacing_order(self, cert_id, now).await
    }
    /// Marks unexpired, unrevoked certificates for early renewal; returns how many were newly
    /// marked.
    pub async fn mark_renew_early(&self, which: &RenewEarly, now: OffsetDateTime) -> Result<u64> {
        renewals::mark_renew_early(self, which, now).await
    }
    /// Marks a certificate revoked; `Unchanged` if it was, the first revocation standing.
    pub async fn revoke_certificate(
        &self,
        id: CertificateId,
        reason: RevocationReason,
        now: OffsetDateTime,
    ) -> Result<StatusChange<Certificate>> {
        certificates::revoke(self, id, reason, now).await
    }

    // ---- jobs ----

    /// Claims the oldest due job whose lease is free, leasing it until `now + lease` and counting
    /// the claim. Safe with several workers and several instances. A job claimed more than
    /// `max_attempts` times comes back `exhausted`: settle it, never run it.
    pub async fn claim_job(
        &self,
        now: OffsetDateTime,
        lease: Duration,
        max_attempts: u32,
    ) -> Result<Option<Job>> {
        jobs::claim(self, now, lease, max_attempts).await
    }
    /// Heartbeat of a running job: extends its lease to `now + lease` if this claim still holds
    /// it, and returns the new expiry; `None` once another worker has claimed the job (or it was
    /// deleted), so the caller stops working on it.
    pub async fn renew_job_lease(
        &self,
        job: &Job,
        now: OffsetDateTime,
        lease: Duration,
    ) -> Result<Option<OffsetDateTime>> {
        jobs::renew(self, job, now, lease).await
    }
    /// Removes a finished job, if this claim still holds it. `Err(NotFound)` when another worker
    /// has claimed it since (it will finish it; recording is idempotent) or it is gone.
    pub async fn complete_job(&self, job: &Job) -> Result<()> {
        jobs::complete(self, job).await
    }
    /// Releases the lease and schedules another attempt at `run_at`, recording the error, if this
    /// claim still holds the job: a stale holder must not release a lease another worker holds,
    /// which would let a third worker run the job at the same time. `Err(NotFound)` otherwise.
    pub async fn retry_job(&self, job: &Job, run_at: OffsetDateTime, error: &str) -> Result<()> {
        jobs::retry(self, job, run_at, error).await
    }
    /// A validation attempt of `id` failed transiently at `at`: records it as attempt
    /// `job.retries + 1` (`challenge_attempts`) and schedules the next attempt at `run_at`,
    /// releasing the lease, in one transaction. The challenge stays `processing`. Only if this
    /// claim still holds the job; `Err(NotFound)` otherwise (its new holder runs it).
    pub async fn retry_validation(
        &self,
        job: &Job,
        id: ChallengeId,
        failed: &Problem,
        at: OffsetDateTime,
        run_at: OffsetDateTime,
    ) -> Result<()> {
        jobs::retry_validation(self, job, id, failed, at, run_at).await
    }
    /// The failed attempts of a challenge that were retried, in order (none for one decided at
    /// its first attempt).
    pub async fn challenge_attempts(&self, id: ChallengeId) -> Result<Vec<ChallengeAttempt>> {
        jobs::challenge_attempts(self, id).await
    }
    /// When the next attempt of a challenge being retried is due, if one is scheduled.
    pub async fn validation_retry_at(&self, id: ChallengeId) -> Result<Option<OffsetDateTime>> {
        jobs::validation_retry_at(self, id).await
    }
    /// When the next job becomes due (run_at or lease expiry), so a worker can sleep until then.
    pub async fn next_job_due(&self) -> Result<Option<OffsetDateTime>> {
        jobs::next_due(self).await
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
