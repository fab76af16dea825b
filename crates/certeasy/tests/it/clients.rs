//! The real ACME clients the end-to-end tests drive, set up once: trusting the test CA's root,
//! talking to the given directory, keeping their state under the test's directory, and never
//! going through a proxy from the environment (tests reach loopback only).

use std::path::Path;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::ServerName;
use rustls_pki_types::pem::PemObject;
use testkit::poll::eventually;
use tokio::net::TcpStream;
use tokio::process::Command;
use tokio_rustls::TlsConnector;

use crate::harness::TestEnv;
use crate::harness::run;

/// How long one lego command may take before [`lego_ok`] gives up on it.
const LEGO_TIMEOUT: Duration = Duration::from_secs(120);

/// `lego --server <directory> --accept-tos --email lego@example.com --path <path>`; the caller
/// adds the challenge flags and the command.
pub fn lego(root: &Path, directory: &str, path: &Path) -> Command {
    let mut cmd = Command::new("lego");
    cmd.env("LEGO_CA_CERTIFICATES", root);
    without_proxies(&mut cmd)
        .arg("--server")
        .arg(directory)
        .args(["--accept-tos", "--email", "lego@example.com", "--path"])
        .arg(path);
    cmd
}

/// `certbot --non-interactive --server <directory>` with its config, work and logs directories
/// under `dir`; the caller adds the command.
pub fn certbot(root: &Path, directory: &str, dir: &Path) -> Command {
    certbot_from(Command::new("certbot"), root, directory, dir)
}

/// [`certbot`] with the current certbot from PyPI (profiles, ARI) in the clients' virtualenv.
pub fn certbot_pypi(root: &Path, directory: &str, dir: &Path) -> Command {
    certbot_from(Command::new(venv_bin("certbot")), root, directory, dir)
}

fn certbot_from(mut cmd: Command, root: &Path, directory: &str, dir: &Path) -> Command {
    cmd.env("REQUESTS_CA_BUNDLE", root);
    without_proxies(&mut cmd)
        .arg("--config-dir")
        .arg(dir.join("config"))
        .arg("--work-dir")
        .arg(dir.join("work"))
        .arg("--logs-dir")
        .arg(dir.join("logs"))
        .args(["--non-interactive", "--server"])
        .arg(directory);
    cmd
}

fn without_proxies(cmd: &mut Command) -> &mut Command {
    cmd.env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
}

/// Runs a lego command to success; a failure shows lego's output and the server's log, which
/// is where the reason usually is.
pub async fn lego_ok(env: &TestEnv, cmd: Command, what: &str) {
    let (ok, out) = run(cmd, LEGO_TIMEOUT).await;
    assert!(
        ok,
        "lego {what} failed:\n{out}\n--- server log ---\n{}",
        env.server_log()
    );
}

/// A program from the virtualenv of current clients from PyPI (scripts/clients-requirements.txt)
/// that scripts/test.sh creates: `$CERTEASY_CLIENTS_VENV/bin/<tool>`, by default under
/// `$HOME/.cache/certeasy-clients/venv`. Debian's older certbot stays on the PATH beside it.
pub fn venv_bin(tool: &str) -> PathBuf {
    let venv = std::env::var_os("CERTEASY_CLIENTS_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").expect("HOME names the user's home");
            PathBuf::from(home).join(".cache/certeasy-clients/venv")
        });
    let bin = venv.join("bin").join(tool);
    assert!(
        bin.is_file(),
        "{} is missing: scripts/test.sh installs it (pip install -r scripts/clients-requirements.txt \
         into CERTEASY_CLIENTS_VENV)",
        bin.display()
    );
    bin
}

/// A web server that gets its certificates itself (Caddy, Apache with mod_md, Traefik), running
/// in its own process group with its output in a log file; the whole group is stopped when the
/// test ends, passed or failed, so no server outlives its test on a port.
pub struct Daemon {
    child: std::process::Child,
    log: PathBuf,
    what: &'static str,
}

