//! The Redis layout: group hashes with compact fields, their sweeping, and the upgrade from the
//! previous layout (one hash per owner), written here by the previous release's own script.

use std::time::Duration;

use ratelimits::BucketKey;
use ratelimits::Kind;
use ratelimits::Limit;
use ratelimits::LimitName;
use ratelimits::MemoryStore;
use ratelimits::RedisStore;
use ratelimits::Store;
use ratelimits::batch::Transaction;
use ratelimits::config::Mode;
use ratelimits::nanos::unix_nanos;
use redis::aio::MultiplexedConnection;
use time::OffsetDateTime;

use crate::support::SHARED_REDIS;
use crate::support::redis_config;
use crate::support::require_redis;
use crate::support::unique_prefix;

const S: i64 = 1_000_000_000;
const MARGIN_MS: i64 = 60_000;

fn tx(name: LimitName, key: &str, limit: Limit, cost: u64) -> Transaction {
    Transaction::new(name, key.to_owned(), limit, cost, Kind::CheckAndSpend).unwrap()
}

fn orders() -> Limit {
    Limit::new(
        "order-creation",
        5,
        20,
        Duration::from_secs(3600),
        Mode::Enforce,
    )
    .unwrap()
}

async fn setup(test: &str) -> (RedisStore, String, MultiplexedConnection) {
    require_redis(SHARED_REDIS).await;
    let prefix = unique_prefix(test);
    let store =
        RedisStore::new(&redis_config(vec![SHARED_REDIS.to_owned()], prefix.clone())).unwrap();
    let client = redis::Client::open(SHARED_REDIS).unwrap();
    let con = client.get_multiplexed_async_connection().await.unwrap();
    (store, prefix, con)
}

async fn stored(con: &mut MultiplexedConnection, store: &RedisStore, key: &str) -> Option<i64> {
    let (group, field) = store.location(&key.into());
    redis::cmd("HGET")
        .arg(group)
        .arg(field)
        .query_async(con)
        .await
        .unwrap()
}

/// What an instance of the previous release wrote for one bucket: its spend script on the
/// owner's hash, with the arguments that release passed.
async fn previous_spend(
    con: &mut MultiplexedConnection,
    owner_key: &str,
    field: &str,
    now: i64,
    limit: &Limit,
    cost: i64,
) {
    let script = redis::Script::new(include_str!("../../benches/support/previous_spend.lua"));
    let pair = |n: i64| (n.div_euclid(S), n.rem_euclid(S));
    let (now_s, now_n) = pair(now);
    let (ceil_s, ceil_n) = pair(now + limit.burst_offset());
    let (inc_s, inc_n) = pair(limit.emission_interval() * cost);
    let reply: Vec<redis::Value> = script
        .key(owner_key)
        .arg(now_s)
        .arg(now_n)
        .arg(MARGIN_MS)
        .arg(field)
        .arg(ceil_s)
        .arg(ceil_n)
        .arg(inc_s)
        .arg(inc_n)
        .arg(3)
        .invoke_async(con)
        .await
        .unwrap();
    assert_eq!(reply[1], redis::Value::Int(1), "the previous script spent");
}

#[tokio::test]
async fn a_bucket_is_a_compact_field_of_a_listpack_group_holding_the_exact_tat() {
    let (store, prefix, mut con) = setup("layout").await;
    let now = unix_nanos(OffsetDateTime::now_utc()) + 123;
    let limit = orders();
    let out = store
        .spend_batch(
            now,
            &[tx(
                LimitName::NewOrdersPerAccount,
                "order-creation:10000000",
                limit,
                1,
            )],
        )
        .await
        .unwrap();
    assert!(out.allowed);
    let (group, field) = store.location(&"order-creation:10000000".into());
    assert!(group.starts_with(&format!("{prefix}b:")), "{group}");
    assert_eq!(group.len(), prefix.len() + 6);
    assert_eq!(field, b"o\x80\xad\xe2\x04");
    // The TAT to the nanosecond, as the decision computed it.
    assert_eq!(
        stored(&mut con, &store, "order-creation:10000000").await,
        Some(out.decisions[0].new_tat)
    );
    let encoding: String = redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(&group)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(encoding, "listpack");
    // Nothing in the previous layout.
    let exists: i64 = redis::cmd("EXISTS")
        .arg(format!("{prefix}a:10000000"))
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(exists, 0);
    store
        .reset(&["order-creation:10000000".into()])
        .await
        .unwrap();
    assert_eq!(
        stored(&mut con, &store, "order-creation:10000000").await,
        None
    );
}

