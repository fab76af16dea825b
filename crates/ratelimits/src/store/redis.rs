//! Buckets in Redis, sharded client-side over several primaries.
//!
//! Each request costs one script call per shard it touches: the script reads, decides and writes
//! atomically, so concurrent requests cannot both spend the last token (Boulder's read-then-write
//! races, #7780 and #7886, cannot happen). The application's clock is passed in; replies carry the
//! stored TATs, never TTLs, so a reply is independent of when it arrives.
//!
//! A bucket is a field of a small group hash shared with other owners' buckets
//! (`store/redis_layout.rs`); the scripts also read, and move over on write, a bucket still kept
//! in the previous release's layout (one hash per owner), so an upgrade keeps every count.

use std::future::Future;
use std::time::Duration;

use futures::future::join_all;
use redis::Script;
use redis::Value;
use redis::aio::ConnectionManager;
use redis::aio::ConnectionManagerConfig;

use super::Debt;
use super::Store;
use super::StoreFuture;
use super::redis_layout;
use super::redis_layout::SWEEP_EVERY;
use super::sharding::shard_of;
use crate::batch::BatchOutcome;
use crate::batch::Decisions;
use crate::batch::Transaction;
use crate::batch::batch_allowed;
use crate::batch::check_unique;
use crate::bucket_key::BucketKey;
use crate::config::RedisConfig;
use crate::error::Error;
use crate::error::Result;
use crate::gcra;
use crate::gcra::Decision;
use crate::limit::Limit;

const NANOS: i64 = 1_000_000_000;

/// Metric: Redis calls that failed or timed out.
pub const REDIS_ERRORS: &str = "certeasy_ratelimit_redis_errors_total";

/// A Redis-backed [`Store`].
#[derive(Clone)]
pub struct RedisStore {
    shards: Vec<ConnectionManager>,
    prefix: String,
    timeout: Duration,
    margin_ms: i64,
    spend: Script,
    refund: Script,
    insert_guarded: Script,
    absorb: Script,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("shards", &self.shards.len())
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// An instant as the (seconds, nanoseconds) pair the scripts work with.
fn pair(nanos: i64) -> (i64, i64) {
    (nanos.div_euclid(NANOS), nanos.rem_euclid(NANOS))
}

impl RedisStore {
    /// Connects lazily: a server that is down at startup is an error on each call (and the
    /// limiter fails open), not a startup failure, and it is picked up when it comes back.
    /// Must be called inside a Tokio runtime.
    pub fn new(config: &RedisConfig) -> Result<Self> {
        if config.shards.is_empty() {
            return Err(Error::StoreConfig("redis.shards is empty".to_owned()));
        }
        let timeout = config.timeout.std();
        if timeout.is_zero() {
            return Err(Error::StoreConfig(
                "redis.timeout must be longer than zero".to_owned(),
            ));
        }
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(100));
        let shards = config
            .shards
            .iter()
            .map(|url| {
                let client = redis::Client::open(url.as_str())?;
                ConnectionManager::new_lazy_with_config(client, manager_config.clone())
                    .map_err(Error::from)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            shards,
            prefix: config.key_prefix.clone(),
            timeout,
            margin_ms: i64::try_from(config.expiry_margin.std().as_millis()).unwrap_or(i64::MAX),
            spend: Script::new(include_str!("spend.lua")),
            refund: Script::new(include_str!("refund.lua")),
            insert_guarded: Script::new(include_str!("insert_guarded.lua")),
            absorb: Script::new(include_str!("absorb.lua")),
        })
    }

    /// Records `key` once, on its shard, expiring after `ttl`: true the first time, false when it
    /// was already recorded. Several instances use this to share single-use values (nonces).
    pub async fn insert_once(&self, key: &str, ttl: Duration) -> Result<bool> {
        let full = format!("{}{key}", self.prefix);
        let mut con = self.shards[self.shard_for(&BucketKey::parse(key))].clone();
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let set: Option<String> = self
            .timed(async move {
                redis::cmd("SET")
                    .arg(&full)
                    .arg(1)
                    .arg("NX")
                    .arg("PX")
                    .arg(ms)
                    .query_async(&mut con)
                    .await
            })
            .await?;
        Ok(set.is_some())
    }

    /// A value every instance agrees on: the one stored under `name`, or `proposal` when none
    /// was stored yet (the first instance to start wins).
    pub async fn shared_secret(&self, name: &str, proposal: &str) -> Result<String> {
        let full = format!("{}{name}", self.prefix);
        let mut con = self.shards[self.shard_for(&BucketKey::parse(name))].clone();
        let proposal = proposal.to_owned();
        self.timed(async move {
            let _: Option<String> = redis::cmd("SET")
                .arg(&full)
                .arg(&proposal)
                .arg("NX")
                .query_async(&mut con)
                .await?;
            redis::cmd("GET").arg(&full).query_async(&mut con).await
        })
        .await
    }

