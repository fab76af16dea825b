//! Redis fixtures: unique prefixes on the shared server, private servers on free ports.

use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;

use acme_core::duration::ConfigDuration;
use metrics_util::debugging::DebugValue;
use metrics_util::debugging::DebuggingRecorder;
use metrics_util::debugging::Snapshotter;
use ratelimits::config::RedisConfig;
use testkit::ports::free_port;

pub(crate) const SHARED_REDIS: &str = "redis://127.0.0.1:6379";

/// A key prefix no other test (or run) uses.
pub(crate) fn unique_prefix(test: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "certeasy-test:{test}:{}:{nanos}:{}:",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

pub(crate) fn redis_config(shards: Vec<String>, prefix: String) -> RedisConfig {
    RedisConfig {
        shards,
        key_prefix: prefix,
        timeout: ConfigDuration(Duration::from_millis(500)),
        expiry_margin: ConfigDuration::from_secs(60),
    }
}

/// Fails the test with a clear message when a server does not answer.
pub(crate) async fn require_redis(url: &str) {
    let client = redis::Client::open(url).unwrap();
    let result = tokio::time::timeout(Duration::from_secs(2), async {
        let mut con = client.get_multiplexed_async_connection().await?;
        redis::cmd("PING").query_async::<String>(&mut con).await
    })
    .await;
    match result {
        Ok(Ok(_)) => {}
        Ok(Err(err)) => {
            panic!("Redis at {url} is required for this test and is unreachable: {err}")
        }
        Err(_) => panic!("Redis at {url} is required for this test and did not answer within 2 s"),
    }
}

/// A `redis-server` of our own, killed on drop.
pub(crate) struct PrivateRedis {
    pub(crate) port: u16,
    child: Option<Child>,
}

impl PrivateRedis {
    pub(crate) async fn start() -> Self {
        Self::start_on(free_port()).await
    }

    pub(crate) async fn start_on(port: u16) -> Self {
        let child = Command::new("redis-server")
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
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed to run the Redis tests");
        let server = Self {
            port,
            child: Some(child),
        };
        for _ in 0..100 {
            let client = redis::Client::open(server.url()).unwrap();
            if let Ok(Ok(mut con)) = tokio::time::timeout(
                Duration::from_millis(200),
                client.get_multiplexed_async_connection(),
            )
            .await
                && redis::cmd("PING")
                    .query_async::<String>(&mut con)
                    .await
                    .is_ok()
            {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("private redis-server on port {port} did not start");
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The process-wide metrics recorder for the tests that read metrics.
pub(crate) fn metrics() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().unwrap();
        snapshotter
    })
}

/// Sum of a counter since the last snapshot, over the series whose labels include `label`.
pub(crate) fn counter(
    snapshot: &[(metrics_util::CompositeKey, DebugValue)],
    name: &str,
    label: Option<(&str, &str)>,
) -> u64 {
    snapshot
        .iter()
        .filter(|(key, _)| key.key().name() == name)
        .filter(|(key, _)| {
            label.is_none_or(|(k, v)| key.key().labels().any(|l| l.key() == k && l.value() == v))
        })
        .map(|(_, value)| {
            if let DebugValue::Counter(n) = value {
                *n
            } else {
                0
            }
        })
        .sum()
}

pub(crate) fn snapshot() -> Vec<(metrics_util::CompositeKey, DebugValue)> {
    metrics()
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(k, _, _, v)| (k, v))
        .collect()
}
