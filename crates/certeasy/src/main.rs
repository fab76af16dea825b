//! The `certeasy` command.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use acme_core::clock::SystemClock;
use certeasy::config;
use clap::Parser;
use clap::Subcommand;

/// Small short-lived allocations (requests, rows, JSON) dominate; glibc's malloc spent 8 % of
/// the server's CPU on them in the issuance profile (docs/performance.md). The crate's `override`
/// feature makes it the allocator of the C code too (SQLite, aws-lc): on glibc's, the page caches
/// SQLite's readers drop after every commit were handed back to the kernel and faulted in again,
/// 5,000 page faults and 250 `madvise` calls a second under load.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Certeasy: an ACME (RFC 8555) certificate authority for internal PKI.
///
/// Point certbot, lego or any ACME client at the directory URL printed by `certeasy serve`, and
/// give the clients the root certificate it names.
#[derive(Debug, Parser)]
#[command(name = "certeasy", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the ACME server.
    ///
    /// Without --config, built-in defaults are used: data in ./data (SQLite database, CA keys),
    /// the ACME endpoint on https://0.0.0.0:14000 and metrics/health on http://127.0.0.1:14001.
    /// On first start a root and an intermediate CA are created in <data-dir>/ca.
    Serve {
        /// The YAML configuration file (see config/certeasy.yaml for every key).
        #[arg(long, short, env = "CERTEASY_CONFIG")]
        config: Option<PathBuf>,
        #[command(flatten)]
        listeners: ListenerArgs,
        #[command(flatten)]
        test_mode: TestModeArgs,
    },
    /// Work with configuration files.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Administer a running server through its admin listener (server.admin-listen).
    Admin {
        /// Base URL of the admin listener; defaults to http://<server.admin-listen> of --config,
        /// or http://127.0.0.1:14001.
        #[arg(long, env = "CERTEASY_ADMIN_URL")]
        admin_url: Option<String>,
        /// Configuration file to take the admin address and the token file from.
        #[arg(long, short, env = "CERTEASY_CONFIG")]
        config: Option<PathBuf>,
        /// File holding the admin token; defaults to server.admin-token-file of --config, or
        /// <data-dir>/admin.token.
        #[arg(long, env = "CERTEASY_ADMIN_TOKEN_FILE")]
        token_file: Option<PathBuf>,
        #[command(subcommand)]
        command: AdminCommand,
    },
}

/// The listener addresses `certeasy serve` (and `config check`) take over the file's.
#[derive(Debug, clap::Args)]
struct ListenerArgs {
    /// The ACME listener's address (server.listen), e.g. 127.0.0.1:14000.
    #[arg(long, value_name = "ADDR")]
    listen: Option<std::net::SocketAddr>,
    /// The admin listener's address (server.admin-listen), e.g. 127.0.0.1:14001.
    #[arg(long, value_name = "ADDR")]
    admin_listen: Option<std::net::SocketAddr>,
    /// The CRL listener's address (crl.listen), e.g. 127.0.0.1:14002.
    #[arg(long, value_name = "ADDR")]
    crl_listen: Option<std::net::SocketAddr>,
}

impl ListenerArgs {
    fn apply(&self, config: &mut config::Config) {
        if let Some(addr) = self.listen {
            config.server.listen = addr;
        }
        if let Some(addr) = self.admin_listen {
            config.server.admin_listen = addr;
        }
        if let Some(addr) = self.crl_listen {
            config.crl.listen = addr;
        }
    }
}

