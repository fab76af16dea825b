//! The policy layer's one error enum. A [`Refusal`] is a verdict: the request breaks a rule and
//! the client can act on it. Storage states facts (outcomes such as `OrderCreation`,
//! `ChallengeStart`, `StatusChange`) and this layer turns those that refuse into typed refusals
//! ([`StateRefusal`]); its errors are failures only. The HTTP front end maps each refusal to its
//! ACME problem in one place (`acme-api`'s `refusal.rs`); nothing here knows HTTP.

use acme_core::ids::AccountId;
use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use acme_core::status::AccountStatus;
use acme_core::status::AuthzStatus;
use acme_core::status::OrderStatus;
use storage::model::NotStarted;
use time::OffsetDateTime;

use crate::rate_info::RateLimitInfo;

/// What a policy decision can end in besides success.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request was refused by a rule.
    #[error("refused: {0}")]
    Refused(Box<Refusal>),
    /// The database failed, or an object the request names no longer exists: facts and
    /// failures, never a verdict (the front end answers a failure as a server error, without
    /// its text).
    #[error("storage: {0}")]
    Storage(#[from] storage::error::Error),
    /// A part the decision needs failed (the limiter's store, the system RNG): the request is
    /// answered as a server error.
    #[error("{context}: {message}")]
    Internal {
        context: &'static str,
        message: String,
    },
}

impl Error {
    pub(crate) fn internal(context: &'static str, error: &dyn std::fmt::Display) -> Self {
        Self::Internal {
            context,
            message: error.to_string(),
        }
    }
}

impl From<Refusal> for Error {
    fn from(r: Refusal) -> Self {
        Self::Refused(Box::new(r))
    }
}

impl From<StateRefusal> for Error {
    fn from(r: StateRefusal) -> Self {
        Refusal::State(r).into()
    }
}

/// A challenge storage did not start is refused for what it found: the one place that decides
/// so, for the queued start and the one run at once alike.
impl From<NotStarted> for StateRefusal {
    fn from(n: NotStarted) -> Self {
        match n {
            NotStarted::AuthzNotPending(status) => Self::AuthzNotPending(status),
            NotStarted::SiblingStarted => Self::SiblingChallengeStarted,
        }
    }
}

impl From<NotStarted> for Error {
    fn from(n: NotStarted) -> Self {
        StateRefusal::from(n).into()
    }
}

/// A policy verdict against the request.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// A plain rule: the problem says which (`rejectedIdentifier`, `badCSR`, `unauthorized`,
    /// `externalAccountRequired`, …).
    #[error("{}: {}", .0.kind.as_str(), .0.detail)]
    Problem(Problem),
    /// A rate limit: `limit` names it (for the documentation link), the detail says what was
    /// exceeded and until when.
    #[error("rate limit {limit}: {detail}")]
    RateLimited {
        limit: &'static str,
        detail: String,
        /// Seconds until a retry can succeed.
        retry_after_secs: u64,
        /// The policies that applied, the refusing one among them.
        info: RateLimitInfo,
    },
    /// Identifiers paused for the account (zombie pausing): refused until unpaused.
    #[error("paused identifiers for account {account}")]
    Paused {
        /// The limit that pauses (its documentation explains pausing).
        limit: &'static str,
        account: AccountId,
        /// The paused identifiers shown to the client (at most [`crate::pausing::SHOWN`]).
        shown: Vec<String>,
        /// Whether more are paused than shown.
        more: bool,
        /// When the refusal was made (unpause links are stamped with it).
        at: OffsetDateTime,
        info: RateLimitInfo,
    },
    /// The terms of service must be agreed to.
    #[error("the terms of service at {terms} must be agreed to")]
    TermsNotAgreed { terms: String },
    /// The account can no longer act (deactivated or revoked), whichever read found it so: the
    /// request's own, or storage's when the account changed after it (an order, a deactivation,
    /// a finalization), the subscriber's request or an operator's command alike. The front end
    /// answers it as it answers a request signed by such an account (RFC 8555 §7.3.6).
    #[error("account is already {}", .0.as_str())]
    AccountNotValid(AccountStatus),
    /// The object does not exist, or belongs to another account (indistinguishable on purpose).
    #[error("{0} not found")]
    NotFound(&'static str),
    /// What was asked conflicts with what exists (a key that exists already, a bulk selection
    /// that names nothing), or a concurrent change won (a key change from a key another key
    /// change replaced first): `conflict`, 409. Not for an object's state: that is
    /// [`Refusal::State`] or [`Refusal::AccountNotValid`], whichever path noticed it.
    #[error("{0}")]
    Conflict(String),
    /// A key is already the key of another account.
    #[error("the key belongs to account {0}")]
    KeyInUse(AccountId),
    /// A key that may not become an account's or a certificate's: weak or blocked by the
    /// operator (`crate::keys`). The front end answers `badPublicKey` for an account key and
    /// `badCSR` for a CSR's key (RFC 8555 §7.3, §7.4).
    #[error("{detail}")]
    BadKey { key: KeyUse, detail: String },
    /// The object's state does not allow the request, whether the request's own read found it
    /// or storage did under its locks after the object changed: one state, one refusal.
    #[error("{0}")]
    State(StateRefusal),
}

/// What an object's state refuses, rustls style: each a typed fact the front end words, never a
/// string made here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StateRefusal {
    /// Finalization of an order that is not ready (RFC 8555 §7.4: `orderNotReady`).
    #[error("the order is {}, not ready", .0.as_str())]
    OrderNotReady(OrderStatus),
    /// Revocation of a certificate revoked before (RFC 8555 §7.6: `alreadyRevoked`).
    #[error("the certificate is already revoked")]
    AlreadyRevoked,
    /// A validation asked of a challenge whose authorization is no longer pending.
    #[error("authorization is {}", .0.as_str())]
    AuthzNotPending(AuthzStatus),
    /// A validation asked of a challenge while another of its authorization is being (or was)
    /// validated: one validation per authorization.
    #[error("another challenge of this authorization is already being validated")]
    SiblingChallengeStarted,
    /// Deactivation of an authorization that is neither pending nor valid (RFC 8555 §7.5.2).
    #[error("authorization is {}", .0.as_str())]
    AuthzNotActive(AuthzStatus),
}

/// What a key is being accepted as (`crate::keys`): the refusal's problem type follows it,
/// `badPublicKey` for an account key, `badCSR` for a CSR's key. Here, not in `keys.rs`, so
/// that this leaf module imports no other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyUse {
    Account,
    Certificate,
}

impl Refusal {
    /// A refusal of kind `kind`.
    pub fn problem(kind: ProblemType, detail: impl Into<String>) -> Self {
        Self::Problem(Problem::new(kind, detail))
    }

    pub fn malformed(detail: impl Into<String>) -> Self {
        Self::problem(ProblemType::Malformed, detail)
    }

    pub fn unauthorized(detail: impl Into<String>) -> Self {
        Self::problem(ProblemType::Unauthorized, detail)
    }
}
