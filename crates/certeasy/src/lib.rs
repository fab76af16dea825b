//! The `certeasy` binary's library: configuration, wiring and listeners, shared with the
//! integration tests.

pub mod admin;
pub mod admin_audit;
pub mod admin_caller;
pub mod admin_cli;
pub mod admin_client;
pub mod admin_eab;
pub mod admin_error;
pub mod admin_issuers;
pub mod admin_keys;
pub mod admin_metrics;
pub mod admin_token;
pub mod admin_wire;
pub mod audit_offline;
pub mod ca_cli;
pub mod cli;
pub mod config;
pub mod data_dir;
pub mod issuer_reload;
pub mod listener;
pub mod listener_cert;
pub mod listener_sessions;
pub mod reload;
pub mod serve;
pub mod table;
pub mod tls;
