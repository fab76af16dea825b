//! Rows as the rest of Certeasy sees them: domain types, no SQL.

use std::net::IpAddr;

use acme_core::eab_policy::EabPolicy;
use acme_core::identifier::Identifier;
use acme_core::ids::AccountId;
use acme_core::ids::AuthzId;
use acme_core::ids::CertificateId;
use acme_core::ids::ChallengeId;
use acme_core::ids::EabKid;
use acme_core::ids::JobId;
use acme_core::ids::OrderId;
use acme_core::ids::Serial;
use acme_core::problem::Problem;
use acme_core::status::AccountStatus;
use acme_core::status::AuthzStatus;
use acme_core::status::ChallengeStatus;
use acme_core::status::ChallengeType;
use acme_core::status::OrderStatus;
use acme_core::status::RevocationReason;
use time::OffsetDateTime;

pub use crate::audit::Actor;
pub use crate::audit::AuditEvent;
pub use crate::audit::AuditFilter;
pub use crate::audit::AuditKind;
pub use crate::audit::AuditRecord;
pub use crate::audit::BrokenLink;
pub use crate::audit::ChainCheck;

/// An ACME account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub id: AccountId,
    pub status: AccountStatus,
    /// The account key as a JWK JSON object (opaque to storage).
    pub jwk_json: String,
    /// RFC 7638 thumbprint of the key, base64url; unique among accounts.
    pub thumbprint: String,
    pub contacts: Vec<String>,
    pub tos_agreed: bool,
    pub created_at: OffsetDateTime,
    /// The external-account-binding key the account was created with; its policy applies to
    /// every order of the account.
    pub eab_kid: Option<EabKid>,
}

/// What is needed to create an account.
#[derive(Debug, Clone)]
pub struct NewAccount {
    pub jwk_json: String,
    pub thumbprint: String,
    pub contacts: Vec<String>,
    pub tos_agreed: bool,
}

/// An order with the ids of its authorizations, in identifier order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    pub id: OrderId,
    pub account_id: AccountId,
    pub status: OrderStatus,
    pub identifiers: Vec<Identifier>,
    /// `acme_core::identifier::canonical_set_hash` of the identifiers.
    pub set_hash: String,
    pub not_before: Option<OffsetDateTime>,
    pub not_after: Option<OffsetDateTime>,
    pub expires_at: OffsetDateTime,
    pub error: Option<Problem>,
    pub certificate_id: Option<CertificateId>,
    /// The ARI identifier of the certificate this order replaces (RFC 9773 `replaces`).
    pub replaces: Option<String>,
    pub authz_ids: Vec<AuthzId>,
    pub created_at: OffsetDateTime,
    /// The certificate profile chosen at creation; `None` for orders older than profiles, which
    /// get the default one.
    pub profile: Option<String>,
    /// The address of the client whose finalize request took the order to processing, stored
    /// with it (migration 0022) because the certificate may be signed by a worker after a
    /// restart, and the `certificate_issued` audit record names it. `None` before finalization
    /// and for orders finalized before the column existed.
    pub finalize_client_ip: Option<IpAddr>,
}

/// What is needed to create an order.
#[derive(Debug, Clone)]
pub struct NewOrder {
    pub account_id: AccountId,
    pub identifiers: Vec<Identifier>,
    pub set_hash: String,
    pub not_before: Option<OffsetDateTime>,
    pub not_after: Option<OffsetDateTime>,
    pub expires_at: OffsetDateTime,
    /// One per identifier, same order.
    pub authorizations: Vec<NewAuthz>,
    /// Reuse a valid authorization of the same account for the same identifier (wildcard flag
    /// included) instead of creating a new one, when it is still valid at this instant: the
    /// policy layer's reuse margin ahead of now. `None` creates every authorization.
    pub reuse_valid_until: Option<OffsetDateTime>,
    /// The ARI identifier of the certificate this order replaces (RFC 9773 `replaces`), checked
    /// and made canonical by the policy layer.
    pub replaces: Option<String>,
    /// The certificate profile the order is signed with.
    pub profile: String,
    /// The profile's own valid-authorization lifetime (migration 0025), `None` for the CA-wide
    /// one. Each authorization the order creates keeps it and expires this long after its
    /// validation; a valid authorization is reused only when it was validated less than this
    /// long before `reuse_valid_until`, and the order then expires no later than its validation
    /// plus this lifetime: whichever profile it was validated for, it serves this order only
    /// under this order's rule.
    pub valid_authz_lifetime: Option<time::Duration>,
    /// The challenge types this order's profile validates with; empty for any. A valid
    /// authorization is reused only if it was validated with one of them, so a profile's
    /// `challenge-types` holds for every authorization its orders rest on, also one validated
    /// for another profile or pre-authorized.
    pub reuse_challenge_types: Vec<ChallengeType>,
}

