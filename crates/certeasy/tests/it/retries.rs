//! Challenge retries end to end: a dns-01 attempt whose record may still be propagating is
//! repeated after `validation.retry-backoff` while the challenge stays `processing`; any other
//! failure (a wrong key authorization, a refused connection) ends the challenge at once; the
//! final error lists every attempt; the failed-validation limit and zombie pausing count one
//! failure per challenge, and a pair that failed lately gets no retry, so the limit bites as
//! configured and a zombie costs one attempt per failing order; a scheduled retry survives a
//! restart.

use std::sync::atomic::Ordering;
use std::time::Duration;

use acme_jose::Algorithm;
use aws_lc_rs::digest;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use serde_json::json;
use testkit::poll::OnTheWay;

use crate::failure_reports::CountingDns;
use crate::failure_reports::WrongAnswer;
use crate::harness::Db;
use crate::harness::TestEnv;
use crate::harness::free_port;
use crate::raw::Raw;

/// The validation section with retries; `http_port` lets a test point http-01 at a closed port.
fn validation_section(env: &TestEnv, http_port: u16, retries: u32, backoff: &str) -> String {
    validation_through(env.dns.addr(), env, http_port, retries, backoff)
}

/// [`validation_section`] with the resolver at `dns` (a counting forwarder, say).
fn validation_through(
    dns: std::net::SocketAddr,
    env: &TestEnv,
    http_port: u16,
    retries: u32,
    backoff: &str,
) -> String {
    format!(
        "  dns-servers: [\"{dns}\"]\n  http-port: {http_port}\n  tls-alpn-port: {}\n  allow-loopback: true\n  timeout: 2s\n  job-lease: 2s\n  retries: {retries}\n  retry-backoff: {backoff}\n",
        env.tls.port()
    )
}

fn txt_value(key_authorization: &str) -> String {
    URL_SAFE_NO_PAD.encode(digest::digest(
        &digest::SHA256,
        key_authorization.as_bytes(),
    ))
}

