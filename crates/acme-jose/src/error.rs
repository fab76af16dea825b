//! The one error type of the crate, shaped so the HTTP layer can pick the ACME problem type.

use acme_core::problem::{Problem, ProblemType};

/// Why a JWS or JWK was refused. Every message is written for the operator of the ACME client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The request is not a well-formed ACME JWS (maps to `malformed`).
    #[error("{0}")]
    Malformed(String),
    /// The `alg` is unsupported or does not fit the key (maps to `badSignatureAlgorithm`).
    #[error("{0}")]
    BadSignatureAlgorithm(String),
    /// The key is unsupported, malformed or too weak (maps to `badPublicKey`).
    #[error("{0}")]
    BadPublicKey(String),
    /// The signature does not verify (maps to `malformed`, as RFC 8555 has no dedicated type).
    #[error("JWS signature is invalid")]
    BadSignature,
    /// An external account binding names a key this server cannot use, or its MAC does not verify
    /// (maps to `unauthorized`: the binding is well formed but does not authorise the account).
    #[error("{0}")]
    EabUnauthorized(String),
    /// Generating, importing or signing with a local key failed; only the `sign` module returns
    /// this, so it never describes a client request (maps to `serverInternal`).
    #[error("local key operation failed: {0}")]
    Key(String),
}

impl Error {
    /// The ACME problem type RFC 8555 prescribes for this refusal.
    pub fn problem_type(&self) -> ProblemType {
        match self {
            Self::Malformed(_) | Self::BadSignature => ProblemType::Malformed,
            Self::BadSignatureAlgorithm(_) => ProblemType::BadSignatureAlgorithm,
            Self::BadPublicKey(_) => ProblemType::BadPublicKey,
            Self::EabUnauthorized(_) => ProblemType::Unauthorized,
            Self::Key(_) => ProblemType::ServerInternal,
        }
    }

    pub(crate) fn malformed(detail: impl Into<String>) -> Self {
        Self::Malformed(detail.into())
    }

    pub(crate) fn bad_alg(detail: impl Into<String>) -> Self {
        Self::BadSignatureAlgorithm(detail.into())
    }

    pub(crate) fn bad_key(detail: impl Into<String>) -> Self {
        Self::BadPublicKey(detail.into())
    }
}

impl From<Error> for Problem {
    fn from(error: Error) -> Self {
        Problem::new(error.problem_type(), error.to_string())
    }
}
