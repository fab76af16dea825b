//! Test-only infrastructure: real servers on 127.0.0.1 that validation and end-to-end tests talk to.

pub mod acme_http;
pub mod admin_cli;
pub mod dns;
pub mod http01;
pub mod openssl;
pub mod poll;
pub mod ports;
pub mod postgres;
pub mod softhsm;
pub mod tls_alpn;
