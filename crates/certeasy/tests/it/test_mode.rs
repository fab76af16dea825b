//! `certeasy serve --test-mode`: the real binary started the way a client's CI starts it, read
//! through its `--json` line, and driven by lego and instant-acme: http-01 on the chosen port,
//! always-valid challenges with no responder, refused nonces that clients retry, the test rate
//! limits' 429, the certificate lifetime knob, and the temporary state removed on SIGTERM.

use std::net::Ipv4Addr;
use std::path::Path;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

use acme_jose::Algorithm;
use acme_jose::sign::SigningKey;
use instant_acme::Identifier;
use instant_acme::NewOrder;
use instant_acme::OrderStatus;
use instant_acme::RetryPolicy;
use serde_json::Value;
use serde_json::json;
use testkit::dns::TestDnsServer;
use tokio::io::AsyncBufReadExt;
use tokio::io::BufReader;
use tokio::process::Child;
use tokio::process::Command;

use crate::certcheck::pem_ders;
use crate::harness::free_port;
use crate::harness::run;
use crate::harness::unique;
use crate::raw::Raw;

const TIMEOUT: Duration = Duration::from_secs(120);

/// A running `certeasy serve --test-mode --json`.
struct TestModeServer {
    child: Child,
    /// What the server printed: directory, root, root-pem, admin, data-dir.
    info: Value,
    log: PathBuf,
    /// For the log and the clients' files; not the server's state (that is its own temp dir).
    work: tempfile::TempDir,
}