/// An order for `name` and the challenge of type `kind` of its authorization.
async fn order_and_challenge(raw: &Raw, name: &str, kind: &str) -> (String, Value) {
    let order = raw
        .post(
            &raw.url("/acme/new-order"),
            Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
        )
        .await;
    assert_eq!(order.status, 201, "{order:?}");
    let authz = raw
        .post(order.body["authorizations"][0].as_str().unwrap(), None)
        .await;
    let challenge = authz.body["challenges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == kind)
        .unwrap()
        .clone();
    (order.location(), challenge)
}

/// Polls `url` until its status is `want`, failing on any other final status or at `deadline`.
async fn wait_for(raw: &Raw, url: &str, want: &str, deadline: Duration, env: &TestEnv) -> Value {
    let on_the_way = OnTheWay::Only(&["processing", "pending"]);
    raw.wait_for_status(url, want, on_the_way, deadline)
        .await
        .unwrap_or_else(|stuck| panic!("{stuck}\n{}", env.server_log()))
}

async fn storage_of(env: &TestEnv) -> storage::Storage {
    let url = format!(
        "sqlite://{}",
        env.dir.path().join("data/certeasy.db").display()
    );
    storage::Storage::connect(&url).await.unwrap()
}

fn challenge_id(challenge: &Value) -> acme_core::ids::ChallengeId {
    let url = challenge["url"].as_str().unwrap();
    url.rsplit('/').next().unwrap().parse().unwrap()
}

/// The sum over its labels of `metric` lines that also contain `filter`.
async fn metric_sum(env: &TestEnv, metric: &str, filter: &str) -> f64 {
    let text = reqwest::get(format!("http://{}/metrics", env.admin_addr()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with(metric) && l.contains(filter))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Tokens left in the bucket of `limit` for `raw`'s account and `name`, as the admin API shows it.
async fn remaining(env: &TestEnv, raw: &Raw, limit: &str, name: &str) -> u64 {
    let account = raw.kid.clone().unwrap();
    let account = account.rsplit('/').next().unwrap();
    let text = reqwest::Client::new()
        .get(format!(
            "http://{}/admin/ratelimit/{limit}/{account}:{name}",
            env.admin_addr()
        ))
        .bearer_auth(env.admin_token())
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("remaining:"))
        .unwrap_or_else(|| panic!("no remaining in {text}"))
        .trim()
        .parse()
        .unwrap()
}

/// Decisions of the rate limit `limit` so far, allowed or refused.
async fn limit_decisions(env: &TestEnv, limit: &str) -> f64 {
    metric_sum(
        env,
        "certeasy_ratelimit_decisions_total",
        &format!("limit=\"{limit}\""),
    )
    .await
}

/// A started server whose http-01 port refuses connections, with two retries 1 s apart (then
/// 2 s), and a failed-validation budget and zombie threshold of `budget` each.
async fn refusing_env(budget: u32) -> TestEnv {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let section = validation_section(&env, free_port(), 2, "1s");
    env.section("validation", &section);
    env.section(
        "rate-limiting",
        &format!(
            "  whitelist: [\"127.0.0.1\"]\n  failed-validation:\n    max-per-window: {budget}\n    window: 1h\n"
        ),
    );
    env.section(
        "zombie-pausing",
        &format!("  max-consecutive-failures: {budget}\n  refill-per: 24h\n"),
    );
    env.start().await;
    env
}

/// Publishes `value` as the TXT record of `name`'s challenge, then asks for the challenge to be
/// validated and waits for its verdict: `invalid`, since `value` is not this challenge's.
async fn fail_dns01(raw: &Raw, env: &TestEnv, name: &str, value: &str) -> Value {
    let (_, challenge) = order_and_challenge(raw, name, "dns-01").await;
    env.dns.clear_txt(&format!("_acme-challenge.{name}"));
    env.dns.add_txt(&format!("_acme-challenge.{name}"), value);
    let url = challenge["url"].as_str().unwrap();
    raw.post(url, Some(&json!({}))).await;
    wait_for(raw, url, "invalid", Duration::from_secs(20), env).await
}

#[tokio::test]
async fn dns01_record_that_appears_after_the_first_attempt_is_validated_by_a_retry() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let section = validation_section(&env, env.http.port(), 3, "1s");
    env.section("validation", &section);
    env.start().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("propagating");
    let (order_url, challenge) = order_and_challenge(&raw, &name, "dns-01").await;
    let token = challenge["token"].as_str().unwrap();

    // No TXT record yet: the first attempt (run inline) fails transiently.
    let r = raw
        .post(challenge["url"].as_str().unwrap(), Some(&json!({})))
        .await;
    assert_eq!(r.body["status"], "processing", "{r:?}");
    let retry_after: i64 = r.header("retry-after").unwrap().parse().unwrap();
    // The next attempt is due 1 s after the first failed (in whole seconds, rounded up).
    assert!((1..=2).contains(&retry_after), "Retry-After {retry_after}");
    let authz = raw
        .post(
            raw.post(&order_url, None).await.body["authorizations"][0]
                .as_str()
                .unwrap(),
            None,
        )
        .await;
    assert_eq!(authz.body["status"], "pending", "{authz:?}");
    // The failed attempt is the processing challenge's error (RFC 8555 §8.2, erratum 5732).
    let shown = authz.body["challenges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "dns-01")
        .unwrap();
    assert_eq!(shown["status"], "processing", "{shown}");
    assert!(
        shown["error"]["type"]
            .as_str()
            .is_some_and(|t| t.starts_with("urn:ietf:params:acme:error:"))
            && shown["error"]["detail"]
                .as_str()
                .is_some_and(|d| d.contains("TXT")),
        "{shown}"
    );

    // The record propagates; the retry finds it, and the error goes with the valid status.
    env.dns.add_txt(
        &format!("_acme-challenge.{name}"),
        &txt_value(&raw.key_authorization(token)),
    );
    let url = challenge["url"].as_str().unwrap();
    let valid = wait_for(&raw, url, "valid", Duration::from_secs(20), &env).await;
    assert!(valid.get("error").is_none(), "{valid}");
    wait_for(&raw, &order_url, "ready", Duration::from_secs(5), &env).await;

    let attempts = storage_of(&env)
        .await
        .challenge_attempts(challenge_id(&challenge))
        .await
        .unwrap();
    assert!(!attempts.is_empty(), "the failed first attempt is recorded");
    assert_eq!(attempts[0].attempt, 1);
    assert!(
        attempts[0].problem.detail.contains("TXT"),
        "{:?}",
        attempts[0]
    );
}

#[tokio::test]
async fn http01_wrong_key_authorization_fails_at_once() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let section = validation_section(&env, env.http.port(), 3, "1s");
    env.section("validation", &section);
    env.start().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("wrong");
    let (order_url, challenge) = order_and_challenge(&raw, &name, "http-01").await;
    let token = challenge["token"].as_str().unwrap();
    env.http.add(token, &format!("{token}.not-this-account"));

    let r = raw
        .post(challenge["url"].as_str().unwrap(), Some(&json!({})))
        .await;
    assert_eq!(r.body["status"], "invalid", "{r:?}");
    let detail = r.body["error"]["detail"].as_str().unwrap();
    assert_eq!(
        r.body["error"]["type"],
        "urn:ietf:params:acme:error:incorrectResponse"
    );
    assert!(!detail.contains("attempts"), "{detail}");
    wait_for(&raw, &order_url, "invalid", Duration::from_secs(5), &env).await;
    let attempts = storage_of(&env)
        .await
        .challenge_attempts(challenge_id(&challenge))
        .await
        .unwrap();
    assert!(
        attempts.is_empty(),
        "one attempt, nothing retried: {attempts:?}"
    );
    assert_eq!(
        metric_sum(&env, "certeasy_validations_total", "outcome=\"retried\"").await,
        0.0
    );
}

/// A refused connection is the verdict at once, even with retries configured: only a dns-01
/// record may still be propagating. One spend of each bucket.
#[tokio::test]
async fn a_refused_connection_is_final_at_once_and_counts_once() {
    let env = refusing_env(5).await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("refused");
    let (order_url, challenge) = order_and_challenge(&raw, &name, "http-01").await;
    let failed_before = limit_decisions(&env, "failed-validation").await;
    let zombie_before = limit_decisions(&env, "zombie-pausing").await;

    let url = challenge["url"].as_str().unwrap();
    let r = raw.post(url, Some(&json!({}))).await;
    let invalid = if r.body["status"] == "invalid" {
        r.body.clone()
    } else {
        wait_for(&raw, url, "invalid", Duration::from_secs(10), &env).await
    };
    let detail = invalid["error"]["detail"].as_str().unwrap();
    assert_eq!(
        invalid["error"]["type"], "urn:ietf:params:acme:error:connection",
        "{invalid}"
    );
    assert!(!detail.contains("attempts"), "{detail}");
    assert_eq!(detail.matches("connection refused").count(), 1, "{detail}");
    let order = wait_for(&raw, &order_url, "invalid", Duration::from_secs(5), &env).await;
    assert!(order["error"].is_object(), "{order}");

    let attempts = storage_of(&env)
        .await
        .challenge_attempts(challenge_id(&challenge))
        .await
        .unwrap();
    assert!(attempts.is_empty(), "{attempts:?}");
    let failed_after = limit_decisions(&env, "failed-validation").await;
    let zombie_after = limit_decisions(&env, "zombie-pausing").await;
    assert_eq!(
        failed_after - failed_before,
        1.0,
        "failed-validation spends"
    );
    assert_eq!(zombie_after - zombie_before, 1.0, "zombie-pausing counts");
    assert_eq!(
        metric_sum(&env, "certeasy_validations_total", "outcome=\"retried\"").await,
        0.0
    );
}

/// A challenge failed after a retry spends one failed-validation token, not one per attempt; and
/// the failed-validation limit bites as configured even for the retried kind: with 2 failures
/// per 60 s, the second failure of the name gets no retry (its pair failed lately), so both
/// failures are counted at once and a third order is refused.
#[tokio::test]
async fn the_failed_validation_limit_bites_on_failures_of_the_retried_kind() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let section = validation_section(&env, env.http.port(), 3, "1s");
    env.section("validation", &section);
    env.section(
        "rate-limiting",
        "  whitelist: [\"127.0.0.1\"]\n  failed-validation:\n    max-per-window: 2\n    window: 60s\n",
    );
    env.section("zombie-pausing", "  enabled: false\n");
    env.start().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("limited");

    // First failure: the pair is clean, so the stale value gets its retries (1, 2 and 4 s
    // after the failures before them, all within the default 10 s window).
    let first = fail_dns01(&raw, &env, &name, "stale-value").await;
    assert_eq!(
        first["error"]["type"], "urn:ietf:params:acme:error:incorrectResponse",
        "{first}"
    );
    let detail = first["error"]["detail"].as_str().unwrap();
    assert!(detail.contains("failed after 4 attempts"), "{detail}");
    assert_eq!(
        remaining(&env, &raw, "failed-validation", &name).await,
        1,
        "one spend for four attempts"
    );

    // Second failure: the pair failed lately, so it is the verdict at its first attempt.
    let second = fail_dns01(&raw, &env, &name, "stale-value").await;
    let detail = second["error"]["detail"].as_str().unwrap();
    assert!(!detail.contains("attempts"), "no retry: {detail}");
    assert_eq!(remaining(&env, &raw, "failed-validation", &name).await, 0);
    assert_eq!(
        metric_sum(&env, "certeasy_validations_total", "outcome=\"retried\"").await,
        3.0,
        "only the first challenge was retried"
    );

    // Third order of the name: refused.
    let refused = raw
        .post(
            &raw.url("/acme/new-order"),
            Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
        )
        .await;
    assert_eq!(refused.status, 429, "{refused:?}");
    assert_eq!(
        refused.problem_type(),
        "urn:ietf:params:acme:error:rateLimited"
    );
}

