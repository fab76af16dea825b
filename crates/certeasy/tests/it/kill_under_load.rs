//! Durability under SIGKILL: whatever a response told a client exists survives a crash of the
//! server right after that response.
//!
//! Sixteen clients run full flows (new account, new order, http-01, finalize, download) against
//! the real `certeasy serve` binary on its embedded SQLite (and again on PostgreSQL). Every response that says an object
//! exists goes into a ledger: a 201 new-account (URL and key), a 201 new-order (URL, status,
//! authorizations), every later order status a client saw, an accepted challenge or finalize, a
//! certificate URL and the downloaded chain. Once enough certificates are out, the server is
//! SIGKILLed with requests in flight (failed requests are simply not recorded), restarted on the
//! same data directory and ports, and every ledger entry is checked; then the load goes on and the
//! whole sequence is repeated. A response the client got is a promise, so nothing is tolerated:
//! not a missing object, not an order less advanced than a client saw it, not a changed
//! certificate URL or chain byte.

use std::collections::BTreeMap;
use std::process::Child;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use acme_jose::Algorithm;
use acme_jose::sign::SigningKey;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use futures::StreamExt;
use serde_json::Value;
use serde_json::json;

use crate::harness::Db;
use crate::harness::TestEnv;
use crate::harness::unique;

/// Concurrent clients, each running flows one after the other.
const WORKERS: usize = 16;
/// Certificates issued in a round before the server is killed.
const CERTIFICATES_PER_ROUND: usize = 20;
/// Kill-and-restart rounds; the ledger of all earlier rounds is checked after each.
const ROUNDS: usize = 2;
/// Orders an account places before its client starts over with a new account.
const ORDERS_PER_ACCOUNT: usize = 3;
/// How often clients poll; the server's `Retry-After` is ignored to keep the load up.
const POLL: Duration = Duration::from_millis(50);
/// A bound on anything that must happen (a round's issuance, a resumed job), generous for a
/// loaded two-core machine; never a timing assertion.
const PATIENCE: Duration = Duration::from_secs(180);
/// Requests checked at once during verification.
const VERIFY_CONCURRENCY: usize = 8;

/// An order's status, ordered by how far it has progressed; `Invalid` is handled apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Status {
    Pending,
    Ready,
    Processing,
    Valid,
    Invalid,
}

impl Status {
    fn parse(body: &Value) -> Result<Self, String> {
        match body["status"].as_str() {
            Some("pending") => Ok(Self::Pending),
            Some("ready") => Ok(Self::Ready),
            Some("processing") => Ok(Self::Processing),
            Some("valid") => Ok(Self::Valid),
            Some("invalid") => Ok(Self::Invalid),
            _ => Err(format!("no order status in {body}")),
        }
    }

    /// Whether a client that saw `self` may later see `now`: never backwards, never from a live
    /// order to `invalid` (nothing in this test fails a validation), never out of `invalid`.
    fn may_become(self, now: Self) -> bool {
        match (self, now) {
            (Self::Invalid, now) => now == Self::Invalid,
            (_, Self::Invalid) => false,
            (then, now) => now >= then,
        }
    }
}

struct AccountEntry {
    url: String,
    key: Arc<SigningKey>,
}

struct OrderEntry {
    account: usize,
    status: Status,
    authorizations: Vec<String>,
    /// The challenge POST was answered 200: its validation must finish after a crash.
    challenge_accepted: bool,
    certificate: Option<String>,
}

struct CertificateEntry {
    account: usize,
    pem: String,
}

/// Everything the server told a client exists, as the client last saw it.
#[derive(Default)]
struct Ledger {
    accounts: Vec<AccountEntry>,
    orders: BTreeMap<String, OrderEntry>,
    certificates: BTreeMap<String, CertificateEntry>,
    /// Answers that contradict an earlier answer (a regression seen while the server ran).
    anomalies: Vec<String>,
}

impl Ledger {
    fn add_account(&mut self, url: String, key: Arc<SigningKey>) -> usize {
        if let Some(old) = self.accounts.iter().find(|a| a.url == url) {
            self.anomalies
                .push(format!("two new accounts got the same URL {}", old.url));
        }
        self.accounts.push(AccountEntry { url, key });
        self.accounts.len() - 1
    }

