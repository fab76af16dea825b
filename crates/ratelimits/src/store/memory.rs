//! Buckets in process memory, for a single instance and for tests.

use std::sync::Arc;
use std::time::Duration;

use acme_core::clock::SharedClock;
use compact_str::CompactString;
use hashbrown::HashTable;
use parking_lot::Mutex;
use parking_lot::MutexGuard;
use smallvec::SmallVec;
use tokio::task::JoinHandle;

use super::Debt;
use super::Store;
use super::StoreFuture;
use crate::batch::BatchOutcome;
use crate::batch::Decisions;
use crate::batch::Transaction;
use crate::batch::batch_allowed;
use crate::batch::check_unique;
use crate::batch::writes;
use crate::bucket_key::BucketKey;
use crate::error::Result;
use crate::gcra;
use crate::gcra::Decision;
use crate::key_hash::key_hash;
use crate::limit::Limit;
use crate::nanos::unix_nanos;

/// A power of two, and at most 64 so a batch's shards fit in one `u64` mask.
const SHARDS: usize = 32;

/// Batches this long or shorter are decided without touching the allocator beyond the outcome.
const INLINE: usize = 8;

/// Sharded tables of owner → (field → TAT), the layout of [`crate::bucket_key`].
///
/// A batch locks the shards it touches in ascending order, so concurrent batches can never
/// deadlock and each batch is decided and written atomically. A TAT at or before `now` is a full
/// bucket, which is the same as no entry: such entries are dropped on access and by [`sweep`],
/// and a hard cap on buckets bounds memory even under a flood of distinct keys.
///
/// Owners are found by the hash their [`BucketKey`] computed once, and a request's buckets
/// mostly share one owner: a new-order batch reads one table entry, not five.
///
/// [`sweep`]: MemoryStore::sweep
#[derive(Debug)]
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    max_per_shard: usize,
}

#[derive(Debug, Default)]
struct Shard {
    owners: HashTable<Owner>,
    /// Buckets over all owners: what the cap limits.
    buckets: usize,
}

/// An account's or an address's buckets: one cache line. Lookups miss the cache more often
/// than not (a busy server touches a different account on every request), so the table is
/// kept as small as a line per owner; the owner's hash is not stored but recomputed when the
/// table grows.
#[derive(Debug)]
#[repr(align(64))]
struct Owner {
    owner: CompactString,
    buckets: SmallVec<[Bucket; 1]>,
}

#[derive(Debug)]
struct Bucket {
    field: CompactString,
    tat: i64,
}

impl Owner {
    fn tat(&self, field: &str) -> Option<i64> {
        self.position(field).map(|i| self.buckets[i].tat)
    }

    fn position(&self, field: &str) -> Option<usize> {
        self.buckets.iter().position(|b| b.field == field)
    }

    /// The latest TAT: when the whole owner is full again.
    fn latest(&self) -> i64 {
        self.buckets.iter().map(|b| b.tat).max().unwrap_or(i64::MIN)
    }
}

/// Per transaction of a batch: where its bucket sits among its owner's buckets.
type Slots = SmallVec<[Option<usize>; INLINE]>;
/// Per transaction of a batch: the TAT stored, full buckets included.
type Tats = SmallVec<[Option<i64>; INLINE]>;

/// What a batch does to one bucket once decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// Nothing to write.
    Keep,
    /// A new TAT.
    Set(i64),
    /// Found full: the same as absent, so the entry goes.
    Forget,
}

fn same_owner(a: &BucketKey, b: &BucketKey) -> bool {
    a.owner_hash() == b.owner_hash() && a.owner() == b.owner()
}

/// A bucket found full is the same as an absent one.
fn live(tat: Option<i64>, now: i64) -> Option<i64> {
    tat.filter(|t| *t > now)
}

/// Decides every transaction against its stored TAT; returns the decisions and the verdict.
fn decide_all(now: i64, batch: &[Transaction], raw: &[Option<i64>]) -> (Decisions, bool) {
    let decisions: Decisions = batch
        .iter()
        .zip(raw)
        .map(|(tx, stored)| gcra::decide(now, live(*stored, now), tx.limit(), tx.cost()))
        .collect();
    let allowed = batch_allowed(batch, &decisions);
    (decisions, allowed)
}

