//! Where TATs live. Both stores share [`crate::gcra`] and [`crate::batch`], so they decide alike.

mod memory;
mod redis;
mod redis_layout;
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

/// Debt counted by one instance while the shared store was unreachable, handed to the store when it
/// answers again (see [`Store::absorb`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Debt {
    /// The bucket.
    pub key: BucketKey,
    /// The limit in force for it now: its burst caps what is absorbed.
    pub limit: Limit,
    /// How far ahead of `now` the instance's bucket was full again, in nanoseconds (above 0).
    pub nanos: i64,
}

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

    /// Adds each debt to its bucket: the TAT moves `nanos` later (from `now` when the bucket is
    /// full), never beyond `now` + the burst offset. Unlike a spend it never refuses: the
    /// failures it stands for have already happened.
    fn absorb<'a>(&'a self, now: i64, debts: &'a [Debt]) -> StoreFuture<'a, ()>;

    /// Whether the store is reached over the network and shared by instances, so it can be
    /// unreachable while this instance runs. The limiter then keeps a memory fallback for the
    /// limits that fail safe ([`crate::limit::LimitName::fails_safe`]).
    fn is_remote(&self) -> bool {
        false
    }
}

/// The store the configuration asks for: Redis if `redis:` is set, else memory. Must be called
/// inside a Tokio runtime (the Redis client connects lazily in the background).
pub fn open(config: &RateLimitingConfig) -> Result<Arc<dyn Store>> {
    Ok(match &config.redis {
        Some(redis) => Arc::new(RedisStore::new(redis)?),
        None => Arc::new(MemoryStore::default()),
    })
}