/// A zombie's failing orders cost one validation attempt each, as the subscriber's servers see
/// them, until it is paused: the dns-01 kind is retried only while its pair is clean (the first
/// order), the http-01 kind never.
#[tokio::test]
async fn a_zombie_costs_one_attempt_per_failing_order() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let dns = CountingDns::start(env.dns.addr()).await;
    let target = WrongAnswer::start().await;
    // One retry, as shipped.
    let section = validation_through(dns.addr, &env, target.port, 1, "1s");
    env.section("validation", &section);
    env.section(
        "rate-limiting",
        "  whitelist: [\"127.0.0.1\"]\n  failed-validation:\n    enabled: false\n",
    );
    env.section(
        "zombie-pausing",
        "  max-consecutive-failures: 3\n  refill-per: 24h\n",
    );
    env.start().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;

    // dns-01: a stale TXT value, order after order.
    let name = env.name("zombie-dns");
    let mut queries = Vec::new();
    for _ in 0..3 {
        let before = dns.challenge_queries.load(Ordering::SeqCst);
        fail_dns01(&raw, &env, &name, "stale-value").await;
        queries.push(dns.challenge_queries.load(Ordering::SeqCst) - before);
    }
    // The first order's attempt and its one retry (after that the pair owes its bucket); then
    // one attempt per order. Before, every order cost four.
    assert_eq!(queries, [2, 1, 1], "TXT queries per failing order");
    let paused = raw
        .post(
            &raw.url("/acme/new-order"),
            Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
        )
        .await;
    assert_eq!(paused.status, 429, "paused after 3 failures: {paused:?}");

    // http-01: a wrong key authorization, never retried. Another account, so the orders stay
    // within the per-account order burst.
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("zombie-http");
    let mut requests = Vec::new();
    for _ in 0..3 {
        let before = target.requests.load(Ordering::SeqCst);
        let (_, challenge) = order_and_challenge(&raw, &name, "http-01").await;
        let url = challenge["url"].as_str().unwrap();
        raw.post(url, Some(&json!({}))).await;
        wait_for(&raw, url, "invalid", Duration::from_secs(10), &env).await;
        requests.push(target.requests.load(Ordering::SeqCst) - before);
    }
    assert_eq!(requests, [1, 1, 1], "http-01 requests per failing order");
    let paused = raw
        .post(
            &raw.url("/acme/new-order"),
            Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
        )
        .await;
    assert_eq!(paused.status, 429, "paused after 3 failures: {paused:?}");
}