    fn add_order(
        &mut self,
        url: &str,
        account: usize,
        status: Status,
        authorizations: Vec<String>,
    ) {
        let entry = OrderEntry {
            account,
            status,
            authorizations,
            challenge_accepted: false,
            certificate: None,
        };
        if self.orders.insert(url.to_owned(), entry).is_some() {
            self.anomalies
                .push(format!("two new orders got the same URL {url}"));
        }
    }

    /// Records an order body a client got, checking it against what clients saw before.
    fn observe_order(&mut self, url: &str, body: &Value) -> Result<Status, String> {
        let status = Status::parse(body)?;
        let certificate = body["certificate"].as_str().map(str::to_owned);
        let Some(entry) = self.orders.get_mut(url) else {
            return Err(format!("order {url} is not in the ledger"));
        };
        if !entry.status.may_become(status) {
            self.anomalies.push(format!(
                "order {url} went from {:?} to {status:?}: {body}",
                entry.status
            ));
            return Ok(status);
        }
        entry.status = status;
        match (&entry.certificate, certificate) {
            (Some(old), Some(new)) if *old != new => self.anomalies.push(format!(
                "order {url} changed its certificate URL from {old} to {new}"
            )),
            (None, Some(new)) => entry.certificate = Some(new),
            (Some(old), None) => self.anomalies.push(format!(
                "order {url} lost its certificate URL {old}: {body}"
            )),
            _ => {}
        }
        if status == Status::Valid && entry.certificate.is_none() {
            self.anomalies.push(format!(
                "order {url} is valid without a certificate: {body}"
            ));
        }
        Ok(status)
    }

    fn add_certificate(&mut self, url: &str, account: usize, pem: String) {
        match self.certificates.get(url) {
            Some(old) if old.pem != pem => self
                .anomalies
                .push(format!("certificate {url} was served with different bytes")),
            Some(_) => {}
            None => {
                self.certificates
                    .insert(url.to_owned(), CertificateEntry { account, pem });
            }
        }
    }

    fn summary(&self) -> String {
        let mut by_status = BTreeMap::new();
        for order in self.orders.values() {
            *by_status.entry(format!("{:?}", order.status)).or_insert(0) += 1;
        }
        format!(
            "{} accounts, {} orders {by_status:?}, {} certificates",
            self.accounts.len(),
            self.orders.len(),
            self.certificates.len()
        )
    }
}

fn lock(ledger: &Mutex<Ledger>) -> std::sync::MutexGuard<'_, Ledger> {
    ledger.lock().unwrap()
}

/// An HTTPS client trusting the test CA, with a bound on every request.
fn client(env: &TestEnv) -> reqwest::Client {
    let root = reqwest::Certificate::from_pem(env.root_pem().as_bytes()).unwrap();
    reqwest::Client::builder()
        .no_proxy()
        .add_root_certificate(root)
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

struct Reply {
    status: u16,
    location: Option<String>,
    body: Value,
    text: String,
}

/// One client's connection state: the next nonce comes from the last response.
struct Session<'a> {
    http: &'a reqwest::Client,
    base: &'a str,
    nonce: Option<String>,
}

impl<'a> Session<'a> {
    fn new(http: &'a reqwest::Client, base: &'a str) -> Self {
        Self {
            http,
            base,
            nonce: None,
        }
    }

    async fn fresh_nonce(&self) -> Result<String, String> {
        let url = format!("{}/acme/new-nonce", self.base);
        let resp = self
            .http
            .head(&url)
            .send()
            .await
            .map_err(|e| format!("HEAD {url}: {e}"))?;
        resp.headers()
            .get("replay-nonce")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or_else(|| format!("HEAD {url}: {} without a nonce", resp.status()))
    }

