//! Two servers sharing a private Redis: a nonce is accepted once by both together, also while
//! Redis is down (then each accepts only the nonces it issued during the outage).

use std::time::Duration;

use acme_jose::Algorithm;
use serde_json::json;

use crate::harness::Db;
use crate::harness::TestEnv;
use crate::harness::free_port;
use crate::ratelimit::PrivateRedis;
use crate::raw::Raw;
use crate::raw::Reply;

const BAD_NONCE: &str = "urn:ietf:params:acme:error:badNonce";

/// A newAccount request at `at`'s server carrying `nonce` (possibly issued by another server).
async fn new_account_with(at: &Raw, nonce: &str) -> Reply {
    let url = at.url("/acme/new-account");
    let payload = json!({"termsOfServiceAgreed": true});
    let body = at
        .key
        .sign_acme(&url, Some(nonce), None, Some(&payload))
        .unwrap();
    at.send(&url, body, "application/jose+json").await
}

fn accepted(r: &Reply) -> bool {
    r.status == 200 || r.status == 201
}

async fn server(port: u16, prefix: &str) -> TestEnv {
    let mut env = TestEnv::new(Db::Sqlite).await;
    // A generous timeout: a loaded machine must not turn a slow answer into an outage.
    env.section(
        "redis",
        &format!(
            "  shards: [\"redis://127.0.0.1:{port}\"]\n  timeout: 1s\n  key-prefix: \"{prefix}:\"\n"
        ),
    );
    env.start().await;
    env
}

#[tokio::test]
async fn nonces_are_single_use_across_instances_through_a_redis_outage() {
    let port = free_port();
    let redis = PrivateRedis::start_on(port);
    let prefix = crate::harness::unique("n");
    let a_env = server(port, &prefix).await;
    let b_env = server(port, &prefix).await;
    let a = Raw::new(&a_env, Algorithm::Es256);
    let b = Raw::new(&b_env, Algorithm::Es256);

    // A shared nonce from A is good once at B.
    let n1 = a.nonce().await;
    let r = new_account_with(&b, &n1).await;
    assert!(accepted(&r), "{r:?}");
    let r = new_account_with(&a, &n1).await;
    assert_eq!(r.problem_type(), BAD_NONCE, "{r:?}");

    // Redis stops: replaying it at A is still refused, with a fresh nonce to retry with.
    drop(redis);
    let r = new_account_with(&a, &n1).await;
    assert_eq!(r.problem_type(), BAD_NONCE, "{r:?}");
    let fresh = r
        .header("replay-nonce")
        .expect("a badNonce carries a fresh nonce");

    // That nonce is local to A: refused at B, good once at A.
    let r = new_account_with(&b, &fresh).await;
    assert_eq!(r.problem_type(), BAD_NONCE, "{r:?}");
    let r = new_account_with(&a, &fresh).await;
    assert!(accepted(&r), "{r:?}");
    let r = new_account_with(&a, &fresh).await;
    assert_eq!(r.problem_type(), BAD_NONCE, "{r:?}");

    // Redis comes back (empty): nonces of A are accepted at B again, and the nonce used before
    // the outage still is not.
    let _redis = PrivateRedis::start_on(port);
    let mut shared = false;
    for _ in 0..150 {
        let n = a.nonce().await;
        if accepted(&new_account_with(&b, &n).await) {
            shared = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(shared, "nonces are shared again once Redis answers");
    for at in [&a, &b] {
        let r = new_account_with(at, &n1).await;
        assert_eq!(r.problem_type(), BAD_NONCE, "{r:?}");
    }
}
