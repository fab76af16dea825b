//! A test environment: temp dir, test DNS server, challenge responders, and a Certeasy server
//! configured through a real YAML file (in process, or as the real binary).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering;
use std::time::Duration;

use acme_core::clock::SystemClock;
use certeasy::serve::RunningServer;
use testkit::admin_cli::AdminCli;
use testkit::dns::TestDnsServer;
use testkit::http01::Http01Responder;
use testkit::poll::eventually;
pub use testkit::ports::free_port;
pub use testkit::postgres::PgDatabase;
use testkit::tls_alpn::TlsAlpnResponder;

/// Which database a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Db {
    Sqlite,
    Postgres,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A label unique within this test process and across concurrent processes.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}{}x{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// The pieces a test sets up before Certeasy starts.
pub struct TestEnv {
    pub dir: tempfile::TempDir,
    pub dns: TestDnsServer,
    pub http: Http01Responder,
    pub tls: TlsAlpnResponder,
    pub acme_port: u16,
    pub admin_port: u16,
    /// The CRL listener's port (`crl.listen`).
    pub crl_port: u16,
    pub config_path: PathBuf,
    pub root_path: PathBuf,
    pub server: Option<RunningServer>,
    pub child: Option<Child>,
    /// Kept so the database lives as long as the environment.
    pub _pg: Option<PgDatabase>,
    /// Config sections: section name → YAML body (already indented by two spaces).
    pub sections: BTreeMap<String, String>,
    pub suffix: String,
    /// Extra top-level lines.
    pub top_level: String,
}

impl TestEnv {
    /// Prepares everything; call [`TestEnv::start`] or [`TestEnv::spawn_binary`] next.
    pub async fn new(db: Db) -> Self {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let dns = TestDnsServer::start().await.unwrap();
        let http = Http01Responder::start().await.unwrap();
        let tls = TlsAlpnResponder::start().await.unwrap();
        let acme_port = free_port();
        let admin_port = free_port();
        let crl_port = free_port();
        let pg = match db {
            Db::Postgres => {
                Some(PgDatabase::create("certeasy_it_").expect("a throw-away database"))
            }
            Db::Sqlite => None,
        };
        let mut sections = BTreeMap::new();
        sections.insert(
            "server".to_owned(),
            format!(
                "  listen: \"127.0.0.1:{acme_port}\"\n  admin-listen: \"127.0.0.1:{admin_port}\"\n  external-url: \"https://localhost:{acme_port}\"\n  tls-names: [\"localhost\", \"127.0.0.1\"]\n"
            ),
        );
        sections.insert(
            "crl".to_owned(),
            format!("  listen: \"127.0.0.1:{crl_port}\"\n"),
        );
        if let Some(pg) = &pg {
            sections.insert("database".to_owned(), format!("  url: \"{}\"\n", pg.url()));
        }
        // No challenge retries: tests that are not about them (`retries.rs` is) see a transient
        // failure as the verdict at once, as before retries existed.
        sections.insert(
            "validation".to_owned(),
            format!(
                "  dns-servers: [\"{}\"]\n  http-port: {}\n  tls-alpn-port: {}\n  allow-loopback: true\n  timeout: 5s\n  retries: 0\n",
                dns.addr(),
                http.port(),
                tls.port()
            ),
        );
        sections.insert(
            "logging".to_owned(),
            "  level: \"info,certeasy=debug\"\n".to_owned(),
        );
        // Tests that are not about rate limits run from a whitelisted loopback; the account
        // limits stay at their defaults. Rate-limit tests replace this section.
        sections.insert(
            "rate-limiting".to_owned(),
            "  whitelist: [\"127.0.0.1\", \"::1\"]\n".to_owned(),
        );
        let config_path = dir.path().join("certeasy.yaml");
        let root_path = dir.path().join("data/ca/root.pem");
        Self {
            dir,
            dns,
            http,
            tls,
            acme_port,
            admin_port,
            crl_port,
            config_path,
            root_path,
            server: None,
            child: None,
            _pg: pg,
            sections,
            suffix: unique("t"),
            top_level: String::new(),
        }
    }

    /// Replaces or adds a config section (body indented by two spaces).
    pub fn section(&mut self, name: &str, body: &str) {
        self.sections.insert(name.to_owned(), body.to_owned());
    }

    /// Changes the ports challenges are validated on (e.g. to where lego or certbot listen).
    pub fn challenge_ports(&mut self, http_port: u16, tls_port: u16) {
        let body = format!(
            "  dns-servers: [\"{}\"]\n  http-port: {http_port}\n  tls-alpn-port: {tls_port}\n  allow-loopback: true\n  timeout: 5s\n  retries: 0\n",
            self.dns.addr()
        );
        self.section("validation", &body);
    }

    /// Rewrites the config file from the current sections (for reload tests).
    pub fn write_config_for_test(&self) {
        self.write_config();
    }

    /// Starts the binary with extra top-level YAML lines (keys that are not sections).
    pub async fn spawn_binary_with_top_level(&mut self, top: &str) {
        self.top_level = top.to_owned();
        self.spawn_binary().await;
    }

    fn write_config(&self) {
        let mut yaml = format!(
            "data-dir: \"{}\"\n{}",
            self.dir.path().join("data").display(),
            self.top_level
        );
        for (name, body) in &self.sections {
            if !body.is_empty() {
                yaml.push_str(&format!("{name}:\n{body}"));
            }
        }
        std::fs::write(&self.config_path, yaml).unwrap();
    }

    /// Starts Certeasy in this process.
    pub async fn start(&mut self) {
        self.write_config();
        let config = certeasy::config::load(&self.config_path).unwrap_or_else(|e| panic!("{e}"));
        let server =
            certeasy::serve::start(&config, Some(&self.config_path), Arc::new(SystemClock))
                .await
                .unwrap();
        self.server = Some(server);
    }

    /// Starts the real `certeasy serve` binary and waits until it answers.
    pub async fn spawn_binary(&mut self) {
        self.write_config();
        let log = std::fs::File::create(self.dir.path().join("server.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_certeasy"))
            .args(["serve", "--config"])
            .arg(&self.config_path)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let url = format!("http://127.0.0.1:{}/healthz", self.admin_port);
        let (within, every) = (Duration::from_secs(30), Duration::from_millis(100));
        let healthy = eventually(within, every, async || {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "certeasy exited early with {status}:\n{}",
                    self.server_log()
                );
            }
            http_get_ok(&url).await.then_some(())
        })
        .await;
        assert!(
            healthy.is_some(),
            "certeasy did not become healthy:\n{}",
            self.server_log()
        );
    }

    /// Kills the binary at once (SIGKILL): a crash, not a shutdown.
    pub fn kill_binary(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn server_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    pub fn directory_url(&self) -> String {
        format!("https://localhost:{}/directory", self.acme_port)
    }

    pub fn base_url(&self) -> String {
        format!("https://localhost:{}", self.acme_port)
    }

    /// A DNS name unique to this test that resolves to 127.0.0.1 in the test DNS server.
    pub fn name(&self, label: &str) -> String {
        let name = format!("{label}.{}.certeasy.test", self.suffix);
        self.dns.set_a(&name, Ipv4Addr::LOCALHOST);
        name
    }

    /// The database the server uses (PostgreSQL when the environment has one, else its SQLite file).
    pub fn database_url(&self) -> String {
        match &self._pg {
            Some(pg) => pg.url().to_owned(),
            None => format!(
                "sqlite://{}",
                self.dir.path().join("data/certeasy.db").display()
            ),
        }
    }

    pub fn root_pem(&self) -> String {
        std::fs::read_to_string(&self.root_path).unwrap()
    }

    /// The `ca:` section with which a second instance loads the CA this one generated, as
    /// `ca.existing` (its issuing intermediate and key under its root): what an operator copies
    /// to a second host of a cluster.
    pub fn existing_ca_section(&self) -> String {
        let ca = self.dir.path().join("data/ca");
        format!(
            "  existing:\n    certificate: \"{}\"\n    private-key: \"{}\"\n    chain: \"{}\"\n",
            ca.join("intermediate.pem").display(),
            ca.join("intermediate.key").display(),
            ca.join("root.pem").display()
        )
    }

    /// An instant-acme account trusting this CA.
    pub async fn account(&self) -> instant_acme::Account {
        let http = testkit::acme_http::nodelay_client(&self.root_path).unwrap();
        let (account, _) = instant_acme::Account::builder_with_http(http)
            .create(
                &instant_acme::NewAccount {
                    contact: &["mailto:ops@example.com"],
                    terms_of_service_agreed: true,
                    only_return_existing: false,
                },
                self.directory_url(),
                None,
            )
            .await
            .unwrap();
        account
    }

    pub fn admin_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.admin_port))
    }

    /// The admin API's bearer token (created by the server on first start in its data dir);
    /// tests calling `/admin/*` over HTTP send `Authorization: Bearer <this>`.
    pub fn admin_token(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("data/admin.token"))
            .unwrap()
            .trim()
            .to_owned()
    }

    /// `certeasy admin --config <this environment's config>`, as on the server's host.
    pub fn admin_cli(&self) -> AdminCli {
        AdminCli::with_config(env!("CARGO_BIN_EXE_certeasy"), &self.config_path)
    }

    /// `certeasy admin` naming only the admin listener and the token file, as from another host.
    pub fn remote_admin_cli(&self) -> AdminCli {
        AdminCli::with_url(
            env!("CARGO_BIN_EXE_certeasy"),
            &format!("http://{}", self.admin_addr()),
            &self.dir.path().join("data/admin.token"),
        )
    }
}

/// `certeasy admin --config <env> <args>`: (success, stdout + stderr).
pub fn admin(env: &TestEnv, args: &[&str]) -> (bool, String) {
    env.admin_cli().run(args).into_pair()
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        self.kill_binary();
    }
}

async fn http_get_ok(url: &str) -> bool {
    let Ok(client) = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(2))
        .build()
    else {
        return false;
    };
    matches!(client.get(url).send().await, Ok(r) if r.status().is_success())
}

/// Runs a command with a timeout, returning (success, combined output).
pub async fn run(mut cmd: tokio::process::Command, timeout: Duration) -> (bool, String) {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = cmd
        .spawn()
        .expect("command must be installed (scripts/test.sh installs lego and certbot)");
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(out)) => {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            (out.status.success(), text)
        }
        Ok(Err(e)) => (false, format!("could not run: {e}")),
        Err(_) => (false, "timed out".to_owned()),
    }
}
