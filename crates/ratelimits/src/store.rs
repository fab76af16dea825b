//! Where TATs live. Both stores share [`crate::gcra`] and [`crate::batch`], so they decide alike.

mod memory;
mod redis;
mod sharding;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub use self::memory::MemoryStore;
pub use self::redis::REDIS_ERRORS;
pub use self::redis::RedisStore;
use crate::batch::BatchOutcome;
use crate::batch::Transaction;
use crate::bucket_key::BucketKey;
use crate::config::RateLimitingConfig;
use crate::error::Result;
use crate::gcra::Decision;
use crate::limit::Limit;

/// A boxed future, so the trait stays object safe and stores can be swapped behind `Arc<dyn Store>`.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// A bucket store. `now` is Unix nanoseconds from the application's clock, never the store's,
/// so several instances and the tests agree on time.
pub trait Store: Send + Sync {
    /// Decides every transaction of the batch against one consistent view and writes the allowed
    /// spends only if every enforced transaction is allowed.
    fn spend_batch<'a>(
        &'a self,
        now: i64,
        batch: &'a [Transaction],
    ) -> StoreFuture<'a, BatchOutcome>;

    /// The answer of [`spend_batch`](Self::spend_batch) when the store has it without waiting
    /// (memory), or None when it must ask over the network (Redis). It spares the in-memory hot
    /// path a boxed future.
    fn spend_batch_ready(&self, _now: i64, _batch: &[Transaction]) -> Option<Result<BatchOutcome>> {
        None
    }

    /// Gives back each transaction's cost (check-only ones are skipped), never above the burst.
    fn refund<'a>(&'a self, now: i64, batch: &'a [Transaction]) -> StoreFuture<'a, ()>;

    /// Deletes buckets, which makes them full.
    fn reset<'a>(&'a self, keys: &'a [BucketKey]) -> StoreFuture<'a, ()>;

    /// A bucket's state without spending: a cost-0 decision.
    fn peek<'a>(
        &'a self,
        now: i64,
        key: &'a BucketKey,
        limit: &'a Limit,
    ) -> StoreFuture<'a, Decision>;
}

/// The store the configuration asks for: Redis if `redis:` is set, else memory. Must be called
/// inside a Tokio runtime (the Redis client connects lazily in the background).
pub fn open(config: &RateLimitingConfig) -> Result<Arc<dyn Store>> {
    Ok(match &config.redis {
        Some(redis) => Arc::new(RedisStore::new(redis)?),
        None => Arc::new(MemoryStore::default()),
    })
}
