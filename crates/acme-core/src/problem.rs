//! The ACME error vocabulary (RFC 8555 §6.7) as domain values.
//!
//! Crates below the HTTP layer describe failures with a [`ProblemType`] and a human detail; only
//! `acme-api` turns them into RFC 7807 documents and HTTP statuses. Validation errors are stored in
//! this form so that a challenge's `error` survives restarts.

use std::str::FromStr;

use crate::identifier::Identifier;
use crate::status::UnknownStatus;

macro_rules! problem_types {
    ($($variant:ident => $wire:literal),+ $(,)?) => {
        /// `urn:ietf:params:acme:error:*` types.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ProblemType {
            $(
                #[doc = concat!("`urn:ietf:params:acme:error:", $wire, "`")]
                $variant
            ),+
        }

        impl ProblemType {
            /// The short name after `urn:ietf:params:acme:error:`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $wire),+
                }
            }
        }

        impl FromStr for ProblemType {
            type Err = UnknownStatus;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                let short = s.strip_prefix("urn:ietf:params:acme:error:").unwrap_or(s);
                match short {
                    $($wire => Ok(Self::$variant),)+
                    _ => Err(UnknownStatus::new("problem type", s)),
                }
            }
        }
    };
}

problem_types! {
    AccountDoesNotExist => "accountDoesNotExist",
    AlreadyReplaced => "alreadyReplaced",
    AlreadyRevoked => "alreadyRevoked",
    BadCsr => "badCSR",
    BadNonce => "badNonce",
    BadPublicKey => "badPublicKey",
    BadRevocationReason => "badRevocationReason",
    BadSignatureAlgorithm => "badSignatureAlgorithm",
    Caa => "caa",
    Compound => "compound",
    // Not in RFC 8555's table; Boulder's name for a request that lost to a concurrent change
    // (409), which ACME clients already know.
    Conflict => "conflict",
    Connection => "connection",
    Dns => "dns",
    ExternalAccountRequired => "externalAccountRequired",
    IncorrectResponse => "incorrectResponse",
    InvalidContact => "invalidContact",
    InvalidProfile => "invalidProfile",
    Malformed => "malformed",
    OrderNotReady => "orderNotReady",
    RateLimited => "rateLimited",
    RejectedIdentifier => "rejectedIdentifier",
    ServerInternal => "serverInternal",
    Tls => "tls",
    Unauthorized => "unauthorized",
    UnsupportedContact => "unsupportedContact",
    UnsupportedIdentifier => "unsupportedIdentifier",
    UserActionRequired => "userActionRequired",
}

impl ProblemType {
    /// The full URN.
    pub fn urn(self) -> String {
        format!("urn:ietf:params:acme:error:{}", self.as_str())
    }
}

/// A failure, with a detail written for the person who reads the client's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The ACME error type.
    pub kind: ProblemType,
    /// What went wrong and, where possible, what to do about it.
    pub detail: String,
    /// The identifier this problem is about, in subproblems.
    pub identifier: Option<Identifier>,
    /// One entry per failing identifier when several fail.
    pub subproblems: Vec<Problem>,
}

impl Problem {
    /// A problem without identifier or subproblems.
    pub fn new(kind: ProblemType, detail: impl Into<String>) -> Self {
        Self {
            kind,
            detail: detail.into(),
            identifier: None,
            subproblems: Vec::new(),
        }
    }

    /// Attaches the identifier the problem concerns.
    pub fn with_identifier(mut self, identifier: Identifier) -> Self {
        self.identifier = Some(identifier);
        self
    }

    /// Combines per-identifier problems: one is returned as is, several become subproblems of a
    /// `compound` (or, when all share a type, that type) problem.
    pub fn combine(mut problems: Vec<Problem>, summary: impl Into<String>) -> Option<Problem> {
        match problems.len() {
            0 => None,
            1 => problems.pop(),
            _ => {
                let first = problems[0].kind;
                let kind = if problems.iter().all(|p| p.kind == first) {
                    first
                } else {
                    ProblemType::Compound
                };
                Some(Problem {
                    kind,
                    detail: summary.into(),
                    identifier: None,
                    subproblems: problems,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problem_types_round_trip() {
        assert_eq!(
            ProblemType::BadCsr.urn(),
            "urn:ietf:params:acme:error:badCSR"
        );
        assert_eq!(
            "urn:ietf:params:acme:error:badNonce"
                .parse::<ProblemType>()
                .unwrap(),
            ProblemType::BadNonce
        );
        assert_eq!("dns".parse::<ProblemType>().unwrap(), ProblemType::Dns);
        assert!("nope".parse::<ProblemType>().is_err());
    }

    #[test]
    fn combine_builds_subproblems() {
        let a = Problem::new(ProblemType::RejectedIdentifier, "a")
            .with_identifier(Identifier::dns("a.example.com").unwrap());
        let b = Problem::new(ProblemType::Malformed, "b")
            .with_identifier(Identifier::dns("b.example.com").unwrap());
        assert_eq!(Problem::combine(vec![a.clone()], "x").unwrap(), a);
        let both = Problem::combine(vec![a, b], "two identifiers failed").unwrap();
        assert_eq!(both.kind, ProblemType::Compound);
        assert_eq!(both.subproblems.len(), 2);
        assert!(Problem::combine(vec![], "none").is_none());
    }
}
