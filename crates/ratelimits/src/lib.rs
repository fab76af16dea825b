//! Rate limits: GCRA buckets, limits, overrides and stores (in memory or Redis).

pub mod config;
