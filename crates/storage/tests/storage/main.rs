//! The storage suite: every scenario runs against SQLite (a temp file) and PostgreSQL (a fresh
//! database on 127.0.0.1:5432, or `CERTEASY_TEST_POSTGRES_URL`).

// Helpers outside `#[test]` functions unwrap too: a failed fixture should fail the test loudly.
#![allow(clippy::unwrap_used)]

mod harness;

mod accounts;
mod admin_queries;
mod at_once;
mod audit;
mod audit_atomic;
mod audit_sealing;
mod authz_lifetimes;
mod blocked_keys;
#[cfg(feature = "bulk-fill")]
mod bulk_fill;
mod certificates;
mod challenge_starts;
mod checkpoints;
mod connect;
mod crls;
mod deactivated;
mod eab;
mod evidence;
mod exclusive;
mod guards;
mod issuer_chains;
mod issuers;
mod jobs;
mod orders;
mod overrides;
mod pauses;
mod pre_authz;
mod prune;
mod reservations;
