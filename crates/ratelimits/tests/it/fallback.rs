//! While Redis is unreachable, the failed-validation and zombie-pausing limits are counted in the
//! instance's memory instead of failing open; when Redis answers again, memory's counts are
//! handed over to it. Each test stops a redis-server of its own.

use std::sync::Arc;
use std::time::Duration;

use metrics_util::debugging::DebugValue;
use ratelimits::BucketId;
use ratelimits::BucketKey;
use ratelimits::Kind;
use ratelimits::Limit;
use ratelimits::LimitName;
use ratelimits::Limiter;
use ratelimits::MemoryStore;
use ratelimits::Overrides;
use ratelimits::RedisStore;
use ratelimits::Request;
use ratelimits::Store;
use ratelimits::Verdict;
use ratelimits::config::Mode;
use ratelimits::config::RateLimitingConfig;
use ratelimits::nanos::unix_nanos;
use ratelimits::store::Debt;
use time::OffsetDateTime;

use crate::support::PrivateRedis;
use crate::support::SHARED_REDIS;
use crate::support::counter;
use crate::support::redis_config;
use crate::support::require_redis;
use crate::support::snapshot;
use crate::support::unique_prefix;

const S: i64 = 1_000_000_000;

fn pair(account: i64, name: &str) -> BucketId {
    BucketId::AccountIdentifier {
        account,
        identifier: name.to_owned(),
    }
}

/// What `ra::verdicts::FailedValidationHook` spends when a challenge turns invalid.
fn failed_validation(account: i64, name: &str) -> Request {
    Request::new(
        LimitName::FailedValidationPerAccountIdentifier,
        pair(account, name),
        1,
    )
    .with_kind(Kind::SpendOnly)
}

/// What `ra::limits::charge_order` asks for a new order naming `name`.
fn new_order(account: i64, name: &str) -> Vec<Request> {
    vec![
        Request::new(
            LimitName::NewOrdersPerAccount,
            BucketId::Account(account),
            1,
        ),
        Request::new(
            LimitName::SanBudgetPerAccount,
            BucketId::Account(account),
            1,
        ),
        Request::new(
            LimitName::FailedValidationPerAccountIdentifier,
            pair(account, name),
            1,
        )
        .with_kind(Kind::CheckOnly),
    ]
}

/// What `ra::verdicts::ZombieHook` spends for a failed validation.
fn consecutive_failure(account: i64, name: &str) -> Request {
    Request::new(
        LimitName::ConsecutiveFailuresPerAccountIdentifier,
        pair(account, name),
        1,
    )
}

/// The `ZombieHook`'s rule: the N-th consecutive failure empties a bucket of N and pauses.
fn pauses(verdict: &Verdict) -> bool {
    !verdict.allowed || verdict.binding.as_ref().is_some_and(|b| b.remaining == 0)
}

async fn limiter_on(server: &PrivateRedis, config: &RateLimitingConfig) -> Limiter {
    let mut redis = redis_config(vec![server.url()], "fb:".to_owned());
    redis.timeout = acme_core::duration::ConfigDuration(Duration::from_millis(100));
    let store: Arc<dyn Store> = Arc::new(RedisStore::new(&redis).unwrap());
    Limiter::new(config, &Overrides::empty(), store).unwrap()
}

/// The store-mode gauge's `mode` label with the value 1 in `metrics`, if exactly one has it.
fn mode(metrics: &[(metrics_util::CompositeKey, DebugValue)]) -> Option<String> {
    let on: Vec<String> = metrics
        .iter()
        .filter(|(key, _)| key.key().name() == ratelimits::limiter::STORE_MODE)
        .filter(|(_, value)| matches!(value, DebugValue::Gauge(v) if v.into_inner() == 1.0))
        .flat_map(|(key, _)| {
            key.key()
                .labels()
                .filter(|l| l.key() == "mode")
                .map(|l| l.value().to_owned())
                .collect::<Vec<_>>()
        })
        .collect();
    match on.as_slice() {
        [one] => Some(one.clone()),
        _ => None,
    }
}

