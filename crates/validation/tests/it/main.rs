//! Validation against real servers on 127.0.0.1 from the testkit: every name is resolved through
//! the test DNS server, every connection goes to loopback (127.0.0.0/8).

mod bounds;
mod caa;
mod common;
mod disclosure;
mod dns01;
mod evidence;
mod hosts;
mod http01;
mod redirects;
mod targets;
mod tls_alpn01;
mod transience;
