//! A real headless Chromium (Debian's `chromium` and `chromedriver`), driven over the W3C
//! WebDriver protocol.
//!
//! Nothing outlives the test: dropping a [`Browser`], on success or while a panic unwinds, ends
//! its session (chromedriver quits Chromium and reaps it), then kills chromedriver's process
//! group, which Chromium inherits, and removes the profile directory. A watchdog does the same
//! when the test process dies without unwinding (a nextest timeout signals only the test's own
//! group). Chromium's crash handlers leave the group but exit with Chromium.

use std::io::Read;
use std::io::Write;
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use serde_json::json;

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

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
    // Dropped first: Chromium is gone before its profile directory is removed.
    _driver: Driver,
    base: String,
    session: String,
    http: reqwest::Client,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub async fn start() -> Self {
        let port = crate::harness::free_port();
        // Before the driver: should this function panic, the driver is dropped (and Chromium
        // killed) before the directory is removed.
        let profile = tempfile::tempdir().unwrap();
        let driver = Driver::spawn(port, profile.path());
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        for _ in 0..100 {
            if let Ok(r) = http.get(format!("{base}/status")).send().await
                && r.status().is_success()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
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
        }}});
        let created: Value = http
            .post(format!("{base}/session"))
            .json_body(&caps)
            .send()
            .await
            .unwrap()
            .json_value()
            .await;
        let session = created["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_owned();
        Self {
            _driver: driver,
            base,
            session,
            http,
            _profile: profile,
        }
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let request = match method {
            "GET" => self.http.get(url),
            _ => self
                .http
                .post(url)
                .json_body(&body.unwrap_or_else(|| json!({}))),
        };
        request.send().await.unwrap().json_value().await
    }

    pub async fn goto(&self, url: &str) {
        self.call("POST", "/url", Some(json!({"url": url}))).await;
    }

    pub async fn url(&self) -> String {
        self.call("GET", "/url", None).await["value"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    pub async fn source(&self) -> String {
        self.call("GET", "/source", None).await["value"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// The visible text of the page.
    pub async fn text(&self) -> String {
        let el = self.find("body").await;
        self.call("GET", &format!("/element/{el}/text"), None).await["value"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    async fn find(&self, css: &str) -> String {
        let found = self
            .call(
                "POST",
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        found["value"][ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("no element {css}: {found}"))
            .to_owned()
    }

    pub async fn click(&self, css: &str) {
        let el = self.find(css).await;
        self.call("POST", &format!("/element/{el}/click"), Some(json!({})))
            .await;
    }
}

impl Drop for Browser {
    /// Ends the session (blocking: `drop` cannot await), so that chromedriver quits Chromium and
    /// reaps it; the driver's own drop then kills whatever is left.
    fn drop(&mut self) {
        let Some(addr) = self.base.strip_prefix("http://") else {
            return;
        };
        let Ok(mut stream) = TcpStream::connect(addr) else {
            return;
        };
        let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
        let _ = stream.set_read_timeout(Some(Duration::from_secs(20)));
        let request = format!(
            "DELETE /session/{} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.session
        );
        // chromedriver answers once Chromium has quit, and keeps the connection open anyway:
        // the answer's first bytes are enough.
        if stream.write_all(request.as_bytes()).is_ok() {
            let _ = stream.read(&mut [0; 256]);
        }
    }
}

/// reqwest without its `json` feature: small helpers.
trait JsonBody {
    fn json_body(self, v: &Value) -> Self;
}

impl JsonBody for reqwest::RequestBuilder {
    fn json_body(self, v: &Value) -> Self {
        self.header("content-type", "application/json")
            .body(v.to_string())
    }
}

trait JsonValue {
    async fn json_value(self) -> Value;
}

impl JsonValue for reqwest::Response {
    async fn json_value(self) -> Value {
        serde_json::from_str(&self.text().await.unwrap()).unwrap()
    }
}
