//! Work a request runs at once is run once. A challenge POST (RFC 8555 §7.5.1) or a finalize
//! (§7.4) that finds a free worker place validates or signs before anything is written, and a
//! concurrent request for the same authorization or order waits for that write (`ra::in_flight`)
//! instead of connecting to the subscriber's server again or signing a second certificate. A
//! validation slower than the request's wait is answered `processing` and finishes later.
//!
//! Everything goes over real HTTPS to the in-process server, with hand-signed requests sent all
//! at once, and an http-01 target that counts the requests it gets and can hold its answers.
//! The registry is taken before a worker place is looked for, so a request that finds none
//! still waits for the first one's write instead of starting the work again through the queue.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use acme_jose::Algorithm;
use axum::Router;
use axum::extract::Request;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use serde_json::json;
use testkit::poll;
use testkit::poll::OnTheWay;
use tokio::sync::Barrier;
use tokio::sync::watch;

use crate::harness::Db;
use crate::harness::TestEnv;
use crate::raw::Raw;
use crate::raw::Reply;

const ERR: &str = "urn:ietf:params:acme:error:";

/// The path prefix of RFC 8555 §8.3.
const CHALLENGE_PREFIX: &str = "/.well-known/acme-challenge/";

/// What the refusal of a second challenge of an authorization says (`storage::authz::try_start`,
/// mapped to `malformed` by `acme-api`'s `problem.rs`).
const ANOTHER_CHALLENGE: &str =
    "another challenge of this authorization is already being validated";

// ---- an http-01 target that counts ----

/// The target's shared state.
struct Target {
    /// token → key authorization served for it.
    tokens: Mutex<HashMap<String, String>>,
    /// token → requests received for it.
    hits: Mutex<HashMap<String, usize>>,
    /// token → answers sent for it.
    answered: Mutex<HashMap<String, usize>>,
    /// How long each request waits before it is answered.
    delay: Duration,
    /// Answers go out only while this is true (after the delay).
    open: watch::Sender<bool>,
    /// Bumped on every request and every answer, for waiters.
    events: watch::Sender<u64>,
}

/// An http-01 target on 127.0.0.1: answers `GET /.well-known/acme-challenge/{token}` with the
/// key authorization added for the token, after `delay` and once open, and counts the requests
/// (testkit's `Http01Responder` does not count). Stops when dropped.
struct CountingTarget {
    state: Arc<Target>,
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl CountingTarget {
    async fn start(delay: Duration, open: bool) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Target {
            tokens: Mutex::default(),
            hits: Mutex::default(),
            answered: Mutex::default(),
            delay,
            open: watch::Sender::new(open),
            events: watch::Sender::new(0),
        });
        let app = Router::new()
            .fallback(answer)
            .with_state(Arc::clone(&state));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { state, port, task }
    }

    fn add(&self, token: &str, key_authorization: &str) {
        self.state
            .tokens
            .lock()
            .unwrap()
            .insert(token.to_owned(), key_authorization.to_owned());
    }

    /// Requests received for `token` so far.
    fn hits(&self, token: &str) -> usize {
        count(&self.state.hits, token)
    }

    /// Answers sent for `token` so far.
    fn answered(&self, token: &str) -> usize {
        count(&self.state.answered, token)
    }

    /// Lets held answers go out.
    fn open(&self) {
        self.state.open.send_replace(true);
    }

    /// Waits until a request for `token` has come in; fails after `within`.
    async fn wait_for_hit(&self, token: &str, within: Duration) {
        let mut events = self.state.events.subscribe();
        tokio::time::timeout(within, events.wait_for(|_| self.hits(token) > 0))
            .await
            .unwrap_or_else(|_| panic!("the validation never reached the target within {within:?}"))
            .unwrap();
    }
}

