//! Redis throughput of the new-order batch through the real limiter and `RedisStore`, on one and
//! two private shards, against `redis-benchmark` running the same script with the same keys and
//! arguments in the same run; and the number of script calls per request and shard, read from
//! `INFO commandstats`.
//!
//! The script itself is also compared with the previous release's (`support/previous_spend.lua`,
//! one hash per owner) under the same `redis-benchmark` load, alternating for `BENCH_ROUNDS`
//! rounds (default 3): requests per second, and the server's CPU time per request from
//! `INFO cpu`, which background load on a shared machine disturbs less.
//!
//! Every request names a fresh account, so every request is allowed and writes its two spent
//! buckets, as a first order of an account does. Tunables: `BENCH_SECS` (default 5) and
//! `BENCH_TASKS` (concurrent tasks, default 40). Prints `RESULT name=value` lines for
//! `scripts/bench.sh`.

#[path = "support/redis_server.rs"]
mod redis_server;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use acme_core::duration::ConfigDuration;
use ratelimits::BucketId;
use ratelimits::Kind;
use ratelimits::Limiter;
use ratelimits::Overrides;
use ratelimits::RedisStore;
use ratelimits::Request;
use ratelimits::config::RateLimitingConfig;
use ratelimits::config::RedisConfig;
use ratelimits::limit::Limit;
use ratelimits::limit::LimitName;
use redis::Script;
use time::OffsetDateTime;

use crate::redis_server::BoxError;
use crate::redis_server::RedisServer;

const PREFIX: &str = "certeasy:rl:";
const MARGIN_MS: i64 = 60_000;
const BATCH: u64 = 5;
const SPEND_LUA: &str = include_str!("../src/store/spend.lua");
const PREVIOUS_SPEND_LUA: &str = include_str!("support/previous_spend.lua");
/// What the store passes for `sweep_every` (`store/redis_layout.rs`).
const SWEEP_EVERY: u64 = 16;

/// Which script the `redis-benchmark` baseline runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// The store's: group hashes, compact fields, the previous owner's hash read as well.
    Current,
    /// The previous release's: one hash per owner.
    Previous,
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn redis_config(shards: &[&RedisServer]) -> RedisConfig {
    RedisConfig {
        shards: shards.iter().map(|s| s.url()).collect(),
        key_prefix: PREFIX.to_owned(),
        // Generous, so a loaded two-core machine measures throughput rather than fail-opens
        // (which are counted and reported anyway).
        timeout: ConfigDuration(Duration::from_secs(2)),
        expiry_margin: ConfigDuration(Duration::from_millis(60_000)),
    }
}

/// The batch `acme-api` builds for a new order with three names (see `charge_order`).
fn new_order_requests(account: i64) -> Vec<Request> {
    let mut requests = vec![
        Request::new(
            LimitName::NewOrdersPerAccount,
            BucketId::Account(account),
            1,
        ),
        Request::new(
            LimitName::SanBudgetPerAccount,
            BucketId::Account(account),
            3,
        ),
    ];
    for label in ["", "www.", "api."] {
        requests.push(
            Request::new(
                LimitName::FailedValidationPerAccountIdentifier,
                BucketId::AccountIdentifier {
                    account,
                    identifier: format!("{label}a{account}.example.com"),
                },
                1,
            )
            .with_kind(Kind::CheckOnly),
        );
    }
    requests
}

#[derive(Default)]
struct LoadStats {
    requests: u64,
    allowed: u64,
    fail_open: u64,
    latencies_us: Vec<u32>,
    elapsed: Duration,
}

impl LoadStats {
    fn percentile(&self, p: f64) -> f64 {
        let mut sorted = self.latencies_us.clone();
        sorted.sort_unstable();
        if sorted.is_empty() {
            return 0.0;
        }
        let index = ((sorted.len() - 1) as f64 * p).round() as usize;
        f64::from(sorted[index]) / 1000.0
    }
}

