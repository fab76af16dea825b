//! Redis memory per bucket: a million buckets written through the real spend script (one key per
//! call, pipelined), with the store's key format and TTLs, into a private `redis-server`; the
//! `used_memory` delta divided by the number of buckets.
//!
//! Further variants attribute the figure: shorter keys (what a compact key format would save)
//! and the same keys written without a TTL (what the expires dictionary costs). Tunable:
//! `BENCH_BUCKETS` (default 1,000,000). Prints `RESULT name=value` lines for `scripts/bench.sh`.

// Shared with `redis_load`, which uses the parts this bench does not.
#[allow(dead_code)]
#[path = "support/redis_server.rs"]
mod redis_server;

use std::time::Duration;
use std::time::Instant;

use redis::Script;
use redis::Value;
use redis::aio::MultiplexedConnection;
use time::OffsetDateTime;

use crate::redis_server::BoxError;
use crate::redis_server::RedisServer;

const SPEND_LUA: &str = include_str!("../src/store/spend.lua");
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
    /// Through the spend script, one key per bucket, with the store's TTL.
    Script,
    /// A plain SET of the same value, without a TTL.
    PlainSet,
    /// Both buckets as fields of one hash per account (the first key), with one TTL: a possible
    /// compact layout, not what the store does.
    AccountHash,
}

fn store_keys(account: u64) -> [String; 2] {
    [
        format!("certeasy:rl:order-creation:{account}"),
        format!("certeasy:rl:san-budget:{account}"),
    ]
}

fn account_hash_keys(account: u64) -> [String; 2] {
    [format!("c:a:{account}"), String::new()]
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
) -> Result<(), BoxError> {
    let accounts = buckets / 2;
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
                    Write::AccountHash => {}
                }
            }
            if variant.write == Write::AccountHash {
                let [hash, _] = (variant.keys)(a);
                pipe.cmd("HSET")
                    .arg(&hash)
                    .arg("o")
                    .arg((now + ORDERS.0 * ORDERS.2).to_string())
                    .arg("s")
                    .arg((now + SANS.0 * SANS.2).to_string())
                    .ignore();
                // The longer of the two TTLs the script would set.
                pipe.cmd("PEXPIRE")
                    .arg(&hash)
                    .arg((SANS.0 * SANS.2) / 1_000_000 + MARGIN_MS)
                    .ignore();
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

async fn measure(server: &RedisServer, variant: &Variant, buckets: u64) -> Result<(), BoxError> {
    let mut con = server.connect().await?;
    let () = redis::cmd("FLUSHALL")
        .arg("SYNC")
        .query_async(&mut con)
        .await?;
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(SPEND_LUA)
        .query_async(&mut con)
        .await?;
    if sha != Script::new(SPEND_LUA).get_hash() {
        return Err("SCRIPT LOAD returned another hash than the store uses".into());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = used_memory(server).await?;
    let started = Instant::now();
    load(&mut con, variant, buckets, &sha).await?;
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
    let sample = &if variant.write == Write::Script {
        owner_and_field(&first).0
    } else {
        first
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
    println!("RESULT {label}_keys={keys}");
    println!("RESULT {label}_bytes_per_bucket={per_bucket:.1}");
    println!(
        "RESULT {label}_hashtable_bytes_per_bucket={:.1}",
        (stat("db.0.overhead.hashtable.main") + stat("db.0.overhead.hashtable.expires")) as f64
            / written as f64
    );
    println!("RESULT {label}_key_length={}", sample.len());
    let expected = if matches!(variant.write, Write::AccountHash | Write::Script) {
        written / 2
    } else {
        written
    };
    if keys != i64::try_from(expected)? {
        return Err(format!("{label}: expected {expected} keys, found {keys}").into());
    }
    Ok(())
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
    let variants = [
        Variant {
            label: "store_keys",
            keys: store_keys,
            write: Write::Script,
        },
        Variant {
            label: "store_keys_no_ttl",
            keys: store_keys,
            write: Write::PlainSet,
        },
        Variant {
            label: "account_hash",
            keys: account_hash_keys,
            write: Write::AccountHash,
        },
    ];
    for variant in &variants {
        measure(&server, variant, buckets).await?;
    }
    Ok(())
}

/// Where the store keeps a bucket written under `key` (`certeasy:rl:<limit>:<account>`): a field
/// of the account's hash, exactly as `RedisStore` lays buckets out.
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
