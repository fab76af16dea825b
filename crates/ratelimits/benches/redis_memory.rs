//! Redis memory per bucket: a million buckets (an order and a SAN-budget bucket for each of half
//! a million accounts) written into a private `redis-server`; the `used_memory` delta divided by
//! the number of buckets.
//!
//! `store` writes them through the real `RedisStore` (its group hashes, fields and TTLs);
//! `previous_layout`, the baseline, through the previous release's spend script and its one hash
//! per account (`benches/support/previous_spend.lua`, pipelined). The two alternate for
//! `BENCH_ROUNDS` rounds (default 3) and the medians are reported. `store_keys_no_ttl`
//! attributes the previous figure: one plain key per bucket without a TTL.
//!
//! Tunables: `BENCH_BUCKETS` (default 1,000,000), `BENCH_ROUNDS`. Prints `RESULT name=value`
//! lines for `scripts/bench.sh`.

// Shared with `redis_load`, which uses the parts this bench does not.
#[allow(dead_code)]
#[path = "support/redis_server.rs"]
mod redis_server;

use std::time::Duration;
use std::time::Instant;

use acme_core::duration::ConfigDuration;
use futures::StreamExt;
use ratelimits::Kind;
use ratelimits::Limit;
use ratelimits::LimitName;
use ratelimits::RedisStore;
use ratelimits::Store;
use ratelimits::batch::Transaction;
use ratelimits::config::Mode;
use ratelimits::config::RedisConfig;
use redis::Script;
use redis::Value;
use redis::aio::MultiplexedConnection;
use time::OffsetDateTime;

use crate::redis_server::BoxError;
use crate::redis_server::RedisServer;

const PREVIOUS_SPEND_LUA: &str = include_str!("support/previous_spend.lua");
const PREFIX: &str = "certeasy:rl:";
const MARGIN_MS: i64 = 60_000;
const CHUNK: u64 = 1_000;
const FIRST_ACCOUNT: u64 = 10_000_000;

/// The default limits of the two buckets a first order writes: (emission interval, burst offset,
/// cost) in nanoseconds. order-creation: 20 per hour, burst 5; san-budget: 100 per hour, burst
/// 100, three names.
const ORDERS: (i64, i64, i64) = (180_000_000_000, 900_000_000_000, 1);
const SANS: (i64, i64, i64) = (36_000_000_000, 3_600_000_000_000, 3);