/// An authorization to create with an order.
#[derive(Debug, Clone)]
pub struct NewAuthz {
    pub identifier: Identifier,
    pub expires_at: OffsetDateTime,
    /// Challenges to offer, each with its random token.
    pub challenges: Vec<(ChallengeType, String)>,
}

/// Database-backed limits counted inside the transaction that creates an order, under the
/// account's lock, so the counts hold under concurrency. `None` leaves a count out. Whether an
/// exceeded limit stops the order is the policy layer's choice (`refuse`), made before the
/// transaction so that a limit in shadow mode costs no second one.
#[derive(Debug, Clone, Default)]
pub struct OrderGuards {
    /// The account's unexpired pending authorizations plus the new ones, against this cap.
    pub max_pending_authz: Option<PendingAuthzGuard>,
    /// The account's non-revoked certificates for the same identifier set within the rolling
    /// window, against this cap.
    pub duplicate_certificates: Option<DuplicateGuard>,
}

/// Parameters of the pending-authorization count.
#[derive(Debug, Clone, Copy)]
pub struct PendingAuthzGuard {
    pub max: u32,
    /// Whether exceeding `max` stops the order ([`OrderCreation::WouldExceed`]) or is only
    /// reported with the created order.
    pub refuse: bool,
}

/// Parameters of the duplicate-certificate count. The window, not a start instant: storage alone
/// turns it into both the count's cutoff and the exceeded count's `retry_at`, so the two cannot
/// disagree.
#[derive(Debug, Clone, Copy)]
pub struct DuplicateGuard {
    pub max: u32,
    pub window: time::Duration,
    /// As for [`PendingAuthzGuard::refuse`].
    pub refuse: bool,
}

/// A database-backed limit found exceeded under the account's lock: the counts, and when a
/// retry can succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardExceeded {
    /// The account's unexpired pending authorizations (before this order) plus the order's new
    /// ones would be more than `max`; `retry_at` is when the soonest of them expires.
    PendingAuthz {
        pending: u32,
        max: u32,
        retry_at: OffsetDateTime,
    },
    /// `count` certificates (at least `max`) were issued for this identifier set within the
    /// window; `retry_at` is when the oldest of them leaves it.
    Duplicates {
        count: u32,
        max: u32,
        retry_at: OffsetDateTime,
    },
}

/// What a pre-authorization request (RFC 8555 §7.4.1) found and did
/// ([`crate::Storage::pre_authorize`]): facts read under the account's lock, like
/// [`OrderCreation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreAuthorization {
    /// A new pending authorization was written. `usage`: how full the pending-authorization cap
    /// is now; `exceeded`: that cap, when it is over and not to refuse on (shadow mode).
    Created {
        authz: Box<Authorization>,
        usage: GuardUsage,
        exceeded: Vec<GuardExceeded>,
    },
    /// The account already holds a valid authorization for the identifier, still valid at the
    /// reuse instant asked for: nothing was written and it is returned, as an order reuses it.
    Reused(Box<Authorization>),
    /// The account is not valid: nothing was written.
    AccountNotValid(AccountStatus),
    /// The pending-authorization cap is exceeded and to refuse on: nothing was written.
    WouldExceed(GuardExceeded),
}

