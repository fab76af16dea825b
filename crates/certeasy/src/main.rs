//! The `certeasy` command.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use acme_core::clock::SystemClock;
use certeasy::config;
use clap::Parser;
use clap::Subcommand;

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
        /// Configuration file to take the admin address from.
        #[arg(long, short, env = "CERTEASY_CONFIG")]
        config: Option<PathBuf>,
        #[command(subcommand)]
        command: AdminCommand,
    },
}

#[derive(Debug, Subcommand)]
enum AdminCommand {
    /// Reload rate limits and overrides from the configuration file (same as SIGHUP). An invalid
    /// file is refused and the limits in force stay.
    Reload,
    /// Inspect or reset rate-limit buckets.
    Ratelimit {
        #[command(subcommand)]
        command: RatelimitCommand,
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
    Check {
        /// The file to check.
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Config {
            command: ConfigCommand::Check { file },
        } => match config::load(&file) {
            Ok(_) => {
                println!("{}: configuration is valid", file.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(2)
            }
        },
        Command::Admin {
            admin_url,
            config: config_file,
            command,
        } => admin(admin_url, config_file, command),
        Command::Serve { config: path } => {
            let config = match &path {
                Some(p) => match config::load(p) {
                    Ok(c) => c,
                    Err(e) => {
                        eprintln!("{e}");
                        return ExitCode::from(2);
                    }
                },
                None => config::Config::default(),
            };
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
            match runtime.block_on(serve(config, path)) {
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

async fn serve(config: config::Config, config_path: Option<PathBuf>) -> anyhow::Result<()> {
    // Two crypto providers in one process make rustls panic; this one is the only one we link.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let server =
        certeasy::serve::start(&config, config_path.as_deref(), Arc::new(SystemClock)).await?;
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
    println!("Certeasy is ready.");
    println!("  ACME directory:   {}", server.directory_url);
    println!("  Root certificate: {root}");
    println!(
        "                    (also served at {}/root.pem)",
        server.directory_url.trim_end_matches("/directory")
    );
    println!(
        "  Metrics, health:  http://{}/metrics  /healthz  /readyz",
        server.admin_addr
    );
    let limits = Arc::clone(&server.limits);
    let reload_path = config_path.clone();
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::SignalKind;
            use tokio::signal::unix::signal;
            let Ok(mut hangups) = signal(SignalKind::hangup()) else {
                return;
            };
            while hangups.recv().await.is_some() {
                match certeasy::serve::reload_limits(&limits, reload_path.as_deref()).await {
                    Ok(()) => tracing::info!("SIGHUP: rate limits and overrides reloaded"),
                    Err(e) => {
                        tracing::error!(error = %format!("{e:#}"), "SIGHUP: reload refused; the previous limits stay in force")
                    }
                }
            }
        }
    });
    let token = server.shutdown_token();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutting down");
        token.cancel();
    });
    server.wait().await;
    Ok(())
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::SignalKind;
        use tokio::signal::unix::signal;
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
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

fn admin(
    admin_url: Option<String>,
    config_file: Option<PathBuf>,
    command: AdminCommand,
) -> ExitCode {
    let base = match admin_url {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None => {
            let config = match &config_file {
                Some(p) => match config::load(p) {
                    Ok(c) => c,
                    Err(e) => {
                        eprintln!("{e}");
                        return ExitCode::from(2);
                    }
                },
                None => config::Config::default(),
            };
            format!("http://{}", config.server.admin_listen)
        }
    };
    let (method, path) = match &command {
        AdminCommand::Reload => ("POST", "/admin/reload".to_owned()),
        AdminCommand::Ratelimit {
            command: RatelimitCommand::Show { limit, id },
        } => (
            "GET",
            format!("/admin/ratelimit/{limit}/{}", encode_segment(id)),
        ),
        AdminCommand::Ratelimit {
            command: RatelimitCommand::Reset { limit, id },
        } => (
            "POST",
            format!("/admin/ratelimit/{limit}/{}/reset", encode_segment(id)),
        ),
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
    let url = format!("{base}{path}");
    let result = runtime.block_on(async {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(std::time::Duration::from_secs(10))
            .build()?;
        let request = if method == "POST" {
            client.post(&url)
        } else {
            client.get(&url)
        };
        let response = request.send().await?;
        let status = response.status();
        let text = response.text().await?;
        Ok::<_, reqwest::Error>((status, text))
    });
    match result {
        Ok((status, text)) => {
            print!("{text}");
            if status.is_success() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("cannot reach the admin listener at {base}: {e}");
            ExitCode::FAILURE
        }
    }
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
