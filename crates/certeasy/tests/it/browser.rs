//! A real headless Chromium (Debian's `chromium` and `chromedriver`), driven over the W3C
//! WebDriver protocol.

use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use serde_json::json;

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    http: reqwest::Client,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub async fn start() -> Self {
        let port = crate::harness::free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver must be installed (scripts/test.sh installs chromium-driver)");
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
        let profile = tempfile::tempdir().unwrap();
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
            driver,
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
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
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
