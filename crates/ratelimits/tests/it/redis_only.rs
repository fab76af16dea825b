//! Redis behaviour the memory store has no equivalent of: sharding, races, outages, expiry.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use ratelimits::BucketKey;
use ratelimits::Kind;
use ratelimits::Limit;
use ratelimits::LimitName;
use ratelimits::RedisStore;
use ratelimits::Store;
use ratelimits::batch::Transaction;
use ratelimits::config::Mode;
use ratelimits::nanos::unix_nanos;
use time::OffsetDateTime;

use crate::support::PrivateRedis;
use crate::support::SHARED_REDIS;
use crate::support::counter;
use crate::support::redis_config;
use crate::support::require_redis;
use crate::support::snapshot;
use crate::support::unique_prefix;

const S: i64 = 1_000_000_000;

fn spend(key: &str, limit: Limit, cost: u64) -> Transaction {
    Transaction::new(
        LimitName::GlobalPerIp,
        key.to_owned(),
        limit,
        cost,
        Kind::CheckAndSpend,
    )
    .unwrap()
}

async fn keys_on(url: &str) -> Vec<String> {
    let client = redis::Client::open(url).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut con)
        .await
        .unwrap()
}

#[tokio::test]
async fn two_shards_spread_keys_and_a_denied_batch_spends_nothing() {
    let a = PrivateRedis::start().await;
    let b = PrivateRedis::start().await;
    let store = RedisStore::new(&redis_config(vec![a.url(), b.url()], "rl:".to_owned())).unwrap();
    let now = 1_800_000_000 * S;
    let roomy = Limit::new("r", 10, 10, Duration::from_secs(60), Mode::Enforce).unwrap();
    let tight = Limit::new("t", 1, 1, Duration::from_secs(60), Mode::Enforce).unwrap();
    let keys: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
    let batch: Vec<Transaction> = keys.iter().map(|k| spend(k, roomy, 1)).collect();
    assert!(store.spend_batch(now, &batch).await.unwrap().allowed);
    let (on_a, on_b) = (keys_on(&a.url()).await.len(), keys_on(&b.url()).await.len());
    assert_eq!(on_a + on_b, 40);
    assert!(
        on_a > 5 && on_b > 5,
        "keys must spread over both shards: {on_a}/{on_b}"
    );

    // Exhaust a "tight" bucket, then spend it together with buckets on both shards: the batch is
    // denied and the other shard's spend is refunded.
    assert!(
        store
            .spend_batch(now, &[spend("tight", tight, 1)])
            .await
            .unwrap()
            .allowed
    );
    let mut batch: Vec<Transaction> = keys.iter().map(|k| spend(k, roomy, 2)).collect();
    batch.push(spend("tight", tight, 1));
    let out = store.spend_batch(now, &batch).await.unwrap();
    assert!(!out.allowed);
    for key in &keys {
        assert_eq!(
            store
                .peek(now, &key.as_str().into(), &roomy)
                .await
                .unwrap()
                .remaining,
            9,
            "{key} must not be spent"
        );
    }
    let bucket_keys: Vec<BucketKey> = keys.iter().map(|k| k.as_str().into()).collect();
    store.reset(&bucket_keys).await.unwrap();
    assert_eq!(
        keys_on(&a.url()).await.len() + keys_on(&b.url()).await.len(),
        1,
        "only tight is left"
    );
}

#[tokio::test]
async fn keys_expire_when_full_again_plus_margin() {
    require_redis(SHARED_REDIS).await;
    let store = RedisStore::new(&redis_config(
        vec![SHARED_REDIS.to_owned()],
        unique_prefix("expiry"),
    ))
    .unwrap();
    let now = unix_nanos(OffsetDateTime::now_utc());
    let l = Limit::new("e", 10, 1, Duration::from_secs(10), Mode::Enforce).unwrap();
    assert!(
        store
            .spend_batch(now, &[spend("e", l, 3)])
            .await
            .unwrap()
            .allowed
    );
    let client = redis::Client::open(SHARED_REDIS).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    // A bucket's group hash lives until its bucket is full again, plus the margin.
    let ttl: i64 = redis::cmd("PTTL")
        .arg(store.location(&"e".into()).0)
        .query_async(&mut con)
        .await
        .unwrap();
    // Full again in 30 s, plus the 60 s margin.
    assert!((89_000..=90_000).contains(&ttl), "ttl {ttl}");
    store.reset(&["e".into()]).await.unwrap();

    // An account's buckets are fields of one group hash, whose TTL covers the longest-lived one.
    let short = Limit::new(
        "order-creation",
        10,
        1,
        Duration::from_secs(10),
        Mode::Enforce,
    )
    .unwrap();
    let long = Limit::new("san-budget", 10, 1, Duration::from_secs(100), Mode::Enforce).unwrap();
    let batch = [
        spend("order-creation:42", short, 1),
        spend("san-budget:42", long, 2),
    ];
    assert!(store.spend_batch(now, &batch).await.unwrap().allowed);
    let group = store.location(&"san-budget:42".into()).0;
    assert_eq!(group, store.location(&"order-creation:42".into()).0);
    let fields: i64 = redis::cmd("HLEN")
        .arg(&group)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(fields, 2);
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&group)
        .query_async(&mut con)
        .await
        .unwrap();
    // san-budget is full again in 200 s, plus the margin.
    assert!((259_000..=260_000).contains(&ttl), "ttl {ttl}");
    store.reset(&["order-creation:42".into()]).await.unwrap();
    let fields: i64 = redis::cmd("HLEN")
        .arg(&group)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(
        fields, 1,
        "reset removes one bucket, not its owner's others"
    );
    store.reset(&["san-budget:42".into()]).await.unwrap();
}

