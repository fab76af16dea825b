//! Buckets in process memory, for a single instance and for tests.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use acme_core::clock::SharedClock;
use parking_lot::Mutex;
use parking_lot::MutexGuard;
use tokio::task::JoinHandle;

use super::Store;
use super::StoreFuture;
use crate::batch::BatchOutcome;
use crate::batch::Transaction;
use crate::batch::batch_allowed;
use crate::batch::check_unique;
use crate::batch::writes;
use crate::gcra;
use crate::gcra::Decision;
use crate::limit::Limit;
use crate::nanos::unix_nanos;

const SHARDS: usize = 32;

/// Sharded maps of key → TAT.
///
/// A batch locks the shards it touches in ascending order, so concurrent batches can never
/// deadlock and each batch is decided and written atomically. A TAT at or before `now` is a full
/// bucket, which is the same as no entry: such entries are dropped on access and by [`sweep`],
/// and a hard cap bounds memory even under a flood of distinct keys.
///
/// [`sweep`]: MemoryStore::sweep
#[derive(Debug)]
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    max_per_shard: usize,
}

/// foldhash, seeded per process: several times faster than SipHash on short keys, and the seed
/// keeps bucket keys from being chosen to collide.
type RandomState = foldhash::fast::RandomState;
type Shard = HashMap<String, i64, RandomState>;

impl MemoryStore {
    /// A store holding at most about `max_entries` buckets.
    pub fn new(max_entries: usize) -> Self {
        Self {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(HashMap::with_hasher(RandomState::default())))
                .collect(),
            hasher: RandomState::default(),
            max_per_shard: max_entries.div_ceil(SHARDS).max(1),
        }
    }

    fn shard_index(&self, key: &str) -> usize {
        // The modulo keeps the value below SHARDS, so the cast back is lossless.
        (self.hasher.hash_one(key) % SHARDS as u64) as usize
    }

    /// Drops every full bucket; returns how many were dropped.
    pub fn sweep(&self, now: i64) -> usize {
        let mut dropped = 0;
        for shard in &self.shards {
            let mut map = shard.lock();
            let before = map.len();
            map.retain(|_, tat| *tat > now);
            dropped += before - map.len();
        }
        dropped
    }

    /// Buckets currently held (full ones not yet swept included).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// Whether no bucket is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sweeps every `interval` until the handle is aborted or the store dropped.
    pub fn spawn_sweeper(
        self: &Arc<Self>,
        clock: SharedClock,
        interval: Duration,
    ) -> JoinHandle<()> {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                let Some(store) = weak.upgrade() else { return };
                let dropped = store.sweep(unix_nanos(clock.now()));
                tracing::debug!(dropped, "swept full rate-limit buckets");
            }
        })
    }

    /// Locks the shards of `keys` in ascending order.
    fn lock<'a>(
        &'a self,
        keys: impl Iterator<Item = &'a str>,
    ) -> Vec<(usize, MutexGuard<'a, Shard>)> {
        let mut indexes: Vec<usize> = keys.map(|k| self.shard_index(k)).collect();
        indexes.sort_unstable();
        indexes.dedup();
        indexes
            .into_iter()
            .map(|i| (i, self.shards[i].lock()))
            .collect()
    }

    fn guard_for<'g, 'a>(
        &self,
        guards: &'g mut [(usize, MutexGuard<'a, Shard>)],
        key: &str,
    ) -> Option<&'g mut Shard> {
        let index = self.shard_index(key);
        guards
            .iter_mut()
            .find(|(i, _)| *i == index)
            .map(|(_, g)| &mut **g)
    }

    fn write(&self, map: &mut Shard, key: &str, tat: i64, now: i64) {
        if let Some(slot) = map.get_mut(key) {
            *slot = tat;
            return;
        }
        if map.len() >= self.max_per_shard {
            map.retain(|_, t| *t > now);
        }
        if map.len() >= self.max_per_shard {
            // Still full of live buckets: forget the one closest to full, which loses the least.
            let victim = map.iter().min_by_key(|(_, t)| **t).map(|(k, _)| k.clone());
            if let Some(victim) = victim {
                map.remove(&victim);
            }
        }
        map.insert(key.to_owned(), tat);
    }

    /// The synchronous core of [`Store::spend_batch`].
    pub fn spend_batch_now(
        &self,
        now: i64,
        batch: &[Transaction],
    ) -> crate::error::Result<BatchOutcome> {
        check_unique(batch)?;
        let mut guards = self.lock(batch.iter().map(Transaction::key));
        let mut decisions = Vec::with_capacity(batch.len());
        let mut stored_tats = Vec::with_capacity(batch.len());
        for tx in batch {
            let stored = self
                .guard_for(&mut guards, tx.key())
                .and_then(|m| m.get(tx.key()).copied())
                .filter(|tat| *tat > now);
            stored_tats.push(stored);
            decisions.push(gcra::decide(now, stored, tx.limit(), tx.cost()));
        }
        let allowed = batch_allowed(batch, &decisions);
        for ((tx, d), stored) in batch.iter().zip(&decisions).zip(stored_tats) {
            let Some(map) = self.guard_for(&mut guards, tx.key()) else {
                continue;
            };
            if writes(tx, d, allowed) || gcra::needs_clamp_write(now, stored, tx.limit()) {
                self.write(map, tx.key(), d.new_tat, now);
            } else if stored.is_none() {
                map.remove(tx.key());
            }
        }
        Ok(BatchOutcome { decisions, allowed })
    }

    fn refund_now(&self, now: i64, batch: &[Transaction]) {
        let mut guards = self.lock(batch.iter().map(Transaction::key));
        for tx in batch.iter().filter(|tx| tx.spends()) {
            let Some(map) = self.guard_for(&mut guards, tx.key()) else {
                continue;
            };
            let stored = map.get(tx.key()).copied();
            if let Some(tat) = gcra::refund(now, stored, tx.limit(), tx.cost()) {
                map.insert(tx.key().to_owned(), tat);
            }
        }
    }

    fn peek_now(&self, now: i64, key: &str, limit: &Limit) -> Decision {
        let stored = self.shards[self.shard_index(key)].lock().get(key).copied();
        gcra::decide(now, stored, limit, 0)
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new(1_000_000)
    }
}

