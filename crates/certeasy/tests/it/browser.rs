//! A real headless Chromium (Debian's `chromium` and `chromedriver`), driven over the W3C
//! WebDriver protocol by `fantoccini`.
//!
//! Nothing outlives the test: dropping a [`Browser`], on success or while a panic unwinds, ends
//! its session (chromedriver quits Chromium and reaps it), then kills chromedriver's process
//! group, which Chromium inherits, and removes the profile directory. A watchdog does the same
//! when the test process dies without unwinding (a nextest timeout signals only the test's own
//! group). Chromium's crash handlers leave the group but exit with Chromium.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;

use fantoccini::Client;
use fantoccini::ClientBuilder;
use fantoccini::Locator;
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::json;

/// chromedriver in a process group of its own; dropping it kills the whole group.
struct Driver {
    child: Child,
    /// `sh` blocked reading a pipe whose write end only this process holds: should this process
    /// end without dropping the driver (killed by a signal), the read sees end of file, and the
    /// watchdog kills chromedriver's group and removes the profile directory.
    watchdog: Option<Child>,
}

impl Driver {
    fn spawn(port: u16, profile: &Path) -> Self {
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("chromedriver must be installed (scripts/test.sh installs chromium-driver)");
        let mut driver = Self {
            child,
            watchdog: None,
        };
        driver.watchdog = Some(
            Command::new("sh")
                .args([
                    "-c",
                    r#"read -r _; kill -KILL "-$1"; sleep 1; rm -rf -- "$2""#,
                    "sh",
                ])
                .arg(driver.child.id().to_string())
                .arg(profile)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                // Out of the test's group, which a nextest timeout kills.
                .process_group(0)
                .spawn()
                .expect("the chromedriver watchdog starts"),
        );
        driver
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(watchdog) = &mut self.watchdog {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}

pub struct Browser {
    /// `None` only once `drop` has closed the session.
    client: Option<Client>,
    /// The runtime the session's connection to chromedriver runs on. A runtime of its own,
    /// because `drop` must wait for the session to end while the test's runtime, on which it is
    /// dropped, cannot run anything.
    session_runtime: SessionRuntime,
    // Dropped after the session ends: Chromium is gone before its profile directory is removed.
    _driver: Driver,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub async fn start() -> Self {
        let port = crate::harness::free_port();
        // Before the driver: should this function panic, the driver is dropped (and Chromium
        // killed) before the directory is removed.
        let profile = tempfile::tempdir().unwrap();
        let driver = Driver::spawn(port, profile.path());
        let session_runtime = SessionRuntime::new();
        let caps = json!({
            "browserName": "chrome",
            "acceptInsecureCerts": true,
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--disable-dev-shm-usage", "--ignore-certificate-errors",
                    format!("--user-data-dir={}", profile.path().display())
                ]
            }
        });
        let serde_json::Value::Object(caps) = caps else {
            unreachable!("the capabilities are an object")
        };
        let webdriver = format!("http://127.0.0.1:{port}");
        // Connecting spawns the session's task: on `session_runtime`, by connecting from there.
        let client = session_runtime
            .get()
            .spawn(async move {
                let mut last = None;
                // chromedriver takes a moment to listen.
                for _ in 0..100 {
                    match ClientBuilder::new(HttpConnector::new())
                        .capabilities(caps.clone())
                        .connect(&webdriver)
                        .await
                    {
                        Ok(client) => return client,
                        Err(e) => last = Some(e),
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                panic!("no session: {last:?}")
            })
            .await
            .unwrap();
        Self {
            client: Some(client),
            session_runtime,
            _driver: driver,
            _profile: profile,
        }
    }

    fn client(&self) -> &Client {
        self.client
            .as_ref()
            .expect("the session is open until drop")
    }

    pub async fn goto(&self, url: &str) {
        self.client().goto(url).await.unwrap();
    }

    pub async fn url(&self) -> String {
        self.client().current_url().await.unwrap().to_string()
    }

    pub async fn source(&self) -> String {
        self.client().source().await.unwrap()
    }

    /// The visible text of the page.
    pub async fn text(&self) -> String {
        self.client()
            .find(Locator::Css("body"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub async fn click(&self, css: &str) {
        self.client()
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no element {css}: {e}"))
            .click()
            .await
            .unwrap();
    }
}

impl Drop for Browser {
    /// Ends the session, so that chromedriver quits Chromium and reaps it, and waits (at most
    /// 20 s) for chromedriver's answer, which comes once Chromium has quit; the driver's own drop
    /// then kills whatever is left.
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        let (done, ended) = std::sync::mpsc::channel();
        self.session_runtime.get().spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(20), client.close()).await;
            let _ = done.send(());
        });
        let _ = ended.recv_timeout(Duration::from_secs(25));
    }
}

/// A one-thread runtime that, dropped, shuts down without waiting: a runtime dropped the usual
/// way blocks, which panics inside the test's runtime (also while a panic unwinds).
struct SessionRuntime(Option<tokio::runtime::Runtime>);

impl SessionRuntime {
    fn new() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        Self(Some(runtime))
    }

    fn get(&self) -> &tokio::runtime::Runtime {
        self.0.as_ref().expect("taken only by drop")
    }
}

impl Drop for SessionRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}
