//! The `certeasy` command: parses the command line (`certeasy::cli`) and wires what it asks
//! for: `serve` (the server, its signals and what it prints on start), `config check`, and
//! `admin` (run by `certeasy::admin_cli`).

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use acme_core::clock::SystemClock;
use certeasy::cli::Cli;
use certeasy::cli::Command;
use certeasy::cli::ConfigCommand;
use certeasy::cli::configure;
use certeasy::config;
use clap::Parser;

/// Small short-lived allocations (requests, rows, JSON) dominate; glibc's malloc spent 8 % of
/// the server's CPU on them in the issuance profile (docs/performance.md). The crate's `override`
/// feature makes it the allocator of the C code too (SQLite, aws-lc): on glibc's, the page caches
/// SQLite's readers drop after every commit were handed back to the kernel and faulted in again,
/// 5,000 page faults and 250 `madvise` calls a second under load.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
        Command::Admin { options, command } => certeasy::admin_cli::run(options, command),
        Command::Ca { command } => certeasy::ca_cli::run(command),
        Command::Audit { command } => certeasy::audit_offline::run(command),
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
                        "SIGHUP: rate limits, overrides, listener certificate and issuers reloaded"
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
