//! The policy layer's one error enum. A [`Refusal`] is a verdict: the request breaks a rule and
//! the client can act on it. The HTTP front end maps each to its ACME problem in one place
//! (`acme-api`'s `problem.rs`); nothing here knows HTTP.

use acme_core::ids::AccountId;
use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use acme_core::status::AccountStatus;
use time::OffsetDateTime;

use crate::rate_info::RateLimitInfo;

/// What a policy decision can end in besides success.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request was refused by a rule.
    #[error("refused: {0}")]
    Refused(Box<Refusal>),
    /// The database failed, or the object changed under the request.
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
    /// The account can no longer act (deactivated or revoked).
    #[error("account is {}", .0.as_str())]
    AccountNotValid(AccountStatus),
    /// The object does not exist, or belongs to another account (indistinguishable on purpose).
    #[error("{0} not found")]
    NotFound(&'static str),
    /// The object's state does not allow what was asked (already deactivated, already revoked,
    /// a bulk selection that names nothing), or a concurrent change won (a key change from a key
    /// another key change replaced first): `conflict`, 409.
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
