//! Work stays bounded: a name whose many addresses accept connections and never answer holds at
//! most one worker per challenge, for a bounded time, while other orders keep finishing; and a
//! failed validation is counted before any client can see it.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use acme_jose::Algorithm;
use serde_json::Value;
use serde_json::json;
use testkit::poll::OnTheWay;

use crate::harness::Db;
use crate::harness::TestEnv;
use crate::raw::Raw;
use crate::raw::Reply;

/// Listeners on `addrs` (all on `port`) that accept every connection and never answer; returns
/// how many connections they accepted so far.
async fn silent_listeners(
    addrs: &[Ipv4Addr],
    port: u16,
) -> (Arc<AtomicUsize>, Vec<tokio::task::JoinHandle<()>>) {
    let accepted = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for addr in addrs {
        let listener = tokio::net::TcpListener::bind((*addr, port))
            .await
            .unwrap_or_else(|e| panic!("binding {addr}:{port}: {e}"));
        let accepted = Arc::clone(&accepted);
        tasks.push(tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                accepted.fetch_add(1, Ordering::SeqCst);
                held.push(stream);
            }
        }));
    }
    (accepted, tasks)
}

async fn new_order(raw: &Raw, name: &str) -> Reply {
    raw.post(
        &raw.url("/acme/new-order"),
        Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
    )
    .await
}

async fn status(raw: &Raw, url: &str) -> String {
    raw.post(url, None).await.body["status"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn wait_for_status(raw: &Raw, url: &str, want: &str, within: Duration) -> Value {
    raw.wait_for_status(url, want, OnTheWay::Any, within)
        .await
        .unwrap_or_else(|stuck| panic!("{stuck}"))
}

fn csr_b64(name: &str) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    let der = params.serialize_request(&key).unwrap();
    base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, der.der())
}

#[tokio::test]
async fn names_with_many_silent_addresses_do_not_stall_other_orders() {
    silent_addresses_do_not_stall_other_orders(Db::Sqlite).await;
}

#[tokio::test]
async fn names_with_many_silent_addresses_do_not_stall_other_orders_on_postgres() {
    silent_addresses_do_not_stall_other_orders(Db::Postgres).await;
}