/// 32 tasks hammer one bucket for about two seconds: the atomic script admits no more than the
/// burst plus what refilled meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_spends_never_exceed_the_rate() {
    require_redis(SHARED_REDIS).await;
    let store = Arc::new(
        RedisStore::new(&redis_config(
            vec![SHARED_REDIS.to_owned()],
            unique_prefix("hammer"),
        ))
        .unwrap(),
    );
    let (burst, per_second) = (10u64, 20u64);
    let l = Limit::new(
        "h",
        burst,
        per_second,
        Duration::from_secs(1),
        Mode::Enforce,
    )
    .unwrap();
    let admitted = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let first_now = unix_nanos(OffsetDateTime::now_utc());
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (store, admitted) = (store.clone(), admitted.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..100_000 {
                if started.elapsed() >= Duration::from_secs(2) {
                    break;
                }
                let now = unix_nanos(OffsetDateTime::now_utc());
                let out = store.spend_batch(now, &[spend("one", l, 1)]).await.unwrap();
                if out.allowed {
                    admitted.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = (unix_nanos(OffsetDateTime::now_utc()) - first_now) as f64 / S as f64;
    let admitted = admitted.load(Ordering::Relaxed);
    let bound = burst as f64 + elapsed * per_second as f64 + 1.0;
    assert!(admitted as f64 <= bound, "admitted {admitted} > {bound}");
    assert!(admitted >= burst, "admitted only {admitted}");
}

/// A dead server allows requests (fail open, counted); once it is back, limits apply again
/// without a restart. While it is down, it is asked at most once per probe interval: the
/// requests in between do not wait for it.
#[tokio::test]
async fn fail_open_while_redis_is_down_and_recover() {
    let _ = snapshot();
    let mut server = PrivateRedis::start().await;
    let port = server.port;
    let mut config = redis_config(vec![server.url()], "fo:".to_owned());
    config.timeout = acme_core::duration::ConfigDuration(Duration::from_millis(100));
    let store: Arc<dyn Store> = Arc::new(RedisStore::new(&config).unwrap());
    let mut rl = ratelimits::config::RateLimitingConfig::default();
    rl.account_creation.burst = 2;
    let limiter = ratelimits::Limiter::new(&rl, &ratelimits::Overrides::empty(), store).unwrap();
    let ip = "192.0.2.1".parse().unwrap();
    let request = [ratelimits::Request::ip(LimitName::NewAccountPerIp, ip, 1)];
    let now = OffsetDateTime::now_utc();
    assert!(limiter.check(now, &request).await.unwrap().allowed);
    assert!(limiter.check(now, &request).await.unwrap().allowed);
    assert!(!limiter.check(now, &request).await.unwrap().allowed);

    server.kill();
    let before = Instant::now();
    for _ in 0..5 {
        let verdict = limiter.check(now, &request).await.unwrap();
        assert!(verdict.allowed && verdict.fail_open, "{verdict:?}");
    }
    assert!(
        before.elapsed() < Duration::from_secs(3),
        "calls to a dead server must not hang"
    );
    let metrics = snapshot();
    assert!(
        counter(
            &metrics,
            ratelimits::limiter::DECISIONS,
            Some(("outcome", "fail_open"))
        ) >= 5
    );
    let errors = counter(&metrics, ratelimits::limiter::REDIS_ERRORS, None);
    assert!(
        (1..5).contains(&errors),
        "{errors} calls to the dead server for 5 requests"
    );

    let _server = PrivateRedis::start_on(port).await;
    let mut recovered = false;
    for _ in 0..100 {
        let verdict = limiter.check(now, &request).await.unwrap();
        if !verdict.fail_open {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(recovered, "the limiter never reconnected");
    // The new server is empty: one token was spent by the recovering call above.
    assert!(limiter.check(now, &request).await.unwrap().allowed);
    let verdict = limiter.check(now, &request).await.unwrap();
    assert!(!verdict.allowed && !verdict.fail_open, "{verdict:?}");
}

/// The nonce ledger's record-once keys expire: used nonces never accumulate in Redis.
#[tokio::test]
async fn single_use_keys_expire_with_their_ttl() {
    require_redis(SHARED_REDIS).await;
    let prefix = unique_prefix("once");
    let store =
        RedisStore::new(&redis_config(vec![SHARED_REDIS.to_owned()], prefix.clone())).unwrap();
    let guard = store.shared_secret("guard", "secret").await.unwrap();
    let ttl = Duration::from_secs(700);
    assert_eq!(
        store
            .insert_once_guarded("guard", &guard, "used:1", ttl)
            .await
            .unwrap(),
        Some(true)
    );
    let client = redis::Client::open(SHARED_REDIS).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let pttl: i64 = redis::cmd("PTTL")
        .arg(format!("{prefix}used:1"))
        .query_async(&mut con)
        .await
        .unwrap();
    assert!((1..=700_000).contains(&pttl), "pttl {pttl}");
    let _: i64 = redis::cmd("DEL")
        .arg(format!("{prefix}guard"))
        .arg(format!("{prefix}used:1"))
        .query_async(&mut con)
        .await
        .unwrap();
}