/// What creating an order found and did ([`crate::Storage::create_order`]). Refusals are the
/// caller's to make: these are facts read under the account's lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrderCreation {
    /// The order and its authorizations were written. `usage`: how full the counted limits are
    /// now; `exceeded`: the limits over their cap that were not to refuse (in shadow mode).
    Created {
        order: Box<Order>,
        usage: GuardUsage,
        exceeded: Vec<GuardExceeded>,
    },
    /// The account is not valid (deactivated or revoked since the request was authenticated):
    /// nothing was written.
    AccountNotValid(AccountStatus),
    /// A limit to refuse on is exceeded: nothing was written. `also`: limits counted before it
    /// that were exceeded but not to refuse on.
    WouldExceed {
        exceeded: GuardExceeded,
        also: Vec<GuardExceeded>,
    },
}

/// How full the database-backed limits were once an order was created, so clients can see them
/// in `RateLimit` headers. `None` for a guard that was not checked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GuardUsage {
    pub pending_authz: Option<PendingAuthzUsage>,
    pub duplicates: Option<DuplicateUsage>,
}

/// The account's unexpired pending authorizations, this order's new ones included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingAuthzUsage {
    pub pending: u32,
    /// When the last of them expires (the cap is whole again); `None` when there are none.
    pub all_expired_at: Option<OffsetDateTime>,
}

/// The account's non-revoked certificates for this identifier set within the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DuplicateUsage {
    pub count: u32,
    /// When the newest of them leaves the window; `None` when there are none.
    pub all_left_at: Option<OffsetDateTime>,
}

/// An authorization with its challenges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    pub id: AuthzId,
    pub account_id: AccountId,
    /// For a wildcard order this is the wildcard identifier itself (`*.example.com`); the name
    /// validated is its base name.
    pub identifier: Identifier,
    pub status: AuthzStatus,
    pub expires_at: OffsetDateTime,
    pub challenges: Vec<Challenge>,
}

/// A challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    pub id: ChallengeId,
    pub authz_id: AuthzId,
    pub kind: ChallengeType,
    pub token: String,
    pub status: ChallengeStatus,
    pub validated_at: Option<OffsetDateTime>,
    pub error: Option<Problem>,
}

/// How one authorization of an order was validated: what CAA is checked again with when the
/// validation is too old to vouch for CAA at issuance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderValidation {
    pub authz_id: AuthzId,
    pub identifier: Identifier,
    /// The type of the authorization's valid challenge.
    pub method: ChallengeType,
    pub validated_at: OffsetDateTime,
}

/// What a worker learned when it recorded a validation outcome; the caller uses it for side
/// effects after commit (rate-limit spends, pausing, metrics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationRecorded {
    pub account_id: AccountId,
    pub authz_id: AuthzId,
    pub identifier: Identifier,
    /// The challenge's final status (valid or invalid); unchanged if it was already final.
    pub status: ChallengeStatus,
    /// False when the challenge had already been decided (an idempotent repeat).
    pub changed: bool,
}

/// What starting a validation of a challenge found ([`crate::Storage::start_challenge`],
/// [`crate::Storage::record_valid_at_once`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChallengeStart {
    /// The challenge left pending now. `job`: the `Validate` job, when the caller asked to hold
    /// it (`start_challenge_claimed`); none for a validation recorded valid at once.
    Started {
        challenge: Challenge,
        job: Option<Job>,
    },
    /// The challenge had already left pending (started before, by this client or another
    /// instance): starting is idempotent, so this is the answer as it stands.
    Left(Challenge),
    /// The challenge is pending but cannot start; nothing changed except expiry applied.
    NotStarted(NotStarted),
}

impl ChallengeStart {
    /// The challenge as it now is, unless it could not start.
    pub fn challenge(&self) -> Option<&Challenge> {
        match self {
            Self::Started { challenge, .. } | Self::Left(challenge) => Some(challenge),
            Self::NotStarted(_) => None,
        }
    }
}

/// Why a pending challenge did not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotStarted {
    /// Its authorization is no longer pending (expired, deactivated, decided), expiry applied
    /// first.
    AuthzNotPending(AuthzStatus),
    /// Another challenge of the same authorization has already left pending: one validation per
    /// authorization.
    SiblingStarted,
}