    /// Records `key` once, expiring after `ttl`, but only while `guard` still holds `expected`:
    /// `Some(true)` the first time, `Some(false)` when already recorded, `None` when `guard`
    /// holds something else (or nothing). One script on `guard`'s shard, so the check and the
    /// write are atomic and every key of this ledger lives next to its guard: a Redis that
    /// restarted empty has lost both the guard and what it guarded, and says so instead of
    /// accepting a value it forgot it had seen.
    pub async fn insert_once_guarded(
        &self,
        guard: &str,
        expected: &str,
        key: &str,
        ttl: Duration,
    ) -> Result<Option<bool>> {
        let guard_key = format!("{}{guard}", self.prefix);
        let full = format!("{}{key}", self.prefix);
        let mut con = self.shards[self.shard_for(&BucketKey::parse(guard))].clone();
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let script = &self.insert_guarded;
        let expected = expected.to_owned();
        let verdict: i64 = self
            .timed(async move {
                script
                    .key(&guard_key)
                    .key(&full)
                    .arg(&expected)
                    .arg(ms)
                    .invoke_async(&mut con)
                    .await
            })
            .await?;
        Ok(match verdict {
            1 => Some(true),
            0 => Some(false),
            _ => None,
        })
    }

    /// Checks that every shard answers, for health endpoints and startup logs.
    pub async fn ping(&self) -> Result<()> {
        for shard in &self.shards {
            let mut con = shard.clone();
            let _: String = self
                .timed(async move { redis::cmd("PING").query_async(&mut con).await })
                .await?;
        }
        Ok(())
    }

    /// Where `key`'s bucket lives: its group hash and its field there (see
    /// `store/redis_layout.rs`), for operators' tools and tests that look at Redis directly.
    pub fn location(&self, key: &BucketKey) -> (String, Vec<u8>) {
        (
            redis_layout::group_key(&self.prefix, key),
            redis_layout::field(key).into_vec(),
        )
    }

    /// The Redis key of a bucket's owner in the previous layout (a hash whose fields were the
    /// owner's buckets), read so that an upgrade keeps every bucket's count.
    fn owner_key(&self, key: &BucketKey) -> String {
        let mut full = String::with_capacity(self.prefix.len() + key.owner().len());
        full.push_str(&self.prefix);
        full.push_str(key.owner());
        full
    }

    /// Adds a bucket's keys (its group, its owner's previous hash) and its first two arguments
    /// (its field in each) to a script call.
    fn locate(&self, invocation: &mut redis::ScriptInvocation<'_>, key: &BucketKey) {
        let (group, field) = self.location(key);
        invocation.key(group).key(self.owner_key(key));
        invocation.arg(field).arg(key.field());
    }

    /// Buckets are sharded by their owner, so one request's buckets share a shard.
    fn shard_for(&self, key: &BucketKey) -> usize {
        shard_of(key.owner(), self.shards.len())
    }