    /// A signed POST (`payload` `None` is POST-as-GET); a `badNonce` is retried with the fresh
    /// nonce it carries, anything else is returned as it came.
    async fn post(
        &mut self,
        key: &SigningKey,
        kid: Option<&str>,
        url: &str,
        payload: Option<&Value>,
    ) -> Result<Reply, String> {
        for _ in 0..5 {
            let nonce = match self.nonce.take() {
                Some(nonce) => nonce,
                None => self.fresh_nonce().await?,
            };
            let body = key
                .sign_acme(url, Some(&nonce), kid, payload)
                .map_err(|e| e.to_string())?;
            let resp = self
                .http
                .post(url)
                .header("content-type", "application/jose+json")
                .body(body)
                .send()
                .await
                .map_err(|e| format!("POST {url}: {e}"))?;
            let status = resp.status().as_u16();
            let header = |name: &str| {
                resp.headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            let location = header("location");
            self.nonce = header("replay-nonce");
            let text = resp
                .text()
                .await
                .map_err(|e| format!("POST {url}: body: {e}"))?;
            let body = serde_json::from_str(&text).unwrap_or(Value::Null);
            if status == 400 && body["type"] == "urn:ietf:params:acme:error:badNonce" {
                continue;
            }
            return Ok(Reply {
                status,
                location,
                body,
                text,
            });
        }
        Err(format!("POST {url}: badNonce five times"))
    }
}

fn expect_status(reply: &Reply, want: u16, what: &str) -> Result<(), String> {
    if reply.status == want {
        Ok(())
    } else {
        Err(format!("{what}: {} {}", reply.status, reply.text))
    }
}

/// Everything a client needs from the shared state.
struct Load<'a> {
    env: &'a TestEnv,
    ledger: &'a Mutex<Ledger>,
    stop: &'a AtomicBool,
    /// Flows between their first request and their last response.
    in_flight: &'a AtomicUsize,
}

/// Runs flows until told to stop; a failed flow (the server was killed under it) is abandoned.
async fn client_loop(load: &Load<'_>) {
    let http = client(load.env);
    let base = load.env.base_url();
    while !load.stop.load(Ordering::SeqCst) {
        load.in_flight.fetch_add(1, Ordering::SeqCst);
        let outcome = account_flow(load, &http, &base).await;
        load.in_flight.fetch_sub(1, Ordering::SeqCst);
        if let Err(e) = outcome {
            if load.stop.load(Ordering::SeqCst) {
                return;
            }
            // Not fatal by itself (the verification is what counts), but worth seeing.
            eprintln!("flow failed while the server ran: {e}");
            tokio::time::sleep(POLL).await;
        }
    }
}

async fn account_flow(load: &Load<'_>, http: &reqwest::Client, base: &str) -> Result<(), String> {
    let mut session = Session::new(http, base);
    let key = Arc::new(SigningKey::generate(Algorithm::Es256).map_err(|e| e.to_string())?);
    let reply = session
        .post(
            &key,
            None,
            &format!("{base}/acme/new-account"),
            Some(&json!({"termsOfServiceAgreed": true, "contact": ["mailto:durable@example.com"]})),
        )
        .await?;
    expect_status(&reply, 201, "new-account")?;
    let url = reply.location.ok_or("new-account without a Location")?;
    let account = lock(load.ledger).add_account(url.clone(), Arc::clone(&key));
    for _ in 0..ORDERS_PER_ACCOUNT {
        if load.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        order_flow(load, &mut session, &key, &url, account).await?;
    }
    Ok(())
}