/// With the shipped default (5 failed validations per pair per hour), the new order after the
/// fifth failure is refused while Redis is down, at the limiter, exactly as with Redis up; the
/// order and SAN limits of the same batch fail open, and another pair is not affected.
#[tokio::test]
async fn the_sixth_failed_validation_is_refused_while_redis_is_down() {
    let _ = snapshot();
    let mut server = PrivateRedis::start().await;
    let config = RateLimitingConfig::default();
    assert_eq!(
        config.failed_validation.max_per_window, 5,
        "the default this test is about"
    );
    let limiter = limiter_on(&server, &config).await;
    let now = OffsetDateTime::now_utc();
    let up = limiter
        .check(now, &new_order(1, "a.example"))
        .await
        .unwrap();
    assert!(up.allowed && !up.fallback && !up.fail_open, "{up:?}");
    assert_eq!(mode(&snapshot()).as_deref(), Some("redis"));

    server.kill();
    for failure in 1..=5 {
        let order = limiter
            .check(now, &new_order(1, "a.example"))
            .await
            .unwrap();
        assert!(
            order.allowed,
            "order {failure} comes before the {failure}th failure: {order:?}"
        );
        assert!(order.fallback && order.fail_open, "{order:?}");
        let spent = limiter
            .check(now, &[failed_validation(1, "a.example")])
            .await
            .unwrap();
        assert!(
            spent.fallback && !spent.fail_open,
            "counted, in memory: {spent:?}"
        );
    }
    assert!(limiter.in_fallback());
    let sixth = limiter
        .check(now, &new_order(1, "a.example"))
        .await
        .unwrap();
    assert!(!sixth.allowed, "{sixth:?}");
    let binding = sixth.binding.unwrap();
    assert_eq!(
        binding.name,
        LimitName::FailedValidationPerAccountIdentifier
    );
    assert_eq!(binding.key.identifier(), Some("a.example"));
    assert_eq!(binding.remaining, 0);
    assert!(
        binding.retry_in > Duration::ZERO && binding.retry_in <= Duration::from_secs(720),
        "one token returns within the window's fifth: {:?}",
        binding.retry_in
    );
    // Other pairs: another name of the account, the same name of another account.
    assert!(
        limiter
            .check(now, &new_order(1, "b.example"))
            .await
            .unwrap()
            .allowed
    );
    assert!(
        limiter
            .check(now, &new_order(2, "a.example"))
            .await
            .unwrap()
            .allowed
    );
    // Limits that fail open still do.
    let ip = "192.0.2.9".parse().unwrap();
    for _ in 0..30 {
        let global = limiter
            .check(now, &[Request::ip(LimitName::GlobalPerIp, ip, 1)])
            .await
            .unwrap();
        assert!(global.allowed && global.fail_open && !global.fallback);
    }
    // `certeasy admin ratelimit show` reads the bucket in force: memory's.
    let shown = limiter
        .show(
            now,
            LimitName::FailedValidationPerAccountIdentifier,
            &pair(1, "a.example"),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(shown.remaining, 0);
    assert_eq!(mode(&snapshot()).as_deref(), Some("memory_fallback"));
}

/// Only a remote store gets a fallback: a memory store is never unreachable.
#[tokio::test]
async fn a_memory_store_has_no_fallback() {
    let limiter = Limiter::new(
        &RateLimitingConfig::default(),
        &Overrides::empty(),
        Arc::new(MemoryStore::default()),
    )
    .unwrap();
    let verdict = limiter
        .check(
            OffsetDateTime::now_utc(),
            &[failed_validation(1, "a.example")],
        )
        .await
        .unwrap();
    assert!(!verdict.fallback && !verdict.fail_open && !limiter.in_fallback());
}

/// Zombie counting goes on in memory: the third consecutive failure (of a limit of 3) empties the
/// bucket, which is what pauses the pair; a success resets the count even though Redis cannot be
/// told.
#[tokio::test]
async fn zombie_counting_pauses_and_resets_while_redis_is_down() {
    let mut server = PrivateRedis::start().await;
    let mut config = RateLimitingConfig::default();
    config.zombie_pausing.enabled = true;
    config.zombie_pausing.max_consecutive_failures = 3;
    let limiter = limiter_on(&server, &config).await;
    let now = OffsetDateTime::now_utc();
    server.kill();

    for failure in 1..=2 {
        let verdict = limiter
            .check(now, &[consecutive_failure(5, "z.example")])
            .await
            .unwrap();
        assert!(verdict.fallback && !verdict.fail_open, "{verdict:?}");
        assert!(!pauses(&verdict), "failure {failure} does not pause");
    }
    // A success resets the count: memory's at once; Redis's cannot be, and the caller is told.
    assert!(
        limiter
            .reset(
                LimitName::ConsecutiveFailuresPerAccountIdentifier,
                &pair(5, "z.example")
            )
            .await
            .is_err()
    );
    for failure in 1..=3 {
        let verdict = limiter
            .check(now, &[consecutive_failure(5, "z.example")])
            .await
            .unwrap();
        assert_eq!(
            pauses(&verdict),
            failure == 3,
            "failure {failure}: {verdict:?}"
        );
    }
    let fourth = limiter
        .check(now, &[consecutive_failure(5, "z.example")])
        .await
        .unwrap();
    assert!(!fourth.allowed && pauses(&fourth));
}

/// When Redis answers again (here restarted empty), what memory counted is handed over: the pair
/// keeps its three failures, another instance sees them, the next two failures through Redis
/// exhaust the pair, and memory is empty.
#[tokio::test]
async fn memory_counts_are_handed_over_when_redis_returns() {
    let _ = snapshot();
    let mut server = PrivateRedis::start().await;
    let port = server.port;
    let config = RateLimitingConfig::default();
    let limiter = limiter_on(&server, &config).await;
    let now = OffsetDateTime::now_utc();
    assert!(
        !limiter
            .check(now, &[failed_validation(3, "h.example")])
            .await
            .unwrap()
            .fallback
    );
    server.kill();
    for _ in 0..3 {
        let verdict = limiter
            .check(now, &[failed_validation(3, "h.example")])
            .await
            .unwrap();
        assert!(verdict.fallback, "{verdict:?}");
    }

    let server = PrivateRedis::start_on(port).await;
    let mut back = false;
    for _ in 0..100 {
        let verdict = limiter
            .check(now, &new_order(3, "other.example"))
            .await
            .unwrap();
        if !verdict.fallback && !verdict.fail_open {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(back, "the limiter never went back to Redis");
    assert!(!limiter.in_fallback());
    let metrics = snapshot();
    assert_eq!(
        counter(&metrics, ratelimits::limiter::HANDED_OVER, None),
        1,
        "one bucket held debt"
    );
    assert_eq!(mode(&metrics).as_deref(), Some("redis"));

    // Redis restarted empty, yet holds the three failures counted in memory (the one spent
    // before the outage was lost with the old server).
    let failed = LimitName::FailedValidationPerAccountIdentifier;
    let other_instance = limiter_on(&server, &config).await;
    for instance in [&limiter, &other_instance] {
        let shown = instance
            .show(now, failed, &pair(3, "h.example"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(shown.remaining, 2, "5 - 3 counted during the outage");
    }
    for _ in 0..2 {
        let verdict = other_instance
            .check(now, &[failed_validation(3, "h.example")])
            .await
            .unwrap();
        assert!(!verdict.fallback);
    }
    let refused = limiter
        .check(now, &new_order(3, "h.example"))
        .await
        .unwrap();
    assert!(!refused.allowed && !refused.fallback, "{refused:?}");
    assert_eq!(refused.binding.unwrap().name, failed);
}

/// Both stores absorb a debt the same way: added to what the bucket holds, never beyond a
/// full debt (the burst), never refused.
#[tokio::test]
async fn absorbing_debt_adds_and_caps_at_the_burst_in_both_stores() {
    require_redis(SHARED_REDIS).await;
    let redis: Arc<dyn Store> = Arc::new(
        RedisStore::new(&redis_config(
            vec![SHARED_REDIS.to_owned()],
            unique_prefix("absorb"),
        ))
        .unwrap(),
    );
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let limit = Limit::new("f", 5, 5, Duration::from_secs(3600), Mode::Enforce).unwrap();
    let ei = limit.emission_interval();
    let now = unix_nanos(OffsetDateTime::now_utc());
    let key = BucketKey::new(
        LimitName::FailedValidationPerAccountIdentifier,
        &pair(9, "d.example"),
    )
    .unwrap();
    for store in [redis, memory] {
        let debt = |tokens: i64| Debt {
            key: key.clone(),
            limit,
            nanos: tokens * ei,
        };
        store.absorb(now, &[debt(2)]).await.unwrap();
        assert_eq!(store.peek(now, &key, &limit).await.unwrap().remaining, 3);
        store.absorb(now, &[debt(2)]).await.unwrap();
        assert_eq!(store.peek(now, &key, &limit).await.unwrap().remaining, 1);
        store.absorb(now, &[debt(4)]).await.unwrap();
        let full_debt = store.peek(now, &key, &limit).await.unwrap();
        assert_eq!(full_debt.remaining, 0);
        assert_eq!(
            full_debt.reset_in,
            limit.burst_offset(),
            "capped at the burst"
        );
        // A second later one second of debt has drained, as for any bucket.
        let later = store.peek(now + S, &key, &limit).await.unwrap();
        assert_eq!(later.reset_in, limit.burst_offset() - S);
    }
}

/// Memory hands over exactly what it holds: every bucket that is not full, with its debt.
#[test]
fn draining_memory_takes_every_live_bucket() {
    let memory = MemoryStore::default();
    let limit = Limit::new("f", 5, 5, Duration::from_secs(3600), Mode::Enforce).unwrap();
    let now = 1_000_000 * S;
    let tx = |account: i64, cost: u64| {
        ratelimits::batch::Transaction::with_key(
            LimitName::FailedValidationPerAccountIdentifier,
            BucketKey::new(
                LimitName::FailedValidationPerAccountIdentifier,
                &pair(account, "d.example"),
            )
            .unwrap(),
            limit,
            cost,
            Kind::CheckAndSpend,
        )
        .unwrap()
    };
    memory.spend_batch_now(now, &[tx(1, 2)]).unwrap();
    memory.spend_batch_now(now, &[tx(2, 1)]).unwrap();
    let mut drained = memory.drain(now);
    drained.sort_by_key(|(_, debt)| *debt);
    let ei = limit.emission_interval();
    assert_eq!(
        drained,
        [
            (tx(2, 1).key().clone(), ei),
            (tx(1, 2).key().clone(), 2 * ei)
        ]
    );
    assert!(memory.is_empty());
    assert!(memory.drain(now).is_empty());
}

/// Refuses every command of the server's default user (the limiter's) or gives them back, through
/// an admin user of the test's own: Redis keeps its data, as in a network partition, and a
/// refused command is never run later (a paused server would run what it had queued).
async fn refuse_default_user(server: &PrivateRedis, refuse: bool) {
    let admin = format!("redis://admin:pw@127.0.0.1:{}", server.port);
    let client = redis::Client::open(admin).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let _: String = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg(if refuse { "-@all" } else { "+@all" })
        .query_async(&mut con)
        .await
        .unwrap();
}

/// A success while Redis cannot be told (here: it refuses every command, keeping its data) still
/// ends the pair's consecutive failures: the reset is applied when Redis answers again, so the
/// two failures counted before do not come back with it.
#[tokio::test]
async fn a_reset_redis_missed_is_applied_when_it_answers_again() {
    let server = PrivateRedis::start().await;
    let client = redis::Client::open(server.url()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let _: String = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("admin")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("+@all")
        .query_async(&mut con)
        .await
        .unwrap();
    let mut config = RateLimitingConfig::default();
    config.zombie_pausing.enabled = true;
    config.zombie_pausing.max_consecutive_failures = 3;
    let limiter = limiter_on(&server, &config).await;
    let now = OffsetDateTime::now_utc();
    let zombie = LimitName::ConsecutiveFailuresPerAccountIdentifier;
    for _ in 0..2 {
        let verdict = limiter
            .check(now, &[consecutive_failure(8, "r.example")])
            .await
            .unwrap();
        assert!(!verdict.fallback && !pauses(&verdict), "{verdict:?}");
    }

    refuse_default_user(&server, true).await;
    assert!(limiter.reset(zombie, &pair(8, "r.example")).await.is_err());
    assert!(limiter.in_fallback());
    refuse_default_user(&server, false).await;

    let ip = "192.0.2.10".parse().unwrap();
    let mut back = false;
    for _ in 0..100 {
        let verdict = limiter
            .check(now, &[Request::ip(LimitName::GlobalPerIp, ip, 1)])
            .await
            .unwrap();
        if !verdict.fail_open {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(back, "the limiter never went back to Redis");
    let shown = limiter
        .show(now, zombie, &pair(8, "r.example"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(shown.remaining, 3, "the success's reset reached Redis");
    for failure in 1..=3 {
        let verdict = limiter
            .check(now, &[consecutive_failure(8, "r.example")])
            .await
            .unwrap();
        assert!(!verdict.fallback);
        assert_eq!(
            pauses(&verdict),
            failure == 3,
            "failure {failure}: {verdict:?}"
        );
    }
}