/// What the batch writes, per transaction: its field and its change.
fn changes<'b>(
    now: i64,
    batch: &'b [Transaction],
    decisions: &'b [Decision],
    raw: &'b [Option<i64>],
    allowed: bool,
) -> impl Iterator<Item = (&'b str, Change)> + Clone {
    batch
        .iter()
        .zip(decisions)
        .zip(raw)
        .map(move |((tx, d), stored)| {
            let change = if writes(tx, d, allowed)
                || gcra::needs_clamp_write(now, live(*stored, now), tx.limit())
            {
                Change::Set(d.new_tat)
            } else if stored.is_some() && live(*stored, now).is_none() {
                Change::Forget
            } else {
                Change::Keep
            };
            (tx.key().field(), change)
        })
}

/// The shard of a hash. The table itself uses the low bits (slot) and the top seven (tag), so
/// the shard takes bits from the middle: every shard still sees well-spread hashes.
fn shard_of(hash: u64) -> usize {
    // Masked to SHARDS - 1, so the cast is lossless.
    ((hash >> 32) as usize) & (SHARDS - 1)
}

fn matches(key: &BucketKey) -> impl Fn(&Owner) -> bool + '_ {
    move |o| o.owner == key.owner()
}

fn rehash(owner: &Owner) -> u64 {
    key_hash(&owner.owner)
}

impl Shard {
    fn tat(&self, key: &BucketKey) -> Option<i64> {
        self.owners
            .find(key.owner_hash(), matches(key))
            .and_then(|o| o.tat(key.field()))
    }

    /// Applies one owner's changes with one table lookup (two when making room), and adds or
    /// drops the owner's entry as its buckets come and go.
    fn apply<'f>(
        &mut self,
        owner: &BucketKey,
        changes: impl Iterator<Item = (&'f str, Change)> + Clone,
        now: i64,
        max: usize,
    ) {
        if changes.clone().all(|(_, c)| matches!(c, Change::Keep)) {
            return;
        }
        let hash = owner.owner_hash();
        let added = |held: Option<&Owner>| {
            changes
                .clone()
                .filter(|(field, c)| {
                    matches!(c, Change::Set(_)) && held.is_none_or(|o| o.tat(field).is_none())
                })
                .count()
        };
        let mut found = self.owners.find_entry(hash, matches(owner));
        let new_buckets = added(found.as_ref().ok().map(|entry| entry.get()));
        if new_buckets > 0 && self.buckets + new_buckets > max {
            // Rare: at the cap. Make room, then look the owner up again (it may be gone).
            drop(found);
            self.retain_live(now);
            while self.buckets + new_buckets > max && self.evict_one() {}
            found = self.owners.find_entry(hash, matches(owner));
        }
        match found {
            Ok(mut entry) => {
                let held = entry.get_mut();
                for (field, change) in changes {
                    match change {
                        Change::Keep => {}
                        Change::Set(tat) => {
                            match held.buckets.iter_mut().find(|b| b.field == field) {
                                Some(bucket) => bucket.tat = tat,
                                None => {
                                    held.buckets.push(Bucket {
                                        field: field.into(),
                                        tat,
                                    });
                                    self.buckets += 1;
                                }
                            }
                        }
                        Change::Forget => {
                            let before = held.buckets.len();
                            held.buckets.retain(|b| b.field != field);
                            self.buckets -= before - held.buckets.len();
                        }
                    }
                }
                if held.buckets.is_empty() {
                    entry.remove();
                }
            }
            Err(_) => {
                let buckets: SmallVec<[Bucket; 1]> = changes
                    .filter_map(|(field, change)| match change {
                        Change::Set(tat) => Some(Bucket {
                            field: field.into(),
                            tat,
                        }),
                        Change::Keep | Change::Forget => None,
                    })
                    .collect();
                if buckets.is_empty() {
                    return;
                }
                self.buckets += buckets.len();
                self.owners.insert_unique(
                    owner.owner_hash(),
                    Owner {
                        owner: owner.owner().into(),
                        buckets,
                    },
                    rehash,
                );
            }
        }
    }

    /// Forgets a bucket (full again or reset), and its owner with its last bucket.
    fn remove(&mut self, key: &BucketKey) {
        let Ok(mut entry) = self.owners.find_entry(key.owner_hash(), matches(key)) else {
            return;
        };
        let owner = entry.get_mut();
        let before = owner.buckets.len();
        owner.buckets.retain(|b| b.field != key.field());
        self.buckets -= before - owner.buckets.len();
        if owner.buckets.is_empty() {
            entry.remove();
        }
    }

