//! A failed attempt: the problem the subscriber sees and whether trying again later may succeed.
//!
//! The classification is made where the failure is detected (a refused connection, a SERVFAIL, a
//! wrong key authorization), never by reading problem text afterwards. Anything not explicitly
//! marked transient is definite: retrying is the exception, because a retried attempt contacts
//! the target again and the validator must never become a scanner.
//!
//! | Transient (retried within the authorization's lifetime) | Definite (the challenge fails at once) |
//! |---|---|
//! | connecting refused, reset or timed out; the attempt's time limit | the target answered with the wrong key authorization (http-01 body, tls-alpn-01 certificate) |
//! | DNS SERVFAIL, REFUSED, timeout; NXDOMAIN or no A/AAAA for the target name | http-01 answered 4xx (404 included), 3xx that is not followed, or a body too large |
//! | http-01 answered 5xx (a reverse proxy whose backend restarts) | a redirect refused by the rules; an address the target-address policy refuses |
//! | dns-01: NXDOMAIN, no TXT record, or a TXT set without the expected value (propagation) | a TLS handshake the peer refuses or an ALPN mismatch; CAA refusals and CAA lookup failures |
//! | a TLS handshake cut off (reset, EOF, timeout) | a malformed challenge (wildcard with http-01, dns-01 for an IP, bad token) |
//!
//! A dns-01 TXT set that holds other values but not ours is transient because it is what a
//! subscriber sees while an update propagates: secondaries and caches serve the previous set
//! (often the value of an earlier order, or of the other authorization of a `*.name` + `name`
//! pair) for up to the record's TTL. A wrong value stays wrong, so retrying it only costs a few
//! queries to the subscriber's nameservers, never a connection to their hosts.

use acme_core::problem::Problem;

/// Whether an attempt that failed may succeed if repeated later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// The failure may be temporary (network, DNS propagation, an overloaded target): the attempt
    /// may be repeated within the authorization's lifetime.
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
    /// A failure that may pass if the attempt is repeated later.
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

    /// Whether the attempt may be repeated.
    pub fn is_transient(&self) -> bool {
        self.retry == Retry::Transient
    }

    /// The same failure with its problem changed by `f` (a prefix naming the URL, say).
    pub(crate) fn map_problem(self, f: impl FnOnce(Problem) -> Problem) -> Self {
        Self {
            problem: f(self.problem),
            retry: self.retry,
        }
    }
}

/// A problem raised without a classification is definite: only what is known to be temporary is
/// retried.
impl From<Problem> for Failure {
    fn from(problem: Problem) -> Self {
        Self::definite(problem)
    }
}