struct Variant {
    label: &'static str,
    /// Key of the order-creation and san-budget buckets of an account.
    keys: fn(u64) -> [String; 2],
    /// How the two buckets of an account are written.
    write: Write,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Write {
    /// Through the previous release's spend script: one hash per account, with its TTL.
    Script,
    /// Through `RedisStore`, as the store writes them.
    Store,
    /// A plain SET of the same value, without a TTL.
    PlainSet,
}

fn store_keys(account: u64) -> [String; 2] {
    [
        format!("{PREFIX}order-creation:{account}"),
        format!("{PREFIX}san-budget:{account}"),
    ]
}

/// The textual bucket keys, without the prefix (what `RedisStore` is given).
fn bucket_keys(account: u64) -> [String; 2] {
    [
        format!("order-creation:{account}"),
        format!("san-budget:{account}"),
    ]
}

/// Writes every bucket through the store, many calls in flight on its multiplexed connection.
async fn load_store(store: &RedisStore, buckets: u64) -> Result<(), BoxError> {
    let orders = Limit::new(
        "order-creation",
        5,
        20,
        Duration::from_secs(3600),
        Mode::Enforce,
    )?;
    let sans = Limit::new(
        "san-budget",
        100,
        100,
        Duration::from_secs(3600),
        Mode::Enforce,
    )?;
    let accounts = buckets / 2;
    let results: Vec<Result<bool, String>> =
        futures::stream::iter(FIRST_ACCOUNT..FIRST_ACCOUNT + accounts)
            .map(|account| async move {
                let [order, san] = bucket_keys(account);
                let batch = [
                    Transaction::new(
                        LimitName::NewOrdersPerAccount,
                        order,
                        orders,
                        1,
                        Kind::CheckAndSpend,
                    )
                    .map_err(|e| e.to_string())?,
                    Transaction::new(
                        LimitName::SanBudgetPerAccount,
                        san,
                        sans,
                        3,
                        Kind::CheckAndSpend,
                    )
                    .map_err(|e| e.to_string())?,
                ];
                let now = now_nanos().map_err(|e| e.to_string())?;
                store
                    .spend_batch(now, &batch)
                    .await
                    .map(|outcome| outcome.allowed)
                    .map_err(|e| e.to_string())
            })
            .buffer_unordered(256)
            .collect()
            .await;
    for result in results {
        if !result? {
            return Err("a first order was denied".into());
        }
    }
    Ok(())
}

fn pair(nanos: i64) -> (i64, i64) {
    (
        nanos.div_euclid(1_000_000_000),
        nanos.rem_euclid(1_000_000_000),
    )
}

fn now_nanos() -> Result<i64, BoxError> {
    Ok(i64::try_from(
        OffsetDateTime::now_utc().unix_timestamp_nanos(),
    )?)
}

async fn load(
    con: &mut MultiplexedConnection,
    variant: &Variant,
    buckets: u64,
    sha: &str,
    server_url: &str,
) -> Result<(), BoxError> {
    let accounts = buckets / 2;
    if variant.write == Write::Store {
        let store = RedisStore::new(&RedisConfig {
            shards: vec![server_url.to_owned()],
            key_prefix: PREFIX.to_owned(),
            timeout: ConfigDuration(Duration::from_secs(30)),
            expiry_margin: ConfigDuration(Duration::from_millis(
                u64::try_from(MARGIN_MS).unwrap_or(0),
            )),
        })?;
        return load_store(&store, buckets).await;
    }
    let mut account = FIRST_ACCOUNT;
    while account < FIRST_ACCOUNT + accounts {
        let now = now_nanos()?;
        let (now_s, now_n) = pair(now);
        let mut pipe = redis::pipe();
        let end = (account + CHUNK / 2).min(FIRST_ACCOUNT + accounts);
        for a in account..end {
            for (key, (interval, offset, cost)) in (variant.keys)(a).into_iter().zip([ORDERS, SANS])
            {
                match variant.write {
                    Write::Script => {
                        let (ceil_s, ceil_n) = pair(now + offset);
                        let (inc_s, inc_n) = pair(interval * cost);
                        let (owner, field) = owner_and_field(&key);
                        pipe.cmd("EVALSHA")
                            .arg(sha)
                            .arg(1)
                            .arg(owner)
                            .arg(now_s)
                            .arg(now_n)
                            .arg(MARGIN_MS)
                            .arg(field)
                            .arg(ceil_s)
                            .arg(ceil_n)
                            .arg(inc_s)
                            .arg(inc_n)
                            .arg(3)
                            .ignore();
                    }
                    // The value the script would store: the new TAT, now + cost × interval.
                    Write::PlainSet => {
                        pipe.cmd("SET")
                            .arg(key)
                            .arg((now + interval * cost).to_string())
                            .ignore();
                    }
                    Write::Store => {}
                }
            }
        }
        let () = pipe.query_async(con).await?;
        account = end;
    }
    Ok(())
}

async fn used_memory(server: &RedisServer) -> Result<i64, BoxError> {
    Ok(server.info_field("memory", "used_memory").await?.parse()?)
}

/// `MEMORY STATS` integer fields; those of nested maps (`db.0`) are named `db.0.<field>`.
async fn memory_stats(con: &mut MultiplexedConnection) -> Result<Vec<(String, i64)>, BoxError> {
    let value: Value = redis::cmd("MEMORY").arg("STATS").query_async(con).await?;
    let mut out = Vec::new();
    flatten("", value, &mut out);
    Ok(out)
}

fn flatten(prefix: &str, value: Value, out: &mut Vec<(String, i64)>) {
    let items: Vec<Value> = match value {
        Value::Array(items) => items,
        Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
        _ => return,
    };
    for chunk in items.chunks_exact(2) {
        let name = match &chunk[0] {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            Value::SimpleString(s) => s.clone(),
            _ => continue,
        };
        let name = format!("{prefix}{name}");
        match &chunk[1] {
            Value::Int(n) => out.push((name, *n)),
            nested @ (Value::Array(_) | Value::Map(_)) => {
                flatten(&format!("{name}."), nested.clone(), out);
            }
            _ => {}
        }
    }
}

/// Loads the variant into an emptied server; returns its bytes per bucket.
async fn measure(server: &RedisServer, variant: &Variant, buckets: u64) -> Result<f64, BoxError> {
    let mut con = server.connect().await?;
    let () = redis::cmd("FLUSHALL")
        .arg("SYNC")
        .query_async(&mut con)
        .await?;
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(PREVIOUS_SPEND_LUA)
        .query_async(&mut con)
        .await?;
    if sha != Script::new(PREVIOUS_SPEND_LUA).get_hash() {
        return Err("SCRIPT LOAD returned another hash than the store uses".into());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = used_memory(server).await?;
    let started = Instant::now();
    load(&mut con, variant, buckets, &sha, &server.url()).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let after = used_memory(server).await?;
    let keys: i64 = redis::cmd("DBSIZE").query_async(&mut con).await?;
    let expiring: i64 = server
        .info_field("keyspace", "db0")
        .await?
        .split(',')
        .find_map(|kv| kv.strip_prefix("expires="))
        .ok_or("keyspace without expires")?
        .parse()?;
    let first = (variant.keys)(FIRST_ACCOUNT)[0].clone();
    let sample = &match variant.write {
        Write::Script => owner_and_field(&first).0,
        Write::Store => store_location(&bucket_keys(FIRST_ACCOUNT)[0])?,
        Write::PlainSet => first,
    };
    let sample_usage: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(sample)
        .query_async(&mut con)
        .await?;
    let encoding: String = redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(sample)
        .query_async(&mut con)
        .await?;
    let stats = memory_stats(&mut con).await?;
    let stat = |name: &str| stats.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v);
    let label = variant.label;
    let written = buckets / 2 * 2;
    let per_bucket = (after - before) as f64 / written as f64;
    println!(
        "{label}: {keys} keys ({expiring} with TTL) in {elapsed:.1} s; sample {sample:?} \
         ({} bytes of key) encoding {encoding}, MEMORY USAGE {sample_usage}",
        sample.len()
    );
    println!(
        "{label}: overhead.hashtable.main={} overhead.hashtable.expires={}",
        stat("db.0.overhead.hashtable.main"),
        stat("db.0.overhead.hashtable.expires")
    );
    println!(
        "{label}: {per_bucket:.1} bytes per bucket, hash tables {:.1} bytes per bucket",
        (stat("db.0.overhead.hashtable.main") + stat("db.0.overhead.hashtable.expires")) as f64
            / written as f64
    );
    if variant.write == Write::Store {
        let fields = count_fields(&mut con).await?;
        println!(
            "{label}: {fields} fields in {keys} group hashes, {:.1} per group",
            fields as f64 / keys as f64
        );
        if fields != i64::try_from(written)? {
            return Err(format!("{label}: expected {written} fields, found {fields}").into());
        }
        let dictionaries = count_encoding(&mut con, "hashtable").await?;
        if dictionaries > 0 {
            println!("{label}: {dictionaries} groups outgrew the listpack encoding");
        }
        return Ok(per_bucket);
    }
    let expected = if variant.write == Write::Script {
        written / 2
    } else {
        written
    };
    if keys != i64::try_from(expected)? {
        return Err(format!("{label}: expected {expected} keys, found {keys}").into());
    }
    Ok(per_bucket)
}

/// The group hash that holds `key`'s bucket.
fn store_location(key: &str) -> Result<String, BoxError> {
    let store = RedisStore::new(&RedisConfig {
        shards: vec!["redis://127.0.0.1:1".to_owned()],
        key_prefix: PREFIX.to_owned(),
        ..RedisConfig::default()
    })?;
    Ok(store.location(&key.into()).0)
}

/// Fields over every key (HLEN), scanning the keyspace.
async fn count_fields(con: &mut MultiplexedConnection) -> Result<i64, BoxError> {
    let mut total = 0;
    for key in all_keys(con).await? {
        let n: i64 = redis::cmd("HLEN").arg(&key).query_async(con).await?;
        total += n;
    }
    Ok(total)
}

/// Keys of the given `OBJECT ENCODING`.
async fn count_encoding(con: &mut MultiplexedConnection, encoding: &str) -> Result<u64, BoxError> {
    let mut count = 0;
    for key in all_keys(con).await? {
        let found: String = redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(&key)
            .query_async(con)
            .await?;
        count += u64::from(found == encoding);
    }
    Ok(count)
}

async fn all_keys(con: &mut MultiplexedConnection) -> Result<Vec<Vec<u8>>, BoxError> {
    Ok(redis::cmd("KEYS").arg("*").query_async(con).await?)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let buckets = std::env::var("BENCH_BUCKETS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000u64);
    let server = RedisServer::start().await?;
    println!(
        "redis-server {}",
        server.info_field("server", "redis_version").await?
    );
    let rounds = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3usize)
        .max(1);
    let previous = Variant {
        label: "previous_layout",
        keys: store_keys,
        write: Write::Script,
    };
    let store = Variant {
        label: "store",
        keys: store_keys,
        write: Write::Store,
    };
    let (mut before, mut after) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        println!("round {round} of {rounds}");
        before.push(measure(&server, &previous, buckets).await?);
        after.push(measure(&server, &store, buckets).await?);
    }
    println!("previous_layout rounds: {before:?}; store rounds: {after:?}");
    let (before, after) = (median(&mut before), median(&mut after));
    println!("RESULT previous_layout_bytes_per_bucket={before:.1}");
    println!("RESULT store_bytes_per_bucket={after:.1}");
    println!("RESULT store_vs_previous_layout={:.3}", after / before);
    let no_ttl = Variant {
        label: "store_keys_no_ttl",
        keys: store_keys,
        write: Write::PlainSet,
    };
    let plain = measure(&server, &no_ttl, buckets).await?;
    println!("RESULT store_keys_no_ttl_bytes_per_bucket={plain:.1}");
    Ok(())
}

/// Where the previous release kept a bucket written under `key` (`certeasy:rl:<limit>:<account>`):
/// a field of the account's hash.
fn owner_and_field(key: &str) -> (String, String) {
    let (prefix, rest) = key.split_at(
        key.find("order-creation:")
            .or_else(|| key.find("san-budget:"))
            .unwrap_or(0),
    );
    let (limit, account) = rest.split_once(':').unwrap_or((rest, ""));
    let field = if limit == "order-creation" { "o" } else { "s" };
    (format!("{prefix}a:{account}"), field.to_owned())
}
