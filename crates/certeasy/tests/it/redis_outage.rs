//! A Redis outage under the real binary: the failed-validation limit and zombie pausing are
//! counted in the instance's memory and still refuse, while the other limits fail open; when
//! Redis is back the counts move to it and keep refusing. Each test stops a redis-server of its
//! own.

use std::time::Duration;

use acme_jose::Algorithm;
use serde_json::json;

use crate::harness::Db;
use crate::harness::TestEnv;
use crate::harness::free_port;
use crate::ratelimit::PrivateRedis;
use crate::raw::Raw;
use crate::raw::Reply;

const RATE_LIMITED: &str = "urn:ietf:params:acme:error:rateLimited";
const BAD_NONCE: &str = "urn:ietf:params:acme:error:badNonce";

/// Posts, again on `badNonce`: the nonce fetched just before the outage was noticed is a shared
/// one, which no instance can accept while Redis is down (the client retries, as ACME clients do).
async fn post(raw: &Raw, url: &str, payload: Option<&serde_json::Value>) -> Reply {
    for _ in 0..3 {
        let r = raw.post(url, payload).await;
        if r.status == 400 && r.body["type"] == BAD_NONCE {
            continue;
        }
        return r;
    }
    panic!("three badNonce refusals in a row for {url}");
}

async fn new_order(raw: &Raw, name: &str) -> Reply {
    post(
        raw,
        &raw.url("/acme/new-order"),
        Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
    )
    .await
}

/// Orders `name` and fails its http-01 challenge (the test responder serves no such token); waits
/// until the order is invalid, i.e. the failure is recorded and counted.
async fn fail_validation(raw: &Raw, name: &str) {
    let order = new_order(raw, name).await;
    assert_eq!(order.status, 201, "{order:?}");
    let authz = post(raw, order.body["authorizations"][0].as_str().unwrap(), None).await;
    let challenge = authz.body["challenges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "http-01")
        .unwrap()
        .clone();
    post(raw, challenge["url"].as_str().unwrap(), Some(&json!({}))).await;
    let order_url = order.location();
    for _ in 0..200 {
        if post(raw, &order_url, None).await.body["status"] == "invalid" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the order for {name} never became invalid");
}

async fn metrics(env: &TestEnv) -> String {
    reqwest::get(format!("http://{}/metrics", env.admin_addr()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Whether the store-mode gauge reads 1 for `mode`.
fn mode_is(metrics: &str, mode: &str) -> bool {
    metrics.lines().any(|l| {
        l.starts_with("certeasy_ratelimit_store_mode{")
            && l.contains(&format!("mode=\"{mode}\""))
            && l.trim_end().ends_with(" 1")
    })
}

async fn env_with_redis(port: u16, limits: &str, zombie_pausing: &str) -> TestEnv {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.section("rate-limiting", limits);
    env.section(
        "redis",
        &format!("  shards: [\"redis://127.0.0.1:{port}\"]\n  timeout: 50ms\n"),
    );
    if !zombie_pausing.is_empty() {
        env.section("zombie-pausing", zombie_pausing);
    }
    env.spawn_binary().await;
    env
}

/// With the shipped failed-validation limit (5 per pair per hour), the sixth order for a name
/// that failed five times is refused while Redis is down; the warning is logged once and the
/// gauge says memory is in use. When Redis comes back (empty), the five failures move to it and
/// the pair stays refused.
#[tokio::test]
async fn the_sixth_failed_validation_is_refused_while_redis_is_down() {
    let port = free_port();
    let redis = PrivateRedis::start_on(port);
    // Loopback is whitelisted so that the global limit is not what this test meets.
    let env = env_with_redis(port, "  whitelist: [\"127.0.0.1\"]\n", "").await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("failing");

    drop(redis);
    for _ in 0..5 {
        fail_validation(&raw, &name).await;
    }
    let sixth = new_order(&raw, &name).await;
    assert_eq!(sixth.status, 429, "{sixth:?}\n{}", env.server_log());
    assert_eq!(sixth.problem_type(), RATE_LIMITED);
    let detail = sixth.body["detail"].as_str().unwrap();
    assert!(
        detail.contains("failed-validation") && detail.contains(&name),
        "{detail}"
    );
    assert!(sixth.header("retry-after").is_some());
    // Another name of the same account is not refused; order limits fail open meanwhile.
    assert_eq!(new_order(&raw, &env.name("healthy")).await.status, 201);
    let during = metrics(&env).await;
    assert!(mode_is(&during, "memory_fallback"), "{during}");
    let log = env.server_log();
    assert_eq!(
        log.matches("rate-limit store unreachable").count(),
        1,
        "warned once per outage:\n{log}"
    );

    let _redis = PrivateRedis::start_on(port);
    let mut back = false;
    for _ in 0..100 {
        let r = new_order(&raw, &name).await;
        assert_eq!(r.status, 429, "refused throughout: {r:?}");
        if mode_is(&metrics(&env).await, "redis") {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(back, "never went back to Redis:\n{}", env.server_log());
    let after = new_order(&raw, &name).await;
    assert_eq!(after.status, 429, "the failures moved to Redis: {after:?}");
    assert!(
        env.server_log()
            .contains("rate-limit store reachable again"),
        "{}",
        env.server_log()
    );
}

/// Zombie pausing with Redis down: the third consecutive failure (of a limit of 3) pauses the
/// pair, and the next order is refused with the unpause link.
#[tokio::test]
async fn zombie_pausing_pauses_while_redis_is_down() {
    let port = free_port();
    let redis = PrivateRedis::start_on(port);
    let env = env_with_redis(
        port,
        "  whitelist: [\"127.0.0.1\"]\n  failed-validation:\n    enabled: false\n",
        "  max-consecutive-failures: 3\n  refill-per: 24h\n",
    )
    .await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("zombie");

    drop(redis);
    for _ in 0..3 {
        fail_validation(&raw, &name).await;
    }
    let refused = new_order(&raw, &name).await;
    assert_eq!(refused.status, 429, "{refused:?}\n{}", env.server_log());
    assert_eq!(refused.problem_type(), RATE_LIMITED);
    let detail = refused.body["detail"].as_str().unwrap();
    assert!(
        detail.contains("/unpause?token=") && detail.contains(&name),
        "{detail}"
    );
    // Another account is not paused for the same name.
    let mut other = Raw::new(&env, Algorithm::Es256);
    other.register().await;
    assert_eq!(new_order(&other, &name).await.status, 201);
}
