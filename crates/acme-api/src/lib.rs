//! The ACME HTTP layer: routing, JWS authentication, nonces, problem documents and the wire format
//! of RFC 8555. This is the only crate that knows HTTP and JSON; everything below it speaks
//! `acme-core` types.

mod account_keys;
mod auth;
mod client_ip;
pub mod crl;
mod directory_object;
mod handlers;
mod headers;
mod limit_headers;
pub mod limits;
mod methods;
pub mod nonce;
mod problem;
mod refusal;
mod request_metrics;
mod response;
pub mod settings;
pub mod state;
pub mod unpause;
mod urls;
mod wire;

pub use handlers::router;
pub use state::ApiState;
