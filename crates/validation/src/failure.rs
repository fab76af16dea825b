//! A failed attempt: the problem the subscriber sees and whether trying again later may succeed.
//!
//! The classification is made where the failure is detected (a refused connection, a SERVFAIL, a
//! wrong key authorization), never by reading problem text afterwards. Anything not explicitly
//! marked otherwise is definite.
//!
//! Only one class is ever retried: a dns-01 TXT record that is not (yet) there with the expected
//! value ([`Retry::Propagation`]). Everything else is the verdict at once, as Let's Encrypt and
//! Pebble do, so the client reports the real problem while it is still polling. The subscriber
//! controls when validation starts; a client that fixes its web server or DNS asks again with a
//! new order, and a retried attempt would contact the subscriber's hosts again (the validator
//! must never become a scanner). DNS propagation is the exception because the subscriber cannot
//! see it finish: a client's hook returns once the record is at the provider's API, while the
//! authoritative servers and their secondaries may serve the previous set for a few seconds more.
//!
//! | Propagation (retried, within `validation.retry-window`) | Transient (final; may pass with a new order) | Definite (final) |
//! |---|---|---|
//! | dns-01: NXDOMAIN at `_acme-challenge.<name>`, no TXT record there, or a TXT set without the expected value | connecting refused, reset or timed out; the attempt's time limit; a TLS handshake cut off | the target answered with the wrong key authorization (http-01 body, tls-alpn-01 certificate) |
//! | | DNS SERVFAIL, REFUSED, timeout (dns-01 included); NXDOMAIN or no A/AAAA for an http-01 or tls-alpn-01 target | http-01 answered 4xx (404 included), 3xx that is not followed, or a body too large |
//! | | http-01 answered 5xx (a reverse proxy whose backend restarts) | a redirect refused by the rules; an address the target-address policy refuses; a TLS alert or ALPN mismatch; CAA refusals and CAA lookup failures; a malformed challenge |
//!
//! dns-account-01 is dns-01 at another name and is classed the same. dns-persist-01 counts as
//! propagation only while no record naming this CA is there (none at all, or only other CAs'):
//! a record of ours that is malformed, for another account, expired or not for wildcards is
//! definite.
//!
//! A TXT set that holds other values but not ours counts as propagation because it is what a
//! subscriber sees while an update propagates: secondaries and caches serve the previous set
//! (often the value of an earlier order, or of the other authorization of a `*.name` + `name`
//! pair) for up to the record's TTL. A wrong value stays wrong, so its retry costs one more query
//! to the subscriber's nameservers, never a connection to their hosts. Transient and definite
//! differ only in what the logs say about the target: neither is retried.

use acme_core::problem::Problem;

/// Whether an attempt that failed may succeed if repeated later, and whether it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// dns-01: the TXT record is missing or lacks the expected value, as while an update
    /// propagates. The only class the workers repeat (within `validation.retry-window`).
    Propagation,
    /// The failure may be temporary (network, an overloaded target), but it is the verdict:
    /// the subscriber asks again once the target is up.
    Transient,
    /// The target gave a wrong answer or the CA refuses to go on: repeating it cannot help.
    Definite,
}

/// Why one attempt failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// What the subscriber sees (as the challenge's `error` once the challenge is invalid).
    pub problem: Problem,
    /// Whether the attempt may be repeated.
    pub retry: Retry,
}

impl Failure {
    /// A dns-01 record not (yet) visible with the expected value: the attempt may be repeated.
    pub fn propagation(problem: Problem) -> Self {
        Self {
            problem,
            retry: Retry::Propagation,
        }
    }

    /// A failure that may pass later, but is the verdict now.
    pub fn transient(problem: Problem) -> Self {
        Self {
            problem,
            retry: Retry::Transient,
        }
    }

    /// A failure that repeating cannot fix.
    pub fn definite(problem: Problem) -> Self {
        Self {
            problem,
            retry: Retry::Definite,
        }
    }

    /// Whether the attempt may be repeated: only a record that may still be propagating.
    pub fn may_propagate(&self) -> bool {
        self.retry == Retry::Propagation
    }

    /// The class's name, for logs.
    pub fn class(&self) -> &'static str {
        match self.retry {
            Retry::Propagation => "propagation",
            Retry::Transient => "transient",
            Retry::Definite => "definite",
        }
    }

    /// The same failure with its problem changed by `f` (a prefix naming the URL, say).
    pub(crate) fn map_problem(self, f: impl FnOnce(Problem) -> Problem) -> Self {
        Self {
            problem: f(self.problem),
            retry: self.retry,
        }
    }
}

/// A problem raised without a classification is definite: only a record known to be propagating
/// is retried.
impl From<Problem> for Failure {
    fn from(problem: Problem) -> Self {
        Self::definite(problem)
    }
}