    /// Every call goes through here: a slow or dead server must never hold a request.
    async fn timed<T>(&self, call: impl Future<Output = redis::RedisResult<T>>) -> Result<T> {
        let result = match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => Err(Error::Redis(err)),
            Err(_) => Err(Error::Timeout(self.timeout)),
        };
        if let Err(err) = &result {
            metrics::counter!(REDIS_ERRORS).increment(1);
            tracing::warn!(error = %err, "rate-limit redis call failed");
        }
        result
    }

    /// Groups transaction indexes by shard, in shard order.
    fn by_shard(&self, batch: &[Transaction]) -> Vec<(usize, Vec<usize>)> {
        self.keys_by_shard(batch.iter().map(Transaction::key))
    }

    /// Groups the indexes of keys by shard, in shard order.
    fn keys_by_shard<'k>(
        &self,
        keys: impl Iterator<Item = &'k BucketKey>,
    ) -> Vec<(usize, Vec<usize>)> {
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, key) in keys.enumerate() {
            let shard = self.shard_for(key);
            match groups.iter_mut().find(|(s, _)| *s == shard) {
                Some((_, members)) => members.push(i),
                None => groups.push((shard, vec![i])),
            }
        }
        groups.sort_unstable_by_key(|(s, _)| *s);
        groups
    }

    /// Runs the spend script on one shard; returns per member (stored TAT, written).
    async fn spend_on_shard(
        &self,
        now: i64,
        shard: usize,
        members: &[usize],
        batch: &[Transaction],
    ) -> Result<Vec<(Option<i64>, bool)>> {
        let mut invocation = self.spend.prepare_invoke();
        let (now_s, now_n) = pair(now);
        invocation
            .arg(now_s)
            .arg(now_n)
            .arg(self.margin_ms)
            .arg(SWEEP_EVERY);
        for &i in members {
            let tx = &batch[i];
            let limit = tx.limit();
            let (ceil_s, ceil_n) = pair(now.saturating_add(limit.burst_offset()));
            // cost <= burst, so cost × EI <= burst offset, which fits in i64.
            let increment = limit
                .emission_interval()
                .saturating_mul(i64::try_from(tx.cost()).unwrap_or(i64::MAX));
            let (inc_s, inc_n) = pair(increment);
            let flags = i64::from(tx.enforced()) + 2 * i64::from(tx.spends());
            self.locate(&mut invocation, tx.key());
            invocation
                .arg(ceil_s)
                .arg(ceil_n)
                .arg(inc_s)
                .arg(inc_n)
                .arg(flags);
        }
        let mut con = self.shards[shard].clone();
        let reply: Vec<Value> = self.timed(invocation.invoke_async(&mut con)).await?;
        parse_spend_reply(&reply, members.len())
    }

    async fn refund_on_shard(
        &self,
        now: i64,
        shard: usize,
        members: &[usize],
        batch: &[Transaction],
    ) -> Result<()> {
        let mut invocation = self.refund.prepare_invoke();
        let (now_s, now_n) = pair(now);
        invocation
            .arg(now_s)
            .arg(now_n)
            .arg(self.margin_ms)
            .arg(SWEEP_EVERY);
        let mut any = false;
        for &i in members {
            let tx = &batch[i];
            if !tx.spends() {
                continue;
            }
            any = true;
            let limit = tx.limit();
            let (ceil_s, ceil_n) = pair(now.saturating_add(limit.burst_offset()));
            let decrement = limit
                .emission_interval()
                .saturating_mul(i64::try_from(tx.cost()).unwrap_or(i64::MAX));
            let (dec_s, dec_n) = pair(decrement);
            self.locate(&mut invocation, tx.key());
            invocation.arg(ceil_s).arg(ceil_n).arg(dec_s).arg(dec_n);
        }
        if !any {
            return Ok(());
        }
        let mut con = self.shards[shard].clone();
        let _: i64 = self.timed(invocation.invoke_async(&mut con)).await?;
        Ok(())
    }

    async fn spend_batch_inner(&self, now: i64, batch: &[Transaction]) -> Result<BatchOutcome> {
        check_unique(batch)?;
        let groups = self.by_shard(batch);
        let replies = join_all(
            groups
                .iter()
                .map(|(shard, members)| self.spend_on_shard(now, *shard, members, batch)),
        )
        .await;
        let mut decisions = vec![None; batch.len()];
        let mut written = vec![false; batch.len()];
        for ((_, members), reply) in groups.iter().zip(replies) {
            // Any shard failing fails the whole call; the limiter then fails open. What the other
            // shards spent stays spent: the request is allowed anyway.
            for (&i, (stored, was_written)) in members.iter().zip(reply?) {
                let tx = &batch[i];
                decisions[i] = Some(gcra::decide(now, stored, tx.limit(), tx.cost()));
                written[i] = was_written;
            }
        }
        let decisions: Decisions = decisions
            .into_iter()
            .map(|d| {
                d.ok_or_else(|| Error::UnexpectedReply("a transaction got no decision".to_owned()))
            })
            .collect::<Result<_>>()?;
        let allowed = batch_allowed(batch, &decisions);
        if !allowed && written.iter().any(|w| *w) {
            // Another shard denied: give back what the allowing shards spent, so the batch spends
            // nothing. A failure here leaves those tokens spent, which errs on the strict side.
            let spent: Vec<Transaction> = batch
                .iter()
                .zip(&written)
                .filter(|(_, w)| **w)
                .map(|(tx, _)| tx.clone())
                .collect();
            if let Err(err) = self.refund_inner(now, &spent).await {
                tracing::warn!(error = %err, "refunding a denied cross-shard batch failed");
            }
        }
        Ok(BatchOutcome { decisions, allowed })
    }

    async fn refund_inner(&self, now: i64, batch: &[Transaction]) -> Result<()> {
        let groups = self.by_shard(batch);
        let results = join_all(
            groups
                .iter()
                .map(|(shard, members)| self.refund_on_shard(now, *shard, members, batch)),
        )
        .await;
        results.into_iter().collect()
    }

    async fn reset_inner(&self, keys: &[BucketKey]) -> Result<()> {
        // One pipeline of HDELs per shard: a bucket is a field of its group's hash, and may still
        // be one of its owner's hash in the previous layout.
        let mut per_shard: Vec<redis::Pipeline> = vec![redis::pipe(); self.shards.len()];
        let mut used = vec![false; self.shards.len()];
        for key in keys {
            let shard = self.shard_for(key);
            let (group, field) = self.location(key);
            per_shard[shard]
                .cmd("HDEL")
                .arg(group)
                .arg(field)
                .ignore()
                .cmd("HDEL")
                .arg(self.owner_key(key))
                .arg(key.field())
                .ignore();
            used[shard] = true;
        }
        for (shard, pipe) in per_shard.into_iter().enumerate().filter(|(s, _)| used[*s]) {
            let mut con = self.shards[shard].clone();
            let _: () = self
                .timed(async move { pipe.query_async(&mut con).await })
                .await?;
        }
        Ok(())
    }

    /// One absorb script per shard, the shards in parallel. A shard that fails fails the call;
    /// what the others absorbed stays absorbed (the caller then keeps counting in memory, which
    /// errs on the strict side).
    async fn absorb_inner(&self, now: i64, debts: &[Debt]) -> Result<()> {
        let groups = self.keys_by_shard(debts.iter().map(|d| &d.key));
        let results = join_all(groups.iter().map(|(shard, members)| async move {
            let mut invocation = self.absorb.prepare_invoke();
            let (now_s, now_n) = pair(now);
            invocation
                .arg(now_s)
                .arg(now_n)
                .arg(self.margin_ms)
                .arg(SWEEP_EVERY);
            for &i in members {
                let debt = &debts[i];
                let (ceil_s, ceil_n) = pair(now.saturating_add(debt.limit.burst_offset()));
                let (debt_s, debt_n) = pair(debt.nanos.max(0));
                self.locate(&mut invocation, &debt.key);
                invocation.arg(ceil_s).arg(ceil_n).arg(debt_s).arg(debt_n);
            }
            let mut con = self.shards[*shard].clone();
            let _: i64 = self.timed(invocation.invoke_async(&mut con)).await?;
            Ok(())
        }))
        .await;
        results.into_iter().collect()
    }

    async fn peek_inner(&self, now: i64, key: &BucketKey, limit: &Limit) -> Result<Decision> {
        let mut con = self.shards[self.shard_for(key)].clone();
        let (group, field) = self.location(key);
        let old_key = self.owner_key(key);
        let (raw, old): (Option<String>, Option<String>) = self
            .timed(async move {
                redis::pipe()
                    .cmd("HGET")
                    .arg(group)
                    .arg(field)
                    .cmd("HGET")
                    .arg(old_key)
                    .arg(key.field())
                    .query_async(&mut con)
                    .await
            })
            .await?;
        // The later TAT counts, as in the scripts.
        let stored = [raw, old]
            .into_iter()
            .flatten()
            .filter_map(|r| r.parse::<i64>().ok())
            .max();
        Ok(gcra::decide(now, stored, limit, 0))
    }
}