/// What asking for a status change did: the object as it now is either way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatusChange<T> {
    /// The change was made.
    Changed(T),
    /// The object was not in a status that allows the change (already deactivated, already
    /// revoked, already settled); nothing changed.
    Unchanged(T),
}

/// What beginning a finalization found ([`crate::Storage::begin_finalize`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finalizing {
    /// ready → processing with the CSR stored and a `Finalize` job enqueued; `job` when the
    /// caller asked to hold it and this call created it.
    Begun { order: Box<Order>, job: Option<Job> },
    /// The order is not ready: its status now, after expiry (its own or an authorization's)
    /// was applied and committed.
    NotReady(OrderStatus),
}

/// An issued certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Certificate {
    pub id: CertificateId,
    pub account_id: AccountId,
    pub order_id: OrderId,
    pub serial: Serial,
    /// DER of the leaf.
    pub der: Vec<u8>,
    /// PEM of leaf followed by the intermediate(s).
    pub chain_pem: String,
    pub set_hash: String,
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    pub issued_at: OffsetDateTime,
    pub revoked_at: Option<OffsetDateTime>,
    pub revocation_reason: Option<RevocationReason>,
    /// When an operator asked for this certificate to be renewed early (ARI answers with a
    /// window in the past from then on).
    pub renew_early_at: Option<OffsetDateTime>,
}

/// A certificate ready to be stored.
#[derive(Debug, Clone)]
pub struct NewCertificate {
    pub serial: Serial,
    pub der: Vec<u8>,
    /// The CA certificates that follow the leaf in its download (without the root), PEM. Stored
    /// once per distinct chain; [`Certificate::chain_pem`] is the leaf's PEM followed by it.
    pub issuer_chain_pem: String,
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    /// The CRL shard the certificate's distribution point names; `None` without CRLs.
    pub crl_shard: Option<u16>,
}

/// The jobs of one kind that are due and held by no worker: the queue's backlog, as the admin
/// listener's metrics show it. Jobs being run (leased) are not waiting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobBacklog {
    pub waiting: u64,
    /// The due time of the one that has waited longest.
    pub oldest_due: Option<OffsetDateTime>,
}

/// Kinds of durable work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKind {
    /// Attempt the validation of a challenge in `processing`.
    Validate(ChallengeId),
    /// Issue the certificate of an order in `processing`.
    Finalize(OrderId),
}

/// A claimed job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub id: JobId,
    pub kind: JobKind,
    /// Claims so far, this one included. Together with `id` it names this claim: a later claim
    /// (after the lease ran out) always has a higher count, so a stale holder cannot renew.
    pub attempts: u32,
    /// Claims of this job that ended in a scheduled validation retry (a transient failure,
    /// recorded in `challenge_attempts`): the number of failed attempts before this one. They
    /// are not held against `max_attempts`, which bounds claims that ended without a verdict.
    pub retries: u32,
    pub lease_until: OffsetDateTime,
    /// Every allowed attempt was already used (the last holder crashed or lost its lease): the
    /// job must not run again, only be settled, so its object still reaches a final state.
    pub exhausted: bool,
}

/// A validation attempt that failed transiently and was retried (`Storage::retry_validation`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChallengeAttempt {
    /// 1 for the first attempt of the challenge.
    pub attempt: u32,
    /// When the attempt ended.
    pub at: OffsetDateTime,
    /// Why it failed.
    pub problem: Problem,
}

/// What a certificate is to be, recorded before it is signed ([`crate::Storage::reserve_serial`],
/// [`crate::Storage::reserve_ready_order`]): the signer then signs exactly this, and the
/// certificate is stored against it ([`crate::Storage::complete_order`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewReservation {
    pub serial: Serial,
    /// Whole seconds, as the certificate will say.
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    /// The chain the issuing CA heads: names the issuer (stored once, as for certificates).
    pub issuer_chain_pem: String,
    /// The configured name of the issuer that signs it (migration 0020); the certificate is
    /// stored under it too.
    pub issuer: String,
    /// The CRL shard the certificate will name; `None` without CRLs.
    pub crl_shard: Option<u16>,
}