/// `certeasy serve --test-mode` and its knobs; each overrides the same key of the `test-mode:`
/// block (docs/configuration.md).
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Test mode (NOT FOR PRODUCTION)")]
struct TestModeArgs {
    /// Run an ephemeral instance for testing ACME clients: a fresh CA and state in a temporary
    /// directory removed on exit (unless --data-dir), listener on 127.0.0.1:14000, loopback
    /// validation allowed on ports 5002 (http-01) and 5001 (tls-alpn-01), rate limits off.
    /// Prints the directory URL and the root certificate. Same as `test-mode.enabled: true`.
    #[arg(long)]
    test_mode: bool,
    /// Test mode: keep state in this directory instead of a temporary one (kept on exit).
    #[arg(long, value_name = "DIR", requires = "test_mode")]
    data_dir: Option<PathBuf>,
    /// Test mode: the port http-01 challenges are validated on [default: 5002].
    #[arg(long, value_name = "PORT", requires = "test_mode")]
    http_port: Option<u16>,
    /// Test mode: the port tls-alpn-01 challenges are validated on [default: 5001].
    #[arg(long, value_name = "PORT", requires = "test_mode")]
    tls_alpn_port: Option<u16>,
    /// Test mode: resolve names (http-01, tls-alpn-01, dns-01 TXT) through this DNS server,
    /// IP[:PORT] (repeatable); default: the system's resolvers.
    #[arg(long = "dns-server", value_name = "ADDR", requires = "test_mode", value_parser = certeasy::config::parse_resolver)]
    dns_servers: Vec<std::net::SocketAddr>,
    /// Test mode: every challenge is valid at once, without contacting anything (no CAA
    /// check either), so a client needs no challenge responder.
    #[arg(long, requires = "test_mode")]
    always_valid: bool,
    /// Test mode: refuse this percentage of valid nonces with badNonce, so the client must
    /// retry with the nonce of the refusal [default: 0].
    #[arg(long, value_name = "PERCENT", requires = "test_mode", value_parser = clap::value_parser!(u8).range(0..=100))]
    reject_nonces: Option<u8>,
    /// Test mode: never reuse a valid authorization; every order needs fresh validations
    /// (default: reused, as in production).
    #[arg(long, requires = "test_mode")]
    no_authz_reuse: bool,
    /// Test mode: the lifetime of every certificate, e.g. 1h or 2d [default: the profile's].
    #[arg(long, value_name = "DURATION", requires = "test_mode")]
    cert_lifetime: Option<acme_core::duration::ConfigDuration>,
    /// Test mode: enforce small real rate limits (e.g. 5 orders per account per minute) so
    /// clients meet 429 with Retry-After; without it, no rate limit applies.
    #[arg(long, requires = "test_mode")]
    rate_limits: bool,
    /// Test mode: print one JSON object (directory, root, root-pem, admin, data-dir) on stdout
    /// instead of the text, for scripts.
    #[arg(long, requires = "test_mode")]
    json: bool,
}

impl TestModeArgs {
    /// Writes the flags that were given over the `test-mode:` block.
    fn apply(&self, block: &mut config::TestModeConfig) {
        if self.test_mode {
            block.enabled = true;
        }
        if let Some(dir) = &self.data_dir {
            block.data_dir = Some(dir.clone());
        }
        if let Some(port) = self.http_port {
            block.http_port = port;
        }
        if let Some(port) = self.tls_alpn_port {
            block.tls_alpn_port = port;
        }
        if !self.dns_servers.is_empty() {
            block.dns_servers = self.dns_servers.clone();
        }
        if self.always_valid {
            block.always_valid = true;
        }
        if let Some(percent) = self.reject_nonces {
            block.reject_nonces_percent = percent;
        }
        if self.no_authz_reuse {
            block.authz_reuse = false;
        }
        if let Some(lifetime) = self.cert_lifetime {
            block.cert_lifetime = Some(lifetime);
        }
        if self.rate_limits {
            block.rate_limits = true;
        }
    }
}

