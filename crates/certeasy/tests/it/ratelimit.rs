//! The limiter chain end to end: every layer is driven past its limit by a real client, which
//! sees 429 + Retry-After + RateLimit headers, waits, and succeeds.

use std::process::Command as StdCommand;
use std::time::Duration;

use acme_jose::Algorithm;
use instant_acme::ChallengeType;
use instant_acme::Identifier;
use rustls_pki_types::CertificateDer;
use serde_json::Value;
use serde_json::json;

use crate::harness::Db;
use crate::harness::TestEnv;
use crate::harness::admin;
use crate::harness::free_port;
use crate::harness::run;
use crate::raw::Raw;
use crate::raw::Reply;

const RATE_LIMITED: &str = "urn:ietf:params:acme:error:rateLimited";

/// Asserts a complete 429 and returns its Retry-After in seconds.
fn assert_limited(r: &Reply, limit: &str) -> u64 {
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.problem_type(), RATE_LIMITED, "{r:?}");
    let detail = r.body["detail"].as_str().unwrap();
    assert!(
        detail.contains(limit) && detail.contains("retry after") && detail.contains("UTC"),
        "{detail}"
    );
    let retry: u64 = r
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!(retry >= 1, "Retry-After is never 0");
    let links: Vec<String> = r
        .headers
        .get_all("link")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    assert!(
        links
            .iter()
            .any(|l| l.contains("/docs/rate-limits#") && l.contains("rel=\"help\"")),
        "{links:?}"
    );
    assert!(r.header("replay-nonce").is_some());
    let policy = r.header("ratelimit-policy").expect("RateLimit-Policy");
    assert!(policy.contains(&format!("\"{limit}\"")), "{policy}");
    let current = r.header("ratelimit").expect("RateLimit");
    assert!(current.contains("r=0"), "{current}");
    retry
}

async fn new_order(raw: &Raw, names: &[String]) -> Reply {
    let ids: Vec<Value> = names
        .iter()
        .map(|n| json!({"type": "dns", "value": n}))
        .collect();
    raw.post(
        &raw.url("/acme/new-order"),
        Some(&json!({ "identifiers": ids })),
    )
    .await
}

fn account_id(raw: &Raw) -> String {
    raw.kid
        .clone()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned()
}

async fn env_with(limits: &str) -> TestEnv {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.section("rate-limiting", limits);
    env.start().await;
    env
}

#[tokio::test]
async fn global_limit_refuses_then_recovers_and_headers_guide_clients() {
    let env = env_with("  global:\n    requests-per-minute: 60\n    burst: 3\n").await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    let created = raw.register().await;
    let policy = created.header("ratelimit-policy").unwrap();
    assert!(
        policy.contains("q="),
        "successful responses carry the policy: {policy}"
    );
    let kid = raw.kid.clone().unwrap();
    assert_eq!(raw.post(&kid, None).await.status, 200);
    assert_eq!(raw.post(&kid, None).await.status, 200);
    let refused = raw.post(&kid, None).await;
    let wait = assert_limited(&refused, "global");
    assert_eq!(
        wait, 1,
        "60 per minute: the next token is at most a second away"
    );
    tokio::time::sleep(Duration::from_secs(wait)).await;
    assert_eq!(raw.post(&kid, None).await.status, 200);
}