/// Where a reservation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReservationState {
    /// Recorded, maybe signed, not stored yet: a resumed job signs it again.
    Reserved,
    /// Its certificate is stored.
    Issued,
    /// Never stored: the order failed, or a resumed job could not sign it again (another
    /// issuer). The serial may have been signed, so it is never used again.
    Abandoned,
}

impl ReservationState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reserved => "reserved",
            Self::Issued => "issued",
            Self::Abandoned => "abandoned",
        }
    }
}

impl std::str::FromStr for ReservationState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [Self::Reserved, Self::Issued, Self::Abandoned]
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| format!("reservation state {s:?}"))
    }
}

/// A serial recorded before its certificate was signed (migration 0014).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    pub serial: Serial,
    pub order_id: OrderId,
    pub account_id: AccountId,
    pub identifiers: Vec<Identifier>,
    /// The `issuer_chains` row of the issuer.
    pub issuer_chain_id: i64,
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    pub crl_shard: Option<u16>,
    pub reserved_at: OffsetDateTime,
    /// How many times signing it was begun: more than 1 after a resumed job signed it again.
    pub signings: u32,
    pub state: ReservationState,
    pub certificate_id: Option<CertificateId>,
    /// The configured name of the issuer that signs it: a resumed job signs with it again.
    pub issuer: String,
}

/// What reserving a serial for an order in `processing` found ([`crate::Storage::reserve_serial`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reserved {
    /// Recorded and committed: sign exactly this. After a crash it is the order's open
    /// reservation, its `signings` counted up.
    Reserved(Box<Reservation>),
    /// The account is no longer valid: nothing was recorded.
    AccountNotValid(AccountStatus),
    /// An authorization of the order is no longer valid, or expired: nothing was recorded.
    AuthorizationNotValid,
    /// The order is no longer processing (already issued, or failed): nothing to sign.
    Settled(OrderStatus),
}

/// What reserving a serial for a ready order did ([`crate::Storage::reserve_ready_order`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReservedAtOnce {
    /// The order went from ready to processing with the CSR, under a `Finalize` job claimed by
    /// the caller, and the reservation was recorded, all committed together.
    Reserved {
        order: Box<Order>,
        job: Job,
        reservation: Box<Reservation>,
    },
    /// The account is no longer valid: nothing was stored (a deactivation has already made the
    /// account's unfinished orders invalid).
    AccountNotValid(AccountStatus),
    /// The order is not ready: its status now, after expiry was applied and committed.
    NotReady(OrderStatus),
}

/// What pausing one (account, identifier) pair did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseOutcome {
    /// The pair had never been paused; it is now.
    Paused,
    /// The pair was already paused; nothing changed.
    AlreadyPaused,
    /// The pair had been unpaused long enough ago; it is paused again from now.
    Repaused,
    /// The pair was unpaused within the grace period, so the subscriber's recent unpause wins and
    /// nothing changed.
    SkippedGrace,
}

impl PauseOutcome {
    /// A short name for metric labels and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Paused => "paused",
            Self::AlreadyPaused => "already-paused",
            Self::Repaused => "repaused",
            Self::SkippedGrace => "grace",
        }
    }
}

/// One row of the pause table: a current pause (`unpaused_at` is `None`) or a lifted one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PausedPair {
    pub account_id: AccountId,
    pub identifier: Identifier,
    pub paused_at: OffsetDateTime,
    pub unpaused_at: Option<OffsetDateTime>,
}

/// What an early-renewal mark applies to.
#[derive(Debug, Clone)]
pub enum RenewEarly {
    /// One certificate.
    Serial(Serial),
    /// Every certificate of an account.
    Account(AccountId),
}

/// Which certificates an operator's listing, count or bulk revocation covers. Every field is a
/// condition (ANDed); `None` leaves it out. Time ranges include their start and exclude their end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CertificateFilter {
    /// A name the certificate holds (exactly, wildcard label included).
    pub name: Option<Identifier>,
    pub serial: Option<Serial>,
    pub account: Option<AccountId>,
    pub issued_from: Option<OffsetDateTime>,
    pub issued_until: Option<OffsetDateTime>,
    /// `not_after` at or after this instant.
    pub expires_from: Option<OffsetDateTime>,
    /// `not_after` before this instant.
    pub expires_until: Option<OffsetDateTime>,
    /// `Some(true)`: only revoked ones; `Some(false)`: only unrevoked ones.
    pub revoked: Option<bool>,
}

