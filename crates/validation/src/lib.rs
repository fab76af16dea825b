//! Challenge validation for Certeasy: http-01 and dns-01 (RFC 8555 §8.3, §8.4), tls-alpn-01
//! (RFC 8737), IP identifiers (RFC 8738) and CAA checking (RFC 8659, RFC 8657 parameters).
//!
//! One [`Validator`] performs single validation attempts; retries, scheduling and persistence of the
//! outcome belong to the caller. Every failure is an ACME [`Problem`](acme_core::problem::Problem)
//! whose detail names what was fetched or queried and what was found, because that text is what the
//! subscriber sees in their client's output.
//!
//! All network access goes through one DNS resolver that never caches and refuses loopback targets
//! unless configured otherwise, so redirects and CNAMEs cannot steer the validator to addresses a
//! direct request could not reach.

mod address_policy;
mod caa;
mod dns01;
mod error;
mod http01;
mod key_authorization;
mod resolver;
mod settings;
mod tls_alpn01;
mod tls_verifier;
mod validator;

pub use error::Error;
pub use settings::ValidationSettings;
pub use validator::Validator;
