//! JWS and JWK handling for ACME (RFC 8555 §6.2), built directly on `aws-lc-rs`.
//!
//! ACME uses a narrow slice of JOSE: flattened JSON serialization only, a protected header that
//! carries everything, public keys only, and five signature algorithms. Implementing exactly that
//! slice keeps the attack surface small and lets every refusal carry a detail a client operator can
//! act on. The crate does no I/O: the HTTP layer owns nonces, account lookup and problem documents.

mod algorithm;
mod b64;
pub mod eab;
mod error;
pub mod goodkey;
mod header;
mod jwk;
mod jws;
mod key_hash;
pub mod sign;
mod spki;
mod verify;
mod verifying_key;

pub use algorithm::Algorithm;
pub use error::Error;
pub use header::{KeyRef, ProtectedHeader};
pub use jwk::{EcCurve, Jwk, MAX_RSA_BITS, MIN_RSA_BITS};
pub use jws::Jws;
pub use key_hash::SpkiHash;
pub use verifying_key::VerifyingKey;
