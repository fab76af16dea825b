//! One suite, run against the memory store and against Redis on 127.0.0.1:6379.

use std::time::Duration;

use ratelimits::Error;
use ratelimits::Kind;
use ratelimits::Limit;
use ratelimits::LimitName;
use ratelimits::MemoryStore;
use ratelimits::RedisStore;
use ratelimits::Store;
use ratelimits::batch::Transaction;
use ratelimits::config::Mode;
use ratelimits::gcra;

use crate::support::SHARED_REDIS;
use crate::support::redis_config;
use crate::support::require_redis;
use crate::support::unique_prefix;

const S: i64 = 1_000_000_000;
/// An instant with non-zero nanoseconds, so the Lua (seconds, nanoseconds) arithmetic is exercised.
const T0: i64 = 1_767_225_600 * S + 123_456_789;

fn limit(burst: u64, count: u64, period: Duration) -> Limit {
    Limit::new("test", burst, count, period, Mode::Enforce).unwrap()
}

fn tx(key: &str, limit: Limit, cost: u64, kind: Kind) -> Transaction {
    Transaction::new(LimitName::GlobalPerIp, key.to_owned(), limit, cost, kind).unwrap()
}

fn spend(key: &str, limit: Limit) -> Transaction {
    tx(key, limit, 1, Kind::CheckAndSpend)
}

async fn spend_until_denied(store: &dyn Store) {
    let l = limit(3, 1, Duration::from_secs(1));
    for expected in [2, 1, 0] {
        let out = store.spend_batch(T0, &[spend("a", l)]).await.unwrap();
        assert!(out.allowed);
        assert_eq!(out.decisions[0].remaining, expected);
    }
    let out = store.spend_batch(T0, &[spend("a", l)]).await.unwrap();
    assert!(!out.allowed);
    assert_eq!(
        (out.decisions[0].retry_in, out.decisions[0].reset_in),
        (S, 3 * S)
    );
    assert_eq!(store.peek(T0, &"a".into(), &l).await.unwrap().remaining, 0);
    let out = store.spend_batch(T0 + S, &[spend("a", l)]).await.unwrap();
    assert!(out.allowed);
    assert_eq!(
        store
            .peek(T0 + 10 * S, &"a".into(), &l)
            .await
            .unwrap()
            .remaining,
        3
    );
}

async fn batch_is_all_or_nothing(store: &dyn Store) {
    let roomy = limit(10, 10, Duration::from_secs(10));
    let tight = limit(1, 1, Duration::from_secs(10));
    assert!(
        store
            .spend_batch(T0, &[spend("tight", tight)])
            .await
            .unwrap()
            .allowed
    );
    let out = store
        .spend_batch(T0, &[spend("roomy", roomy), spend("tight", tight)])
        .await
        .unwrap();
    assert!(!out.allowed);
    assert!(out.decisions[0].allowed && !out.decisions[1].allowed);
    assert_eq!(
        store
            .peek(T0, &"roomy".into(), &roomy)
            .await
            .unwrap()
            .remaining,
        10,
        "nothing spent"
    );
}

async fn check_only_and_spend_only(store: &dyn Store) {
    let l = limit(2, 1, Duration::from_secs(60));
    let out = store
        .spend_batch(T0, &[tx("c", l, 2, Kind::CheckOnly)])
        .await
        .unwrap();
    assert!(out.allowed);
    assert_eq!(
        store.peek(T0, &"c".into(), &l).await.unwrap().remaining,
        2,
        "check-only is never written"
    );

    let exhausted = limit(1, 1, Duration::from_secs(60));
    assert!(
        store
            .spend_batch(T0, &[spend("s", exhausted)])
            .await
            .unwrap()
            .allowed
    );
    let out = store
        .spend_batch(
            T0,
            &[
                spend("main", l),
                tx("s", exhausted, 1, Kind::SpendOnly),
                tx("fits", l, 1, Kind::SpendOnly),
            ],
        )
        .await
        .unwrap();
    assert!(out.allowed, "a spend-only that does not fit never denies");
    assert!(!out.decisions[1].allowed);
    assert_eq!(
        store.peek(T0, &"main".into(), &l).await.unwrap().remaining,
        1
    );
    assert_eq!(
        store.peek(T0, &"fits".into(), &l).await.unwrap().remaining,
        1,
        "a spend-only that fits is spent"
    );
}

async fn shadow_never_denies(store: &dyn Store) {
    let shadow = limit(1, 1, Duration::from_secs(60)).with_mode(Mode::Shadow);
    let l = limit(5, 5, Duration::from_secs(60));
    assert!(
        store
            .spend_batch(T0, &[spend("sh", shadow)])
            .await
            .unwrap()
            .allowed
    );
    let out = store
        .spend_batch(T0, &[spend("sh", shadow), spend("en", l)])
        .await
        .unwrap();
    assert!(out.allowed);
    assert!(!out.decisions[0].allowed);
    assert_eq!(store.peek(T0, &"en".into(), &l).await.unwrap().remaining, 4);
}