    /// Drops every full bucket; returns how many.
    fn retain_live(&mut self, now: i64) -> usize {
        let mut dropped = 0;
        self.owners.retain(|owner| {
            let before = owner.buckets.len();
            owner.buckets.retain(|b| b.tat > now);
            dropped += before - owner.buckets.len();
            !owner.buckets.is_empty()
        });
        self.buckets -= dropped;
        dropped
    }

    /// Still full of live buckets: forget the owner closest to full, which loses the least.
    /// False when there was nothing to forget.
    fn evict_one(&mut self) -> bool {
        let victim = self
            .owners
            .iter()
            .min_by_key(|o| o.latest())
            .map(|o| o.owner.clone());
        if let Some(name) = victim
            && let Ok(entry) = self.owners.find_entry(key_hash(&name), |o| o.owner == name)
        {
            let (owner, _) = entry.remove();
            self.buckets -= owner.buckets.len();
            return true;
        }
        false
    }
}

/// The shards a batch holds, locked, in ascending order of shard number.
struct Locked<'a> {
    guards: SmallVec<[(usize, MutexGuard<'a, Shard>); INLINE]>,
}

impl Locked<'_> {
    fn shard(&mut self, key: &BucketKey) -> &mut Shard {
        let wanted = shard_of(key.owner_hash());
        match self.guards.iter_mut().find(|(i, _)| *i == wanted) {
            Some((_, guard)) => guard,
            // `MemoryStore::lock` locked the shard of every key it was given.
            None => unreachable!("shard of a batch key not locked"),
        }
    }
}

