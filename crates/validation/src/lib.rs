//! Challenge validation for Certeasy: http-01 and dns-01 (RFC 8555 §8.3, §8.4), tls-alpn-01
//! (RFC 8737), dns-account-01 (draft-ietf-acme-dns-account-label-02), dns-persist-01
//! (draft-ietf-acme-dns-persist-02), IP identifiers (RFC 8738) and CAA checking (RFC 8659, RFC
//! 8657 parameters).
//!
//! One [`Validator`] performs single validation attempts; retries, scheduling and persistence of the
//! outcome belong to the caller. [`Validator::attempt`] says, as a [`Failure`], whether a failed
//! attempt may be repeated (a dns-01 record still propagating) or not; see `failure.rs` for the table. Every failure is an ACME [`Problem`](acme_core::problem::Problem)
//! whose detail names what was fetched or queried and what was found, because that text is what the
//! subscriber sees in their client's output.
//!
//! All network access goes through one DNS resolver that never caches, and every address the
//! validator connects to (resolved names, redirect targets, IP identifiers) is held to one
//! target-address policy (`address_policy`), so redirects and CNAMEs cannot steer the validator to
//! link-local, metadata or other refused addresses. One attempt is bounded as a whole by
//! `timeout`, and at most [`MAX_ADDRESSES_PER_NAME`] addresses of a name are tried.
//!
//! Problem details never quote what another host served after a redirect, and quote at most a
//! short, escaped prefix of what the identifier's own host served.

mod address_policy;
mod caa;
mod context;
mod dns01;
mod dns_account01;
mod dns_persist01;
mod error;
mod evidence;
mod failure;
mod http01;
mod key_authorization;
mod quote;
mod resolver;
mod settings;
mod tls_alpn01;
mod tls_verifier;
mod validator;

pub use error::Error;
pub use evidence::Evidence;
pub use failure::{Failure, Retry};
pub use resolver::MAX_ADDRESSES_PER_NAME;
pub use settings::{DEFAULT_ALLOW_PRIVATE_REDIRECTS, ValidationSettings};
pub use validator::{AttemptAccount, MAX_ISSUER_DOMAIN_NAMES, Validator};