impl Daemon {
    /// Starts `cmd` with stdout and stderr in `log`.
    pub fn spawn(what: &'static str, mut cmd: std::process::Command, log: PathBuf) -> Self {
        use std::os::unix::process::CommandExt;
        let out = std::fs::File::create(&log).unwrap();
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .env_remove("HTTPS_PROXY")
            .env_remove("https_proxy")
            .env_remove("HTTP_PROXY")
            .env_remove("http_proxy")
            .process_group(0);
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!("{what} must be installed (scripts/test.sh installs it): {e}")
        });
        Self { child, log, what }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's own output so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `signal` (a name `kill` knows, such as `USR1`) to the server's main process.
    pub fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {} failed", self.pid());
    }

    /// Panics with the server's log when it has exited.
    pub fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{} exited with {status}:\n{}", self.what, self.log());
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // The group: Apache's workers are children of the process we started.
        let group = format!("-{}", self.child.id());
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &group])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The chain a TLS server on 127.0.0.1:`port` presents for `name` (SNI), when it verifies under
/// `root_pem` (the test CA's root only) for that name; otherwise why not, e.g. the self-signed
/// certificate a server shows before it has one from the CA.
pub async fn served_chain(root_pem: &str, port: u16, name: &str) -> Result<Vec<Vec<u8>>, String> {
    let mut store = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(root_pem.as_bytes()) {
        store.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(store)
    .with_no_client_auth();
    let tcp = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let server_name = ServerName::try_from(name.to_owned()).unwrap();
    let tls = tokio::time::timeout(
        Duration::from_secs(5),
        TlsConnector::from(Arc::new(config)).connect(server_name, tcp),
    )
    .await
    .map_err(|_| "TLS handshake timed out".to_owned())?
    .map_err(|e| format!("TLS handshake: {e}"))?;
    let certs = tls.get_ref().1.peer_certificates().unwrap_or_default();
    Ok(certs.iter().map(|c| c.to_vec()).collect())
}

/// DER certificates as one PEM bundle, in their order.
pub fn to_pem(ders: &[Vec<u8>]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut pem = String::new();
    for der in ders {
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in b64.encode(der).as_bytes().chunks(64) {
            pem.push_str(std::str::from_utf8(line).unwrap());
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    pem
}

/// How long a server may take to get a certificate from Certeasy and serve it.
pub const SERVED_WITHIN: Duration = Duration::from_secs(90);

/// Waits until `daemon` serves, on 127.0.0.1:`port` for `name`, a certificate for exactly `name`
/// that chains to this test's CA root, and returns the served chain as PEM; `accept` may ask for
/// more (a certificate other than the one served before). Fails with the server's and Certeasy's
/// logs.
pub async fn wait_served(
    env: &TestEnv,
    daemon: &mut Daemon,
    port: u16,
    name: &str,
    accept: impl Fn(&[Vec<u8>]) -> bool,
) -> String {
    let root = env.root_pem();
    let mut last = String::new();
    let served = eventually(SERVED_WITHIN, Duration::from_millis(250), async || {
        daemon.assert_running();
        match served_chain(&root, port, name).await {
            Ok(chain) if accept(&chain) => Some(chain),
            Ok(_) => {
                last = "the certificate served before".to_owned();
                None
            }
            Err(e) => {
                last = e;
                None
            }
        }
    })
    .await;
    let Some(chain) = served else {
        panic!(
            "{} did not serve a certificate from Certeasy for {name} on 127.0.0.1:{port} \
             within {SERVED_WITHIN:?} (last: {last}):\n{}\n--- server log ---\n{}",
            daemon.what,
            daemon.log(),
            env.server_log()
        );
    };
    let pem = to_pem(&chain);
    crate::certcheck::assert_chain(&pem, &root, &[name]);
    pem
}

/// Marks the certificate (DER) for early renewal through the real admin CLI
/// (`certeasy admin certificates renew-early <serial>`): from then on its ARI window lies in the
/// past and says "renew now".
pub async fn renew_early(env: &TestEnv, leaf: &[u8]) {
    let (_, cert) = x509_parser::parse_x509_certificate(leaf).unwrap();
    let serial = hex::encode(cert.tbs_certificate.raw_serial());
    let out = env
        .admin_cli()
        .run_async(
            &["certificates", "renew-early", "--json", serial.as_str()],
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(out.json()["count"], 1, "one certificate marked");
}

/// The leaf certificate (DER) of a PEM chain.
pub fn leaf_of(pem: &str) -> Vec<u8> {
    crate::certcheck::pem_ders(pem).remove(0)
}