impl MemoryStore {
    /// A store holding at most about `max_entries` buckets.
    pub fn new(max_entries: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            max_per_shard: max_entries.div_ceil(SHARDS).max(1),
        }
    }

    /// Drops every full bucket; returns how many were dropped.
    pub fn sweep(&self, now: i64) -> usize {
        self.shards.iter().map(|s| s.lock().retain_live(now)).sum()
    }

    /// Buckets currently held (full ones not yet swept included).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().buckets).sum()
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
    fn lock<'a>(&self, keys: impl Iterator<Item = &'a BucketKey>) -> Locked<'_> {
        let mut mask = keys.fold(0u64, |mask, key| mask | 1 << shard_of(key.owner_hash()));
        let mut guards = SmallVec::new();
        while mask != 0 {
            // Lowest set bit first: ascending order. trailing_zeros of a u64 is below 64.
            let i = mask.trailing_zeros() as usize;
            guards.push((i, self.shards[i].lock()));
            mask &= mask - 1;
        }
        Locked { guards }
    }

    /// The synchronous core of [`Store::spend_batch`].
    pub fn spend_batch_now(&self, now: i64, batch: &[Transaction]) -> Result<BatchOutcome> {
        check_unique(batch)?;
        let Some(first) = batch.first() else {
            return Ok(BatchOutcome {
                decisions: Decisions::new(),
                allowed: true,
            });
        };
        if batch[1..]
            .iter()
            .all(|tx| same_owner(tx.key(), first.key()))
        {
            // The server's batches all have one owner (an address, or an account): one lock,
            // one lookup.
            return Ok(self.spend_one_owner(now, batch));
        }
        // Buckets of several owners (tests and tools; the server never builds such a batch):
        // every shard involved stays locked from the first read to the last write.
        let mut locked = self.lock(batch.iter().map(Transaction::key));
        let raw: Tats = batch
            .iter()
            .map(|tx| locked.shard(tx.key()).tat(tx.key()))
            .collect();
        let (decisions, allowed) = decide_all(now, batch, &raw);
        for (tx, change) in batch
            .iter()
            .zip(changes(now, batch, &decisions, &raw, allowed))
        {
            locked.shard(tx.key()).apply(
                tx.key(),
                std::iter::once(change),
                now,
                self.max_per_shard,
            );
        }
        Ok(BatchOutcome { decisions, allowed })
    }

    /// [`MemoryStore::spend_batch_now`] for a batch whose buckets share one owner: one lock,
    /// one table lookup, and each bucket found once and then written where it was found.
    fn spend_one_owner(&self, now: i64, batch: &[Transaction]) -> BatchOutcome {
        let key = batch[0].key();
        let mut guard = self.shards[shard_of(key.owner_hash())].lock();
        let shard = &mut *guard;
        let found = shard.owners.find_entry(key.owner_hash(), matches(key));
        // Per transaction: where its bucket sits among the owner's, and its stored TAT.
        let (slots, raw): (Slots, Tats) = match &found {
            Ok(entry) => {
                let held = entry.get();
                batch
                    .iter()
                    .map(|tx| {
                        let slot = held.position(tx.key().field());
                        (slot, slot.map(|i| held.buckets[i].tat))
                    })
                    .unzip()
            }
            Err(_) => batch.iter().map(|_| (None, None)).unzip(),
        };
        let (decisions, allowed) = decide_all(now, batch, &raw);
        let changes: SmallVec<[Change; INLINE]> = changes(now, batch, &decisions, &raw, allowed)
            .map(|(_, change)| change)
            .collect();
        if changes.iter().all(|c| matches!(c, Change::Keep)) {
            return BatchOutcome { decisions, allowed };
        }
        let added = changes
            .iter()
            .zip(&slots)
            .filter(|(c, slot)| matches!(c, Change::Set(_)) && slot.is_none())
            .count();
        if added > 0 && shard.buckets + added > self.max_per_shard {
            // At the cap: the general path makes room first.
            drop(found);
            let fields = batch.iter().map(|tx| tx.key().field());
            shard.apply(
                key,
                fields.zip(changes.iter().copied()),
                now,
                self.max_per_shard,
            );
            return BatchOutcome { decisions, allowed };
        }
        match found {
            Ok(mut entry) => {
                let held = entry.get_mut();
                let mut forget = false;
                for ((tx, change), slot) in batch.iter().zip(&changes).zip(&slots) {
                    match (*change, *slot) {
                        (Change::Set(tat), Some(i)) => held.buckets[i].tat = tat,
                        (Change::Set(tat), None) => held.buckets.push(Bucket {
                            field: tx.key().field().into(),
                            tat,
                        }),
                        (Change::Forget, Some(_)) => forget = true,
                        _ => {}
                    }
                }
                shard.buckets += added;
                if forget {
                    let before = held.buckets.len();
                    held.buckets.retain(|b| {
                        !batch.iter().zip(&changes).any(|(tx, c)| {
                            matches!(c, Change::Forget) && b.field == tx.key().field()
                        })
                    });
                    shard.buckets -= before - held.buckets.len();
                }
                if held.buckets.is_empty() {
                    entry.remove();
                }
            }
            Err(absent) => {
                let buckets: SmallVec<[Bucket; 1]> = batch
                    .iter()
                    .zip(&changes)
                    .filter_map(|(tx, change)| match *change {
                        Change::Set(tat) => Some(Bucket {
                            field: tx.key().field().into(),
                            tat,
                        }),
                        Change::Keep | Change::Forget => None,
                    })
                    .collect();
                if !buckets.is_empty() {
                    shard.buckets += buckets.len();
                    absent.into_table().insert_unique(
                        key.owner_hash(),
                        Owner {
                            owner: key.owner().into(),
                            buckets,
                        },
                        rehash,
                    );
                }
            }
        }
        BatchOutcome { decisions, allowed }
    }

    fn refund_now(&self, now: i64, batch: &[Transaction]) {
        let mut locked = self.lock(batch.iter().map(Transaction::key));
        for tx in batch.iter().filter(|tx| tx.spends()) {
            let shard = locked.shard(tx.key());
            let stored = shard.tat(tx.key());
            if let Some(tat) = gcra::refund(now, stored, tx.limit(), tx.cost()) {
                shard.apply(
                    tx.key(),
                    std::iter::once((tx.key().field(), Change::Set(tat))),
                    now,
                    self.max_per_shard,
                );
            }
        }
    }

    /// Takes every bucket that is not full: its key and how far ahead of `now` it is full again.
    /// The store is empty afterwards. The limiter's memory fallback hands its buckets to Redis
    /// this way when Redis answers again.
    pub fn drain(&self, now: i64) -> Vec<(BucketKey, i64)> {
        let mut taken = Vec::new();
        for shard in &self.shards {
            let mut shard = shard.lock();
            for owner in shard.owners.drain() {
                for bucket in owner.buckets {
                    if bucket.tat > now {
                        taken.push((
                            BucketKey::from_parts(owner.owner.clone(), bucket.field),
                            bucket.tat - now,
                        ));
                    }
                }
            }
            shard.buckets = 0;
        }
        taken
    }

    /// The synchronous core of [`Store::absorb`].
    pub fn absorb_now(&self, now: i64, debts: &[Debt]) {
        for debt in debts.iter().filter(|d| d.nanos > 0) {
            let mut shard = self.shards[shard_of(debt.key.owner_hash())].lock();
            let base = live(shard.tat(&debt.key), now).map_or(now, |tat| tat.max(now));
            let ceiling = now.saturating_add(debt.limit.burst_offset());
            let tat = base.saturating_add(debt.nanos).min(ceiling);
            shard.apply(
                &debt.key,
                std::iter::once((debt.key.field(), Change::Set(tat))),
                now,
                self.max_per_shard,
            );
        }
    }

    fn peek_now(&self, now: i64, key: &BucketKey, limit: &Limit) -> Decision {
        let stored = self.shards[shard_of(key.owner_hash())].lock().tat(key);
        gcra::decide(now, stored, limit, 0)
    }

    fn reset_now(&self, keys: &[BucketKey]) {
        for key in keys {
            self.shards[shard_of(key.owner_hash())].lock().remove(key);
        }
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new(1_000_000)
    }
}

