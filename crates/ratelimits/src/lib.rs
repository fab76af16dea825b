//! Rate limits: GCRA buckets, limits, overrides and stores (in memory or Redis).
//!
//! The crate decides on buckets and knows nothing of ACME or HTTP: callers name a limit, a bucket
//! id and a cost, and get a verdict with the numbers a `Retry-After` needs.

pub mod batch;
pub mod bucket;
pub mod bucket_key;
pub mod config;
pub mod error;
pub mod gcra;
mod key_hash;
pub mod limit;
pub mod limiter;
pub mod nanos;
pub mod overrides;
pub mod store;

pub use crate::batch::Kind;
pub use crate::bucket::BucketId;
pub use crate::bucket_key::BucketKey;
pub use crate::error::Error;
pub use crate::error::Result;
pub use crate::limit::Limit;
pub use crate::limit::LimitName;
pub use crate::limiter::BindingLimit;
pub use crate::limiter::BucketState;
pub use crate::limiter::Limiter;
pub use crate::limiter::Request;
pub use crate::limiter::Verdict;
pub use crate::overrides::Overrides;
pub use crate::store::MemoryStore;
pub use crate::store::RedisStore;
pub use crate::store::Store;
