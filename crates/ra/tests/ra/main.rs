//! The registration authority tested on its own, as Boulder tests its RA (`ra_test.go`): every
//! decision and refusal through `Ra`'s public API, over a temporary SQLite database, a fake clock,
//! the in-memory rate-limit store and a fake job runner ([`harness`]). No HTTP, no sleeps: time
//! moves when a test advances the clock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod accounts;
mod audit;
mod caa;
mod challenges;
mod eab;
mod harness;
mod keys;
mod limits;
mod operator;
mod orders;
mod pausing;
mod profiles;
mod renewals;
mod revocation;