impl Drop for CountingTarget {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn count(map: &Mutex<HashMap<String, usize>>, token: &str) -> usize {
    map.lock().unwrap().get(token).copied().unwrap_or(0)
}

fn bump(map: &Mutex<HashMap<String, usize>>, token: &str) {
    *map.lock().unwrap().entry(token.to_owned()).or_default() += 1;
}

async fn answer(State(target): State<Arc<Target>>, request: Request) -> Response {
    let Some(token) = request
        .uri()
        .path()
        .strip_prefix(CHALLENGE_PREFIX)
        .map(str::to_owned)
    else {
        return StatusCode::NOT_FOUND.into_response();
    };
    bump(&target.hits, &token);
    target.events.send_modify(|n| *n += 1);
    tokio::time::sleep(target.delay).await;
    let mut open = target.open.subscribe();
    let _ = open.wait_for(|open| *open).await;
    let served = target.tokens.lock().unwrap().get(&token).cloned();
    bump(&target.answered, &token);
    target.events.send_modify(|n| *n += 1);
    match served {
        Some(body) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/octet-stream")],
            body,
        )
            .into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

// ---- the server and the requests ----

/// A started server whose http-01 validations go to `target`, with `workers` worker places (32,
/// the default, leaves a place free for every request here). The
/// validation timeout leaves room for a target held for a while; no retries, so one attempt is
/// one request.
async fn server(db: Db, target: &CountingTarget, workers: usize) -> TestEnv {
    let mut env = TestEnv::new(db).await;
    let section = format!(
        "  dns-servers: [\"{}\"]\n  http-port: {}\n  tls-alpn-port: {}\n  allow-loopback: true\n  timeout: 15s\n  retries: 0\n  workers: {workers}\n",
        env.dns.addr(),
        target.port,
        env.tls.port()
    );
    env.section("validation", &section);
    env.start().await;
    env
}

/// Signs one request per `(url, payload)`, each with its own nonce, then sends them all at the
/// same moment, each on its own connection (the nonces are fetched concurrently, which leaves
/// one warm connection per request in the client's pool). Replies in the order of `requests`.
async fn post_at_once(raw: &Raw, requests: &[(String, Value)]) -> Vec<Reply> {
    let nonces = futures::future::join_all(requests.iter().map(|_| raw.nonce())).await;
    let barrier = Arc::new(Barrier::new(requests.len()));
    let tasks: Vec<_> = requests
        .iter()
        .zip(nonces)
        .map(|((url, payload), nonce)| {
            let body = raw
                .key
                .sign_acme(url, Some(&nonce), raw.kid.as_deref(), Some(payload))
                .unwrap();
            let (http, url, barrier) = (raw.http.clone(), url.clone(), Arc::clone(&barrier));
            tokio::spawn(async move {
                barrier.wait().await;
                let resp = http
                    .post(&url)
                    .header("content-type", "application/jose+json")
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                let status = resp.status().as_u16();
                let headers = resp.headers().clone();
                let text = resp.text().await.unwrap();
                Reply {
                    status,
                    headers,
                    body: serde_json::from_str(&text).unwrap_or(Value::Null),
                    text,
                }
            })
        })
        .collect();
    let mut replies = Vec::new();
    for task in tasks {
        replies.push(task.await.unwrap());
    }
    replies
}

/// A new order for `name`: (order URL, order body, its authorization's URL and body).
async fn new_order(raw: &Raw, name: &str) -> (String, Value, String, Value) {
    let order = raw
        .post(
            &raw.url("/acme/new-order"),
            Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
        )
        .await;
    assert_eq!(order.status, 201, "{order:?}");
    let authz_url = order.body["authorizations"][0].as_str().unwrap().to_owned();
    let authz = raw.post(&authz_url, None).await;
    assert_eq!(authz.status, 200, "{authz:?}");
    assert_eq!(authz.body["status"], "pending", "{authz:?}");
    (order.location(), order.body, authz_url, authz.body)
}

/// The challenge of type `kind` in an authorization object.
fn challenge_of(authz: &Value, kind: &str) -> Value {
    authz["challenges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} challenge in {authz}"))
        .clone()
}

/// Polls `url` until its status is `want`, failing on any status but `pending` and `processing`
/// on the way, or after `within`.
async fn wait_for(raw: &Raw, url: &str, want: &str, within: Duration) -> Value {
    let on_the_way = OnTheWay::Only(&["pending", "processing"]);
    poll::wait_for_status(url, want, on_the_way, within, async || {
        let r = raw.post(url, None).await;
        assert_eq!(r.status, 200, "{r:?}");
        r.body
    })
    .await
    .unwrap_or_else(|stuck| panic!("{stuck}"))
}

/// The sum of the server's `metric` samples whose labels contain `filter`.
async fn metric(env: &TestEnv, metric: &str, filter: &str) -> f64 {
    let text = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(format!("http://{}/metrics", env.admin_addr()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")) || l.starts_with(&format!("{metric} ")))
        .filter(|l| l.contains(filter))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Validation attempts the server ran, of any type and outcome.
async fn validations(env: &TestEnv) -> f64 {
    metric(env, "certeasy_validations_total", "").await
}

fn csr(name: &str) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    URL_SAFE_NO_PAD.encode(params.serialize_request(&key).unwrap().der())
}

#[track_caller]
fn assert_refused(r: &Reply, status: u16, kind: &str, what: &str) {
    assert_eq!(r.status, status, "{what}: {r:?}");
    assert_eq!(r.problem_type(), format!("{ERR}{kind}"), "{what}: {r:?}");
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/problem+json"),
        "{what}"
    );
}

// ---- 1. concurrent challenge POSTs ----

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_posts_of_one_challenge_validate_it_once_sqlite() {
    concurrent_posts_of_one_challenge_validate_it_once(Db::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_posts_of_one_challenge_validate_it_once_postgres() {
    concurrent_posts_of_one_challenge_validate_it_once(Db::Postgres).await;
}

/// Eight POSTs of the same http-01 challenge at the same moment, to a target that answers at
/// once: the target is asked exactly once, the authorization and the order end valid and ready,
/// and every POST is answered 200 with the challenge `processing` or `valid`: the one that ran
/// the validation, those that waited for its write (`ra::in_flight`), and those the server read
/// only after that write (a repeated POST of a challenge that left pending is answered with the
/// challenge as it stands).
async fn concurrent_posts_of_one_challenge_validate_it_once(db: Db) {
    let target = CountingTarget::start(Duration::ZERO, true).await;
    let env = server(db, &target, 32).await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("same");
    let (order_url, _, authz_url, authz) = new_order(&raw, &name).await;
    let http01 = challenge_of(&authz, "http-01");
    let token = http01["token"].as_str().unwrap();
    let url = http01["url"].as_str().unwrap();
    target.add(token, &raw.key_authorization(token));
    let before = validations(&env).await;

    let requests: Vec<(String, Value)> = (0..8).map(|_| (url.to_owned(), json!({}))).collect();
    let replies = post_at_once(&raw, &requests).await;
    for (i, r) in replies.iter().enumerate() {
        let what = format!("POST {i}");
        assert_eq!(r.status, 200, "{what}: {r:?}");
        assert_eq!(r.body["url"], url, "{what}: {r:?}");
        assert_eq!(r.body["type"], "http-01", "{what}: {r:?}");
        assert!(
            matches!(r.body["status"].as_str(), Some("processing" | "valid")),
            "{what}: {r:?}"
        );
        assert!(r.body.get("error").is_none(), "{what}: {r:?}");
    }
    assert!(
        replies.iter().any(|r| r.body["status"] == "valid"),
        "a target that answers at once is validated within the request: {replies:?}"
    );

    let authz = wait_for(&raw, &authz_url, "valid", Duration::from_secs(20)).await;
    assert_eq!(
        challenge_of(&authz, "http-01")["status"],
        "valid",
        "{authz}"
    );
    wait_for(&raw, &order_url, "ready", Duration::from_secs(5)).await;
    assert_eq!(
        target.hits(token),
        1,
        "the target must be asked once for the token, however many POSTs came at once: {replies:?}"
    );
    assert_eq!(
        validations(&env).await - before,
        1.0,
        "one validation attempt in all"
    );
}

/// With one worker place (taken by the request that runs the validation at once, held at the
/// target for a moment, or by a job loop looking for work), concurrent POSTs of the same
/// challenge still validate it once: the in-flight registry is taken before a place is looked
/// for, so a request that finds none waits for the first one's write instead of starting the
/// challenge through the queue while the first validation has written nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_no_free_worker_place_concurrent_posts_still_validate_once() {
    let target = CountingTarget::start(Duration::from_millis(300), true).await;
    let env = server(Db::Sqlite, &target, 1).await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("full");
    let (order_url, _, authz_url, authz) = new_order(&raw, &name).await;
    let http01 = challenge_of(&authz, "http-01");
    let token = http01["token"].as_str().unwrap();
    let url = http01["url"].as_str().unwrap();
    target.add(token, &raw.key_authorization(token));

    let requests: Vec<(String, Value)> = (0..8).map(|_| (url.to_owned(), json!({}))).collect();
    let replies = post_at_once(&raw, &requests).await;
    for (i, r) in replies.iter().enumerate() {
        assert_eq!(r.status, 200, "POST {i}: {r:?}");
    }
    wait_for(&raw, &authz_url, "valid", Duration::from_secs(20)).await;
    wait_for(&raw, &order_url, "ready", Duration::from_secs(5)).await;
    assert_eq!(
        target.hits(token),
        1,
        "the target must be asked once: {replies:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sibling_challenge_posted_during_a_validation_is_refused_sqlite() {
    a_sibling_challenge_posted_during_a_validation_is_refused(Db::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sibling_challenge_posted_during_a_validation_is_refused_postgres() {
    a_sibling_challenge_posted_during_a_validation_is_refused(Db::Postgres).await;
}

/// POSTs of the http-01 challenge at once, and while its validation is at the target (held
/// there until every request is answered), POSTs of the same challenge and of its dns-01 and
/// tls-alpn-01 siblings, also at once. Every http-01 POST is answered 200 `processing` (the
/// validation outlasts the request's wait); every sibling POST is refused with the one
/// validation per authorization rule: 400 `malformed`, "another challenge of this authorization
/// is already being validated", and the sibling stays pending. Released, the target is asked
/// once, and the authorization ends valid by http-01. The siblings could have been validated
/// (their TXT record and certificate are in place): nothing but the rule refuses them.
async fn a_sibling_challenge_posted_during_a_validation_is_refused(db: Db) {
    let target = CountingTarget::start(Duration::ZERO, false).await;
    let env = server(db, &target, 32).await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("mix");
    let (order_url, _, authz_url, authz) = new_order(&raw, &name).await;
    let http01 = challenge_of(&authz, "http-01");
    let dns01 = challenge_of(&authz, "dns-01");
    let alpn = challenge_of(&authz, "tls-alpn-01");
    let token = http01["token"].as_str().unwrap();
    target.add(token, &raw.key_authorization(token));
    let dns_ka = raw.key_authorization(dns01["token"].as_str().unwrap());
    env.dns.add_txt(
        &format!("_acme-challenge.{name}"),
        &URL_SAFE_NO_PAD.encode(aws_lc_rs::digest::digest(
            &aws_lc_rs::digest::SHA256,
            dns_ka.as_bytes(),
        )),
    );
    env.tls
        .add(
            &name,
            &raw.key_authorization(alpn["token"].as_str().unwrap()),
        )
        .unwrap();
    let before = validations(&env).await;
    let url = |c: &Value| c["url"].as_str().unwrap().to_owned();

    // The first wave: http-01 only, so that it is http-01 that is being validated. The second,
    // once that validation has reached the target and while the first wave still waits for its
    // answers: the same challenge and both siblings.
    let first: Vec<(String, Value)> = (0..4).map(|_| (url(&http01), json!({}))).collect();
    let second: Vec<(String, Value)> = vec![
        (url(&dns01), json!({})),
        (url(&http01), json!({})),
        (url(&alpn), json!({})),
        (url(&dns01), json!({})),
        (url(&alpn), json!({})),
        (url(&http01), json!({})),
    ];
    let (first, second) = tokio::join!(post_at_once(&raw, &first), async {
        target.wait_for_hit(token, Duration::from_secs(20)).await;
        post_at_once(&raw, &second).await
    });
    assert_eq!(target.answered(token), 0, "the target was held throughout");

    for (i, r) in first.iter().enumerate() {
        assert_eq!(r.status, 200, "first wave {i}: {r:?}");
        assert_eq!(
            r.body["url"],
            url(&http01).as_str(),
            "first wave {i}: {r:?}"
        );
        assert_eq!(r.body["status"], "processing", "first wave {i}: {r:?}");
        assert!(r.header("retry-after").is_some(), "first wave {i}: {r:?}");
    }
    for (i, r) in second.iter().enumerate() {
        let what = format!("second wave {i}");
        if r.body["type"] == "http-01" {
            assert_eq!(r.status, 200, "{what}: {r:?}");
            assert_eq!(r.body["status"], "processing", "{what}: {r:?}");
            continue;
        }
        assert_refused(r, 400, "malformed", &what);
        assert_eq!(r.body["detail"], ANOTHER_CHALLENGE, "{what}: {r:?}");
    }
    assert_eq!(
        second.iter().filter(|r| r.status == 400).count(),
        4,
        "the four sibling POSTs are refused: {second:?}"
    );

    let pending = raw.post(&authz_url, None).await;
    assert_eq!(pending.body["status"], "pending", "{pending:?}");
    assert_eq!(
        challenge_of(&pending.body, "http-01")["status"],
        "processing",
        "{pending:?}"
    );
    for kind in ["dns-01", "tls-alpn-01"] {
        assert_eq!(
            challenge_of(&pending.body, kind)["status"],
            "pending",
            "{kind}: {pending:?}"
        );
    }

    target.open();
    let authz = wait_for(&raw, &authz_url, "valid", Duration::from_secs(20)).await;
    assert_eq!(
        challenge_of(&authz, "http-01")["status"],
        "valid",
        "{authz}"
    );
    for kind in ["dns-01", "tls-alpn-01"] {
        assert_eq!(
            challenge_of(&authz, kind)["status"],
            "pending",
            "{kind}: {authz}"
        );
    }
    wait_for(&raw, &order_url, "ready", Duration::from_secs(5)).await;
    assert_eq!(
        target.hits(token),
        1,
        "one request at the target for ten POSTs"
    );
    assert_eq!(
        validations(&env).await - before,
        1.0,
        "one validation attempt in all, none of dns-01 or tls-alpn-01"
    );
}

// ---- 2. concurrent finalize ----

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_finalizes_issue_one_certificate_sqlite() {
    concurrent_finalizes_issue_one_certificate(Db::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_finalizes_issue_one_certificate_postgres() {
    concurrent_finalizes_issue_one_certificate(Db::Postgres).await;
}

/// Six finalize POSTs with the same CSR at the same moment, on a ready order: one is answered
/// 200 with the order `valid` and its certificate URL; the five others 403 `orderNotReady`
/// (RFC 8555 §7.4), as finalizing a processing or valid order is, whether they waited for the
/// first one's write or came after it. One certificate exists for the account, the one the order links, and
/// the CA signed exactly one.
async fn concurrent_finalizes_issue_one_certificate(db: Db) {
    let target = CountingTarget::start(Duration::ZERO, true).await;
    let env = server(db, &target, 32).await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("final");
    let (order_url, order, _, authz) = new_order(&raw, &name).await;
    let http01 = challenge_of(&authz, "http-01");
    let token = http01["token"].as_str().unwrap();
    target.add(token, &raw.key_authorization(token));
    let r = raw
        .post(http01["url"].as_str().unwrap(), Some(&json!({})))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    wait_for(&raw, &order_url, "ready", Duration::from_secs(20)).await;
    let issued_before = metric(&env, "certeasy_certificates_issued_total", "").await;
    let signed_before = metric(&env, "certeasy_certificates_signed_total", "").await;

    let finalize = order["finalize"].as_str().unwrap().to_owned();
    let payload = json!({"csr": csr(&name)});
    let requests: Vec<(String, Value)> = (0..6)
        .map(|_| (finalize.clone(), payload.clone()))
        .collect();
    let replies = post_at_once(&raw, &requests).await;

    let valid: Vec<&Reply> = replies.iter().filter(|r| r.status == 200).collect();
    assert_eq!(valid.len(), 1, "exactly one finalize succeeds: {replies:?}");
    let winner = valid[0];
    assert_eq!(winner.body["status"], "valid", "{winner:?}");
    assert_eq!(winner.location(), order_url);
    assert_eq!(winner.header("retry-after"), None, "{winner:?}");
    let cert_url = winner.body["certificate"].as_str().unwrap().to_owned();
    for (i, r) in replies.iter().enumerate().filter(|(_, r)| r.status != 200) {
        let what = format!("finalize {i}");
        assert_refused(r, 403, "orderNotReady", &what);
        // Read after the winner reserved the serial (the order processing while it signs) or
        // after it stored the certificate (valid): either way nothing was reserved or signed.
        assert!(
            r.body["detail"]
                .as_str()
                .is_some_and(|d| d.contains("is valid") || d.contains("is processing")),
            "{what}: refused because the order is already taken: {r:?}"
        );
    }

    let order = raw.post(&order_url, None).await;
    assert_eq!(order.body["status"], "valid", "{order:?}");
    assert_eq!(order.body["certificate"], cert_url.as_str(), "{order:?}");
    let cert = raw.post(&cert_url, None).await;
    assert_eq!(cert.status, 200, "{cert:?}");
    let leaf = crate::certcheck::assert_chain(&cert.text, &env.root_pem(), &[&name]);

    // One certificate stored for the account, the one downloaded, and one signed and counted.
    let storage = storage::Storage::connect(&env.database_url())
        .await
        .unwrap();
    let account: acme_core::ids::AccountId = raw
        .kid
        .as_deref()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let filter = storage::model::CertificateFilter {
        account: Some(account),
        ..Default::default()
    };
    assert_eq!(storage.count_certificates(&filter).await.unwrap(), 1);
    let order_id: acme_core::ids::OrderId = order_url.rsplit('/').next().unwrap().parse().unwrap();
    let stored = storage
        .order(order_id, time::OffsetDateTime::now_utc())
        .await
        .unwrap()
        .unwrap();
    let stored_cert = storage
        .certificate(stored.certificate_id.unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored_cert.der, leaf,
        "the order's certificate is the one served"
    );
    storage.close().await;
    assert_eq!(
        metric(&env, "certeasy_certificates_issued_total", "").await - issued_before,
        1.0
    );
    // Signed once: the five that lost were refused when they tried to reserve the serial,
    // before anything was signed.
    assert_eq!(
        metric(&env, "certeasy_certificates_signed_total", "").await - signed_before,
        1.0
    );
}

// ---- 3. a slow target ----

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_target_is_answered_processing_and_validated_later_sqlite() {
    a_slow_target_is_answered_processing_and_validated_later(Db::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_target_is_answered_processing_and_validated_later_postgres() {
    a_slow_target_is_answered_processing_and_validated_later(Db::Postgres).await;
}

/// A target that answers after 2.5 s: the challenge POST is answered before that, `processing`
/// with a Retry-After; a repeated POST meanwhile changes nothing; the validation goes on after
/// the answer, and the authorization becomes valid once the target has answered, asked once.
async fn a_slow_target_is_answered_processing_and_validated_later(db: Db) {
    const SLOW: Duration = Duration::from_millis(2500);
    let target = CountingTarget::start(SLOW, true).await;
    let env = server(db, &target, 32).await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("slow");
    let (order_url, _, authz_url, authz) = new_order(&raw, &name).await;
    let http01 = challenge_of(&authz, "http-01");
    let token = http01["token"].as_str().unwrap();
    let url = http01["url"].as_str().unwrap();
    target.add(token, &raw.key_authorization(token));

    let nonce = raw.nonce().await;
    let body = raw
        .key
        .sign_acme(url, Some(&nonce), raw.kid.as_deref(), Some(&json!({})))
        .unwrap();
    let sent = Instant::now();
    let r = raw.send(url, body, "application/jose+json").await;
    let took = sent.elapsed();
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["status"], "processing", "{r:?}");
    let retry_after: u64 = r
        .header("retry-after")
        .expect("a processing challenge carries Retry-After")
        .parse()
        .unwrap();
    assert!(retry_after >= 1, "{r:?}");
    // Answered before the target: the request waited about a second, not for the target.
    assert_eq!(target.hits(token), 1, "the validation had started");
    assert_eq!(target.answered(token), 0, "answered before the target was");
    assert!(
        took < SLOW - Duration::from_millis(500),
        "the POST took {took:?}, about as long as the target"
    );

    // Repeated while the target is still thinking: the same challenge, still processing.
    let again = raw.post(url, Some(&json!({}))).await;
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(again.body["status"], "processing", "{again:?}");
    let pending = raw.post(&authz_url, None).await;
    assert_eq!(pending.body["status"], "pending", "{pending:?}");

    let authz = wait_for(&raw, &authz_url, "valid", Duration::from_secs(20)).await;
    assert_eq!(
        target.answered(token),
        1,
        "valid only once the target answered"
    );
    let valid = challenge_of(&authz, "http-01");
    assert_eq!(valid["status"], "valid", "{authz}");
    assert!(valid["validated"].is_string(), "{authz}");
    assert!(valid.get("error").is_none(), "{authz}");
    wait_for(&raw, &order_url, "ready", Duration::from_secs(5)).await;
    assert_eq!(target.hits(token), 1, "the slow target was asked once");
}

// ---- 4. the validity window is fixed when signing ----

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_window_is_fixed_when_signing_sqlite() {
    the_window_is_fixed_when_signing(Db::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_window_is_fixed_when_signing_postgres() {
    the_window_is_fixed_when_signing(Db::Postgres).await;
}

/// On a fake clock: an order that asks for notBefore = now and is finalized six days later gets
/// a certificate backdated by the configured minute from the signing time, not by six days; an
/// order whose notAfter has passed by the time it is finalized is refused with `malformed`
/// (the type a window refused at new-order gets) and becomes invalid, nothing signed.
async fn the_window_is_fixed_when_signing(db: Db) {
    use time::format_description::well_known::Rfc3339;

    let target = CountingTarget::start(Duration::ZERO, true).await;
    let mut env = TestEnv::new(db).await;
    let section = format!(
        "  dns-servers: [\"{}\"]\n  http-port: {}\n  tls-alpn-port: {}\n  allow-loopback: true\n  retries: 0\n",
        env.dns.addr(),
        target.port,
        env.tls.port()
    );
    env.section("validation", &section);
    env.write_config_for_test();
    let config = certeasy::config::load(&env.config_path).unwrap_or_else(|e| panic!("{e}"));
    let start =
        time::OffsetDateTime::from_unix_timestamp(time::OffsetDateTime::now_utc().unix_timestamp())
            .unwrap();
    let clock = acme_core::clock::FakeClock::new(start);
    env.server = Some(
        certeasy::serve::start(&config, Some(&env.config_path), Arc::new(clock.clone()))
            .await
            .unwrap(),
    );
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let signed_before = metric(&env, "certeasy_certificates_signed_total", "").await;

    // A ready order for `name` asking for `window` (notBefore, notAfter).
    let ready = |name: String, window: Value| {
        let (raw, target) = (&raw, &target);
        async move {
            let mut request = json!({"identifiers": [{"type": "dns", "value": name}]});
            for key in ["notBefore", "notAfter"] {
                if !window[key].is_null() {
                    request[key] = window[key].clone();
                }
            }
            let order = raw.post(&raw.url("/acme/new-order"), Some(&request)).await;
            assert_eq!(order.status, 201, "{order:?}");
            let authz = raw
                .post(order.body["authorizations"][0].as_str().unwrap(), None)
                .await;
            let http01 = challenge_of(&authz.body, "http-01");
            let token = http01["token"].as_str().unwrap();
            target.add(token, &raw.key_authorization(token));
            let r = raw
                .post(http01["url"].as_str().unwrap(), Some(&json!({})))
                .await;
            assert_eq!(r.status, 200, "{r:?}");
            let url = order.location();
            wait_for(raw, &url, "ready", Duration::from_secs(20)).await;
            (url, order.body)
        }
    };
    let rfc3339 = |t: time::OffsetDateTime| t.format(&Rfc3339).unwrap();

    // notBefore = the moment of ordering.
    let late = env.name("late");
    let (url, order) = ready(late.clone(), json!({"notBefore": rfc3339(start)})).await;
    clock.advance(time::Duration::days(6));
    let signed_at = start + time::Duration::days(6);
    let r = raw
        .post(
            order["finalize"].as_str().unwrap(),
            Some(&json!({"csr": csr(&late)})),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let valid = wait_for(&raw, &url, "valid", Duration::from_secs(20)).await;
    let cert = raw.post(valid["certificate"].as_str().unwrap(), None).await;
    let leaf = crate::certcheck::assert_chain(&cert.text, &env.root_pem(), &[&late]);
    let (_, parsed) = x509_parser::parse_x509_certificate(&leaf).unwrap();
    let not_before = parsed.validity().not_before.to_datetime();
    let not_after = parsed.validity().not_after.to_datetime();
    assert_eq!(
        not_before,
        signed_at - time::Duration::minutes(1),
        "backdated by the configured minute from signing, not to the order's notBefore"
    );
    assert_eq!(not_after - not_before, time::Duration::days(90));

    // notAfter passed while the order waited.
    let expired = env.name("expired");
    let asked_end = signed_at + time::Duration::days(1);
    let (url, order) = ready(expired.clone(), json!({"notAfter": rfc3339(asked_end)})).await;
    clock.advance(time::Duration::days(2));
    let r = raw
        .post(
            order["finalize"].as_str().unwrap(),
            Some(&json!({"csr": csr(&expired)})),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let refused = loop {
        let now = raw.post(&url, None).await;
        if now.body["status"] != "processing" {
            break now;
        }
        assert!(Instant::now() < deadline, "still processing: {now:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(refused.body["status"], "invalid", "{refused:?}");
    assert_eq!(
        refused.body["error"]["type"],
        format!("{ERR}malformed"),
        "{refused:?}"
    );
    assert!(
        refused.body["error"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("notAfter")),
        "{refused:?}"
    );
    assert_eq!(refused.body.get("certificate"), None, "{refused:?}");
    assert_eq!(
        metric(&env, "certeasy_certificates_signed_total", "").await - signed_before,
        1.0,
        "only the first order's certificate was signed"
    );
}