#[tokio::test]
async fn account_creation_is_per_ip_and_existing_accounts_are_free() {
    let env = env_with("  account-creation:\n    per-ip-per-hour: 3600\n    burst: 1\n").await;
    let mut first = Raw::new(&env, Algorithm::Es256);
    first.register().await;
    let second = Raw::new(&env, Algorithm::Es256);
    let body = json!({"termsOfServiceAgreed": true});
    let refused = second
        .post(&second.url("/acme/new-account"), Some(&body))
        .await;
    let wait = assert_limited(&refused, "account-creation");
    // Looking up an existing account costs nothing.
    let kid = first.kid.take().unwrap();
    let again = first
        .post(
            &first.url("/acme/new-account"),
            Some(&json!({"onlyReturnExisting": true})),
        )
        .await;
    assert_eq!(again.status, 200, "{again:?}");
    // So does a plain newAccount with a registered key, also while the limit is spent: the limit
    // refuses creating an account, not finding one.
    let plain = first
        .post(&first.url("/acme/new-account"), Some(&body))
        .await;
    assert_eq!(plain.status, 200, "{plain:?}");
    assert_eq!(plain.location(), kid);
    tokio::time::sleep(Duration::from_secs(wait)).await;
    // With a token back, finding the account still leaves it for the next new one.
    let plain = first
        .post(&first.url("/acme/new-account"), Some(&body))
        .await;
    assert_eq!(plain.status, 200, "{plain:?}");
    assert_eq!(
        second
            .post(&second.url("/acme/new-account"), Some(&body))
            .await
            .status,
        201
    );
}

#[tokio::test]
async fn order_creation_and_san_budget_are_independent_quotas() {
    let env = env_with(
        "  order-creation:\n    orders-per-account-per-hour: 3600\n    order-burst: 2\n    san-budget-per-account-per-hour: 3600\n",
    )
    .await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    assert_eq!(new_order(&raw, &[env.name("o1")]).await.status, 201);
    assert_eq!(new_order(&raw, &[env.name("o2")]).await.status, 201);
    let refused = new_order(&raw, &[env.name("o3")]).await;
    let wait = assert_limited(&refused, "order-creation");
    tokio::time::sleep(Duration::from_secs(wait)).await;
    assert_eq!(new_order(&raw, &[env.name("o4")]).await.status, 201);

    let env = env_with(
        "  order-creation:\n    orders-per-account-per-hour: 3600\n    order-burst: 10\n    san-budget-per-account-per-hour: 4\n",
    )
    .await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let three: Vec<String> = (0..3).map(|i| env.name(&format!("s{i}"))).collect();
    assert_eq!(new_order(&raw, &three).await.status, 201);
    let refused = new_order(&raw, &[env.name("s3"), env.name("s4")]).await;
    assert_limited(&refused, "san-budget");
    let five: Vec<String> = (0..5).map(|i| env.name(&format!("big{i}"))).collect();
    let too_big = new_order(&raw, &five).await;
    assert_eq!(
        too_big.problem_type(),
        "urn:ietf:params:acme:error:rejectedIdentifier",
        "{too_big:?}"
    );
}

#[tokio::test]
async fn lego_meets_the_order_limit_waits_and_succeeds() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let port = free_port();
    env.challenge_ports(port, env.tls.port());
    env.section(
        "rate-limiting",
        "  whitelist: [\"127.0.0.1\"]\n  order-creation:\n    orders-per-account-per-hour: 360\n    order-burst: 1\n",
    );
    env.spawn_binary().await;
    let name = env.name("lego-limited");
    let path = env.dir.path().join("lego");
    let lego = |extra: &[&str]| {
        let mut cmd = tokio::process::Command::new("lego");
        cmd.env("LEGO_CA_CERTIFICATES", &env.root_path)
            .arg("--server")
            .arg(env.directory_url())
            .args(["--accept-tos", "--email", "lego@example.com", "--path"])
            .arg(&path)
            .args([
                "--domains",
                &name,
                "--http",
                "--http.port",
                &format!("127.0.0.1:{port}"),
            ])
            .args(extra);
        cmd
    };
    let (ok, out) = run(lego(&["run"]), Duration::from_secs(120)).await;
    assert!(ok, "{out}\n{}", env.server_log());
    let (ok, out) = run(
        lego(&["renew", "--days", "400", "--no-random-sleep"]),
        Duration::from_secs(120),
    )
    .await;
    assert!(!ok, "the second order within 10 s must be refused:\n{out}");
    assert!(
        out.contains("rateLimited") && out.contains("order-creation"),
        "{out}"
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (ok, out) = run(
        lego(&["renew", "--days", "400", "--no-random-sleep"]),
        Duration::from_secs(120),
    )
    .await;
    assert!(
        ok,
        "after waiting, lego succeeds:\n{out}\n{}",
        env.server_log()
    );
}

