//! Validation against real servers on 127.0.0.1 from the testkit: every name is resolved through
//! the test DNS server, every connection goes to loopback.

mod caa;
mod common;
mod dns01;
mod http01;
mod tls_alpn01;
