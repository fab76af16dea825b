//! Integration tests: the shared store suite (memory and Redis), sharding, concurrency,
//! fail-open and the memory fallback, the limiter, and a property test against a reference token bucket.

// Test helpers live outside `#[test]` functions, where clippy's allow-unwrap-in-tests does not
// reach; configs are built by tweaking the defaults on purpose, to show what each test changes.
#![allow(clippy::unwrap_used, clippy::field_reassign_with_default)]

mod database_overrides;
mod fallback;
mod limiter;
mod model;
mod redis_layout;
mod redis_only;
mod store_suite;
mod support;