async fn refund_never_above_burst(store: &dyn Store) {
    let l = limit(5, 5, Duration::from_secs(60));
    store
        .refund(T0, &[tx("r", l, 3, Kind::CheckAndSpend)])
        .await
        .unwrap();
    assert_eq!(
        store.peek(T0, &"r".into(), &l).await.unwrap().remaining,
        5,
        "refund on a full bucket"
    );
    assert!(
        store
            .spend_batch(T0, &[tx("r", l, 2, Kind::CheckAndSpend)])
            .await
            .unwrap()
            .allowed
    );
    assert_eq!(store.peek(T0, &"r".into(), &l).await.unwrap().remaining, 3);
    store
        .refund(T0, &[tx("r", l, 1, Kind::CheckAndSpend)])
        .await
        .unwrap();
    assert_eq!(store.peek(T0, &"r".into(), &l).await.unwrap().remaining, 4);
    store
        .refund(T0, &[tx("r", l, 5, Kind::CheckAndSpend)])
        .await
        .unwrap();
    assert_eq!(store.peek(T0, &"r".into(), &l).await.unwrap().remaining, 5);
    // A check-only transaction is never refunded (it never spent).
    assert!(
        store
            .spend_batch(T0, &[tx("r", l, 5, Kind::CheckAndSpend)])
            .await
            .unwrap()
            .allowed
    );
    store
        .refund(T0, &[tx("r", l, 5, Kind::CheckOnly)])
        .await
        .unwrap();
    assert_eq!(store.peek(T0, &"r".into(), &l).await.unwrap().remaining, 0);
}

async fn reset_makes_full(store: &dyn Store) {
    let l = limit(2, 1, Duration::from_secs(3600));
    assert!(
        store
            .spend_batch(T0, &[tx("x", l, 2, Kind::CheckAndSpend)])
            .await
            .unwrap()
            .allowed
    );
    assert!(
        !store
            .spend_batch(T0, &[spend("x", l)])
            .await
            .unwrap()
            .allowed
    );
    store
        .reset(&["x".into(), "never-existed".into()])
        .await
        .unwrap();
    assert_eq!(store.peek(T0, &"x".into(), &l).await.unwrap().remaining, 2);
}

/// letsencrypt/boulder#8785 through a store: the clamped TAT is written back, so the raised limit
/// refills from "empty" instead of from the old debt.
async fn raised_limit_applies_at_once(store: &dyn Store) {
    let old = limit(5, 5, Duration::from_secs(3600));
    assert!(
        store
            .spend_batch(T0, &[tx("o", old, 5, Kind::CheckAndSpend)])
            .await
            .unwrap()
            .allowed
    );
    assert!(
        !store
            .spend_batch(T0, &[spend("o", old)])
            .await
            .unwrap()
            .allowed
    );
    let raised = limit(10, 60, Duration::from_secs(60));
    let out = store.spend_batch(T0, &[spend("o", raised)]).await.unwrap();
    assert!(!out.allowed);
    assert_eq!(out.decisions[0].retry_in, S);
    let out = store
        .spend_batch(T0 + S, &[spend("o", raised)])
        .await
        .unwrap();
    assert!(out.allowed, "{out:?}");
    assert_eq!(
        store
            .peek(T0 + 11 * S, &"o".into(), &raised)
            .await
            .unwrap()
            .remaining,
        10
    );
}

async fn duplicate_key_refused(store: &dyn Store) {
    let l = limit(2, 1, Duration::from_secs(1));
    let err = store
        .spend_batch(T0, &[spend("d", l), spend("d", l)])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::DuplicateKey(_)), "{err}");
}

/// The store's writes agree with the pure arithmetic to the nanosecond, with an emission interval
/// that does not divide a second.
async fn matches_pure_arithmetic(store: &dyn Store) {
    let l = limit(7, 3, Duration::from_secs(1));
    let mut model_tat = None;
    let mut now = T0;
    let mut step: i64 = 12_345_679;
    for i in 0..60u64 {
        let cost = i % 4;
        let expected = gcra::decide(now, model_tat, &l, cost);
        let out = store
            .spend_batch(now, &[tx("m", l, cost, Kind::CheckAndSpend)])
            .await
            .unwrap();
        assert_eq!(out.decisions[0], expected, "step {i}");
        if expected.allowed && cost > 0 {
            model_tat = Some(expected.new_tat);
        }
        step = (step * 7 + 1_000_003) % 700_000_000;
        now += step;
    }
}

macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(&super::MemoryStore::default()).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test]
                async fn $name() {
                    super::require_redis(super::SHARED_REDIS).await;
                    let config = super::redis_config(vec![super::SHARED_REDIS.to_owned()], super::unique_prefix(stringify!($name)));
                    let store = super::RedisStore::new(&config).unwrap();
                    super::$name(&store).await;
                }
            )*
        }
    };
}

suite!(
    spend_until_denied,
    batch_is_all_or_nothing,
    check_only_and_spend_only,
    shadow_never_denies,
    refund_never_above_burst,
    reset_makes_full,
    raised_limit_applies_at_once,
    duplicate_key_refused,
    matches_pure_arithmetic,
);
