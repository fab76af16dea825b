//! The scaled-out topology of `scripts/cluster.sh`: two real `certeasy` binaries on the local
//! PostgreSQL and Redis behind a local nginx. lego and certbot issue through nginx, requests
//! land on both instances, a nonce of one instance is good once at the other, the limits live
//! in Redis, and after one instance is killed in the middle of an issuance, issuance goes on.

use std::net::Ipv4Addr;
use std::path::Path;
use std::path::PathBuf;
use std::process::Command as StdCommand;
use std::time::Duration;

use acme_jose::Algorithm;
use acme_jose::sign::SigningKey;
use serde_json::json;
use testkit::dns::TestDnsServer;
use testkit::ports::free_port_block;
use tokio::process::Command;
use x509_parser::prelude::FromDer;

use crate::certcheck::assert_chain;
use crate::harness::free_port;
use crate::harness::run;
use crate::harness::unique;
use crate::raw::Raw;

const TIMEOUT: Duration = Duration::from_secs(180);
const BAD_NONCE: &str = "urn:ietf:params:acme:error:badNonce";

/// A cluster started by `scripts/cluster.sh`; dropping it runs `cluster.sh stop` (processes
/// stopped, database dropped, Redis keys under its prefix deleted), whatever the test did.
struct Cluster {
    dir: tempfile::TempDir,
    vars: Vec<(String, String)>,
    base: u16,
    db_name: String,
    prefix: String,
    redis_url: String,
    pg_admin: String,
}