fn parse_spend_reply(reply: &[Value], expected: usize) -> Result<Vec<(Option<i64>, bool)>> {
    if reply.len() != expected * 2 {
        return Err(Error::UnexpectedReply(format!(
            "{} values for {expected} keys",
            reply.len()
        )));
    }
    reply
        .chunks_exact(2)
        .map(|chunk| {
            let stored = match &chunk[0] {
                Value::BulkString(bytes) if bytes.is_empty() => None,
                Value::BulkString(bytes) => std::str::from_utf8(bytes)
                    .ok()
                    .and_then(|s| s.parse::<i64>().ok()),
                Value::SimpleString(s) => s.parse::<i64>().ok(),
                other => return Err(Error::UnexpectedReply(format!("stored TAT {other:?}"))),
            };
            let written = match &chunk[1] {
                Value::Int(n) => *n == 1,
                other => return Err(Error::UnexpectedReply(format!("written flag {other:?}"))),
            };
            Ok((stored, written))
        })
        .collect()
}

impl Store for RedisStore {
    fn spend_batch<'a>(
        &'a self,
        now: i64,
        batch: &'a [Transaction],
    ) -> StoreFuture<'a, BatchOutcome> {
        Box::pin(self.spend_batch_inner(now, batch))
    }

    fn refund<'a>(&'a self, now: i64, batch: &'a [Transaction]) -> StoreFuture<'a, ()> {
        Box::pin(self.refund_inner(now, batch))
    }

    fn reset<'a>(&'a self, keys: &'a [BucketKey]) -> StoreFuture<'a, ()> {
        Box::pin(self.reset_inner(keys))
    }

    fn peek<'a>(
        &'a self,
        now: i64,
        key: &'a BucketKey,
        limit: &'a Limit,
    ) -> StoreFuture<'a, Decision> {
        Box::pin(self.peek_inner(now, key, limit))
    }

    fn absorb<'a>(&'a self, now: i64, debts: &'a [Debt]) -> StoreFuture<'a, ()> {
        Box::pin(self.absorb_inner(now, debts))
    }

    fn is_remote(&self) -> bool {
        true
    }
}