#[tokio::test]
async fn duplicate_certificate_limit_counts_sets_and_revocation_frees_a_slot() {
    let env = env_with("  whitelist: [\"127.0.0.1\"]\n  duplicate-certificate:\n    max-per-window: 1\n    window: 1h\n").await;
    let account = env.account().await;
    let name = env.name("dup");
    let ids = [Identifier::Dns(name.clone())];
    let chain = crate::flow::issue(&env, &account, &ids, ChallengeType::Http01).await;
    let Err(err) = account.new_order(&instant_acme::NewOrder::new(&ids)).await else {
        panic!("the second order for the same set must be refused");
    };
    let instant_acme::Error::Api(problem) = err else {
        panic!("{err:?}")
    };
    assert_eq!(problem.r#type.as_deref(), Some(RATE_LIMITED));
    assert!(
        problem
            .detail
            .as_deref()
            .unwrap()
            .contains("duplicate-certificate"),
        "{problem:?}"
    );
    // The same names in another order and case are the same set; a superset is another set.
    let other = [Identifier::Dns(name.to_uppercase())];
    assert!(
        account
            .new_order(&instant_acme::NewOrder::new(&other))
            .await
            .is_err()
    );
    let superset = [
        Identifier::Dns(name.clone()),
        Identifier::Dns(env.name("dup2")),
    ];
    assert!(
        account
            .new_order(&instant_acme::NewOrder::new(&superset))
            .await
            .is_ok()
    );
    // Revoking frees the slot.
    let leaf = CertificateDer::from(crate::certcheck::pem_ders(&chain).remove(0));
    account
        .revoke(&instant_acme::RevocationRequest {
            certificate: &leaf,
            reason: None,
        })
        .await
        .unwrap();
    assert!(
        account
            .new_order(&instant_acme::NewOrder::new(&ids))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn duplicate_limit_retry_after_is_when_the_oldest_leaves_the_window() {
    let env = env_with("  whitelist: [\"127.0.0.1\"]\n  duplicate-certificate:\n    max-per-window: 1\n    window: 1h\n").await;
    let account = env.account().await;
    let name = env.name("dupwait");
    crate::flow::issue(
        &env,
        &account,
        &[Identifier::Dns(name.clone())],
        ChallengeType::Http01,
    )
    .await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    // Another account is not affected by this account's certificates.
    assert_eq!(
        new_order(&raw, std::slice::from_ref(&name)).await.status,
        201
    );
}

#[tokio::test]
async fn failed_validations_refuse_the_pair_until_a_token_returns() {
    let env = env_with(
        "  whitelist: [\"127.0.0.1\"]\n  failed-validation:\n    max-per-window: 2\n    window: 10s\n",
    )
    .await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("failing");
    for _ in 0..2 {
        let order = new_order(&raw, std::slice::from_ref(&name)).await;
        assert_eq!(order.status, 201, "{order:?}");
        let authz = raw
            .post(order.body["authorizations"][0].as_str().unwrap(), None)
            .await;
        let ch = authz.body["challenges"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "http-01")
            .unwrap()
            .clone();
        raw.post(ch["url"].as_str().unwrap(), Some(&json!({})))
            .await;
        let order_url = order.location();
        for _ in 0..100 {
            if raw.post(&order_url, None).await.body["status"] == "invalid" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let mut refused = None;
    for _ in 0..40 {
        let r = new_order(&raw, std::slice::from_ref(&name)).await;
        if r.status == 429 {
            refused = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let refused = refused.expect("the third order for a twice-failed name is refused");
    let wait = assert_limited(&refused, "failed-validation");
    assert!(refused.body["detail"].as_str().unwrap().contains(&name));
    // The wildcard and other names are separate pairs.
    assert_eq!(new_order(&raw, &[format!("*.{name}")]).await.status, 201);
    assert_eq!(new_order(&raw, &[env.name("healthy")]).await.status, 201);
    // Another account is not affected.
    let mut other = Raw::new(&env, Algorithm::Es256);
    other.register().await;
    assert_eq!(
        new_order(&other, std::slice::from_ref(&name)).await.status,
        201
    );
    tokio::time::sleep(Duration::from_secs(wait)).await;
    assert_eq!(
        new_order(&raw, std::slice::from_ref(&name)).await.status,
        201
    );
}

#[tokio::test]
async fn pending_authorizations_cap_and_expiry() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.section(
        "rate-limiting",
        "  whitelist: [\"127.0.0.1\"]\n  pending-authorizations:\n    max: 2\n",
    );
    env.section("acme", "  authorization-lifetime: 3s\n");
    env.start().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    assert_eq!(new_order(&raw, &[env.name("p1")]).await.status, 201);
    assert_eq!(new_order(&raw, &[env.name("p2")]).await.status, 201);
    let refused = new_order(&raw, &[env.name("p3")]).await;
    let wait = assert_limited(&refused, "pending-authorizations");
    assert!(
        wait <= 3,
        "Retry-After is when the soonest pending authorization expires: {wait}"
    );
    tokio::time::sleep(Duration::from_secs(wait + 1)).await;
    assert_eq!(new_order(&raw, &[env.name("p4")]).await.status, 201);
}

#[tokio::test]
async fn fifty_parallel_orders_never_exceed_the_pending_cap() {
    for db in [Db::Sqlite, Db::Postgres] {
        let mut env = TestEnv::new(db).await;
        env.section(
            "rate-limiting",
            "  whitelist: [\"127.0.0.1\"]\n  order-creation:\n    enabled: false\n  pending-authorizations:\n    max: 10\n",
        );
        // Fifty clients on 127.0.0.1 may open a connection each for their nonce and their
        // order at once: more than `server.max-connections-per-ip` lets one address hold, which
        // would close some handshakes. What is tested here is the pending cap, not that one.
        let server = format!("{}  max-connections-per-ip: 1000\n", env.sections["server"]);
        env.section("server", &server);
        env.start().await;
        let mut raw = Raw::new(&env, Algorithm::Es256);
        raw.register().await;
        let raw = std::sync::Arc::new(raw);
        let mut tasks = Vec::new();
        for i in 0..50 {
            let raw = std::sync::Arc::clone(&raw);
            let name = env.name(&format!("par{i}"));
            tasks.push(tokio::spawn(async move {
                new_order(&raw, &[name]).await.status
            }));
        }
        let mut created = 0;
        let mut limited = 0;
        for t in tasks {
            match t.await.unwrap() {
                201 => created += 1,
                429 => limited += 1,
                other => panic!("unexpected status {other}"),
            }
        }
        assert_eq!((created, limited), (10, 40), "{db:?}");
    }
}

#[tokio::test]
async fn whitelist_bypasses_only_ip_limits() {
    let env = env_with(
        "  whitelist: [\"127.0.0.0/8\"]\n  global:\n    requests-per-minute: 1\n    burst: 1\n  order-creation:\n    orders-per-account-per-hour: 1\n    order-burst: 1\n",
    )
    .await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let kid = raw.kid.clone().unwrap();
    for _ in 0..5 {
        assert_eq!(
            raw.post(&kid, None).await.status,
            200,
            "whitelisted: no global limit"
        );
    }
    assert_eq!(new_order(&raw, &[env.name("w1")]).await.status, 201);
    assert_limited(&new_order(&raw, &[env.name("w2")]).await, "order-creation");
}

async fn post_from(raw: &Raw, url: &str, forwarded_for: &str) -> u16 {
    let nonce = raw.nonce().await;
    let body = raw
        .key
        .sign_acme(url, Some(&nonce), raw.kid.as_deref(), None)
        .unwrap();
    raw.http
        .post(url)
        .header("content-type", "application/jose+json")
        .header("x-forwarded-for", forwarded_for)
        .body(body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn trusted_proxies_decide_whether_x_forwarded_for_is_believed() {
    // Behind a trusted proxy, each forwarded client has its own bucket; IPv6 clients by /64.
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.section(
        "rate-limiting",
        "  global:\n    requests-per-minute: 1\n    burst: 2\n",
    );
    let server = env.sections["server"].clone();
    env.section(
        "server",
        &format!("{server}  trusted-proxies: [\"127.0.0.1\"]\n"),
    );
    env.start().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.kid = Some(String::new());
    let url = raw.url("/acme/new-nonce");
    let _ = &mut raw;
    assert_ne!(post_from(&raw, &url, "198.51.100.7").await, 429);
    assert_ne!(post_from(&raw, &url, "198.51.100.7").await, 429);
    assert_eq!(post_from(&raw, &url, "198.51.100.7").await, 429);
    assert_ne!(
        post_from(&raw, &url, "198.51.100.8").await,
        429,
        "another client has its own bucket"
    );
    assert_ne!(post_from(&raw, &url, "2001:db8::1").await, 429);
    assert_ne!(post_from(&raw, &url, "2001:db8::2").await, 429);
    assert_eq!(
        post_from(&raw, &url, "2001:db8::3").await,
        429,
        "the same /64 shares a bucket"
    );
    assert_ne!(
        post_from(&raw, &url, "2001:db8:0:1::1").await,
        429,
        "another /64 does not"
    );
    // A client cannot escape by prepending addresses: the nearest untrusted hop counts.
    assert_eq!(
        post_from(&raw, &url, "203.0.113.9, 198.51.100.7").await,
        429
    );

    // Without trusted proxies the header is ignored: every request is the peer's.
    let env = env_with("  global:\n    requests-per-minute: 1\n    burst: 2\n").await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.kid = Some(String::new());
    let url = raw.url("/acme/new-nonce");
    assert_ne!(post_from(&raw, &url, "198.51.100.1").await, 429);
    assert_ne!(post_from(&raw, &url, "198.51.100.2").await, 429);
    assert_eq!(post_from(&raw, &url, "198.51.100.3").await, 429);
}

#[tokio::test]
async fn shadow_mode_counts_but_never_refuses() {
    let env = env_with(
        "  whitelist: [\"127.0.0.1\"]\n  order-creation:\n    mode: shadow\n    orders-per-account-per-hour: 1\n    order-burst: 1\n",
    )
    .await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    for i in 0..3 {
        assert_eq!(
            new_order(&raw, &[env.name(&format!("sh{i}"))]).await.status,
            201
        );
    }
    let metrics = reqwest::get(format!("http://{}/metrics", env.admin_addr()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.contains("certeasy_ratelimit_decisions_total")
                && l.contains("order-creation")
                && l.contains("shadow_denied")),
        "{metrics}"
    );
}

#[tokio::test]
async fn reload_raises_limits_at_once_and_refuses_bad_files() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let tight = "  whitelist: [\"127.0.0.1\"]\n  order-creation:\n    orders-per-account-per-hour: 1\n    order-burst: 1\n";
    env.section("rate-limiting", tight);
    env.spawn_binary().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let acct = account_id(&raw);
    assert_eq!(new_order(&raw, &[env.name("r1")]).await.status, 201);
    assert_limited(&new_order(&raw, &[env.name("r2")]).await, "order-creation");

    let (ok, shown) = admin(&env, &["ratelimit", "show", "order-creation", &acct]);
    assert!(ok && shown.contains("remaining: 0"), "{shown}");

    // Raise the limit in the file and reload: the exhausted bucket allows at once.
    env.section("rate-limiting", "  whitelist: [\"127.0.0.1\"]\n  order-creation:\n    orders-per-account-per-hour: 1\n    order-burst: 5\n");
    env.write_config_for_test();
    let (ok, out) = admin(&env, &["reload"]);
    assert!(ok, "{out}");
    assert_eq!(
        new_order(&raw, &[env.name("r3")]).await.status,
        201,
        "a raised limit applies to an exhausted bucket"
    );

    // A broken file is refused and the limits in force stay.
    std::fs::write(
        &env.config_path,
        "rate-limiting:\n  global:\n    burst: lots\n",
    )
    .unwrap();
    let (ok, out) = admin(&env, &["reload"]);
    assert!(!ok && out.contains("burst"), "{out}");
    assert_eq!(new_order(&raw, &[env.name("r4")]).await.status, 201);

    // SIGHUP reloads too: back to the tight limits.
    env.section("rate-limiting", tight);
    env.write_config_for_test();
    let pid = env.child.as_ref().unwrap().id().to_string();
    assert!(
        StdCommand::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );
    let mut refused = false;
    for _ in 0..50 {
        if new_order(&raw, &[env.name("r5")]).await.status == 429 {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        refused,
        "after SIGHUP the tight limit applies:\n{}",
        env.server_log()
    );

    // reset empties the bucket.
    let (ok, out) = admin(&env, &["ratelimit", "reset", "order-creation", &acct]);
    assert!(ok, "{out}");
    assert_eq!(new_order(&raw, &[env.name("r6")]).await.status, 201);
}

#[tokio::test]
async fn overrides_raise_one_account_only() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let overrides = env.dir.path().join("overrides.yaml");
    std::fs::write(&overrides, "[]\n").unwrap();
    env.section("rate-limiting", "  whitelist: [\"127.0.0.1\"]\n  order-creation:\n    orders-per-account-per-hour: 1\n    order-burst: 1\n");
    env.section("rate-limit-overrides", "");
    env.spawn_binary_with_top_level(&format!(
        "rate-limit-overrides: \"{}\"\n",
        overrides.display()
    ))
    .await;
    let mut vip = Raw::new(&env, Algorithm::Es256);
    vip.register().await;
    let mut other = Raw::new(&env, Algorithm::Es256);
    other.register().await;
    assert_eq!(new_order(&vip, &[env.name("v1")]).await.status, 201);
    assert_limited(&new_order(&vip, &[env.name("v2")]).await, "order-creation");
    std::fs::write(
        &overrides,
        format!(
            "- limit: order-creation\n  burst: 10\n  count: 10\n  period: 1h\n  ids: [\"{}\"]\n",
            account_id(&vip)
        ),
    )
    .unwrap();
    let (ok, out) = admin(&env, &["reload"]);
    assert!(ok, "{out}");
    assert_eq!(new_order(&vip, &[env.name("v3")]).await.status, 201);
    assert_eq!(new_order(&other, &[env.name("o1")]).await.status, 201);
    assert_limited(
        &new_order(&other, &[env.name("o2")]).await,
        "order-creation",
    );
    // A bad overrides file is refused, naming the entry.
    std::fs::write(
        &overrides,
        "- limit: no-such-limit\n  burst: 1\n  ids: [\"1\"]\n",
    )
    .unwrap();
    let (ok, out) = admin(&env, &["reload"]);
    assert!(!ok && out.contains("no-such-limit"), "{out}");
}

/// A private redis-server on a free port, killed on drop.
pub(crate) struct PrivateRedis {
    child: std::process::Child,
}

impl PrivateRedis {
    pub(crate) fn start_on(port: u16) -> Self {
        let child = StdCommand::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/test.sh installs it)");
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { child }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn two_instances_share_buckets_through_redis() {
    let prefix = crate::harness::unique("it");
    let section = format!("  shards: [\"redis://127.0.0.1:6379\"]\n  key-prefix: \"{prefix}:\"\n");
    let limits = "  account-creation:\n    per-ip-per-hour: 1\n    burst: 1\n";
    let mut a = TestEnv::new(Db::Sqlite).await;
    a.section("rate-limiting", limits);
    a.section("redis", &section);
    a.start().await;
    let mut b = TestEnv::new(Db::Sqlite).await;
    b.section("rate-limiting", limits);
    b.section("redis", &section);
    b.start().await;
    let mut on_a = Raw::new(&a, Algorithm::Es256);
    on_a.register().await;
    let on_b = Raw::new(&b, Algorithm::Es256);
    let r = on_b
        .post(
            &on_b.url("/acme/new-account"),
            Some(&json!({"termsOfServiceAgreed": true})),
        )
        .await;
    assert_limited(&r, "account-creation");
}

#[tokio::test]
async fn redis_outage_fails_open_and_limits_resume() {
    let port = free_port();
    let redis = PrivateRedis::start_on(port);
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.section(
        "rate-limiting",
        "  global:\n    requests-per-minute: 1\n    burst: 3\n",
    );
    env.section(
        "redis",
        &format!("  shards: [\"redis://127.0.0.1:{port}\"]\n  timeout: 50ms\n"),
    );
    env.start().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let kid = raw.kid.clone().unwrap();
    drop(redis);
    // The nonce fetched before the outage was noticed is shared, so it is refused (badNonce, the
    // client retries); every later nonce is local to this instance and works.
    let mut bad_nonces = 0;
    for _ in 0..10 {
        let r = raw.post(&kid, None).await;
        assert!(r.status < 500, "Redis trouble never causes a 5xx: {r:?}");
        if r.status == 400 && r.body["type"] == "urn:ietf:params:acme:error:badNonce" {
            bad_nonces += 1;
            continue;
        }
        assert_eq!(r.status, 200, "fail open: {r:?}");
    }
    assert!(
        bad_nonces <= 1,
        "{bad_nonces} nonces refused during the outage"
    );
    let _redis = PrivateRedis::start_on(port);
    let mut limited = false;
    for _ in 0..100 {
        if raw.post(&kid, None).await.status == 429 {
            limited = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(limited, "limits apply again once Redis is back");
    let metrics = reqwest::get(format!("http://{}/metrics", env.admin_addr()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("fail_open"),
        "fail-open decisions are counted"
    );
}

#[tokio::test]
async fn instances_behind_one_url_share_nonces_through_redis() {
    let prefix = crate::harness::unique("nonce");
    // A generous Redis deadline: with the default 50 ms, a start-up key fetch slowed by a busy
    // test machine fails open to instance-local nonces (by design, until the next probe), and
    // this test is about sharing, not about that fallback.
    let redis = format!(
        "  shards: [\"redis://127.0.0.1:6379\"]\n  key-prefix: \"{prefix}:\"\n  timeout: 2s\n"
    );
    let mut a = TestEnv::new(Db::Postgres).await;
    a.section("redis", &redis);
    a.start().await;
    // B serves the same external URL and database, as behind a load balancer.
    let mut b = TestEnv::new(Db::Sqlite).await;
    b.section("redis", &redis);
    let server =
        b.sections["server"].replace(&format!("https://localhost:{}", b.acme_port), &a.base_url());
    b.section("server", &server);
    b.section("database", &a.sections["database"].clone());
    b.section("ca", &a.existing_ca_section());
    b.start().await;

    let mut raw = Raw::new(&a, Algorithm::Es256);
    raw.register().await;
    let kid = raw.kid.clone().unwrap();
    let nonce = raw.nonce().await;
    let body = raw
        .key
        .sign_acme(&kid, Some(&nonce), Some(&kid), None)
        .unwrap();
    let at_b = format!(
        "https://localhost:{}{}",
        b.acme_port,
        kid.trim_start_matches(&a.base_url())
    );
    let first = raw.send(&at_b, body.clone(), "application/jose+json").await;
    assert_eq!(first.status, 200, "a nonce from A is good at B: {first:?}");
    let replay = raw.send(&kid, body, "application/jose+json").await;
    assert_eq!(
        replay.problem_type(),
        "urn:ietf:params:acme:error:badNonce",
        "{replay:?}"
    );
}