impl Store for MemoryStore {
    fn spend_batch<'a>(
        &'a self,
        now: i64,
        batch: &'a [Transaction],
    ) -> StoreFuture<'a, BatchOutcome> {
        Box::pin(std::future::ready(self.spend_batch_now(now, batch)))
    }

    fn refund<'a>(&'a self, now: i64, batch: &'a [Transaction]) -> StoreFuture<'a, ()> {
        self.refund_now(now, batch);
        Box::pin(std::future::ready(Ok(())))
    }

    fn reset<'a>(&'a self, keys: &'a [String]) -> StoreFuture<'a, ()> {
        for key in keys {
            self.shards[self.shard_index(key)].lock().remove(key);
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn peek<'a>(&'a self, now: i64, key: &'a str, limit: &'a Limit) -> StoreFuture<'a, Decision> {
        Box::pin(std::future::ready(Ok(self.peek_now(now, key, limit))))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::MemoryStore;
    use super::SHARDS;
    use crate::batch::Kind;
    use crate::batch::Transaction;
    use crate::config::Mode;
    use crate::limit::Limit;
    use crate::limit::LimitName;

    const S: i64 = 1_000_000_000;

    fn tx(key: &str, limit: Limit) -> Transaction {
        Transaction::new(
            LimitName::GlobalPerIp,
            key.into(),
            limit,
            1,
            Kind::CheckAndSpend,
        )
        .unwrap()
    }

    #[test]
    fn full_buckets_are_evicted_and_the_cap_holds() {
        let store = MemoryStore::new(64);
        let limit = Limit::new("x", 5, 1, Duration::from_secs(1), Mode::Enforce).unwrap();
        let now = 1_000 * S;
        for i in 0..1_000 {
            let outcome = store
                .spend_batch_now(now, &[tx(&format!("k{i}"), limit)])
                .unwrap();
            assert!(outcome.allowed);
        }
        assert!(store.len() <= 64 + SHARDS, "cap exceeded: {}", store.len());
        // One second later every bucket is full again (one token spent, one per second).
        let held = store.len();
        assert_eq!(store.sweep(now + S), held);
        assert!(store.is_empty());
        // A bucket found full on access is dropped, not kept.
        store.spend_batch_now(now, &[tx("a", limit)]).unwrap();
        assert_eq!(store.len(), 1);
        let peek = Transaction::new(
            LimitName::GlobalPerIp,
            "a".into(),
            limit,
            0,
            Kind::CheckOnly,
        )
        .unwrap();
        store.spend_batch_now(now + 2 * S, &[peek]).unwrap();
        assert!(store.is_empty());
    }

    #[test]
    fn nothing_is_spent_unless_the_whole_batch_is_allowed() {
        let store = MemoryStore::default();
        let roomy = Limit::new("r", 10, 10, Duration::from_secs(10), Mode::Enforce).unwrap();
        let tight = Limit::new("t", 1, 1, Duration::from_secs(10), Mode::Enforce).unwrap();
        let now = 1_000 * S;
        assert!(
            store
                .spend_batch_now(now, &[tx("tight", tight)])
                .unwrap()
                .allowed
        );
        let outcome = store
            .spend_batch_now(now, &[tx("roomy", roomy), tx("tight", tight)])
            .unwrap();
        assert!(!outcome.allowed);
        assert!(outcome.decisions[0].allowed);
        assert_eq!(store.peek_now(now, "roomy", &roomy).remaining, 10);
    }
}
