//! What a client sees of its quotas: the duplicate-certificate `Retry-After` is always enough,
//! and `RateLimit-Policy` / `RateLimit` list every policy that applied, each going down by
//! exactly what the request spent.

use std::collections::BTreeMap;
use std::time::Duration;

use acme_jose::Algorithm;
use base64::Engine;
use serde_json::Value;
use serde_json::json;
use testkit::poll::OnTheWay;

use crate::harness::Db;
use crate::harness::TestEnv;
use crate::raw::Raw;
use crate::raw::Reply;

async fn env_with(limits: &str) -> TestEnv {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.section("rate-limiting", limits);
    env.start().await;
    env
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

async fn poll_order(raw: &Raw, url: &str, want: &str) -> Value {
    let not_invalid = OnTheWay::Not(&["invalid"]);
    raw.wait_for_status(url, want, not_invalid, Duration::from_secs(30))
        .await
        .unwrap_or_else(|stuck| panic!("order {stuck}"))
}

/// Validates (when needed) and finalizes a created order, and waits for its certificate.
async fn complete(env: &TestEnv, raw: &Raw, created: &Reply, name: &str) {
    let url = created.location();
    if created.body["status"] == "pending" {
        let ch = raw.http01_challenge(&created.body).await;
        let token = ch["token"].as_str().unwrap();
        env.http.add(token, &raw.key_authorization(token));
        let r = raw
            .post(ch["url"].as_str().unwrap(), Some(&json!({})))
            .await;
        assert_eq!(r.status, 200, "{r:?}");
        poll_order(raw, &url, "ready").await;
    }
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    let csr = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(params.serialize_request(&key).unwrap().der());
    let finalize = created.body["finalize"].as_str().unwrap();
    let r = raw.post(finalize, Some(&json!({ "csr": csr }))).await;
    assert_eq!(r.status, 200, "{r:?}");
    poll_order(raw, &url, "valid").await;
}

/// The duplicate-certificate window and its `Retry-After` agree to the second: a client that
/// waits exactly the `Retry-After` it was given gets its order, round after round (each round
/// lands on another sub-second phase of the window's whole-second timestamps).
#[tokio::test]
async fn waiting_the_duplicate_certificate_retry_after_is_always_enough() {
    let env = env_with(
        "  whitelist: [\"127.0.0.1\"]\n  duplicate-certificate:\n    max-per-window: 1\n    window: 6s\n",
    )
    .await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("dupexact");
    let names = std::slice::from_ref(&name);
    let mut order = new_order(&raw, names).await;
    assert_eq!(order.status, 201, "{order:?}");
    for round in 0..3 {
        complete(&env, &raw, &order, &name).await;
        let refused = new_order(&raw, names).await;
        assert_eq!(
            refused.status, 429,
            "round {round}: the certificate just issued is in the 6 s window: {refused:?}"
        );
        assert_eq!(
            refused.problem_type(),
            "urn:ietf:params:acme:error:rateLimited"
        );
        let wait: u64 = refused.header("retry-after").unwrap().parse().unwrap();
        assert!(
            (1..=6).contains(&wait),
            "round {round}: Retry-After {wait} is within the window"
        );
        let current = refused.header("ratelimit").unwrap();
        assert!(
            current.contains(&format!("\"duplicate-certificate\";r=0;t={wait}")),
            "round {round}: {current}"
        );
        tokio::time::sleep(Duration::from_secs(wait)).await;
        order = new_order(&raw, names).await;
        assert_eq!(
            order.status, 201,
            "round {round}: after waiting Retry-After ({wait} s) the order succeeds: {order:?}"
        );
    }
}

/// One item of a `RateLimit-Policy` or `RateLimit` list: its parameters, keyed by policy name
/// plus the decoded partition key (`failed-validation/www.example.com`).
fn items(header: &str) -> Vec<(String, BTreeMap<String, u64>)> {
    header
        .split(", ")
        .map(|item| {
            let mut parts = item.split(';');
            let mut key = parts.next().unwrap().trim_matches('"').to_owned();
            let mut params = BTreeMap::new();
            for p in parts {
                let (k, v) = p.split_once('=').unwrap();
                if k == "pk" {
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(v.trim_matches(':'))
                        .unwrap();
                    key = format!("{key}/{}", String::from_utf8(bytes).unwrap());
                } else {
                    params.insert(k.to_owned(), v.parse().unwrap());
                }
            }
            (key, params)
        })
        .collect()
}

/// The policies of a response: name → (q, w) from `RateLimit-Policy` and (r, t) from `RateLimit`,
/// checking that both list the same policies in the same order.
fn policies(r: &Reply) -> BTreeMap<String, (u64, u64)> {
    let policy = items(&r.header("ratelimit-policy").expect("RateLimit-Policy"));
    let current = items(&r.header("ratelimit").expect("RateLimit"));
    let names = |v: &[(String, BTreeMap<String, u64>)]| {
        v.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>()
    };
    assert_eq!(names(&policy), names(&current), "{r:?}");
    let mut out = BTreeMap::new();
    for ((key, p), (_, c)) in policy.iter().zip(&current) {
        assert!(p.contains_key("w") && c.contains_key("t"), "{r:?}");
        assert!(c["r"] <= p["q"], "{key}: r within q");
        assert!(
            out.insert(key.clone(), (p["q"], c["r"])).is_none(),
            "{key} listed once"
        );
    }
    out
}

#[tokio::test]
async fn every_applied_policy_is_listed_and_goes_down_by_what_was_spent() {
    // A global bucket that refills slowly, so nothing comes back between the two orders.
    let env = env_with("  global:\n    requests-per-minute: 1\n    burst: 50\n").await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let (a, b, c) = (env.name("pa"), env.name("pb"), env.name("pc"));
    let first = new_order(&raw, &[a.clone(), b.clone()]).await;
    assert_eq!(first.status, 201, "{first:?}");
    let second = new_order(&raw, std::slice::from_ref(&c)).await;
    assert_eq!(second.status, 201, "{second:?}");
    let (p1, p2) = (policies(&first), policies(&second));

    let fv = |name: &str| format!("failed-validation/{name}");
    for key in [
        "global",
        "order-creation",
        "san-budget",
        "duplicate-certificate",
        "pending-authorizations",
    ] {
        assert!(
            p1.contains_key(key) && p2.contains_key(key),
            "{key}: {p1:?}"
        );
    }
    assert!(
        p1.contains_key(&fv(&a)) && p1.contains_key(&fv(&b)),
        "{p1:?}"
    );
    assert!(
        p2.contains_key(&fv(&c)) && !p2.contains_key(&fv(&a)),
        "{p2:?}"
    );
    assert_eq!(
        p1.len(),
        7,
        "nothing else is listed on the first order: {p1:?}"
    );

    // Each quota goes down by exactly what the second order spent: one request, one order, one
    // identifier of SAN budget, one new pending authorization, no certificate.
    for (key, spent) in [
        ("global", 1),
        ("order-creation", 1),
        ("san-budget", 1),
        ("pending-authorizations", 1),
        ("duplicate-certificate", 0),
    ] {
        let ((q1, r1), (q2, r2)) = (p1[key], p2[key]);
        assert_eq!(q1, q2, "{key}: the quota itself does not move");
        assert_eq!(r1 - r2, spent, "{key}: {r1} then {r2}");
    }
    // The first order's own spending, from full buckets.
    assert_eq!(p1["order-creation"], (5, 4));
    assert_eq!(p1["san-budget"], (100, 98));
    assert_eq!(p1["pending-authorizations"], (30, 28));
    assert_eq!(p1["duplicate-certificate"], (5, 5));
    // A fresh (account, name) pair has its whole failed-validation quota.
    for (policies, name) in [(&p1, &a), (&p1, &b), (&p2, &c)] {
        assert_eq!(policies[&fv(name)], (5, 5), "{name}");
    }
}
