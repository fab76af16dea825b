//! dns-account-01 (draft-ietf-acme-dns-account-label-02) with raw RFC 8555 requests against a
//! real server and the test DNS server: two accounts validate one name at the same time, each
//! with its own TXT record at `_<label>._acme-challenge.<name>`, and neither disturbs the other;
//! the type is offered for wildcards, and not at all unless enabled.

use std::time::Duration;

use acme_jose::Algorithm;
use aws_lc_rs::digest;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use serde_json::json;
use testkit::poll::OnTheWay;

use crate::harness::Db;
use crate::harness::TestEnv;
use crate::raw::Raw;

/// The account label of draft-ietf-acme-dns-account-label-02 §3.1, computed here independently
/// of the server: `base32(SHA-256(account URL)[0..10])` in lower case.
fn account_label(account_url: &str) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz234567";
    let hash = digest::digest(&digest::SHA256, account_url.as_bytes());
    let bits: Vec<bool> = hash.as_ref()[..10]
        .iter()
        .flat_map(|byte| (0..8).rev().map(move |i| byte >> i & 1 == 1))
        .collect();
    bits.chunks(5)
        .map(|chunk| {
            let index = chunk
                .iter()
                .fold(0_usize, |acc, &b| acc << 1 | usize::from(b));
            char::from(ALPHABET[index])
        })
        .collect()
}

fn txt_value(key_authorization: &str) -> String {
    URL_SAFE_NO_PAD.encode(digest::digest(
        &digest::SHA256,
        key_authorization.as_bytes(),
    ))
}

async fn env_with(enabled: bool) -> TestEnv {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let mut validation = format!(
        "  dns-servers: [\"{}\"]\n  http-port: {}\n  tls-alpn-port: {}\n  allow-loopback: true\n  timeout: 5s\n  retries: 0\n",
        env.dns.addr(),
        env.http.port(),
        env.tls.port()
    );
    if enabled {
        validation.push_str("  dns-account-01: true\n");
    }
    env.section("validation", &validation);
    env.start().await;
    env
}

async fn registered(env: &TestEnv) -> Raw {
    let mut raw = Raw::new(env, Algorithm::Es256);
    raw.register().await;
    raw
}

/// The first authorization of a new order for `identifiers`.
async fn first_authz(raw: &Raw, identifiers: Value) -> Value {
    let order = raw
        .post(
            &raw.url("/acme/new-order"),
            Some(&json!({ "identifiers": identifiers })),
        )
        .await;
    assert_eq!(order.status, 201, "{order:?}");
    raw.post(order.body["authorizations"][0].as_str().unwrap(), None)
        .await
        .body
}

fn types(authz: &Value) -> Vec<String> {
    authz["challenges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap().to_owned())
        .collect()
}

fn challenge_of(authz: &Value, kind: &str) -> Value {
    authz["challenges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} challenge in {authz}"))
        .clone()
}

#[tokio::test]
async fn two_accounts_validate_one_name_at_once_each_with_its_own_record() {
    let env = env_with(true).await;
    let first = registered(&env).await;
    let second = registered(&env).await;
    let name = env.name("shared");
    let identifiers = json!([{"type": "dns", "value": name}]);
    let mut challenges = Vec::new();
    for raw in [&first, &second] {
        let authz = first_authz(raw, identifiers.clone()).await;
        let challenge = challenge_of(&authz, "dns-account-01");
        let token = challenge["token"].as_str().unwrap();
        let kid = raw.kid.as_deref().unwrap();
        let record = format!("_{}._acme-challenge.{name}", account_label(kid));
        env.dns
            .add_txt(&record, &txt_value(&raw.key_authorization(token)));
        challenges.push(challenge);
    }
    // Each account has its own record name; neither overwrote the other's.
    let labels: Vec<String> = [&first, &second]
        .iter()
        .map(|raw| account_label(raw.kid.as_deref().unwrap()))
        .collect();
    assert_ne!(labels[0], labels[1]);
    // Both ask at the same moment.
    let asks = [&first, &second]
        .into_iter()
        .zip(&challenges)
        .map(|(raw, c)| async move {
            let empty = json!({});
            raw.post(c["url"].as_str().unwrap(), Some(&empty)).await
        });
    for reply in futures::future::join_all(asks).await {
        assert_eq!(reply.status, 200, "{reply:?}");
    }
    for (raw, challenge) in [&first, &second].into_iter().zip(&challenges) {
        let url = challenge["url"].as_str().unwrap();
        let done = raw
            .wait_for_status(
                url,
                "valid",
                OnTheWay::Only(&["pending", "processing"]),
                Duration::from_secs(20),
            )
            .await
            .unwrap_or_else(|stuck| panic!("{stuck}\n{}", env.server_log()));
        assert_eq!(done["type"], "dns-account-01");
    }
}

#[tokio::test]
async fn another_accounts_record_does_not_validate() {
    let env = env_with(true).await;
    let owner = registered(&env).await;
    let other = registered(&env).await;
    let name = env.name("theirs");
    let authz = first_authz(&other, json!([{"type": "dns", "value": name}])).await;
    let challenge = challenge_of(&authz, "dns-account-01");
    let token = challenge["token"].as_str().unwrap();
    // The right value, at the owner's label: not where `other`'s challenge looks.
    let owners = format!(
        "_{}._acme-challenge.{name}",
        account_label(owner.kid.as_deref().unwrap())
    );
    env.dns
        .add_txt(&owners, &txt_value(&other.key_authorization(token)));
    let url = challenge["url"].as_str().unwrap();
    other.post(url, Some(&json!({}))).await;
    let done = other
        .wait_for_status(
            url,
            "invalid",
            OnTheWay::Only(&["pending", "processing"]),
            Duration::from_secs(20),
        )
        .await
        .unwrap_or_else(|stuck| panic!("{stuck}\n{}", env.server_log()));
    let detail = done["error"]["detail"].as_str().unwrap();
    let expected_name = format!(
        "_{}._acme-challenge.{name}",
        account_label(other.kid.as_deref().unwrap())
    );
    assert!(detail.contains(&expected_name), "{detail}");
}

#[tokio::test]
async fn offered_for_wildcards_and_only_when_enabled() {
    let env = env_with(true).await;
    let raw = registered(&env).await;
    let name = env.name("wild");
    let wildcard = first_authz(&raw, json!([{"type": "dns", "value": format!("*.{name}")}])).await;
    let offered = types(&wildcard);
    assert!(
        offered.contains(&"dns-account-01".to_owned()),
        "{offered:?}"
    );
    assert!(!offered.contains(&"http-01".to_owned()), "{offered:?}");
    // IP identifiers never get it: the offer is made for DNS names only.
    let ip = first_authz(&raw, json!([{"type": "ip", "value": "127.0.0.1"}])).await;
    let offered = types(&ip);
    assert!(
        !offered.contains(&"dns-account-01".to_owned()),
        "{offered:?}"
    );
    assert!(offered.contains(&"http-01".to_owned()), "{offered:?}");

    let off = env_with(false).await;
    let raw = registered(&off).await;
    let authz = first_authz(&raw, json!([{"type": "dns", "value": off.name("plain")}])).await;
    let offered = types(&authz);
    assert!(
        !offered.contains(&"dns-account-01".to_owned()),
        "{offered:?}"
    );
    assert!(
        !offered.contains(&"dns-persist-01".to_owned()),
        "{offered:?}"
    );
}
