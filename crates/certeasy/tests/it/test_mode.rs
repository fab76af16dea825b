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

/// What a `certeasy` run that must end by itself left: exit code, stdout, stderr.
struct Ended {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Ended {
    /// The stderr lines naming `key`: what `serve` and `config check` must print alike.
    fn lines_naming(&self, key: &str) -> Vec<String> {
        self.stderr
            .lines()
            .filter(|l| l.contains(key))
            .map(str::to_owned)
            .collect()
    }
}

/// Runs `certeasy args` with `tmp` as its TMPDIR (where test mode would create its temporary
/// state), to its end; a refused start ends at once, so 30 s is only a deadline.
async fn run_to_end(args: &[String], tmp: &Path) -> Ended {
    let child = Command::new(env!("CARGO_BIN_EXE_certeasy"))
        .args(args)
        .env("TMPDIR", tmp)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("a refused start ends within 30 s; this one kept running (it was not refused)")
        .unwrap();
    Ended {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `serve` with `flags` (listeners on free loopback ports unless `flags` names one), and
/// `config check` with the same: both must refuse with the same line naming `key`, exit 2, print
/// nothing on stdout and leave `tmp` empty. Returns serve's run.
async fn refused_alike(file: Option<&Path>, flags: &[String], key: &str, tmp: &Path) -> Ended {
    let mut common: Vec<String> = Vec::new();
    if !flags.iter().any(|f| f == "--listen") {
        common.extend(["--listen".to_owned(), format!("127.0.0.1:{}", free_port())]);
    }
    common.extend([
        "--admin-listen".to_owned(),
        format!("127.0.0.1:{}", free_port()),
        "--crl-listen".to_owned(),
        format!("127.0.0.1:{}", free_port()),
    ]);
    common.extend(flags.iter().cloned());
    let mut serve = vec!["serve".to_owned()];
    if flags.iter().any(|f| f == "--test-mode") {
        serve.push("--json".to_owned());
    }
    let mut check = vec!["config".to_owned(), "check".to_owned()];
    if let Some(file) = file {
        serve.extend(["--config".to_owned(), file.display().to_string()]);
        check.push(file.display().to_string());
    }
    serve.extend(common.iter().cloned());
    check.extend(common);
    let served = run_to_end(&serve, tmp).await;
    assert_eq!(served.code, Some(2), "serve {serve:?}:\n{}", served.stderr);
    assert!(served.stdout.is_empty(), "{}", served.stdout);
    let checked = run_to_end(&check, tmp).await;
    assert_eq!(checked.code, Some(2), "{check:?}:\n{}", checked.stderr);
    let refusal = served.lines_naming(key);
    assert!(
        !refusal.is_empty(),
        "no line names {key}:\n{}",
        served.stderr
    );
    assert_eq!(
        checked.lines_naming(key),
        refusal,
        "config check says the same"
    );
    assert_eq!(
        std::fs::read_dir(tmp).unwrap().count(),
        0,
        "a refused test instance creates no state directory"
    );
    served
}

/// Tables and rows in a PostgreSQL database outside PostgreSQL's own schemas.
fn user_tables(url: &str) -> String {
    testkit::postgres::psql(
        url,
        "SELECT count(*) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n \
         ON n.oid = c.relnamespace WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') \
         AND n.nspname NOT LIKE 'pg_toast%'",
    )
    .unwrap()
}

#[tokio::test]
async fn test_mode_refuses_postgresql_before_connecting_and_config_check_says_so() {
    let pg = crate::harness::PgDatabase::create("certeasy_it_").expect("a throw-away database");
    assert_eq!(user_tables(pg.url()), "0", "a fresh database");
    let work = tempfile::tempdir().unwrap();
    let tmp = work.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();

    // The production file, turned into a test instance by the flags.
    let production = work.path().join("prod.yaml");
    std::fs::write(&production, format!("database:\n  url: \"{}\"\n", pg.url())).unwrap();
    let flags = ["--test-mode", "--always-valid"].map(str::to_owned);
    let served = refused_alike(Some(&production), &flags, "database.url", &tmp).await;
    assert!(served.stderr.contains("PostgreSQL"), "{}", served.stderr);
    assert!(
        !served.stderr.contains(pg.url()),
        "the URL is not printed (it may hold a password)"
    );

    // Test mode on in the file: reported at the file's line.
    let in_file = work.path().join("test.yaml");
    std::fs::write(
        &in_file,
        format!(
            "test-mode:\n  enabled: true\ndatabase:\n  url: \"{}\"\n",
            pg.url()
        ),
    )
    .unwrap();
    let served = refused_alike(Some(&in_file), &[], "database.url", &tmp).await;
    assert!(
        served.stderr.contains(&format!("{}:4:", in_file.display())),
        "{}",
        served.stderr
    );

    assert_eq!(
        user_tables(pg.url()),
        "0",
        "nothing was written to the database test mode refused"
    );
}

#[tokio::test]
async fn test_mode_refuses_a_data_directory_it_did_not_create_and_takes_its_own_again() {
    let work = tempfile::tempdir().unwrap();
    let tmp = work.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    // A production data directory: CA key, database.
    let production = work.path().join("production");
    std::fs::create_dir_all(production.join("ca")).unwrap();
    std::fs::write(production.join("ca/intermediate.key"), "PRODUCTION KEY").unwrap();
    std::fs::write(production.join("certeasy.db"), "PRODUCTION DB").unwrap();
    let listing = |dir: &Path| {
        let mut names: Vec<String> = walk(dir)
            .iter()
            .map(|p| p.strip_prefix(dir).unwrap().display().to_string())
            .collect();
        names.sort();
        names
    };
    let before = listing(&production);
    let flags = [
        "--test-mode".to_owned(),
        "--data-dir".to_owned(),
        production.display().to_string(),
    ];
    let served = refused_alike(None, &flags, "test-mode.data-dir", &tmp).await;
    assert!(
        served.stderr.contains(".certeasy-test-mode"),
        "{}",
        served.stderr
    );
    assert_eq!(listing(&production), before, "nothing written in it");
    assert_eq!(
        std::fs::read_to_string(production.join("ca/intermediate.key")).unwrap(),
        "PRODUCTION KEY"
    );

    // A new directory is created and marked, and taken again on the next start.
    let own = work.path().join("own");
    let own_arg = own.display().to_string();
    let first = TestModeServer::start(&["--data-dir", &own_arg]).await;
    assert!(own.join(".certeasy-test-mode").is_file());
    let root = first.info["root-pem"].as_str().unwrap().to_owned();
    first.terminate().await;
    assert!(own.join("ca").is_dir(), "a given directory is kept");
    let second = TestModeServer::start(&["--data-dir", &own_arg]).await;
    assert_eq!(
        second.info["root-pem"].as_str().unwrap(),
        root,
        "its own CA is loaded again"
    );
    second.terminate().await;
}

/// Every file under `dir`, recursively.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(walk(&path));
        }
        found.push(path);
    }
    found
}

#[tokio::test]
async fn test_mode_refuses_a_listener_that_is_not_loopback() {
    let work = tempfile::tempdir().unwrap();
    let tmp = work.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let port = free_port();
    let flags = [
        "--test-mode".to_owned(),
        "--always-valid".to_owned(),
        "--listen".to_owned(),
        format!("0.0.0.0:{port}"),
    ];
    let served = refused_alike(None, &flags, "server.listen", &tmp).await;
    assert!(
        served.stderr.contains("not a loopback address"),
        "{}",
        served.stderr
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "nothing listens on the refused port"
    );
}