async fn load(
    limiter: Arc<Limiter>,
    accounts: Arc<AtomicI64>,
    tasks: u64,
    duration: Duration,
) -> Result<LoadStats, BoxError> {
    let started = Instant::now();
    let deadline = started + duration;
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let limiter = Arc::clone(&limiter);
        let accounts = Arc::clone(&accounts);
        handles.push(tokio::spawn(async move {
            let mut stats = LoadStats::default();
            while Instant::now() < deadline {
                let requests = new_order_requests(accounts.fetch_add(1, Ordering::Relaxed));
                let began = Instant::now();
                let verdict = limiter
                    .check(OffsetDateTime::now_utc(), &requests)
                    .await
                    .map_err(|e| e.to_string())?;
                let us = began.elapsed().as_micros();
                stats
                    .latencies_us
                    .push(u32::try_from(us).unwrap_or(u32::MAX));
                stats.requests += 1;
                stats.allowed += u64::from(verdict.allowed);
                stats.fail_open += u64::from(verdict.fail_open);
            }
            Ok::<LoadStats, String>(stats)
        }));
    }
    let mut total = LoadStats::default();
    for handle in handles {
        let stats = handle.await??;
        total.requests += stats.requests;
        total.allowed += stats.allowed;
        total.fail_open += stats.fail_open;
        total.latencies_us.extend(stats.latencies_us);
    }
    total.elapsed = started.elapsed();
    Ok(total)
}

/// Runs the load against `shards` after a warm-up (which also caches the script), and reports
/// throughput and EVALSHA calls per request.
async fn measure(
    label: &str,
    shards: &[&RedisServer],
    accounts: &Arc<AtomicI64>,
    tasks: u64,
    secs: u64,
) -> Result<LoadStats, BoxError> {
    let config = RateLimitingConfig::default();
    let store = RedisStore::new(&redis_config(shards))?;
    let limiter = Arc::new(Limiter::new(
        &config,
        &Overrides::default(),
        Arc::new(store),
    )?);
    load(
        Arc::clone(&limiter),
        Arc::clone(accounts),
        tasks,
        Duration::from_secs(1),
    )
    .await?;
    let mut before = Vec::new();
    for shard in shards {
        before.push(shard.command_calls("evalsha").await?);
    }
    let stats = load(
        limiter,
        Arc::clone(accounts),
        tasks,
        Duration::from_secs(secs),
    )
    .await?;
    let mut calls = Vec::new();
    for (shard, before) in shards.iter().zip(before) {
        calls.push(shard.command_calls("evalsha").await? - before);
    }
    let requests = stats.requests as f64;
    let seconds = stats.elapsed.as_secs_f64();
    let total_calls: u64 = calls.iter().sum();
    println!(
        "{label}: {} requests in {seconds:.2} s, {} allowed, {} fail-open; evalsha per shard {calls:?}",
        stats.requests, stats.allowed, stats.fail_open
    );
    println!("RESULT {label}_requests_per_s={:.0}", requests / seconds);
    println!(
        "RESULT {label}_decisions_per_s={:.0}",
        requests * BATCH as f64 / seconds
    );
    println!(
        "RESULT {label}_latency_ms_p50={:.3}",
        stats.percentile(0.50)
    );
    println!(
        "RESULT {label}_latency_ms_p99={:.3}",
        stats.percentile(0.99)
    );
    println!(
        "RESULT {label}_evalsha_per_request={:.4}",
        total_calls as f64 / requests
    );
    for (i, c) in calls.iter().enumerate() {
        println!(
            "RESULT {label}_evalsha_per_request_shard{i}={:.4}",
            *c as f64 / requests
        );
    }
    println!("RESULT {label}_fail_open={}", stats.fail_open);
    println!("RESULT {label}_denied={}", stats.requests - stats.allowed);
    Ok(stats)
}

/// An instant as the (seconds, nanoseconds) pair the script works with.
fn pair(nanos: i64) -> (i64, i64) {
    (
        nanos.div_euclid(1_000_000_000),
        nanos.rem_euclid(1_000_000_000),
    )
}

/// The arguments `RedisStore` passes for one bucket: ceiling, increment and flags.
fn bucket_args(now: i64, limit: &Limit, cost: u64, flags: i64) -> Vec<String> {
    let (ceil_s, ceil_n) = pair(now + limit.burst_offset());
    let (inc_s, inc_n) = pair(limit.emission_interval() * i64::try_from(cost).unwrap_or(1));
    [ceil_s, ceil_n, inc_s, inc_n, flags]
        .iter()
        .map(i64::to_string)
        .collect()
}