#[tokio::test]
async fn a_scheduled_retry_survives_a_restart() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let section = validation_section(&env, env.http.port(), 3, "3s");
    env.section("validation", &section);
    env.spawn_binary().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("restart");
    let (order_url, challenge) = order_and_challenge(&raw, &name, "dns-01").await;
    let token = challenge["token"].as_str().unwrap();
    let url = challenge["url"].as_str().unwrap();
    let r = raw.post(url, Some(&json!({}))).await;
    assert_eq!(r.body["status"], "processing", "{r:?}");
    // Once the first attempt is recorded (its retry due 3 s later), crash. The server holds its
    // database exclusively while it runs, so the metrics say when.
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while metric_sum(&env, "certeasy_validations_total", "outcome=\"retried\"").await < 1.0 {
        assert!(
            tokio::time::Instant::now() < until,
            "the first attempt is never recorded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    env.kill_binary();
    let storage = storage_of(&env).await;
    let attempts = storage
        .challenge_attempts(challenge_id(&challenge))
        .await
        .unwrap();
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    drop(storage);

    env.dns.add_txt(
        &format!("_acme-challenge.{name}"),
        &txt_value(&raw.key_authorization(token)),
    );
    env.spawn_binary().await;
    wait_for(&raw, url, "valid", Duration::from_secs(30), &env).await;
    wait_for(&raw, &order_url, "ready", Duration::from_secs(5), &env).await;
}
