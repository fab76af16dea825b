//! The servers `bench` measures: their configuration files, written by serialising each
//! server's own configuration model (Certeasy's `certeasy::config::Config`, Pebble's JSON), and
//! their processes, stopped with SIGTERM as an operator would.

use std::fs::File;
use std::io::BufRead as _;
use std::io::BufReader;
use std::net::IpAddr;
use std::net::Ipv4Addr;
use std::net::Ipv6Addr;
use std::net::SocketAddr;
use std::net::TcpStream;
use std::path::Path;
use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

use acme_core::duration::ConfigDuration;
use anyhow::Context;
use anyhow::bail;
use certeasy::config::Config;
use ipnet::IpNet;
use serde::Serialize;

use crate::cli::TlsCertArgs;
use crate::tlscert;

/// How long a server may take to listen (Certeasy creates its CA on first start).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The loopback ports of a part, from `--port-base` on: both servers validate http-01 against
/// the load generator's responder and resolve names through its DNS server, on the same ports.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ports {
    pub(crate) acme: u16,
    pub(crate) mgmt: u16,
    pub(crate) admin: u16,
    pub(crate) http01: u16,
    pub(crate) tls_alpn: u16,
    pub(crate) dns: u16,
    pub(crate) proxy: u16,
    pub(crate) acme2: u16,
    pub(crate) admin2: u16,
    pub(crate) db_proxy: u16,
}

/// Certeasy's CRL listener is this far above its ACME port (one instance's ports never meet
/// the other's).
const CRL_OFFSET: u16 = 9;
/// The last port of the range.
const LAST_OFFSET: u16 = 17;

impl Ports {
    pub(crate) fn from_base(base: u16) -> anyhow::Result<Self> {
        if base.checked_add(LAST_OFFSET).is_none() {
            bail!("--port-base {base}: the ports up to base + {LAST_OFFSET} must exist");
        }
        Ok(Self {
            acme: base,
            mgmt: base + 1,
            admin: base + 2,
            http01: base + 3,
            tls_alpn: base + 4,
            dns: base + 5,
            proxy: base + 6,
            acme2: base + 7,
            admin2: base + 8,
            db_proxy: base + LAST_OFFSET,
        })
    }
}

/// The CRL listener's port of the Certeasy whose ACME listener is on `listen`.
pub(crate) fn crl_port(listen: u16) -> u16 {
    listen + CRL_OFFSET
}

pub(crate) fn loopback(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)
}

/// One Certeasy instance of a run.
#[derive(Debug, Clone)]
pub(crate) struct CerteasyInstance {
    /// The ACME listener's port; its CRL listener is `CRL_OFFSET` above.
    pub(crate) listen: u16,
    pub(crate) admin: u16,
    /// The port clients reach it on (the proxy's, in the cluster part).
    pub(crate) external: u16,
    /// `None`: SQLite in the data directory.
    pub(crate) database_url: Option<String>,
    /// Redis URL and key prefix; `None`: limits in memory.
    pub(crate) redis: Option<(String, String)>,
}

