//! Durable work: challenge validation and certificate issuance run here, outside the request.
//!
//! Every job lives in the database (`storage` enqueues it in the same transaction that accepted the
//! client's request). Workers claim jobs under a short lease that a heartbeat renews while the
//! attempt runs; a crash leaves the lease to expire and the job is picked up again, by this
//! instance after a restart or by another instance, at most `max-attempts` times in all. Jobs are
//! idempotent: recording a validation twice or completing an order twice changes nothing.

pub mod audit_sealer;
mod caa_recheck;
mod context;
pub mod crl;
mod finalizations;
mod job_loop;
mod lease;
pub mod pruner;
pub mod settings;
mod validations;

pub use finalizations::Prepared;
pub use job_loop::Workers;