/// Redis and memory decide alike to the nanosecond: the stored TAT is exact, so Retry-After is.
#[tokio::test]
async fn retry_after_is_the_memory_stores_to_the_nanosecond() {
    let (redis_store, _prefix, _con) = setup("exact").await;
    let memory = MemoryStore::default();
    let limit = Limit::new("odd", 3, 7, Duration::from_millis(1_234_567), Mode::Enforce).unwrap();
    let now = unix_nanos(OffsetDateTime::now_utc()) + 987_654_321;
    let key = "failed-validation:77:example.com";
    for step in 0..6 {
        let at = now + step * 99_999_937;
        let batch = [tx(
            LimitName::FailedValidationPerAccountIdentifier,
            key,
            limit,
            1,
        )];
        let a = redis_store.spend_batch(at, &batch).await.unwrap();
        let b = memory.spend_batch(at, &batch).await.unwrap();
        assert_eq!(a.decisions, b.decisions, "step {step}");
        assert_eq!(a.allowed, b.allowed, "step {step}");
    }
    let at = now + 6 * 99_999_937;
    let peeked = redis_store.peek(at, &key.into(), &limit).await.unwrap();
    assert_eq!(peeked, memory.peek(at, &key.into(), &limit).await.unwrap());
    assert!(peeked.reset_in > 0);
}

/// Owners whose buckets land in one group, found by trying names.
fn same_group(store: &RedisStore, count: usize, tag: &str) -> Vec<String> {
    let target = store.location(&format!("{tag}0").as_str().into()).0;
    let mut keys = Vec::new();
    for i in 0.. {
        let key = format!("{tag}{i}");
        if store.location(&key.as_str().into()).0 == target {
            keys.push(key);
            if keys.len() == count {
                break;
            }
        }
    }
    keys
}

#[tokio::test]
async fn stale_fields_count_as_full_and_are_swept_when_the_group_grows() {
    let (store, _prefix, mut con) = setup("sweep").await;
    let keys = same_group(&store, 52, "s");
    let group = store.location(&keys[0].as_str().into()).0;
    let limit = Limit::new("s", 2, 1, Duration::from_secs(60), Mode::Enforce).unwrap();
    let then = unix_nanos(OffsetDateTime::now_utc());
    for key in &keys[..20] {
        let batch = [tx(LimitName::GlobalPerIp, key, limit, 2)];
        assert!(store.spend_batch(then, &batch).await.unwrap().allowed);
    }
    let hlen = |con: &mut MultiplexedConnection| {
        let group = group.clone();
        let mut con = con.clone();
        async move {
            redis::cmd("HLEN")
                .arg(group)
                .query_async::<i64>(&mut con)
                .await
                .unwrap()
        }
    };
    assert_eq!(hlen(&mut con).await, 20);
    // An hour later every one of them is full again (2 minutes + 1 minute margin): a stale field
    // decides as an absent one.
    let later = then + 3600 * S;
    let peeked = store
        .peek(later, &keys[0].as_str().into(), &limit)
        .await
        .unwrap();
    assert_eq!(peeked.remaining, 2);
    assert_eq!(peeked.reset_in, 0);
    // Adding fields sweeps the stale ones once the count reaches a multiple of 16: at 32 fields.
    for (i, key) in keys[20..36].iter().enumerate() {
        let batch = [tx(LimitName::GlobalPerIp, key, limit, 1)];
        assert!(store.spend_batch(later, &batch).await.unwrap().allowed);
        let expected = if 21 + i < 32 { 21 + i } else { 21 + i - 20 };
        assert_eq!(hlen(&mut con).await, expected as i64, "after {} new", i + 1);
    }
    for key in &keys[..20] {
        assert_eq!(stored(&mut con, &store, key).await, None, "{key} was swept");
    }
    // A bucket spent within the margin is live and stays.
    let recent = [tx(LimitName::GlobalPerIp, &keys[0], limit, 2)];
    assert!(store.spend_batch(later, &recent).await.unwrap().allowed);
    // 90 s on, the buckets spent at `later` are within their minute of margin: live.
    let fresh = later + 90 * S;
    for key in &keys[36..] {
        let batch = [tx(LimitName::GlobalPerIp, key, limit, 1)];
        assert!(store.spend_batch(fresh, &batch).await.unwrap().allowed);
    }
    assert!(stored(&mut con, &store, &keys[0]).await.is_some());
    assert_eq!(hlen(&mut con).await, 17 + 16, "nothing live is swept");
    let all: Vec<BucketKey> = keys.iter().map(|k| k.as_str().into()).collect();
    store.reset(&all).await.unwrap();
    assert_eq!(hlen(&mut con).await, 0, "an emptied group is gone");
}