#[derive(Debug, Subcommand)]
enum AdminCommand {
    /// Reload rate limits and overrides from the configuration file, and the listener's
    /// certificate files (same as SIGHUP). An invalid file is refused and what is in force stays.
    Reload,
    /// Copy the SQLite database into a backup file, while the server runs.
    ///
    /// The server writes <data-dir>/backups/certeasy-<UTC time YYYYMMDDTHHMMSSZ>.db on its own
    /// machine (the directory is created 0700; a second backup within the same second gets a
    /// suffix) and prints the file's path, size and how long the copy took. The file is a
    /// complete SQLite database, consistent although the server goes on serving while it is
    /// written, compacted, and created with mode 0600: it holds account and EAB keys. The running
    /// server holds its database exclusively, so this is the way to back it up online. The CA
    /// files, admin.token and unpause.key are not in it: back them up beside it
    /// (docs/operations.md).
    ///
    /// A PostgreSQL database is backed up with pg_dump instead: the server refuses this command
    /// there.
    #[command(
        after_long_help = "Examples:\n  certeasy admin backup\n  certeasy admin backup --json"
    )]
    Backup {
        /// Print one JSON document ({"path", "bytes", "seconds"}) instead of a line.
        #[arg(long)]
        json: bool,
    },
    /// Inspect or reset rate-limit buckets.
    Ratelimit {
        #[command(subcommand)]
        command: RatelimitCommand,
    },
    /// List, show and deactivate ACME accounts.
    Accounts {
        #[command(subcommand)]
        command: certeasy::admin_cli::AccountsCommand,
    },
    /// List, show and revoke certificates (by serial, or in bulk by filters).
    Certificates {
        #[command(subcommand)]
        // Boxed: its filters would make every `Command` as large as this one variant.
        command: Box<certeasy::admin_cli::CertificatesCommand>,
    },
    /// External account binding keys: create, list, revoke.
    Eab {
        #[command(subcommand)]
        command: EabCommand,
    },
    /// Blocked keys: block, unblock, list (no account or certificate may hold one).
    Keys {
        #[command(subcommand)]
        command: certeasy::admin_keys::KeysCommand,
    },
    /// List paused (account, identifier) pairs.
    Pauses {
        #[command(subcommand)]
        command: PausesCommand,
    },
    /// Pause identifiers of an account: its new orders naming them are refused until unpaused.
    Pause {
        /// The account id.
        #[arg(long)]
        account: i64,
        /// A file of identifiers, one per line (dns:name, ip:addr, or bare).
        #[arg(long)]
        file: Option<PathBuf>,
        /// Identifiers (dns:name, ip:addr, or bare).
        names: Vec<String>,
    },
    /// Unpause identifiers of an account; with no names (and no --file), every pause of the account.
    Unpause {
        /// The account id.
        #[arg(long)]
        account: i64,
        /// A file of identifiers, one per line.
        #[arg(long)]
        file: Option<PathBuf>,
        /// Identifiers (dns:name, ip:addr, or bare).
        names: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
enum EabCommand {
    /// Create an external account binding key (RFC 8555 §7.3.4). Prints its key ID and HMAC key
    /// (base64url) once: give both to the subscriber's ACME client.
    Create {
        /// Allow names equal to or below this domain (repeatable). With no --domain and no
        /// --cidr, any identifier the CA allows.
        #[arg(long = "domain")]
        domains: Vec<String>,
        /// Allow IP identifiers inside this network (repeatable).
        #[arg(long = "cidr")]
        cidrs: Vec<String>,
        /// Allow this certificate profile (repeatable); none means any.
        #[arg(long = "profile")]
        profiles: Vec<String>,
        /// Longest certificate validity orders of bound accounts may ask for (e.g. 30d).
        #[arg(long)]
        max_validity: Option<String>,
        /// The key binds no new account after this long (e.g. 7d); bound accounts keep working.
        #[arg(long)]
        expires_in: Option<String>,
        /// The key may bind any number of accounts (default: one).
        #[arg(long)]
        reusable: bool,
        /// Print the key as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the keys with their policy and how many accounts each binds (never the HMAC keys).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key: it binds no new account. Accounts already bound keep working under its
    /// policy, unless --deactivate-accounts.
    Revoke {
        /// The key ID.
        kid: String,
        /// Also deactivate every valid account bound with the key (as `accounts deactivate`
        /// does: refused from its next request on); prints how many. Allowed on a key revoked
        /// before.
        #[arg(long)]
        deactivate_accounts: bool,
    },
}

#[derive(Debug, Subcommand)]
enum PausesCommand {
    /// Print the current pauses (or, with --all, also lifted ones), newest first.
    List {
        /// Only this account.
        #[arg(long)]
        account: Option<i64>,
        /// Include pairs that were unpaused.
        #[arg(long)]
        all: bool,
    },
}

#[derive(Debug, Subcommand)]
enum RatelimitCommand {
    /// Print a bucket's remaining tokens and when it is full again.
    Show {
        /// Limit name: global, account-creation, order-creation, san-budget, failed-validation.
        limit: String,
        /// Bucket id: an IP address, an account id, or <account id>:<identifier>.
        id: String,
    },
    /// Empty a bucket's debt so it is full at once.
    Reset {
        /// Limit name.
        limit: String,
        /// Bucket id.
        id: String,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Validate a configuration file: unknown keys, wrong types and impossible values are reported
    /// with file, line and key. Exits 0 when the file is valid.
    ///
    /// Given the flags `certeasy serve` would be started with (listeners, test mode), it checks
    /// the configuration they make and refuses what serve would refuse, e.g. test mode with a
    /// PostgreSQL database, on a public listener or in a data directory it did not create.
    /// Nothing is created or opened.
    Check {
        /// The file to check; without it, the built-in defaults with the flags.
        file: Option<PathBuf>,
        #[command(flatten)]
        listeners: ListenerArgs,
        #[command(flatten)]
        test_mode: TestModeArgs,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Config {
            command:
                ConfigCommand::Check {
                    file,
                    listeners,
                    test_mode,
                },
        } => match configure(file.as_deref(), &listeners, &test_mode) {
            Ok(_) => {
                let what = file.as_ref().map_or_else(
                    || "the built-in defaults".to_owned(),
                    |f| f.display().to_string(),
                );
                println!("{what}: configuration is valid");
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        Command::Admin {
            admin_url,
            config: config_file,
            token_file,
            command,
        } => admin(admin_url, config_file, token_file, command),
        Command::Serve {
            config: path,
            listeners,
            test_mode,
        } => {
            // Every check, test mode's refusals included, before anything is created.
            let mut config = match configure(path.as_deref(), &listeners, &test_mode) {
                Ok(c) => c,
                Err(code) => return code,
            };
            // Declared before the runtime, so it is dropped (and the directory removed) after
            // the runtime has stopped every task that could still write to it.
            let mut _temporary_state = None;
            if config.test_mode.enabled {
                let data_dir = match &config.test_mode.data_dir {
                    Some(dir) => dir.clone(),
                    // Private like any data directory: it holds the CA keys.
                    None => match tempfile::Builder::new()
                        .prefix("certeasy-test-mode-")
                        .permissions(std::fs::Permissions::from_mode(0o700))
                        .tempdir()
                    {
                        Ok(dir) => _temporary_state.insert(dir).path().to_path_buf(),
                        Err(e) => {
                            eprintln!(
                                "certeasy: cannot create the test mode's state directory: {e}"
                            );
                            return ExitCode::FAILURE;
                        }
                    },
                };
                if let Err(e) = certeasy::data_dir::create_test_mode(&data_dir) {
                    eprintln!("certeasy: test mode's state directory: {e:#}");
                    return ExitCode::FAILURE;
                }
                config.apply_test_mode(data_dir);
            }
            if let Err(problems) = config::check(&config) {
                for problem in problems {
                    eprintln!("certeasy: {problem}");
                }
                return ExitCode::from(2);
            }
            init_logging(&config);
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("cannot start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let json = test_mode.json;
            let result = runtime.block_on(serve(config, path, json));
            // Every task ends before the temporary state directory goes.
            drop(runtime);
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("{e:#}");
                    eprintln!("certeasy: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

async fn serve(
    config: config::Config,
    config_path: Option<PathBuf>,
    json: bool,
) -> anyhow::Result<()> {
    // Two crypto providers in one process make rustls panic; this one is the only one we link.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let server =
        certeasy::serve::start(&config, config_path.as_deref(), Arc::new(SystemClock)).await?;
    // The handlers are installed before "ready" is printed: a supervisor (or a test) that sends
    // SIGTERM or SIGHUP the moment it reads that line must reach them, not the default action,
    // which would kill the process without its clean shutdown (a test instance's state
    // directory would be left behind).
    let signals = Signals::install()?;
    let root = server.root_path.as_ref().map_or_else(
        || "(loaded from the configured files)".to_owned(),
        |p| p.display().to_string(),
    );
    tracing::info!(
        directory = %server.directory_url,
        acme = %server.acme_addr,
        admin = %server.admin_addr,
        root = %root,
        "certeasy is ready"
    );
    if config.test_mode.enabled {
        announce_test_mode(&config, &server, &root, json);
    } else {
        println!("Certeasy is ready.");
        println!("  ACME directory:   {}", server.directory_url);
        println!("  Root certificate: {root}");
        println!(
            "                    (also served at {}/root.pem)",
            server.directory_url.trim_end_matches("/directory")
        );
        if let (Some(base), Some(addr)) = (&server.crl_base_url, server.crl_addr) {
            println!("  CRLs:             {base}/<shard>.crl (served on {addr})");
        }
        println!(
            "  Metrics, health:  http://{}/metrics  /healthz  /readyz",
            server.admin_addr
        );
    }
    let Signals {
        #[cfg(unix)]
        mut hangups,
        stop,
    } = signals;
    #[cfg(unix)]
    {
        let reloader = server.reloader();
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                match reloader.reload().await {
                    Ok(()) => tracing::info!(
                        "SIGHUP: rate limits, overrides and listener certificate reloaded"
                    ),
                    Err(e) => {
                        tracing::error!(error = %format!("{e:#}"), "SIGHUP: reload refused")
                    }
                }
            }
        });
    }
    let token = server.shutdown_token();
    tokio::spawn(async move {
        stop.wait().await;
        tracing::info!("shutting down");
        token.cancel();
    });
    server.wait().await;
    Ok(())
}

/// What a test instance prints on start: for people (text, marked NOT FOR PRODUCTION), or with
/// `--json` one JSON object on stdout for scripts (the text then goes to stderr).
fn announce_test_mode(
    config: &config::Config,
    server: &certeasy::serve::RunningServer,
    root: &str,
    json: bool,
) {
    let t = &config.test_mode;
    let admin = format!("http://{}", server.admin_addr);
    let text = format!(
        "Certeasy TEST MODE is ready. NOT FOR PRODUCTION: throw-away CA{}.\n  ACME directory:   {}\n  Root certificate: {root}\n  Admin, metrics:   {admin}/metrics\n  CRLs:             {}\n  Validation:       http-01 on port {}, tls-alpn-01 on port {}{}{}\n  Nonces refused:   {}%  Authorization reuse: {}  Rate limits: {}  Certificate lifetime: {}\n",
        if t.data_dir.is_some() {
            format!(", state in {}", config.data_dir.display())
        } else {
            format!(", state in {} (removed on exit)", config.data_dir.display())
        },
        server.directory_url,
        server
            .crl_base_url
            .as_ref()
            .map_or_else(|| "off".to_owned(), |base| format!("{base}/<shard>.crl")),
        t.http_port,
        t.tls_alpn_port,
        if t.dns_servers.is_empty() {
            String::new()
        } else {
            format!(
                ", DNS through {}",
                t.dns_servers
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
        if t.always_valid {
            " (always valid: nothing is contacted)"
        } else {
            ""
        },
        t.reject_nonces_percent,
        if t.authz_reuse { "on" } else { "off" },
        if t.rate_limits {
            "on (test limits)"
        } else {
            "off"
        },
        t.cert_lifetime
            .map_or_else(|| "the profile's".to_owned(), |d| d.to_string()),
    );
    if json {
        eprint!("{text}");
        let object = serde_json::json!({
            "directory": server.directory_url,
            "root": root,
            "root-pem": server.root_pem,
            "admin": admin,
            "data-dir": config.data_dir.display().to_string(),
            "crl": server.crl_base_url,
            "test-mode": true,
        });
        println!("{object}");
    } else {
        print!("{text}");
        print!("{}", server.root_pem);
    }
}

/// The signals `serve` answers, registered with the kernel when installed.
struct Signals {
    /// SIGHUP: reload.
    #[cfg(unix)]
    hangups: tokio::signal::unix::Signal,
    /// SIGTERM or SIGINT: shut down cleanly.
    stop: StopSignals,
}

/// SIGTERM and SIGINT (Ctrl-C).
struct StopSignals {
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            use anyhow::Context as _;
            use tokio::signal::unix::SignalKind;
            use tokio::signal::unix::signal;
            let listen = |kind: SignalKind, name: &str| {
                signal(kind).with_context(|| format!("installing the {name} handler"))
            };
            Ok(Self {
                hangups: listen(SignalKind::hangup(), "SIGHUP")?,
                stop: StopSignals {
                    terminate: listen(SignalKind::terminate(), "SIGTERM")?,
                    interrupt: listen(SignalKind::interrupt(), "SIGINT")?,
                },
            })
        }
        #[cfg(not(unix))]
        Ok(Self {
            stop: StopSignals {},
        })
    }
}

impl StopSignals {
    async fn wait(self) {
        #[cfg(unix)]
        {
            let Self {
                mut terminate,
                mut interrupt,
            } = self;
            tokio::select! {
                _ = terminate.recv() => {}
                _ = interrupt.recv() => {}
            }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn init_logging(config: &config::Config) {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&config.logging.level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if config.logging.format == config::LogFormat::Json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// The configuration `certeasy serve` runs with: the file at `path` (or the defaults) with the
/// flags written over it, checked as a whole (test mode's refusals included, see
/// `Config::test_mode_refusals`). Creates nothing, so `config check` shares it. Problems are
/// printed; exit code 2, as for a bad file.
fn configure(
    path: Option<&std::path::Path>,
    listeners: &ListenerArgs,
    test_mode: &TestModeArgs,
) -> Result<config::Config, ExitCode> {
    let mut config = load_or_default(path)?;
    listeners.apply(&mut config);
    test_mode.apply(&mut config.test_mode);
    if let Err(problems) = config::check(&config) {
        for problem in problems {
            eprintln!("certeasy: {problem}");
        }
        return Err(ExitCode::from(2));
    }
    Ok(config)
}

/// The configuration at `path`, or the built-in defaults without one. A bad file is reported
/// (file, line, key) and becomes exit code 2, as for `config check`.
fn load_or_default(path: Option<&std::path::Path>) -> Result<config::Config, ExitCode> {
    match path {
        Some(p) => config::load(p).map_err(|e| {
            eprintln!("{e}");
            ExitCode::from(2)
        }),
        None => Ok(config::Config::default()),
    }
}

fn admin(
    admin_url: Option<String>,
    config_file: Option<PathBuf>,
    token_file: Option<PathBuf>,
    command: AdminCommand,
) -> ExitCode {
    let config = match load_or_default(config_file.as_deref()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let base = match admin_url {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None => format!("http://{}", config.server.admin_listen),
    };
    let token_path = token_file.unwrap_or_else(|| config.admin_token_path());
    let token = match certeasy::admin_token::read(&token_path) {
        Ok(token) => token,
        Err(e) => {
            eprintln!("{e:#} (pass --config or --token-file)");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(admin_command(&base, &token, command)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("cannot reach the admin listener at {base}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs one admin command; `Ok(false)` when the server refused it (its answer is printed).
async fn admin_command(
    base: &str,
    token: &certeasy::admin_token::AdminToken,
    command: AdminCommand,
) -> anyhow::Result<bool> {
    let mut auth = reqwest::header::HeaderValue::from_str(&format!("Bearer {}", token.as_str()))?;
    auth.set_sensitive(true);
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(reqwest::header::AUTHORIZATION, auth);
    let client = reqwest::Client::builder()
        .no_proxy()
        .default_headers(headers)
        .timeout(std::time::Duration::from_secs(120))
        .build()?;
    let simple = |method: &str, path: String| (method.to_owned(), path);
    let (method, path) = match command {
        AdminCommand::Reload => simple("POST", "/admin/reload".to_owned()),
        AdminCommand::Backup { json } => {
            return certeasy::admin_cli::backup(&client, base, json).await;
        }
        AdminCommand::Accounts { command } => {
            return certeasy::admin_cli::accounts(&client, base, command).await;
        }
        AdminCommand::Certificates { command } => {
            return certeasy::admin_cli::certificates(&client, base, *command).await;
        }
        AdminCommand::Ratelimit {
            command: RatelimitCommand::Show { limit, id },
        } => simple(
            "GET",
            format!("/admin/ratelimit/{limit}/{}", encode_segment(&id)),
        ),
        AdminCommand::Ratelimit {
            command: RatelimitCommand::Reset { limit, id },
        } => simple(
            "POST",
            format!("/admin/ratelimit/{limit}/{}/reset", encode_segment(&id)),
        ),
        AdminCommand::Eab { command } => return eab(&client, base, command).await,
        AdminCommand::Keys { command } => {
            return certeasy::admin_keys::keys(&client, base, command).await;
        }
        AdminCommand::Pauses {
            command: PausesCommand::List { account, all },
        } => {
            let mut path = format!("/admin/pauses?all={all}");
            if let Some(a) = account {
                path.push_str(&format!("&account={a}"));
            }
            simple("GET", path)
        }
        AdminCommand::Pause {
            account,
            file,
            names,
        } => {
            return batch(
                &client,
                base,
                "/admin/pause",
                account,
                collect_names(file, names)?,
                "paused",
            )
            .await;
        }
        AdminCommand::Unpause {
            account,
            file,
            names,
        } => {
            let names = collect_names(file, names)?;
            if names.is_empty() {
                // Account-wide: the server unpauses up to 50,000 per call; repeat until done.
                let mut total = 0_u64;
                loop {
                    let body =
                        serde_json::json!({ "account": account, "identifiers": [] }).to_string();
                    let (ok, text) = send(
                        &client,
                        "POST",
                        &format!("{base}/admin/unpause"),
                        Some(body),
                    )
                    .await?;
                    if !ok {
                        eprint!("{text}");
                        return Ok(false);
                    }
                    let n: u64 = text.trim().parse().unwrap_or(0);
                    total += n;
                    if n < u64::from(acme_api::unpause::MAX_PER_CLICK) {
                        break;
                    }
                }
                println!("{total} pairs of account {account} unpaused");
                return Ok(true);
            }
            return batch(&client, base, "/admin/unpause", account, names, "unpaused").await;
        }
    };
    let (ok, text) = send(&client, &method, &format!("{base}{path}"), None).await?;
    print!("{text}");
    Ok(ok)
}

/// `certeasy admin eab ...`: the server answers JSON; this prints it for people or as is.
async fn eab(client: &reqwest::Client, base: &str, command: EabCommand) -> anyhow::Result<bool> {
    let (ok, text, json) = match command {
        EabCommand::Create {
            domains,
            cidrs,
            profiles,
            max_validity,
            expires_in,
            reusable,
            json,
        } => {
            let body = serde_json::json!({
                "domains": domains,
                "cidrs": cidrs,
                "profiles": profiles,
                "max-validity": max_validity,
                "expires-in": expires_in,
                "reusable": reusable,
            });
            let (ok, text) = send(
                client,
                "POST",
                &format!("{base}/admin/eab"),
                Some(body.to_string()),
            )
            .await?;
            (ok, text, json)
        }
        EabCommand::List { json } => {
            let (ok, text) = send(client, "GET", &format!("{base}/admin/eab"), None).await?;
            (ok, text, json)
        }
        EabCommand::Revoke {
            kid,
            deactivate_accounts,
        } => {
            let mut url = format!("{base}/admin/eab/{}/revoke", encode_segment(&kid));
            if deactivate_accounts {
                url.push_str("?deactivate-accounts=true");
            }
            let (ok, text) = send(client, "POST", &url, None).await?;
            (ok, text, false)
        }
    };
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        anyhow::anyhow!("the admin listener answered something other than JSON ({e}): {text}")
    })?;
    if !ok {
        let detail = value.get("error").and_then(|v| v.as_str()).unwrap_or(&text);
        eprintln!("refused: {detail}");
        return Ok(false);
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(true);
    }
    match &value {
        serde_json::Value::Array(keys) => {
            println!(
                "kid\tdomains\tcidrs\tprofiles\tmax-validity\texpires-at\treusable\trevoked-at\tbound-accounts"
            );
            for key in keys {
                println!("{}", eab_row(key));
            }
        }
        key if key.get("hmac-key").is_some() => {
            let field = |name: &str| key.get(name).and_then(|v| v.as_str()).unwrap_or("");
            println!("Key ID:   {}", field("kid"));
            println!("HMAC key: {}", field("hmac-key"));
            // The `=` form: a base64url key may start with '-', which argument parsers would
            // otherwise take for an option.
            println!("The HMAC key is shown only now. Give both to the ACME client, e.g.");
            println!(
                "  certbot --eab-kid={} --eab-hmac-key={}",
                field("kid"),
                field("hmac-key")
            );
            println!(
                "  lego --eab --kid={} --hmac={}",
                field("kid"),
                field("hmac-key")
            );
            println!("Policy: {}", eab_row(key));
        }
        key => {
            println!("revoked: {}", eab_row(key));
            if let Some(count) = key.get("deactivated-accounts").and_then(|v| v.as_u64()) {
                println!("deactivated accounts: {count}");
            }
        }
    }
    Ok(true)
}

/// One key as a tab-separated row; `-` for an empty field.
fn eab_row(key: &serde_json::Value) -> String {
    let show = |name: &str| match key.get(name) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Array(items)) if !items.is_empty() => items
            .iter()
            .map(|i| i.as_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>()
            .join(","),
        Some(serde_json::Value::Bool(b)) => b.to_string(),
        Some(serde_json::Value::Number(n)) => n.to_string(),
        _ => "-".to_owned(),
    };
    [
        "kid",
        "domains",
        "cidrs",
        "profiles",
        "max-validity",
        "expires-at",
        "reusable",
        "revoked-at",
        "bound-accounts",
    ]
    .map(show)
    .join("\t")
}

async fn send(
    client: &reqwest::Client,
    method: &str,
    url: &str,
    body: Option<String>,
) -> anyhow::Result<(bool, String)> {
    let mut request = if method == "POST" {
        client.post(url)
    } else {
        client.get(url)
    };
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body);
    }
    let response = request.send().await?;
    let ok = response.status().is_success();
    Ok((ok, response.text().await?))
}

fn collect_names(file: Option<PathBuf>, mut names: Vec<String>) -> anyhow::Result<Vec<String>> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
        names.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_owned),
        );
    }
    for n in &names {
        certeasy::admin_wire::parse_identifier(n).map_err(|e| anyhow::anyhow!("{n}: {e}"))?;
    }
    Ok(names)
}

/// Sends names in chunks of 1,000 with a progress bar.
async fn batch(
    client: &reqwest::Client,
    base: &str,
    path: &str,
    account: i64,
    names: Vec<String>,
    verb: &str,
) -> anyhow::Result<bool> {
    if names.is_empty() {
        anyhow::bail!("no identifiers given (pass names or --file)");
    }
    let bar = indicatif::ProgressBar::new(names.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} identifiers {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut done = 0_u64;
    for chunk in names.chunks(1_000) {
        let body = serde_json::json!({ "account": account, "identifiers": chunk }).to_string();
        let (ok, text) = send(client, "POST", &format!("{base}{path}"), Some(body)).await?;
        if !ok {
            bar.abandon();
            eprint!("{text}");
            return Ok(false);
        }
        done += text.trim().parse::<u64>().unwrap_or(0);
        bar.inc(chunk.len() as u64);
    }
    bar.finish_with_message(format!("({done} {verb})"));
    println!(
        "{done} of {} identifiers of account {account} {verb}",
        names.len()
    );
    Ok(true)
}

/// Percent-encodes a path segment (bucket ids hold ':' and may hold '/').
fn encode_segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b':' | b'*' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}