async fn order_flow(
    load: &Load<'_>,
    session: &mut Session<'_>,
    key: &SigningKey,
    kid: &str,
    account: usize,
) -> Result<(), String> {
    let base = session.base;
    let name = load.env.name(&unique("k"));
    let reply = session
        .post(
            key,
            Some(kid),
            &format!("{base}/acme/new-order"),
            Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
        )
        .await?;
    expect_status(&reply, 201, "new-order")?;
    let order_url = reply.location.ok_or("new-order without a Location")?;
    let status = Status::parse(&reply.body)?;
    let authorizations: Vec<String> = reply.body["authorizations"]
        .as_array()
        .ok_or("new-order without authorizations")?
        .iter()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    let finalize = reply.body["finalize"]
        .as_str()
        .ok_or("new-order without a finalize URL")?
        .to_owned();
    lock(load.ledger).add_order(&order_url, account, status, authorizations.clone());

    for authz_url in &authorizations {
        let authz = session.post(key, Some(kid), authz_url, None).await?;
        expect_status(&authz, 200, "authorization")?;
        if authz.body["status"] == "valid" {
            continue;
        }
        let challenge = authz.body["challenges"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "http-01"))
            .ok_or("no http-01 challenge")?;
        let token = challenge["token"]
            .as_str()
            .ok_or("challenge without token")?;
        let thumbprint = key.public_jwk().thumbprint();
        load.env.http.add(token, &format!("{token}.{thumbprint}"));
        let url = challenge["url"].as_str().ok_or("challenge without URL")?;
        let reply = session.post(key, Some(kid), url, Some(&json!({}))).await?;
        expect_status(&reply, 200, "challenge")?;
    }
    if let Some(order) = lock(load.ledger).orders.get_mut(&order_url) {
        order.challenge_accepted = true;
    }

    poll_order(load, session, key, kid, &order_url, Status::Ready).await?;
    let csr = csr(&name)?;
    let reply = session
        .post(key, Some(kid), &finalize, Some(&json!({ "csr": csr })))
        .await?;
    expect_status(&reply, 200, "finalize")?;
    lock(load.ledger).observe_order(&order_url, &reply.body)?;
    let order = poll_order(load, session, key, kid, &order_url, Status::Valid).await?;
    let certificate = order["certificate"]
        .as_str()
        .ok_or("valid order without a certificate")?;
    let reply = session.post(key, Some(kid), certificate, None).await?;
    expect_status(&reply, 200, "certificate")?;
    if !reply.text.contains("-----BEGIN CERTIFICATE-----") {
        return Err(format!(
            "certificate {certificate} is not PEM: {}",
            reply.text
        ));
    }
    lock(load.ledger).add_certificate(certificate, account, reply.text);
    Ok(())
}

/// Polls an order, recording every answer, until it is at least `want`.
async fn poll_order(
    load: &Load<'_>,
    session: &mut Session<'_>,
    key: &SigningKey,
    kid: &str,
    url: &str,
    want: Status,
) -> Result<Value, String> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let reply = session.post(key, Some(kid), url, None).await?;
        expect_status(&reply, 200, "order")?;
        let status = lock(load.ledger).observe_order(url, &reply.body)?;
        if status == Status::Invalid {
            return Err(format!("order {url} became invalid: {}", reply.text));
        }
        if status >= want {
            return Ok(reply.body);
        }
        if load.stop.load(Ordering::SeqCst) || Instant::now() > deadline {
            return Err(format!("order {url} stayed {status:?}"));
        }
        tokio::time::sleep(POLL).await;
    }
}

fn csr(name: &str) -> Result<String, String> {
    let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let mut params =
        rcgen::CertificateParams::new(vec![name.to_owned()]).map_err(|e| e.to_string())?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    let csr = params.serialize_request(&key).map_err(|e| e.to_string())?;
    Ok(URL_SAFE_NO_PAD.encode(csr.der()))
}

/// The server process, SIGKILLed when dropped so a failing test leaves nothing behind.
struct Server(Option<Child>);

impl Server {
    /// `Child::kill` is SIGKILL on Unix: a crash, not a shutdown.
    fn sigkill(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.sigkill();
    }
}

