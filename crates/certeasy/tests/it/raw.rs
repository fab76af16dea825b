//! A raw ACME client for requests no well-behaved client library would send.

use std::time::Duration;

use acme_jose::Algorithm;
use acme_jose::sign::SigningKey;
use serde_json::Value;
use serde_json::json;
use testkit::poll;
use testkit::poll::OnTheWay;
use testkit::poll::Stuck;

use crate::harness::TestEnv;

/// The challenge of type `kind` (`http-01`, `dns-01`, …) in an authorization's body.
pub fn challenge<'a>(authz: &'a Value, kind: &str) -> &'a Value {
    authz["challenges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == kind)
        .unwrap()
}

/// An HTTPS client that trusts the test CA and ignores proxy variables.
pub fn client(env: &TestEnv) -> reqwest::Client {
    let root = reqwest::Certificate::from_pem(env.root_pem().as_bytes()).unwrap();
    reqwest::Client::builder()
        .no_proxy()
        .add_root_certificate(root)
        .build()
        .unwrap()
}

/// A response reduced to what tests look at.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Reply {
    pub fn problem_type(&self) -> &str {
        self.body["type"].as_str().unwrap_or("")
    }

    pub fn location(&self) -> String {
        self.headers
            .get("location")
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned()
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    }
}

async fn reply(resp: reqwest::Response) -> Reply {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Reply {
        status,
        headers,
        body,
        text,
    }
}

/// An account driven by hand.
pub struct Raw {
    pub http: reqwest::Client,
    pub base: String,
    pub key: SigningKey,
    pub kid: Option<String>,
}

impl Raw {
    pub fn new(env: &TestEnv, alg: Algorithm) -> Self {
        Self {
            http: client(env),
            base: env.base_url(),
            key: SigningKey::generate(alg).unwrap(),
            kid: None,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn nonce(&self) -> String {
        let resp = self
            .http
            .head(self.url("/acme/new-nonce"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        resp.headers()
            .get("replay-nonce")
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned()
    }

    /// Sends a raw body.
    pub async fn send(&self, url: &str, body: String, content_type: &str) -> Reply {
        let resp = self
            .http
            .post(url)
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap();
        reply(resp).await
    }

    /// Signs and posts with a fresh nonce; `payload = None` is POST-as-GET.
    pub async fn post(&self, url: &str, payload: Option<&Value>) -> Reply {
        let nonce = self.nonce().await;
        let body = self
            .key
            .sign_acme(url, Some(&nonce), self.kid.as_deref(), payload)
            .unwrap();
        self.send(url, body, "application/jose+json").await
    }

    /// Polls the object at `url` (POST-as-GET) until its status is `want`: testkit's wait, with
    /// this client.
    pub async fn wait_for_status(
        &self,
        url: &str,
        want: &str,
        on_the_way: OnTheWay<'_>,
        within: Duration,
    ) -> Result<Value, Stuck> {
        poll::wait_for_status(url, want, on_the_way, within, async || {
            self.post(url, None).await.body
        })
        .await
    }

    /// The http-01 challenge object of an order's first authorization.
    pub async fn http01_challenge(&self, order: &Value) -> Value {
        let authz = self
            .post(order["authorizations"][0].as_str().unwrap(), None)
            .await;
        challenge(&authz.body, "http-01").clone()
    }

    /// The key authorization of a token for this account's key.
    pub fn key_authorization(&self, token: &str) -> String {
        format!("{token}.{}", self.key.public_jwk().thumbprint())
    }

    /// The inner JWS of a keyChange (RFC 8555 §7.3.5) from this account's key to `new_key`.
    pub fn key_change_inner(&self, new_key: &SigningKey) -> Value {
        let kid = self.kid.as_deref().expect("the account is registered");
        let inner = new_key
            .sign_flattened(
                json!({"jwk": new_key.public_jwk().to_json(), "url": self.url("/acme/key-change")}),
                json!({"account": kid, "oldKey": self.key.public_jwk().to_json()})
                    .to_string()
                    .as_bytes(),
            )
            .expect("signing the inner JWS");
        serde_json::from_str(&inner).expect("a signed JWS is JSON")
    }

    /// The directory object (RFC 8555 §7.1.1), fetched with a plain GET.
    pub async fn directory(&self) -> Value {
        let text = self
            .http
            .get(self.url("/directory"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        serde_json::from_str(&text).unwrap()
    }

    /// Creates the account and remembers its kid.
    pub async fn register(&mut self) -> Reply {
        let r = self
            .post(
                &self.url("/acme/new-account"),
                Some(&json!({"termsOfServiceAgreed": true, "contact": ["mailto:raw@example.com"]})),
            )
            .await;
        assert!(r.status == 201 || r.status == 200, "{r:?}");
        self.kid = Some(r.location());
        r
    }
}