/// Certeasy's configuration for a benchmark: the shipped defaults, on loopback ports,
/// validating against the load generator, with every limit that would throttle one client off
/// (whitelisted loopback, per-account limits disabled; Pebble has none) and no authorization
/// reuse (every order names a new host anyway).
pub(crate) fn certeasy_config(dir: &Path, ports: &Ports, instance: &CerteasyInstance) -> Config {
    let mut config = Config {
        data_dir: dir.join("data"),
        ..Config::default()
    };
    config.server.listen = loopback(instance.listen);
    config.server.admin_listen = loopback(instance.admin);
    config.server.external_url = format!("https://localhost:{}", instance.external);
    config.server.tls_names = vec!["localhost".to_owned(), Ipv4Addr::LOCALHOST.to_string()];
    config.validation.dns_servers = vec![loopback(ports.dns)];
    config.validation.http_port = ports.http01;
    config.validation.tls_alpn_port = ports.tls_alpn;
    config.validation.allow_loopback = true;
    config.validation.timeout = ConfigDuration::from_secs(5);
    config.logging.level = "warn".to_owned();
    config.acme.reuse_valid_authorizations = false;
    let limits = &mut config.rate_limiting;
    limits.whitelist = vec![
        IpNet::from(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        IpNet::from(IpAddr::V6(Ipv6Addr::LOCALHOST)),
    ];
    limits.order_creation.enabled = false;
    limits.pending_authorizations.enabled = false;
    limits.duplicate_certificate.enabled = false;
    limits.failed_validation.enabled = false;
    config.zombie_pausing.enabled = false;
    config.crl.listen = loopback(crl_port(instance.listen));
    if let Some(url) = &instance.database_url {
        config.database.url.clone_from(url);
    }
    if let Some((url, prefix)) = &instance.redis {
        config.redis.shards = vec![url.clone()];
        config.redis.key_prefix.clone_from(prefix);
    }
    config
}

/// Writes `config` as YAML to `dir/certeasy-<port>.yaml` and reads it back as the server will:
/// a file the server would read differently, or refuse, stops the part before any run.
pub(crate) fn write_certeasy_config(dir: &Path, config: &Config) -> anyhow::Result<PathBuf> {
    let path = dir.join(format!("certeasy-{}.yaml", config.server.listen.port()));
    let yaml = serde_saphyr::to_string(config).context("serialising Certeasy's configuration")?;
    let source = path.display().to_string();
    let read = certeasy::config::from_str(&yaml, &source)
        .with_context(|| format!("Certeasy refuses the configuration written to {source}"))?;
    if read != *config {
        bail!("{source} does not read back as the configuration it was written from");
    }
    std::fs::write(&path, yaml).with_context(|| format!("writing {source}"))?;
    Ok(path)
}

/// Writes `config` as YAML without the dotted `keys`, for a build that predates them (it is
/// not read back: this build's model would fill them in again).
fn write_config_without(dir: &Path, config: &Config, keys: &[String]) -> anyhow::Result<PathBuf> {
    let path = dir.join(format!("certeasy-{}.yaml", config.server.listen.port()));
    let mut value = serde_json::to_value(config).context("serialising Certeasy's configuration")?;
    for key in keys {
        let (parents, last) = match key.rsplit_once('.') {
            Some((parents, last)) => (Some(parents), last),
            None => (None, key.as_str()),
        };
        let mut node = &mut value;
        for part in parents.into_iter().flat_map(|p| p.split('.')) {
            node = node.get_mut(part).with_context(|| {
                format!("--baseline-drop-keys {key}: no {part:?} in the configuration")
            })?;
        }
        node.as_object_mut()
            .and_then(|map| map.remove(last))
            .with_context(|| {
                format!("--baseline-drop-keys {key}: no such key in the configuration")
            })?;
    }
    let yaml =
        serde_saphyr::to_string(&value).context("serialising the baseline's configuration")?;
    std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Pebble's configuration file (`pebble -config`).
#[derive(Debug, Serialize)]
struct PebbleFile {
    pebble: PebbleConfig,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct PebbleConfig {
    listen_address: SocketAddr,
    management_listen_address: SocketAddr,
    certificate: PathBuf,
    private_key: PathBuf,
    http_port: u16,
    tls_port: u16,
    #[serde(rename = "ocspResponderURL")]
    ocsp_responder_url: String,
    external_account_binding_required: bool,
}

/// A directory of its own under `out` for one server start (`run.<label>.<n>`).
pub(crate) fn fresh_dir(out: &Path, label: &str) -> anyhow::Result<PathBuf> {
    for n in 0u32.. {
        let dir = out.join(format!("run.{label}.{n}"));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
        }
    }
    bail!("no free run directory under {}", out.display())
}

/// A process the part started; stopped (SIGTERM, then reaped) when dropped, so that an error
/// leaves no server behind.
#[derive(Debug)]
pub(crate) struct Process {
    child: Child,
    name: String,
}

impl Process {
    /// Starts `command` with stdout and stderr into `log` and no stdin.
    pub(crate) fn spawn(name: &str, command: &mut Command, log: &Path) -> anyhow::Result<Self> {
        Self::spawn_split(name, command, log, log)
    }

    /// Starts `command` with stdout into `stdout`, stderr into `stderr` (the same file or not)
    /// and no stdin.
    pub(crate) fn spawn_split(
        name: &str,
        command: &mut Command,
        stdout: &Path,
        stderr: &Path,
    ) -> anyhow::Result<Self> {
        let create = |path: &Path| {
            File::create(path).with_context(|| format!("creating {}", path.display()))
        };
        let out = create(stdout)?;
        let err = if stderr == stdout {
            out.try_clone()?
        } else {
            create(stderr)?
        };
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        Ok(Self {
            child,
            name: name.to_owned(),
        })
    }

    /// Waits for the process to end by itself.
    pub(crate) fn wait(mut self) -> anyhow::Result<std::process::ExitStatus> {
        Ok(self.child.wait()?)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails when the process has exited.
    pub(crate) fn alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("{} exited early: {status}", self.name);
        }
        Ok(())
    }

    /// Waits until `port` accepts TCP connections; the process must stay alive meanwhile.
    pub(crate) fn wait_port(&mut self, port: u16) -> anyhow::Result<()> {
        let started = Instant::now();
        while started.elapsed() < START_TIMEOUT {
            self.alive()?;
            if TcpStream::connect_timeout(&loopback(port), Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!("{}: nothing listens on {port}", self.name)
    }

    /// Waits until `path` exists and is not empty (a file the process writes once ready).
    pub(crate) fn wait_file(&mut self, path: &Path) -> anyhow::Result<()> {
        let started = Instant::now();
        while started.elapsed() < START_TIMEOUT {
            if std::fs::metadata(path).is_ok_and(|m| m.len() > 0) {
                return Ok(());
            }
            self.alive()?;
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!("{} never wrote {}", self.name, path.display())
    }

    /// SIGTERM and wait: the server shuts down as it does for an operator.
    pub(crate) fn stop(mut self) -> anyhow::Result<()> {
        self.terminate()
    }

    fn terminate(&mut self) -> anyhow::Result<()> {
        if self.child.try_wait()?.is_some() {
            return Ok(());
        }
        let pid = rustix::process::Pid::from_child(&self.child);
        // Already gone between the check and the signal: nothing to stop.
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Err(error) = self.terminate() {
            eprintln!("stopping {}: {error:#}", self.name);
        }
    }
}

/// A server started for one run: its process, where it keeps its files, the root its HTTPS
/// certificate chains to, and its directory URL.
#[derive(Debug)]
pub(crate) struct Started {
    pub(crate) process: Process,
    pub(crate) dir: PathBuf,
    pub(crate) root: PathBuf,
    pub(crate) directory: String,
}

impl Started {
    pub(crate) fn log(&self) -> PathBuf {
        self.dir.join("server.log")
    }
}

/// A new Pebble process: its own listener certificate, no artificial validation sleeps, no
/// rejected nonces, no authorization reuse.
pub(crate) fn start_pebble(out: &Path, ports: &Ports) -> anyhow::Result<Started> {
    let dir = fresh_dir(out, "pebble")?;
    tlscert::write(&TlsCertArgs { out: dir.clone() })?;
    let file = PebbleFile {
        pebble: PebbleConfig {
            listen_address: loopback(ports.acme),
            management_listen_address: loopback(ports.mgmt),
            certificate: dir.join("cert.pem"),
            private_key: dir.join("key.pem"),
            http_port: ports.http01,
            tls_port: ports.tls_alpn,
            ocsp_responder_url: String::new(),
            external_account_binding_required: false,
        },
    };
    let config = dir.join("pebble.json");
    std::fs::write(&config, serde_json::to_string_pretty(&file)? + "\n")?;
    let mut process = Process::spawn(
        "pebble",
        Command::new("pebble")
            .arg("-config")
            .arg(&config)
            .arg("-dnsserver")
            .arg(loopback(ports.dns).to_string())
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .env("PEBBLE_AUTHZREUSE", "0"),
        &dir.join("server.log"),
    )?;
    process.wait_port(ports.acme)?;
    Ok(Started {
        process,
        root: dir.join("root.pem"),
        directory: format!("https://localhost:{}/dir", ports.acme),
        dir,
    })
}

/// A new `certeasy serve` on a fresh data directory (SQLite, limits in memory).
pub(crate) fn start_certeasy(
    out: &Path,
    certeasy: &Path,
    ports: &Ports,
    label: &str,
) -> anyhow::Result<Started> {
    start_certeasy_build(out, certeasy, ports, label, None, &[])
}

/// [`start_certeasy`] with the `certeasy` binary of another build, possibly on PostgreSQL
/// (`database_url`), its file written without `drop_keys` (keys that build predates).
pub(crate) fn start_certeasy_build(
    out: &Path,
    certeasy: &Path,
    ports: &Ports,
    label: &str,
    database_url: Option<String>,
    drop_keys: &[String],
) -> anyhow::Result<Started> {
    let dir = fresh_dir(out, label)?;
    let instance = CerteasyInstance {
        listen: ports.acme,
        admin: ports.admin,
        external: ports.acme,
        database_url,
        redis: None,
    };
    let config = certeasy_config(&dir, ports, &instance);
    let root = config.data_dir.join("ca/root.pem");
    let path = if drop_keys.is_empty() {
        write_certeasy_config(&dir, &config)?
    } else {
        write_config_without(&dir, &config, drop_keys)?
    };
    let mut process = Process::spawn(
        "certeasy",
        Command::new(certeasy)
            .arg("serve")
            .arg("--config")
            .arg(&path),
        &dir.join("server.log"),
    )?;
    process.wait_port(ports.acme)?;
    process.wait_file(&root)?;
    Ok(Started {
        process,
        root,
        directory: format!("https://localhost:{}/directory", ports.acme),
        dir,
    })
}

/// The last `lines` lines of a log, for the error of a failed run.
pub(crate) fn tail(path: &Path, lines: usize) -> String {
    let Ok(file) = File::open(path) else {
        return format!("(no {})", path.display());
    };
    let all: Vec<String> = BufReader::new(file).lines().map_while(Result::ok).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::CerteasyInstance;
    use super::Ports;
    use super::certeasy_config;
    use super::write_certeasy_config;

    /// Each run's file is the model serialised: Certeasy reads back exactly the configuration
    /// the part built, with the shipped defaults for everything it did not set.
    #[test]
    fn certeasy_reads_back_the_configuration_it_is_given() {
        let dir = std::env::temp_dir().join(format!("loadgen-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let ports = Ports::from_base(18400).expect("ports");
        for instance in [
            CerteasyInstance {
                listen: ports.acme,
                admin: ports.admin,
                external: ports.acme,
                database_url: None,
                redis: None,
            },
            CerteasyInstance {
                listen: ports.acme2,
                admin: ports.admin2,
                external: ports.proxy,
                database_url: Some("postgres://postgres@127.0.0.1:5432/bench".to_owned()),
                redis: Some((
                    "redis://127.0.0.1:6379".to_owned(),
                    "certeasy-loadgen-1:".to_owned(),
                )),
            },
        ] {
            let config = certeasy_config(&dir, &ports, &instance);
            let path = write_certeasy_config(&dir, &config).expect("written and read back");
            let text = std::fs::read_to_string(&path).expect("file");
            assert!(text.contains("allow-loopback: true"), "{text}");
            let read = certeasy::config::load(&path).expect("loads");
            assert_eq!(read, config);
            assert_eq!(read.crl.listen.port(), instance.listen + 9);
            assert!(!read.rate_limiting.order_creation.enabled);
            assert_eq!(
                read.external_url(),
                format!("https://localhost:{}", instance.external)
            );
        }
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    /// The defaults alone (every key of the model written out) read back unchanged.
    #[test]
    fn the_default_configuration_reads_back() {
        let config = certeasy::config::Config::default();
        let yaml = serde_saphyr::to_string(&config).expect("serialises");
        let read = certeasy::config::from_str(&yaml, "defaults.yaml").expect("reads");
        assert_eq!(read, config);
    }

    #[test]
    fn the_port_range_must_fit() {
        assert!(Ports::from_base(u16::MAX - 3).is_err());
        assert_eq!(Ports::from_base(18400).expect("fits").db_proxy, 18417);
    }
}