impl Store for MemoryStore {
    fn spend_batch_ready(&self, now: i64, batch: &[Transaction]) -> Option<Result<BatchOutcome>> {
        Some(self.spend_batch_now(now, batch))
    }

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

    fn reset<'a>(&'a self, keys: &'a [BucketKey]) -> StoreFuture<'a, ()> {
        self.reset_now(keys);
        Box::pin(std::future::ready(Ok(())))
    }

    fn peek<'a>(
        &'a self,
        now: i64,
        key: &'a BucketKey,
        limit: &'a Limit,
    ) -> StoreFuture<'a, Decision> {
        Box::pin(std::future::ready(Ok(self.peek_now(now, key, limit))))
    }

    fn absorb<'a>(&'a self, now: i64, debts: &'a [Debt]) -> StoreFuture<'a, ()> {
        self.absorb_now(now, debts);
        Box::pin(std::future::ready(Ok(())))
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
        assert_eq!(store.peek_now(now, &"roomy".into(), &roomy).remaining, 10);
    }

    #[test]
    fn an_owner_is_one_cache_line() {
        assert_eq!(size_of::<super::Owner>(), 64);
    }

    /// An account's buckets share one entry; each still comes and goes on its own, and the cap
    /// and `len` count buckets, not owners.
    #[test]
    fn buckets_of_one_owner_live_and_go_separately() {
        let store = MemoryStore::new(1_000);
        let slow = Limit::new("slow", 5, 1, Duration::from_secs(100), Mode::Enforce).unwrap();
        let fast = Limit::new("fast", 5, 1, Duration::from_secs(1), Mode::Enforce).unwrap();
        let now = 1_000 * S;
        let orders = tx("order-creation:7", slow);
        let failed = tx("failed-validation:7:example.com", fast);
        let other = tx("order-creation:8", slow);
        let outcome = store
            .spend_batch_now(now, &[orders, failed, other])
            .unwrap();
        assert!(outcome.allowed);
        assert_eq!(store.len(), 3);
        let owners: usize = store.shards.iter().map(|s| s.lock().owners.len()).sum();
        assert_eq!(owners, 2, "account 7's two buckets share one entry");

        // Two seconds later the fast bucket is full again and is dropped; the slow one stays.
        let later = now + 2 * S;
        let peek = |key: &str, limit: Limit| {
            Transaction::new(
                LimitName::GlobalPerIp,
                key.into(),
                limit,
                0,
                Kind::CheckOnly,
            )
            .unwrap()
        };
        let outcome = store
            .spend_batch_now(
                later,
                &[
                    peek("failed-validation:7:example.com", fast),
                    peek("order-creation:7", slow),
                ],
            )
            .unwrap();
        assert_eq!(outcome.decisions[0].remaining, 5);
        assert_eq!(outcome.decisions[1].remaining, 4);
        assert_eq!(store.len(), 2);
        assert_eq!(
            store
                .peek_now(later, &"order-creation:7".into(), &slow)
                .remaining,
            4
        );

        // A reset takes one bucket; the owner goes with its last one.
        store.reset_now(&["order-creation:7".into()]);
        assert_eq!(store.len(), 1);
        let owners: usize = store.shards.iter().map(|s| s.lock().owners.len()).sum();
        assert_eq!(owners, 1);
        assert_eq!(store.sweep(now + 1_000 * S), 1);
        assert!(store.is_empty());
    }
}