impl CertificateFilter {
    /// Whether no condition is set, so the filter names every certificate.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Which accounts an operator's listing covers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccountFilter {
    pub status: Option<AccountStatus>,
    /// A substring of one of the contacts (`example.com` finds `mailto:ops@example.com`).
    pub contact: Option<String>,
}

/// One page of a listing: rows with an id below `before` (newest first), at most `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page<Id> {
    pub before: Option<Id>,
    pub limit: u32,
}

/// A certificate as listings show it: the stored row without its DER and PEM, plus the names
/// of the order it was issued for (the names the certificate holds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateSummary {
    pub id: CertificateId,
    pub account_id: AccountId,
    pub order_id: OrderId,
    pub serial: Serial,
    pub identifiers: Vec<Identifier>,
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    pub issued_at: OffsetDateTime,
    pub revoked_at: Option<OffsetDateTime>,
    pub revocation_reason: Option<RevocationReason>,
}

/// What an account holds, for `admin accounts show`. Orders that never issued are pruned after
/// `database.prune-after`, so `orders` counts those still stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccountCounts {
    pub orders: u64,
    pub certificates: u64,
    pub revoked_certificates: u64,
}

/// An external-account-binding key (RFC 8555 §7.3.4) and the policy it gives bound accounts.
#[derive(Clone, PartialEq, Eq)]
pub struct EabKey {
    pub kid: EabKid,
    /// The shared MAC key; never logged, never listed. `None` once a single-use key has bound
    /// its account: it is erased in that transaction, since it can never verify a binding again
    /// and a copy of the database should not hold it.
    pub hmac_key: Option<Vec<u8>>,
    pub policy: EabPolicy,
    /// After this instant the key binds no new account (bound accounts keep working).
    pub expires_at: Option<OffsetDateTime>,
    /// False: the key binds one account only.
    pub reusable: bool,
    pub revoked_at: Option<OffsetDateTime>,
    pub created_at: OffsetDateTime,
    /// How many accounts are bound with the key.
    pub bound_accounts: u32,
}

impl std::fmt::Debug for EabKey {
    /// Leaves the HMAC key out, so a key never reaches a log line through `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EabKey")
            .field("kid", &self.kid)
            .field("policy", &self.policy)
            .field("expires_at", &self.expires_at)
            .field("reusable", &self.reusable)
            .field("revoked_at", &self.revoked_at)
            .field("created_at", &self.created_at)
            .field("bound_accounts", &self.bound_accounts)
            .finish_non_exhaustive()
    }
}

/// What is needed to create an external-account-binding key.
#[derive(Clone)]
pub struct NewEabKey {
    pub kid: EabKid,
    pub hmac_key: Vec<u8>,
    pub policy: EabPolicy,
    pub expires_at: Option<OffsetDateTime>,
    pub reusable: bool,
}

/// What a key change (RFC 8555 §7.3.5) did. It is a compare-and-set on the old key, so of two
/// rollovers from one key exactly one changes it; the others are verdicts, not errors, and the
/// policy layer turns each into its problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyChange {
    /// The account now has the new key.
    Changed(Account),
    /// Another account already has the new key; nothing changed.
    KeyInUse(AccountId),
    /// The account's key is no longer the old key the request was checked against (a concurrent
    /// key change won); nothing changed.
    OldKeyReplaced,
}

/// What binding a key and creating the account did. Refusals are verdicts, not errors: the
/// caller turns each into its own problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindOutcome {
    /// The account exists and is bound to the key.
    Created(Account),
    /// No key has this kid.
    UnknownKey,
    /// The key was revoked at this instant.
    Revoked(OffsetDateTime),
    /// The key expired at this instant.
    Expired(OffsetDateTime),
    /// The key is single-use and already binds this account.
    AlreadyBound(AccountId),
    /// Another account already has the account key (a concurrent newAccount won); nothing was
    /// bound.
    KeyRegistered(AccountId),
}
