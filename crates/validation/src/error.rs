//! Construction errors. Validation outcomes are `Problem`s, never this type.

/// Why a [`Validator`](crate::Validator) could not be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The DNS resolver could not be configured (for example, no usable system configuration).
    #[error("configuring the validation DNS resolver: {0}")]
    Resolver(#[source] hickory_resolver::net::NetError),
    /// The TLS client for tls-alpn-01 could not be configured.
    #[error("configuring the tls-alpn-01 TLS client: {0}")]
    Tls(#[source] rustls::Error),
    /// A setting is out of range.
    #[error("invalid validation setting: {0}")]
    Settings(String),
}