async fn silent_addresses_do_not_stall_other_orders(db: Db) {
    let mut env = TestEnv::new(db).await;
    // Three workers and a three-second lease: without heartbeats the free worker would take over
    // a stuck job within a few seconds, and the healthy order below would wait behind it. (A
    // one-second lease made the test depend on a heartbeat, every 333 ms, never being starved for
    // a second on a loaded CI machine.) The
    // validation timeout is long, so a stuck challenge stays in flight long after the healthy
    // order is done (whether its attempt ends by the validator's deadline or the runner's
    // backstop); after one attempt it is settled.
    let body = format!(
        "  dns-servers: [\"{}\"]\n  http-port: {}\n  tls-alpn-port: {}\n  allow-loopback: true\n  timeout: 15s\n  workers: 3\n  max-attempts: 1\n  job-lease: 3s\n  retries: 0\n",
        env.dns.addr(),
        env.http.port(),
        env.tls.port()
    );
    env.section("validation", &body);
    env.start().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;

    // Two names, each with eight addresses that accept and never answer (the validator tries
    // at most two of them, each until its deadline).
    let mut stuck = Vec::new();
    let mut listeners = Vec::new();
    // Each backend's run has its own addresses, so the two tests can run at once.
    let net = if db == Db::Sqlite { 1 } else { 3 };
    for n in 0..2u8 {
        let addrs: Vec<Ipv4Addr> = (0..8u8)
            .map(|i| Ipv4Addr::new(127, 0, net + n, 2 + i))
            .collect();
        let (accepted, tasks) = silent_listeners(&addrs, env.http.port()).await;
        listeners.extend(tasks);
        let name = env.name(&format!("silent{n}"));
        env.dns.set_a_records(&name, &addrs);
        let order = new_order(&raw, &name).await;
        assert_eq!(order.status, 201, "{order:?}");
        let ch = raw.http01_challenge(&order.body).await;
        let r = raw
            .post(ch["url"].as_str().unwrap(), Some(&json!({})))
            .await;
        assert_eq!(r.body["status"], "processing", "{r:?}");
        stuck.push((order.location(), accepted));
    }
    // Both are in flight: each has connected to one of its silent addresses.
    let connected = Instant::now() + Duration::from_secs(30);
    while stuck.iter().any(|(_, a)| a.load(Ordering::SeqCst) == 0) {
        assert!(
            Instant::now() < connected,
            "the stuck validations never connected"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Two lease lengths pass: a job whose lease were not renewed would have been reclaimed.
    tokio::time::sleep(Duration::from_millis(6500)).await;

    // A healthy order validates and is issued meanwhile.
    let name = env.name("healthy");
    let order = new_order(&raw, &name).await;
    let order_url = order.location();
    let ch = raw.http01_challenge(&order.body).await;
    let token = ch["token"].as_str().unwrap();
    env.http.add(token, &raw.key_authorization(token));
    raw.post(ch["url"].as_str().unwrap(), Some(&json!({})))
        .await;
    wait_for_status(&raw, &order_url, "ready", Duration::from_secs(60)).await;
    let r = raw
        .post(
            order.body["finalize"].as_str().unwrap(),
            Some(&json!({"csr": csr_b64(&name)})),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    wait_for_status(&raw, &order_url, "valid", Duration::from_secs(60)).await;
    for (url, _) in &stuck {
        assert_eq!(
            status(&raw, url).await,
            "pending",
            "the stuck challenges were still in flight (their workers kept their leases) while \
             the healthy order finished"
        );
    }

    // The stuck ones end too: a final state, never an endless poll, and by the validator's own
    // deadline within the one attempt (a job that lost its lease would have been settled with
    // serverInternal instead).
    for (url, _) in &stuck {
        let order = wait_for_status(&raw, url, "invalid", Duration::from_secs(120)).await;
        assert_eq!(
            order["error"]["type"], "urn:ietf:params:acme:error:connection",
            "{order}"
        );
    }
    for task in listeners {
        task.abort();
    }
}

/// Room for the rounds' orders (two per round) in the per-account order quota.
const ORDERS: &str = "  whitelist: [\"127.0.0.1\"]\n  order-creation:\n    orders-per-account-per-hour: 1000\n    order-burst: 100\n    san-budget-per-account-per-hour: 1000\n";

/// Orders, fails and re-orders one fresh name per round, the instant the challenge reads
/// `invalid`; returns the re-order replies.
async fn reorder_at_once_after_failures(env: &TestEnv, rounds: usize) -> Vec<Reply> {
    let mut raw = Raw::new(env, Algorithm::Es256);
    raw.register().await;
    let mut replies = Vec::new();
    for round in 0..rounds {
        let name = env.name(&format!("race{round}"));
        // Nothing listens on this address's http port: the validation fails at once.
        env.dns.set_a(&name, Ipv4Addr::new(127, 0, 0, 3));
        let order = new_order(&raw, &name).await;
        assert_eq!(order.status, 201, "round {round}: {order:?}");
        let ch = raw.http01_challenge(&order.body).await;
        let url = ch["url"].as_str().unwrap().to_owned();
        raw.post(&url, Some(&json!({}))).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while status(&raw, &url).await != "invalid" {
            assert!(Instant::now() < deadline, "round {round}: never invalid");
        }
        replies.push(new_order(&raw, &name).await);
    }
    replies
}

#[tokio::test]
async fn a_failed_validation_is_counted_before_the_client_sees_it() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.section(
        "rate-limiting",
        &format!("{ORDERS}  failed-validation:\n    max-per-window: 1\n    window: 1h\n"),
    );
    env.start().await;
    for (round, r) in reorder_at_once_after_failures(&env, 20)
        .await
        .iter()
        .enumerate()
    {
        assert_eq!(
            r.status, 429,
            "round {round}: the failure was not yet counted: {r:?}"
        );
        assert!(
            r.body["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("failed-validation"),
            "round {round}: {r:?}"
        );
    }
}

#[tokio::test]
async fn a_zombie_pause_is_in_place_before_the_client_sees_the_failure() {
    zombie_pause_in_place_before_the_failure_is_seen(Db::Sqlite).await;
}

#[tokio::test]
async fn a_zombie_pause_is_in_place_before_the_client_sees_the_failure_on_postgres() {
    zombie_pause_in_place_before_the_failure_is_seen(Db::Postgres).await;
}

async fn zombie_pause_in_place_before_the_failure_is_seen(db: Db) {
    let mut env = TestEnv::new(db).await;
    env.section(
        "rate-limiting",
        &format!("{ORDERS}  failed-validation:\n    enabled: false\n"),
    );
    env.section(
        "zombie-pausing",
        "  max-consecutive-failures: 1\n  refill-per: 24h\n",
    );
    env.start().await;
    for (round, r) in reorder_at_once_after_failures(&env, 20)
        .await
        .iter()
        .enumerate()
    {
        assert_eq!(
            r.status, 429,
            "round {round}: the pair was not yet paused: {r:?}"
        );
        assert!(r.text.contains("/unpause?token="), "round {round}: {r:?}");
    }
}