impl Cluster {
    fn script() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/cluster.sh")
    }

    /// Runs `cluster.sh <args>` with this cluster's environment.
    fn sh(&self, args: &[&str]) -> (bool, String) {
        let out = StdCommand::new("bash")
            .arg(Self::script())
            .args(args)
            // The instances' log filter is the config's (tower_http=debug), not the caller's.
            .env_remove("RUST_LOG")
            .envs(self.vars.iter().map(|(k, v)| (k, v)))
            .output()
            .expect("bash runs scripts/cluster.sh");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    fn start(http01_port: u16, dns: &TestDnsServer) -> Self {
        let dir = tempfile::tempdir().unwrap();
        // nginx, a, a's admin, b, b's admin, a's and b's CRL listeners.
        let base = free_port_block(7);
        let db_name = unique("certeasy_cluster_");
        let prefix = unique("certeasy-cluster-it-");
        let redis_url = std::env::var("CERTEASY_TEST_REDIS_URL")
            .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
        let pg_admin = testkit::postgres::admin_url();
        // Every client of this test comes from 127.0.0.1: three accounts (lego, certbot and the
        // raw one) must fit the per-IP account-creation bucket.
        let extra = dir.path().join("extra.yaml");
        std::fs::write(
            &extra,
            "rate-limiting:\n  account-creation:\n    per-ip-per-hour: 100\n    burst: 20\n",
        )
        .unwrap();
        let state = dir.path().join("cluster");
        let vars = [
            ("CERTEASY_BIN", env!("CARGO_BIN_EXE_certeasy").to_owned()),
            ("CLUSTER_DIR", state.display().to_string()),
            ("CLUSTER_PORT_BASE", base.to_string()),
            ("CLUSTER_POSTGRES_URL", pg_admin.clone()),
            ("CLUSTER_REDIS_URL", redis_url.clone()),
            ("CLUSTER_DB_NAME", db_name.clone()),
            ("CLUSTER_REDIS_PREFIX", prefix.clone()),
            ("CLUSTER_HTTP01_PORT", http01_port.to_string()),
            ("CLUSTER_DNS_SERVERS", dns.addr().to_string()),
            ("CLUSTER_ALLOW_LOOPBACK", "true".to_owned()),
            ("CLUSTER_JOB_LEASE", "6s".to_owned()),
            ("CLUSTER_EXTRA_YAML", extra.display().to_string()),
        ];
        let cluster = Self {
            dir,
            vars: vars.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            base,
            db_name,
            prefix,
            redis_url,
            pg_admin,
        };
        // The guard exists before `start`: a start that fails half-way is cleaned up too.
        let (ok, out) = cluster.sh(&["start"]);
        assert!(
            ok,
            "cluster.sh start failed (it needs nginx, psql, redis-cli, openssl and curl; \
             scripts/test.sh installs them, and PostgreSQL and Redis on 127.0.0.1):\n{out}\n{}",
            cluster.logs()
        );
        assert!(out.contains(&cluster.directory_url()), "{out}");
        assert!(
            out.contains(&cluster.root_path().display().to_string()),
            "{out}"
        );
        cluster
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("cluster")
    }

    fn root_path(&self) -> PathBuf {
        self.state().join("ca/root.pem")
    }

    fn root_pem(&self) -> String {
        std::fs::read_to_string(self.root_path()).unwrap()
    }

    /// The external URL: nginx.
    fn base_url(&self) -> String {
        format!("https://localhost:{}", self.base)
    }

    fn directory_url(&self) -> String {
        format!("{}/directory", self.base_url())
    }

    /// An instance's own ACME listener, bypassing nginx.
    fn instance_url(&self, name: &str) -> String {
        format!("https://localhost:{}", self.base + instance_offset(name))
    }

    fn admin_url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}", self.base + instance_offset(name) + 1)
    }

    /// An instance's log, without colour codes.
    fn log(&self, name: &str) -> String {
        let text =
            std::fs::read_to_string(self.state().join(format!("{name}.log"))).unwrap_or_default();
        strip_ansi(&text)
    }

    fn logs(&self) -> String {
        format!(
            "--- instance a ---\n{}\n--- instance b ---\n{}\n--- nginx ---\n{}",
            tail(&self.log("a")),
            tail(&self.log("b")),
            tail(
                &std::fs::read_to_string(self.state().join("nginx/error.log")).unwrap_or_default()
            )
        )
    }

    /// ACME requests an instance has served, from its log (`tower_http=debug`).
    fn served(&self, name: &str) -> usize {
        self.log(name)
            .lines()
            .filter(|l| l.contains("finished processing request") && l.contains("uri=/acme/"))
            .count()
    }

    /// The sum of a counter over its labels on an instance's `/metrics`.
    async fn counter(&self, name: &str, metric: &str) -> f64 {
        let text = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .get(format!("{}/metrics", self.admin_url(name)))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .filter(|l| {
                l.starts_with(&format!("{metric}{{")) || l.starts_with(&format!("{metric} "))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    fn redis_keys(&self) -> usize {
        let out = StdCommand::new("redis-cli")
            .args(["-u", &self.redis_url, "--scan", "--pattern"])
            .arg(format!("{}:*", self.prefix))
            .output()
            .expect("redis-cli must be installed (scripts/test.sh installs it)");
        String::from_utf8_lossy(&out.stdout).lines().count()
    }

    fn database_exists(&self) -> bool {
        let out = StdCommand::new("psql")
            .arg(&self.pg_admin)
            .args(["-tAc"])
            .arg(format!(
                "SELECT 1 FROM pg_database WHERE datname = '{}'",
                self.db_name
            ))
            .output()
            .expect("psql must be installed (scripts/test.sh installs it)");
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).trim() == "1"
    }

    fn lego(&self, path: &Path) -> Command {
        crate::clients::lego(&self.root_path(), &self.directory_url(), path)
    }

    fn certbot(&self, dir: &Path) -> Command {
        crate::clients::certbot(&self.root_path(), &self.directory_url(), dir)
    }

    fn check(&self, result: (bool, String), what: &str) {
        let (ok, out) = result;
        assert!(ok, "{what} failed:\n{out}\n{}", self.logs());
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.sh(&["stop"]);
    }
}

fn instance_offset(name: &str) -> u16 {
    match name {
        "a" => 1,
        "b" => 3,
        other => panic!("no instance {other}"),
    }
}

fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-byte
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

/// A raw ACME client sending to `at` (an instance or nginx), signing URLs of the external URL.
fn raw(cluster: &Cluster, at: String) -> Raw {
    let root = reqwest::Certificate::from_pem(cluster.root_pem().as_bytes()).unwrap();
    Raw {
        http: reqwest::Client::builder()
            .no_proxy()
            .add_root_certificate(root)
            .build()
            .unwrap(),
        base: at,
        key: SigningKey::generate(Algorithm::Es256).unwrap(),
        kid: None,
    }
}

/// A newAccount signed for the external URL, with `nonce`, sent to `at`'s listener.
async fn new_account_at(cluster: &Cluster, at: &Raw, nonce: &str) -> crate::raw::Reply {
    let signed_url = format!("{}/acme/new-account", cluster.base_url());
    let body = at
        .key
        .sign_acme(
            &signed_url,
            Some(nonce),
            None,
            Some(&json!({"termsOfServiceAgreed": true})),
        )
        .unwrap();
    at.send(&at.url("/acme/new-account"), body, "application/jose+json")
        .await
}

async fn lego_run(cluster: &Cluster, path: &Path, name: &str, port: u16) -> (bool, String) {
    let mut cmd = cluster.lego(path);
    cmd.args([
        "--domains",
        name,
        "--http",
        "--http.port",
        &format!("127.0.0.1:{port}"),
        "run",
    ]);
    run(cmd, TIMEOUT).await
}

async fn certbot_certonly(cluster: &Cluster, dir: &Path, name: &str, port: u16) -> (bool, String) {
    let mut cmd = cluster.certbot(dir);
    cmd.args([
        "certonly",
        "--standalone",
        "--agree-tos",
        "-m",
        "certbot@example.com",
        "--http-01-address",
        "127.0.0.1",
        "--http-01-port",
        &port.to_string(),
        "-d",
        name,
    ]);
    run(cmd, TIMEOUT).await
}

#[tokio::test]
async fn cluster_behind_nginx_shares_state_and_survives_losing_an_instance() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let dns = TestDnsServer::start().await.unwrap();
    let suffix = unique("c");
    let name = |label: &str| {
        let n = format!("{label}.{suffix}.certeasy.test");
        dns.set_a(&n, Ipv4Addr::LOCALHOST);
        n
    };
    let http01 = free_port();
    let cluster = Cluster::start(http01, &dns);

    // A nonce from instance a is good once at instance b, and then no longer at a.
    let at_a = raw(&cluster, cluster.instance_url("a"));
    let at_b = raw(&cluster, cluster.instance_url("b"));
    let nonce = at_a.nonce().await;
    let r = new_account_at(&cluster, &at_b, &nonce).await;
    assert!(
        r.status == 201 || r.status == 200,
        "{r:?}\n{}",
        cluster.logs()
    );
    let r = new_account_at(&cluster, &at_a, &nonce).await;
    assert_eq!(r.problem_type(), BAD_NONCE, "{r:?}");

    // lego and certbot through nginx.
    let lego_path = cluster.dir.path().join("lego");
    let first = name("lego1");
    cluster.check(
        lego_run(&cluster, &lego_path, &first, http01).await,
        "lego run",
    );
    let pem = std::fs::read_to_string(lego_path.join(format!("certificates/{first}.crt"))).unwrap();
    assert_chain(&pem, &cluster.root_pem(), &[&first]);

    let certbot_dir = cluster.dir.path().join("certbot");
    let second = name("certbot1");
    cluster.check(
        certbot_certonly(&cluster, &certbot_dir, &second, http01).await,
        "certbot certonly",
    );
    let pem =
        std::fs::read_to_string(certbot_dir.join(format!("config/live/{second}/fullchain.pem")))
            .unwrap();
    assert_chain(&pem, &cluster.root_pem(), &[&second]);

    // nginx spread the ACME requests over both instances, and the limits and nonces they share
    // are in Redis under the cluster's prefix.
    let (a_before, b_before) = (cluster.served("a"), cluster.served("b"));
    assert!(
        a_before > 0 && b_before > 0,
        "requests landed on a: {a_before}, on b: {b_before}\n{}",
        cluster.logs()
    );
    for instance in ["a", "b"] {
        let decisions = cluster
            .counter(instance, "certeasy_ratelimit_decisions_total")
            .await;
        assert!(decisions > 0.0, "instance {instance} consulted no limit");
    }
    assert!(
        cluster.redis_keys() > 0,
        "no Redis key under {}",
        cluster.prefix
    );

    // A revocation through nginx reaches the CRL the certificate names, and both instances
    // serve that CRL byte for byte (published once, by whichever instance won the number).
    let mut revoke = cluster.lego(&lego_path);
    revoke.args(["--domains", &first, "revoke", "--reason", "4", "--keep"]);
    cluster.check(run(revoke, TIMEOUT).await, "lego revoke");
    let first_der = crate::certcheck::pem_ders(
        &std::fs::read_to_string(lego_path.join(format!("certificates/{first}.crt"))).unwrap(),
    )
    .remove(0);
    let (_, first_cert) = x509_parser::certificate::X509Certificate::from_der(&first_der).unwrap();
    let file = first_cert
        .extensions()
        .iter()
        .find_map(|ext| match ext.parsed_extension() {
            x509_parser::extensions::ParsedExtension::CRLDistributionPoints(points) => points
                .points
                .first()
                .and_then(|p| match &p.distribution_point {
                    Some(x509_parser::extensions::DistributionPointName::FullName(names)) => {
                        names.iter().find_map(|n| match n {
                            x509_parser::extensions::GeneralName::URI(uri) => {
                                Some((*uri).to_owned())
                            }
                            _ => None,
                        })
                    }
                    _ => None,
                }),
            _ => None,
        })
        .expect("a CRL distribution point");
    assert!(
        file.starts_with(&format!("{}/crl/", cluster.base_url())),
        "certificates name the CRL behind nginx: {file}"
    );
    let file = file.rsplit('/').next().unwrap().to_owned();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut crls = Vec::new();
        for offset in [5, 6] {
            let url = format!("http://127.0.0.1:{}/crl/{file}", cluster.base + offset);
            let response = http.get(&url).send().await.unwrap();
            assert_eq!(response.status(), 200, "{url}");
            crls.push(response.bytes().await.unwrap().to_vec());
        }
        // Each instance picks the newly published CRL up on its own, so for a moment one may
        // still serve the one before; once both list the revocation they serve the same bytes.
        let lists_revocation = |der: &[u8]| {
            let (_, crl) =
                x509_parser::revocation_list::CertificateRevocationList::from_der(der).unwrap();
            crl.iter_revoked_certificates()
                .any(|r| r.raw_serial() == first_cert.raw_serial())
        };
        if crls.iter().all(|der| lists_revocation(der)) {
            assert_eq!(crls[0], crls[1], "both instances serve the same CRL");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the revocation never reached the CRL\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Instance b is killed (SIGKILL) while lego is issuing; that issuance completes (nginx sends
    // what b did not answer to a, and a takes over b's leased jobs), and so do later ones.
    let third = name("lego2");
    let lego_path2 = cluster.dir.path().join("lego2");
    let during = {
        let path = lego_path2.clone();
        let third = third.clone();
        let cmd = {
            let mut cmd = cluster.lego(&path);
            cmd.args([
                "--domains",
                &third,
                "--http",
                "--http.port",
                &format!("127.0.0.1:{http01}"),
                "run",
            ]);
            cmd
        };
        tokio::spawn(run(cmd, TIMEOUT))
    };
    // Once lego is under way (an ACME request of it reached an instance), kill b.
    let served_before = a_before + b_before;
    for _ in 0..200 {
        if cluster.served("a") + cluster.served("b") > served_before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(!during.is_finished(), "lego finished before b was killed");
    let (ok, out) = cluster.sh(&["kill-instance", "b"]);
    assert!(ok, "{out}");
    cluster.check(during.await.unwrap(), "lego run while instance b is killed");
    let pem =
        std::fs::read_to_string(lego_path2.join(format!("certificates/{third}.crt"))).unwrap();
    assert_chain(&pem, &cluster.root_pem(), &[&third]);

    let (ok, status) = cluster.sh(&["status"]);
    assert!(!ok, "status reports the killed instance:\n{status}");
    assert!(
        status.contains("b: stopped") && status.contains("a: ready"),
        "{status}"
    );

    let b_after_stop = cluster.served("b");
    let a_after_stop = cluster.served("a");
    let fourth = name("certbot2");
    cluster.check(
        certbot_certonly(&cluster, &certbot_dir, &fourth, http01).await,
        "certbot certonly with instance b killed",
    );
    let pem =
        std::fs::read_to_string(certbot_dir.join(format!("config/live/{fourth}/fullchain.pem")))
            .unwrap();
    assert_chain(&pem, &cluster.root_pem(), &[&fourth]);
    let fifth = name("lego3");
    cluster.check(
        lego_run(&cluster, &lego_path, &fifth, http01).await,
        "lego run with instance b killed",
    );
    assert_eq!(cluster.served("b"), b_after_stop, "b is gone");
    assert!(
        cluster.served("a") > a_after_stop,
        "a served the later issuances"
    );

    // `stop` removes what `start` made on the shared services.
    let (ok, out) = cluster.sh(&["stop"]);
    assert!(ok, "{out}");
    assert!(
        !cluster.database_exists(),
        "database {} dropped",
        cluster.db_name
    );
    assert_eq!(
        cluster.redis_keys(),
        0,
        "Redis keys under {} deleted",
        cluster.prefix
    );
}
