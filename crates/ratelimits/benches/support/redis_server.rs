//! A private `redis-server` on a free loopback port, killed when dropped, and readers of `INFO`.
//!
//! Benchmarks never touch the shared instance on 6379: they flush and count, which would disturb
//! the tests of everyone else.

use std::error::Error;
use std::net::TcpListener;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;

pub(crate) type BoxError = Box<dyn Error + Send + Sync>;

/// A `redis-server` child process.
pub(crate) struct RedisServer {
    child: Child,
    port: u16,
}

impl RedisServer {
    /// Starts a server without persistence and waits until it answers PING.
    pub(crate) async fn start() -> Result<Self, BoxError> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let server = Self { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut con) = server.connect().await {
                let pong: redis::RedisResult<String> =
                    redis::cmd("PING").query_async(&mut con).await;
                if pong.is_ok() {
                    return Ok(server);
                }
            }
            if Instant::now() > deadline {
                return Err(format!("redis-server on port {port} did not start").into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub(crate) async fn connect(&self) -> Result<MultiplexedConnection, BoxError> {
        let client = redis::Client::open(self.url())?;
        // Flushing or loading a million keys takes longer than the default response timeout.
        let config =
            AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(120)));
        Ok(client
            .get_multiplexed_async_connection_with_config(&config)
            .await?)
    }

    /// One field of an `INFO` section, e.g. `("memory", "used_memory")`.
    pub(crate) async fn info_field(&self, section: &str, field: &str) -> Result<String, BoxError> {
        let mut con = self.connect().await?;
        let info: String = redis::cmd("INFO")
            .arg(section)
            .query_async(&mut con)
            .await?;
        info.lines()
            .find_map(|line| line.strip_prefix(&format!("{field}:")))
            .map(|v| v.trim().to_owned())
            .ok_or_else(|| format!("INFO {section} has no {field}").into())
    }

    /// `calls` of a command in `INFO commandstats` (0 if it never ran).
    pub(crate) async fn command_calls(&self, command: &str) -> Result<u64, BoxError> {
        let Ok(stats) = self
            .info_field("commandstats", &format!("cmdstat_{command}"))
            .await
        else {
            return Ok(0);
        };
        let calls = stats
            .split(',')
            .find_map(|kv| kv.strip_prefix("calls="))
            .ok_or("commandstats without calls")?;
        Ok(calls.parse()?)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