/// Waits until `target` certificates are in the ledger, then kills the server under the load.
async fn kill_after(load: &Load<'_>, server: &mut Server, target: usize) {
    let deadline = Instant::now() + PATIENCE;
    while lock(load.ledger).certificates.len() < target {
        if Instant::now() > deadline {
            load.stop.store(true, Ordering::SeqCst);
            panic!(
                "{target} certificates were not issued in {PATIENCE:?}: {}\nserver log:\n{}",
                lock(load.ledger).summary(),
                load.env.server_log()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let in_flight = load.in_flight.load(Ordering::SeqCst);
    server.sigkill();
    load.stop.store(true, Ordering::SeqCst);
    println!(
        "SIGKILL with {in_flight} flows in flight; ledger: {}",
        lock(load.ledger).summary()
    );
}

/// Checks every ledger entry against the restarted server; returns what is wrong.
async fn verify(env: &TestEnv, ledger: &Mutex<Ledger>) -> Vec<String> {
    let http = client(env);
    let base = env.base_url();
    let failures = Mutex::new(Vec::new());
    let (http, base, failures_ref) = (&http, base.as_str(), &failures);
    let accounts: Vec<(String, Arc<SigningKey>)> = lock(ledger)
        .accounts
        .iter()
        .map(|a| (a.url.clone(), Arc::clone(&a.key)))
        .collect();
    let account_checks = accounts.iter().map(|(url, key)| async move {
        if let Err(e) = verify_account(http, base, url, key).await {
            failures_ref.lock().unwrap().push(e);
        }
    });
    futures::stream::iter(account_checks)
        .buffer_unordered(VERIFY_CONCURRENCY)
        .collect::<Vec<()>>()
        .await;

    let orders: Vec<String> = lock(ledger).orders.keys().cloned().collect();
    let accounts_ref = &accounts;
    let order_checks = orders.iter().map(|url| async move {
        if let Err(e) = verify_order(http, base, ledger, accounts_ref, url).await {
            failures_ref.lock().unwrap().push(e);
        }
    });
    futures::stream::iter(order_checks)
        .buffer_unordered(VERIFY_CONCURRENCY)
        .collect::<Vec<()>>()
        .await;

    let certificates: Vec<(String, usize, String)> = lock(ledger)
        .certificates
        .iter()
        .map(|(url, c)| (url.clone(), c.account, c.pem.clone()))
        .collect();
    let certificate_checks = certificates.iter().map(|(url, account, pem)| async move {
        let (kid, key) = &accounts_ref[*account];
        let mut session = Session::new(http, base);
        let outcome = match session.post(key, Some(kid), url, None).await {
            Ok(reply) if reply.status == 200 && reply.text == *pem => Ok(()),
            Ok(reply) if reply.status == 200 => Err(format!(
                "certificate {url} changed:\nwas:\n{pem}\nnow:\n{}",
                reply.text
            )),
            Ok(reply) => Err(format!(
                "certificate {url}: {} {}",
                reply.status, reply.text
            )),
            Err(e) => Err(e),
        };
        if let Err(e) = outcome {
            failures_ref.lock().unwrap().push(e);
        }
    });
    futures::stream::iter(certificate_checks)
        .buffer_unordered(VERIFY_CONCURRENCY)
        .collect::<Vec<()>>()
        .await;

    let mut failures = failures.into_inner().unwrap();
    failures.append(&mut lock(ledger).anomalies);
    failures
}

/// The account answers POST-as-GET, and its key still finds it (`onlyReturnExisting`).
async fn verify_account(
    http: &reqwest::Client,
    base: &str,
    url: &str,
    key: &SigningKey,
) -> Result<(), String> {
    let mut session = Session::new(http, base);
    let reply = session.post(key, Some(url), url, None).await?;
    if reply.status != 200 || reply.body["status"] != "valid" {
        return Err(format!("account {url}: {} {}", reply.status, reply.text));
    }
    let reply = session
        .post(
            key,
            None,
            &format!("{base}/acme/new-account"),
            Some(&json!({"onlyReturnExisting": true})),
        )
        .await?;
    if reply.status != 200 || reply.location.as_deref() != Some(url) {
        return Err(format!(
            "account {url} by its key: {} {:?} {}",
            reply.status, reply.location, reply.text
        ));
    }
    Ok(())
}

/// The order exists, at least as advanced as a client saw it, with the same certificate; its
/// authorizations exist; accepted work (a challenge, a finalize) finishes after the restart.
async fn verify_order(
    http: &reqwest::Client,
    base: &str,
    ledger: &Mutex<Ledger>,
    accounts: &[(String, Arc<SigningKey>)],
    url: &str,
) -> Result<(), String> {
    let (account, recorded, authorizations, challenge_accepted, certificate) = {
        let ledger = lock(ledger);
        let o = &ledger.orders[url];
        (
            o.account,
            o.status,
            o.authorizations.clone(),
            o.challenge_accepted,
            o.certificate.clone(),
        )
    };
    let (kid, key) = &accounts[account];
    let mut session = Session::new(http, base);
    for authz in &authorizations {
        let reply = session.post(key, Some(kid), authz, None).await?;
        if reply.status != 200 {
            return Err(format!(
                "authorization {authz} of order {url}: {} {}",
                reply.status, reply.text
            ));
        }
    }
    // Where a client saw the order go: finalize accepted means a certificate is owed, an
    // accepted challenge means the validation is owed.
    let owed = if recorded >= Status::Processing {
        Status::Valid
    } else if challenge_accepted {
        Status::Ready
    } else {
        recorded
    };
    let deadline = Instant::now() + PATIENCE;
    loop {
        let reply = session.post(key, Some(kid), url, None).await?;
        if reply.status != 200 {
            return Err(format!(
                "order {url} (seen {recorded:?}): {} {}",
                reply.status, reply.text
            ));
        }
        let status = Status::parse(&reply.body)?;
        if !recorded.may_become(status) {
            return Err(format!(
                "order {url} was seen {recorded:?}, is now {}",
                reply.text
            ));
        }
        if let Some(certificate) = &certificate
            && reply.body["certificate"].as_str() != Some(certificate.as_str())
        {
            return Err(format!(
                "order {url} had certificate {certificate}, is now {}",
                reply.text
            ));
        }
        // Recording keeps the ledger strict for the next round.
        lock(ledger).observe_order(url, &reply.body)?;
        if status == Status::Invalid || status >= owed {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "order {url} (seen {recorded:?}) never reached {owed:?} after the restart: {}",
                reply.text
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

fn configure(env: &mut TestEnv) {
    // A short lease so jobs claimed by the killed process are resumed soon after the restart.
    let validation = format!(
        "  dns-servers: [\"{}\"]\n  http-port: {}\n  tls-alpn-port: {}\n  allow-loopback: true\n  timeout: 5s\n  job-lease: 2s\n",
        env.dns.addr(),
        env.http.port(),
        env.tls.port()
    );
    env.section("validation", &validation);
    env.section(
        "rate-limiting",
        "  whitelist: [\"127.0.0.1\", \"::1\"]\n  order-creation:\n    order-burst: 1000\n    orders-per-account-per-hour: 1000\n    san-budget-per-account-per-hour: 1000\n",
    );
}

#[tokio::test]
async fn sigkill_under_load_loses_nothing_a_client_was_told() {
    kill_restart_check(Db::Sqlite).await;
}

/// The same promises on PostgreSQL, where a commit is the server's, not the file's.
#[tokio::test]
async fn sigkill_under_load_on_postgres_loses_nothing_a_client_was_told() {
    kill_restart_check(Db::Postgres).await;
}

/// Rounds of load, SIGKILL, restart on the same data and ports, and a check of the whole ledger.
async fn kill_restart_check(db: Db) {
    let mut env = TestEnv::new(db).await;
    configure(&mut env);
    env.spawn_binary().await;
    let ledger = Mutex::new(Ledger::default());
    for round in 1..=ROUNDS {
        let target = lock(&ledger).certificates.len() + CERTIFICATES_PER_ROUND;
        let mut server = Server(env.child.take());
        let stop = AtomicBool::new(false);
        let in_flight = AtomicUsize::new(0);
        let load = Load {
            env: &env,
            ledger: &ledger,
            stop: &stop,
            in_flight: &in_flight,
        };
        let clients = futures::future::join_all((0..WORKERS).map(|_| client_loop(&load)));
        tokio::join!(clients, kill_after(&load, &mut server, target));
        drop(server);

        // spawn_binary starts a new log; keep the killed server's.
        let log = env.dir.path().join("server.log");
        let kept = env.dir.path().join(format!("server-killed-{round}.log"));
        std::fs::rename(&log, &kept).unwrap();
        env.spawn_binary().await;
        let failures = verify(&env, &ledger).await;
        assert!(
            failures.is_empty(),
            "round {round}: {} promises broken after SIGKILL and restart:\n{}\n\nkilled server's log tail:\n{}\n\nrestarted server's log:\n{}",
            failures.len(),
            failures.join("\n"),
            tail(&std::fs::read_to_string(&kept).unwrap_or_default()),
            tail(&env.server_log())
        );
        println!(
            "round {round}: all promises kept after restart; ledger: {}",
            lock(&ledger).summary()
        );
    }
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(200)..].join("\n")
}