/// A fleet upgrades while buckets are live in the previous layout: the new release reads them,
/// spends on top of them (once, not twice) and moves them into their group.
#[tokio::test]
async fn upgrade_keeps_counts_from_the_previous_layout() {
    let (store, prefix, mut con) = setup("upgrade").await;
    let limit = orders();
    let now = unix_nanos(OffsetDateTime::now_utc());
    let owner = format!("{prefix}a:42");
    // The previous release spent 3 of 5 orders and 1 SAN.
    previous_spend(&mut con, &owner, "o", now, &limit, 3).await;
    let sans = Limit::new(
        "san-budget",
        100,
        100,
        Duration::from_secs(3600),
        Mode::Enforce,
    )
    .unwrap();
    previous_spend(&mut con, &owner, "s", now, &sans, 1).await;
    let old_tat: i64 = redis::cmd("HGET")
        .arg(&owner)
        .arg("o")
        .query_async(&mut con)
        .await
        .unwrap();

    // Not full: the new release sees the 3 spent orders.
    let key: BucketKey = "order-creation:42".into();
    assert_eq!(store.peek(now, &key, &limit).await.unwrap().remaining, 2);
    let out = store
        .spend_batch(
            now,
            &[tx(
                LimitName::NewOrdersPerAccount,
                "order-creation:42",
                limit,
                1,
            )],
        )
        .await
        .unwrap();
    assert!(out.allowed);
    assert_eq!(
        out.decisions[0].remaining, 1,
        "spent once on top of the old count"
    );
    assert_eq!(
        out.decisions[0].new_tat,
        old_tat + limit.emission_interval()
    );
    // Moved: the group holds it, the owner's hash no longer does, the other bucket stays there.
    assert_eq!(
        stored(&mut con, &store, "order-creation:42").await,
        Some(old_tat + limit.emission_interval())
    );
    let old_fields: Vec<String> = redis::cmd("HKEYS")
        .arg(&owner)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(old_fields, vec!["s".to_owned()]);
    assert_eq!(store.peek(now, &key, &limit).await.unwrap().remaining, 1);

    // An instance still on the previous release spends the SAN bucket again meanwhile; a refund
    // through the new release starts from that later TAT and moves the bucket.
    previous_spend(&mut con, &owner, "s", now, &sans, 2).await;
    let refund = [tx(LimitName::SanBudgetPerAccount, "san-budget:42", sans, 1)];
    store.refund(now, &refund).await.unwrap();
    let san: BucketKey = "san-budget:42".into();
    assert_eq!(store.peek(now, &san, &sans).await.unwrap().remaining, 98);
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&owner)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(
        exists, 0,
        "the owner's hash is gone once every bucket moved"
    );

    // If the previous layout holds the later TAT (an old instance spent after the move), it wins.
    previous_spend(&mut con, &owner, "o", now, &limit, 5).await;
    let peeked = store.peek(now, &key, &limit).await.unwrap();
    assert_eq!(peeked.remaining, 0, "the old instance's later TAT counts");
    // Reset clears both layouts.
    store.reset(&[key.clone(), san]).await.unwrap();
    assert_eq!(store.peek(now, &key, &limit).await.unwrap().remaining, 5);
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&owner)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(exists, 0);
}
