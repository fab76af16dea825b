//! Clients see why a validation failed, and promptly: the real certbot and lego against the real
//! `certeasy serve` binary with the shipped validation defaults (no `retries`, `retry-backoff` or
//! `retry-window` in the file, the default `timeout`), through an unserved http-01 challenge, a
//! wrong key authorization, a wrong TXT value, a missing TXT record and a name that does not
//! exist. Each client run must print the problem type the server decided and end within 15 s:
//! a client that gives up polling first (certbot 2.1 after about 30 s, with "All authorizations
//! were not finalized by the CA") never shows the subscriber the real problem.
//!
//! Also the counting servers the retry tests use: an http-01 target that answers every request
//! with the wrong key authorization, and a DNS forwarder that counts challenge TXT queries.

use std::net::Ipv4Addr;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use tokio::io::AsyncReadExt;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::net::UdpSocket;
use tokio::process::Command;

use crate::harness::Db;
use crate::harness::TestEnv;
use crate::harness::free_port;
use crate::harness::run;

/// The longest a client may take to report a failed validation.
const PROMPT: Duration = Duration::from_secs(15);

/// How long a client run may take before the harness kills it: well past [`PROMPT`], so a slow
/// client shows what it printed instead of only "timed out".
const KILL_AFTER: Duration = Duration::from_secs(90);

/// An http-01 target on 127.0.0.1 that answers every request 200 with a body that is no key
/// authorization, and counts the requests.
pub struct WrongAnswer {
    pub port: u16,
    pub requests: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl WrongAnswer {
    pub async fn start() -> Self {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&requests);
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let counted = Arc::clone(&counted);
                tokio::spawn(async move {
                    let mut buf = [0_u8; 4096];
                    if matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {
                        counted.fetch_add(1, Ordering::SeqCst);
                    }
                    let body = "not-the-key-authorization";
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                });
            }
        });
        Self {
            port,
            requests,
            task,
        }
    }
}

impl Drop for WrongAnswer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A UDP DNS forwarder on 127.0.0.1 in front of `upstream` that counts the queries for names
/// under `_acme-challenge.`: what a subscriber's nameserver sees of dns-01 attempts.
pub struct CountingDns {
    pub addr: SocketAddr,
    pub challenge_queries: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl CountingDns {
    pub async fn start(upstream: SocketAddr) -> Self {
        let socket = Arc::new(UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap());
        let addr = socket.local_addr().unwrap();
        let challenge_queries = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&challenge_queries);
        let task = tokio::spawn(async move {
            let mut buf = [0_u8; 4096];
            while let Ok((n, client)) = socket.recv_from(&mut buf).await {
                let query = buf[..n].to_vec();
                // Names travel as length-prefixed labels: 15 then "_acme-challenge".
                let lower = query.to_ascii_lowercase();
                if lower.windows(16).any(|w| w == b"\x0f_acme-challenge") {
                    counted.fetch_add(1, Ordering::SeqCst);
                }
                let socket = Arc::clone(&socket);
                tokio::spawn(async move {
                    let forward = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
                    forward.send_to(&query, upstream).await.unwrap();
                    let mut answer = [0_u8; 4096];
                    if let Ok(Ok(m)) =
                        tokio::time::timeout(Duration::from_secs(2), forward.recv(&mut answer))
                            .await
                    {
                        let _ = socket.send_to(&answer[..m], client).await;
                    }
                });
            }
        });
        Self {
            addr,
            challenge_queries,
            task,
        }
    }
}

