//! Nonces of two instances sharing a private redis-server that the test starts, stops and
//! restarts on its own port (the shared server on 6379 is never touched).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::io::Write;
use std::net::TcpStream;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use acme_api::nonce::NonceError;
use acme_api::nonce::NonceService;
use acme_api::nonce::redis::RedisNonceLedger;
use acme_core::duration::ConfigDuration;
use ratelimits::RedisStore;
use ratelimits::config::RedisConfig;
use testkit::poll::eventually;
use testkit::ports::free_port;
use time::OffsetDateTime;

/// A redis-server of our own, killed on drop.
struct PrivateRedis {
    child: Child,
}

impl PrivateRedis {
    fn start_on(port: u16) -> Self {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/test.sh installs it)");
        // Owned at once, so a failed start is killed and reaped on drop too.
        let server = Self { child };
        for _ in 0..200 {
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
                let mut reply = [0_u8; 7];
                if s.write_all(b"PING\r\n").is_ok()
                    && s.read_exact(&mut reply).is_ok()
                    && &reply == b"+PONG\r\n"
                {
                    return server;
                }
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("private redis-server on port {port} did not start");
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn instance(port: u16) -> NonceService {
    let store = RedisStore::new(&RedisConfig {
        shards: vec![format!("redis://127.0.0.1:{port}")],
        key_prefix: "it:nonce:".to_owned(),
        // Generous: a loaded test machine must not turn a slow answer into an outage.
        timeout: ConfigDuration(Duration::from_secs(1)),
        ..RedisConfig::default()
    })
    .unwrap();
    NonceService::with_ledger(
        time::Duration::minutes(10),
        Arc::new(RedisNonceLedger::new(store)),
    )
    .await
}

/// Issues at `at` until `other` accepts the nonce, i.e. until nonces are shared again.
async fn wait_until_shared(at: &NonceService, other: &NonceService) {
    let (within, every) = (Duration::from_secs(30), Duration::from_millis(200));
    let shared = eventually(within, every, async || {
        let now = OffsetDateTime::now_utc();
        other.redeem(&at.issue(now), now).await.ok()
    })
    .await;
    assert!(
        shared.is_some(),
        "nonces did not become shared again within 30 s of Redis coming back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nonce_is_never_accepted_twice_across_instances_even_while_redis_is_down() {
    let port = free_port();
    let redis = PrivateRedis::start_on(port);
    let a = instance(port).await;
    let b = instance(port).await;
    let now = OffsetDateTime::now_utc;

    // Shared: issued at A, accepted once at B, refused again at A.
    let n = a.issue(now());
    assert_eq!(b.redeem(&n, now()).await, Ok(()));
    assert_eq!(a.redeem(&n, now()).await, Err(NonceError::Reused));
    let unused = a.issue(now());

    // Redis stops: the replay at A is refused, and so is a shared nonce nobody used yet.
    drop(redis);
    assert_eq!(
        a.redeem(&n, now()).await,
        Err(NonceError::LedgerUnavailable)
    );
    assert_eq!(
        a.redeem(&unused, now()).await,
        Err(NonceError::LedgerUnavailable)
    );

    // While Redis is down, A's nonces are local: good once at A, refused at B.
    let local = a.issue(now());
    assert_eq!(
        b.redeem(&local, now()).await,
        Err(NonceError::OtherInstance)
    );
    assert_eq!(a.redeem(&local, now()).await, Ok(()));
    assert_eq!(a.redeem(&local, now()).await, Err(NonceError::Reused));
    // B learns of the outage from its first refused redemption; its next nonce is local too.
    let from_b = b.issue(now());
    assert_eq!(
        b.redeem(&from_b, now()).await,
        Err(NonceError::LedgerUnavailable)
    );
    let local_b = b.issue(now());
    assert_eq!(
        a.redeem(&local_b, now()).await,
        Err(NonceError::OtherInstance)
    );
    assert_eq!(b.redeem(&local_b, now()).await, Ok(()));

    // Redis comes back empty (no persistence): nonces are shared again under a new key, and
    // the nonce redeemed before the outage still is not accepted anywhere.
    let _redis = PrivateRedis::start_on(port);
    wait_until_shared(&a, &b).await;
    wait_until_shared(&b, &a).await;
    assert!(a.redeem(&n, now()).await.is_err());
    assert!(b.redeem(&n, now()).await.is_err());
    assert!(a.redeem(&unused, now()).await.is_err());
    let shared = b.issue(now());
    assert_eq!(a.redeem(&shared, now()).await, Ok(()));
    assert_eq!(b.redeem(&shared, now()).await, Err(NonceError::Reused));
}