impl TestModeServer {
    /// Starts the binary on free loopback ports with `args` after `serve --test-mode --json`, and
    /// reads its JSON line.
    async fn start(args: &[&str]) -> Self {
        let work = tempfile::tempdir().unwrap();
        let log = work.path().join("server.log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_certeasy"))
            .args(["serve", "--test-mode", "--json", "--listen"])
            .arg(format!("127.0.0.1:{}", free_port()))
            .arg("--admin-listen")
            .arg(format!("127.0.0.1:{}", free_port()))
            .arg("--crl-listen")
            .arg(format!("127.0.0.1:{}", free_port()))
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "no JSON line within 60 s:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            })
            .unwrap()
            .unwrap_or_else(|| {
                panic!(
                    "the server exited before printing:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            });
        let info: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(info["test-mode"], true, "{info}");
        Self {
            child,
            info,
            log,
            work,
        }
    }

    fn directory(&self) -> String {
        self.info["directory"].as_str().unwrap().to_owned()
    }

    fn root(&self) -> PathBuf {
        PathBuf::from(self.info["root"].as_str().unwrap())
    }

    fn data_dir(&self) -> PathBuf {
        PathBuf::from(self.info["data-dir"].as_str().unwrap())
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A raw ACME client (for what no client library shows: statuses and headers).
    fn raw(&self) -> Raw {
        let root =
            reqwest::Certificate::from_pem(self.info["root-pem"].as_str().unwrap().as_bytes())
                .unwrap();
        Raw {
            http: reqwest::Client::builder()
                .no_proxy()
                .add_root_certificate(root)
                .build()
                .unwrap(),
            base: self.directory().trim_end_matches("/directory").to_owned(),
            key: SigningKey::generate(Algorithm::Es256).unwrap(),
            kid: None,
        }
    }

    /// The sum of one metric's samples whose labels contain `labels`.
    async fn metric(&self, name: &str, labels: &str) -> f64 {
        let url = format!("{}/metrics", self.info["admin"].as_str().unwrap());
        let text = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .get(url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .filter(|l| l.starts_with(name) && l.contains(labels))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// SIGTERM, then waits (with a deadline) for a clean exit.
    async fn terminate(mut self) {
        let pid = self.child.id().unwrap();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("the server stops within 30 s of SIGTERM")
            .unwrap();
        assert!(exit.success(), "exit {exit}:\n{}", self.log());
    }
}

fn lego(server: &TestModeServer, path: &Path) -> Command {
    crate::clients::lego(&server.root(), &server.directory(), path)
}

/// notAfter − notBefore of the first certificate of a PEM chain.
fn lifetime(pem: &str) -> Duration {
    use x509_parser::prelude::FromDer;
    let der = pem_ders(pem).remove(0);
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(&der).unwrap();
    let v = cert.validity();
    Duration::from_secs(u64::try_from(v.not_after.timestamp() - v.not_before.timestamp()).unwrap())
}

#[tokio::test]
async fn lego_issues_over_http01_on_the_chosen_port_and_the_state_goes_on_exit() {
    let dns = TestDnsServer::start().await.unwrap();
    let name = format!("{}.test-mode.certeasy.test", unique("lego"));
    dns.set_a(&name, Ipv4Addr::LOCALHOST);
    let port = free_port();
    let server = TestModeServer::start(&[
        "--http-port",
        &port.to_string(),
        "--dns-server",
        &dns.addr().to_string(),
        "--cert-lifetime",
        "1h",
    ])
    .await;
    let data_dir = server.data_dir();
    assert!(data_dir.join("ca/root.pem").is_file());
    assert!(
        data_dir
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("certeasy-test-mode-")
    );
    let path = server.work.path().join("lego");
    let mut cmd = lego(&server, &path);
    cmd.args([
        "--domains",
        &name,
        "--http",
        "--http.port",
        &format!("127.0.0.1:{port}"),
        "run",
    ]);
    let (ok, out) = run(cmd, TIMEOUT).await;
    assert!(ok, "lego failed:\n{out}\n--- server ---\n{}", server.log());
    let pem = std::fs::read_to_string(path.join(format!("certificates/{name}.crt"))).unwrap();
    assert_eq!(
        lifetime(&pem),
        Duration::from_secs(3600),
        "--cert-lifetime 1h"
    );
    assert!(
        server.log().contains("TEST MODE"),
        "the start is logged loudly"
    );

    server.terminate().await;
    assert!(
        !data_dir.exists(),
        "the temporary state directory {} is removed on exit",
        data_dir.display()
    );
}

#[tokio::test]
async fn always_valid_issues_with_no_responder_and_no_dns() {
    // No DNS server, nothing listening: the names do not even resolve.
    let server = TestModeServer::start(&["--always-valid"]).await;
    let http = testkit::acme_http::nodelay_client(&server.root()).unwrap();
    let (account, _) = instant_acme::Account::builder_with_http(http)
        .create(
            &instant_acme::NewAccount {
                contact: &[],
                terms_of_service_agreed: true,
                only_return_existing: false,
            },
            server.directory(),
            None,
        )
        .await
        .unwrap();
    let identifiers = [
        Identifier::Dns(format!("{}.invalid", unique("nobody"))),
        Identifier::Dns(format!("*.{}.invalid", unique("wild"))),
    ];
    let mut order = account
        .new_order(&NewOrder::new(&identifiers))
        .await
        .unwrap();
    let mut authorizations = order.authorizations();
    while let Some(authz) = authorizations.next().await {
        let mut authz = authz.unwrap();
        // A wildcard is offered dns-01 only.
        let kind = if authz.identifier().wildcard {
            instant_acme::ChallengeType::Dns01
        } else {
            instant_acme::ChallengeType::Http01
        };
        authz.challenge(kind).unwrap().set_ready().await.unwrap();
    }
    let status = order.poll_ready(&RetryPolicy::default()).await.unwrap();
    assert_eq!(
        status,
        OrderStatus::Ready,
        "{:?}\n{}",
        order.state(),
        server.log()
    );
    order.finalize().await.unwrap();
    let chain = order
        .poll_certificate(&RetryPolicy::default())
        .await
        .unwrap();
    assert!(!pem_ders(&chain).is_empty());
    server.terminate().await;
}

#[tokio::test]
async fn lego_succeeds_while_half_the_nonces_are_refused() {
    let server = TestModeServer::start(&["--reject-nonces", "50", "--always-valid"]).await;
    // lego signs about eight requests per certificate, so one run meets no refusal now and then
    // (1 in 256 at 50 %); up to five runs, each of which must succeed, make a sample in which
    // at least one refusal is certain unless the refusals do not happen at all.
    let mut refused = 0.0;
    let mut runs = Vec::new();
    for attempt in 0..5 {
        let name = format!("{}.invalid", unique("nonces"));
        let path = server.work.path().join(format!("lego-{attempt}"));
        let mut cmd = lego(&server, &path);
        // lego still starts its http-01 server, but always-valid never contacts it.
        cmd.args([
            "--domains",
            &name,
            "--http",
            "--http.port",
            &format!("127.0.0.1:{}", free_port()),
            "run",
        ]);
        let (ok, out) = run(cmd, TIMEOUT).await;
        assert!(ok, "lego failed:\n{out}\n--- server ---\n{}", server.log());
        assert!(path.join(format!("certificates/{name}.crt")).is_file());
        runs.push(out);
        refused = server
            .metric("certeasy_nonces_refused_total", "reason=\"injected\"")
            .await;
        if refused >= 1.0 {
            break;
        }
    }
    assert!(
        refused >= 1.0,
        "the server refused no nonce on purpose in {} lego runs\n--- lego ---\n{}\n--- server ---\n{}",
        runs.len(),
        runs.join("\n---\n"),
        server.log()
    );

    // One raw client: about half of 40 valid nonces are refused, as badNonce.
    let mut raw = server.raw();
    let mut registered = false;
    for _ in 0..20 {
        let r = raw
            .post(
                &raw.url("/acme/new-account"),
                Some(&json!({"termsOfServiceAgreed": true})),
            )
            .await;
        if r.status == 201 {
            raw.kid = Some(r.location());
            registered = true;
            break;
        }
        assert_eq!(
            r.problem_type(),
            "urn:ietf:params:acme:error:badNonce",
            "{r:?}"
        );
    }
    assert!(registered, "20 attempts all refused at 50 %");
    let mut bad = 0;
    for _ in 0..40 {
        let r = raw.post(raw.kid.clone().unwrap().as_str(), None).await;
        match r.status {
            200 => {}
            400 => {
                assert_eq!(
                    r.problem_type(),
                    "urn:ietf:params:acme:error:badNonce",
                    "{r:?}"
                );
                assert!(r.header("replay-nonce").is_some());
                bad += 1;
            }
            other => panic!("unexpected {other}: {r:?}"),
        }
    }
    // 50 % of 40: outside 5..=35 has a probability below 1e-5.
    assert!((5..=35).contains(&bad), "{bad} of 40 refused");
    server.terminate().await;
}

#[tokio::test]
async fn test_rate_limits_answer_429_with_retry_after_within_a_few_orders() {
    let server = TestModeServer::start(&["--rate-limits", "--always-valid"]).await;
    let mut raw = server.raw();
    let r = raw
        .post(
            &raw.url("/acme/new-account"),
            Some(&json!({"termsOfServiceAgreed": true})),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    raw.kid = Some(r.location());
    let started = Instant::now();
    let mut created = 0;
    let limited = loop {
        let name = format!("{}.invalid", unique("limited"));
        let r = raw
            .post(
                &raw.url("/acme/new-order"),
                Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
            )
            .await;
        if r.status == 429 {
            break r;
        }
        assert_eq!(r.status, 201, "{r:?}");
        created += 1;
        assert!(created <= 10, "no 429 after {created} orders");
    };
    assert_eq!(
        limited.problem_type(),
        "urn:ietf:params:acme:error:rateLimited"
    );
    let retry: u64 = limited
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(created, 5, "the order burst of the test limits");
    server.terminate().await;
}