impl Drop for CountingDns {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One failure case: the name, which challenge the client uses, and the problem type expected.
struct Case {
    what: &'static str,
    name: String,
    dns01: bool,
    /// The TXT value the client's DNS hook publishes; `None`: it publishes nothing.
    txt: Option<&'static str>,
    problem: &'static str,
}

/// A server with the shipped validation defaults, its http-01 port on a [`WrongAnswer`], and the
/// five cases, their names set up in the test DNS server.
async fn server_and_cases() -> (TestEnv, WrongAnswer, Vec<Case>) {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let wrong = WrongAnswer::start().await;
    // Only what a test network needs: the test resolver, the ports, loopback targets. No
    // timeout, retries, retry-backoff or retry-window: the shipped defaults decide.
    env.section(
        "validation",
        &format!(
            "  dns-servers: [\"{}\"]\n  http-port: {}\n  tls-alpn-port: {}\n  allow-loopback: true\n",
            env.dns.addr(),
            wrong.port,
            env.tls.port()
        ),
    );
    env.spawn_binary().await;
    let unserved = env.name("unserved");
    // Nothing listens on 127.0.0.2: the connection is refused.
    env.dns.set_a(&unserved, Ipv4Addr::new(127, 0, 0, 2));
    let wrong_key = env.name("wrong-key");
    let wrong_txt = env.name("wrong-txt");
    let no_txt = env.name("no-txt");
    // The challenge name exists (as beside a CNAME or other records) but holds no TXT record.
    env.dns.clear_txt(&format!("_acme-challenge.{no_txt}"));
    let nxdomain = format!("nxdomain.{}.certeasy.test", env.suffix);
    let cases = vec![
        Case {
            what: "an unserved http-01 challenge",
            name: unserved,
            dns01: false,
            txt: None,
            problem: "connection",
        },
        Case {
            what: "a wrong key authorization",
            name: wrong_key,
            dns01: false,
            txt: None,
            problem: "incorrectResponse",
        },
        Case {
            what: "a wrong TXT value",
            name: wrong_txt,
            dns01: true,
            txt: Some("not-the-digest-of-the-key-authorization"),
            problem: "incorrectResponse",
        },
        Case {
            what: "no TXT record",
            name: no_txt,
            dns01: true,
            txt: None,
            problem: "unauthorized",
        },
        Case {
            what: "a name that does not exist (NXDOMAIN)",
            name: nxdomain,
            dns01: false,
            txt: None,
            problem: "dns",
        },
    ];
    (env, wrong, cases)
}

fn write_hook(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// Runs `cmd`, which must fail, and checks that it printed `shows` (the problem type as the
/// client spells it) within [`PROMPT`].
async fn expect_reported(cmd: Command, env: &TestEnv, client: &str, case: &Case, shows: &str) {
    let started = Instant::now();
    let (ok, out) = run(cmd, KILL_AFTER).await;
    let took = started.elapsed();
    assert!(
        !ok,
        "{client} succeeded with {}:\n{out}\n{}",
        case.what,
        env.server_log()
    );
    assert!(
        out.contains(shows),
        "{client} does not show `{shows}` for {} after {took:?}:\n{out}\n--- server log ---\n{}",
        case.what,
        env.server_log()
    );
    assert!(
        took < PROMPT,
        "{client} took {took:?} to report {} ({}):\n{out}",
        case.what,
        case.problem
    );
    eprintln!(
        "{client}: {} reported as {} in {took:?}",
        case.what, case.problem
    );
}

#[tokio::test]
async fn certbot_reports_each_failed_validation_within_15_seconds() {
    let (env, _wrong, cases) = server_and_cases().await;
    let dir = env.dir.path().join("certbot");
    std::fs::create_dir_all(&dir).unwrap();
    let url = env.dns.control_url();
    let nothing = dir.join("nothing.sh");
    write_hook(&nothing, "exit 0");
    for case in &cases {
        let mut cmd = crate::clients::certbot(&env.root_path, &env.directory_url(), &dir);
        cmd.args([
            "certonly",
            "--manual",
            "--agree-tos",
            "-m",
            "certbot@example.com",
        ])
        .args(["--cert-name", case.name.as_str(), "-d", case.name.as_str()]);
        let hook = match (case.dns01, case.txt) {
            (true, Some(value)) => {
                let hook = dir.join(format!("txt-{}.sh", case.name));
                write_hook(
                    &hook,
                    &format!(
                        "curl -sf -X POST -d \"{{\\\"host\\\":\\\"_acme-challenge.$CERTBOT_DOMAIN.\\\",\\\"value\\\":\\\"{value}\\\"}}\" {url}/set-txt"
                    ),
                );
                hook
            }
            _ => nothing.clone(),
        };
        cmd.args([
            "--preferred-challenges",
            if case.dns01 { "dns" } else { "http" },
        ])
        .arg("--manual-auth-hook")
        .arg(&hook);
        // certbot prints "Type:   <type>" for each failed domain.
        let shows = format!("Type:   {}", case.problem);
        expect_reported(cmd, &env, "certbot", case, &shows).await;
    }
}

#[tokio::test]
async fn lego_reports_each_failed_validation_within_15_seconds() {
    let (env, _wrong, cases) = server_and_cases().await;
    let path = env.dir.path().join("lego");
    // lego serves http-01 itself, here where the server never looks: the server's http-01 port
    // is the wrong-answer target (or, for the unserved name, refused).
    let lego_port = free_port();
    let url = env.dns.control_url();
    for case in &cases {
        let mut cmd = crate::clients::lego(&env.root_path, &env.directory_url(), &path);
        cmd.args(["--domains", case.name.as_str()]);
        if case.dns01 {
            let hook = env.dir.path().join(format!("lego-{}.sh", case.name));
            let present = match case.txt {
                Some(value) => format!(
                    "curl -sf -X POST -d \"{{\\\"host\\\":\\\"$2\\\",\\\"value\\\":\\\"{value}\\\"}}\" {url}/set-txt"
                ),
                None => "true".to_owned(),
            };
            write_hook(
                &hook,
                &format!(
                    "# lego exec provider: $1 = present|cleanup, $2 = FQDN, $3 = value\ncase \"$1\" in\n  present) {present} ;;\nesac"
                ),
            );
            cmd.env("EXEC_PATH", &hook)
                .env("EXEC_POLLING_INTERVAL", "1")
                .env("EXEC_PROPAGATION_TIMEOUT", "10")
                .args(["--dns", "exec", "--dns.disable-cp"])
                .arg("--dns.resolvers")
                .arg(env.dns.addr().to_string());
        } else {
            cmd.args(["--http", "--http.port", &format!("127.0.0.1:{lego_port}")]);
        }
        cmd.arg("run");
        // lego prints the problem document's type URN.
        let shows = format!("urn:ietf:params:acme:error:{}", case.problem);
        expect_reported(cmd, &env, "lego", case, &shows).await;
    }
}