/// The server's CPU seconds (user + system) so far.
async fn server_cpu(server: &RedisServer) -> Result<f64, BoxError> {
    let user: f64 = server.info_field("cpu", "used_cpu_user").await?.parse()?;
    let sys: f64 = server.info_field("cpu", "used_cpu_sys").await?.parse()?;
    Ok(user + sys)
}

/// `redis-benchmark` running the same script (EVALSHA) with keys of the same format, the account
/// replaced by `__rand_int__`, and the arguments the store computes for the default limits.
/// Returns requests per second and the server's CPU microseconds per request.
async fn baseline(
    server: &RedisServer,
    requests: u64,
    tasks: u64,
    layout: Layout,
) -> Result<(f64, f64), BoxError> {
    let mut con = server.connect().await?;
    let lua = match layout {
        Layout::Current => SPEND_LUA,
        Layout::Previous => PREVIOUS_SPEND_LUA,
    };
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(lua)
        .query_async(&mut con)
        .await?;
    if sha != Script::new(lua).get_hash() {
        return Err("SCRIPT LOAD returned another hash than the store uses".into());
    }
    let config = RateLimitingConfig::default();
    let limiter = Limiter::new(
        &config,
        &Overrides::default(),
        Arc::new(ratelimits::MemoryStore::default()),
    )?;
    let limit = |name: LimitName, id: BucketId| {
        limiter
            .limit_for(name, &id)
            .ok_or_else(|| format!("{name} is disabled"))
    };
    let orders = limit(LimitName::NewOrdersPerAccount, BucketId::Account(1))?;
    let sans = limit(LimitName::SanBudgetPerAccount, BucketId::Account(1))?;
    let failed = limit(
        LimitName::FailedValidationPerAccountIdentifier,
        BucketId::AccountIdentifier {
            account: 1,
            identifier: "x".to_owned(),
        },
    )?;
    let now = OffsetDateTime::now_utc().unix_timestamp_nanos();
    let now = i64::try_from(now)?;
    let (now_s, now_n) = pair(now);
    let mut args: Vec<String> = vec!["EVALSHA".to_owned(), sha];
    let fields = [
        ("o", "o".to_owned()),
        ("s", "s".to_owned()),
        ("f", "f:example.com".to_owned()),
        ("f", "f:www.example.com".to_owned()),
        ("f", "f:api.example.com".to_owned()),
    ];
    match layout {
        Layout::Previous => {
            // An account's buckets as fields of one hash, `a:<account>`.
            args.push(BATCH.to_string());
            for _ in 0..BATCH {
                args.push(format!("{PREFIX}a:__rand_int__"));
            }
            args.extend([now_s.to_string(), now_n.to_string(), MARGIN_MS.to_string()]);
        }
        Layout::Current => {
            // Per bucket its group hash and its owner's previous hash. A field here is text of
            // about the length of the store's binary ones (which a command line cannot carry):
            // the code, the account's digits, then the identifier's part.
            args.push((2 * BATCH).to_string());
            for _ in 0..BATCH {
                args.push(format!("{PREFIX}b:__rand_int__"));
                args.push(format!("{PREFIX}a:__rand_int__"));
            }
            args.extend([
                now_s.to_string(),
                now_n.to_string(),
                MARGIN_MS.to_string(),
                SWEEP_EVERY.to_string(),
            ]);
        }
    }
    for (i, (code, old)) in fields.iter().enumerate() {
        if layout == Layout::Current {
            args.push(format!("{code}1234{}", old.get(1..).unwrap_or("")));
        }
        args.push(old.clone());
        let (limit, cost, flags) = match i {
            0 => (&orders, 1, 3),
            1 => (&sans, 3, 3),
            _ => (&failed, 1, 1),
        };
        args.extend(bucket_args(now, limit, cost, flags));
    }
    let cpu_before = server_cpu(server).await?;
    let output = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &server.port().to_string()])
        .args(["-c", &tasks.to_string(), "-n", &requests.to_string()])
        .args(["-P", "1", "-r", "100000000", "--csv"])
        .args(&args)
        .output()?;
    let cpu = server_cpu(server).await? - cpu_before;
    let text = String::from_utf8_lossy(&output.stdout);
    println!(
        "redis-benchmark -c {tasks} -n {requests} -P 1 -r 100000000 --csv EVALSHA <sha> {} ...",
        if layout == Layout::Current { 10 } else { 5 }
    );
    println!("{}", text.trim());
    let rps = text
        .lines()
        .nth(1)
        .and_then(|line| line.split(',').nth(1))
        .map(|field| field.trim_matches('"').to_owned())
        .ok_or_else(|| format!("unexpected redis-benchmark output: {text}"))?;
    let cpu_us = cpu * 1e6 / requests as f64;
    println!("server CPU {cpu_us:.1} us per request");
    Ok((rps.parse()?, cpu_us))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let secs = env_or("BENCH_SECS", 5);
    let tasks = env_or("BENCH_TASKS", 40);
    let accounts = Arc::new(AtomicI64::new(10_000_000));
    let first = RedisServer::start().await?;
    let second = RedisServer::start().await?;

    // The baseline runs just before and just after our one-shard run, so background load on a
    // shared machine shows up as a spread between the two rather than as a skewed ratio.
    let baseline_requests = secs * 15_000;
    let (base_before, _) = baseline(&first, baseline_requests, tasks, Layout::Current).await?;
    let one = measure("redis_1shard", &[&first], &accounts, tasks, secs).await?;
    let (base_after, _) = baseline(&first, baseline_requests, tasks, Layout::Current).await?;
    let two = measure("redis_2shards", &[&first, &second], &accounts, tasks, secs).await?;

    let ours_rps = one.requests as f64 / one.elapsed.as_secs_f64();
    let base_rps = (base_before + base_after) / 2.0;
    println!("RESULT redis_benchmark_requests_per_s_before={base_before:.0}");
    println!("RESULT redis_benchmark_requests_per_s_after={base_after:.0}");
    println!("RESULT redis_benchmark_requests_per_s={base_rps:.0}");
    println!(
        "RESULT redis_benchmark_decisions_per_s={:.0}",
        base_rps * BATCH as f64
    );
    println!(
        "RESULT redis_1shard_vs_redis_benchmark={:.3}",
        ours_rps / base_rps
    );
    println!(
        "RESULT redis_2shards_vs_1shard={:.3}",
        (two.requests as f64 / two.elapsed.as_secs_f64()) / ours_rps
    );

    // The script against the previous release's, alternating on a fresh server.
    let rounds = usize::try_from(env_or("BENCH_ROUNDS", 3))?.max(1);
    let third = RedisServer::start().await?;
    let (mut prev_rps, mut prev_cpu, mut cur_rps, mut cur_cpu) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (rps, cpu) = baseline(&third, baseline_requests, tasks, Layout::Previous).await?;
        prev_rps.push(rps);
        prev_cpu.push(cpu);
        let (rps, cpu) = baseline(&third, baseline_requests, tasks, Layout::Current).await?;
        cur_rps.push(rps);
        cur_cpu.push(cpu);
    }
    println!("previous script rps {prev_rps:?} cpu_us {prev_cpu:?}");
    println!("current script rps {cur_rps:?} cpu_us {cur_cpu:?}");
    let (prev_rps, prev_cpu) = (median(&mut prev_rps), median(&mut prev_cpu));
    let (cur_rps, cur_cpu) = (median(&mut cur_rps), median(&mut cur_cpu));
    println!("RESULT script_previous_layout_requests_per_s={prev_rps:.0}");
    println!("RESULT script_current_layout_requests_per_s={cur_rps:.0}");
    println!(
        "RESULT script_current_vs_previous_requests_per_s={:.3}",
        cur_rps / prev_rps
    );
    println!("RESULT script_previous_layout_server_cpu_us_per_request={prev_cpu:.1}");
    println!("RESULT script_current_layout_server_cpu_us_per_request={cur_cpu:.1}");
    println!(
        "RESULT script_current_vs_previous_server_cpu={:.3}",
        cur_cpu / prev_cpu
    );
    Ok(())
}
