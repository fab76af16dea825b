//! The `certeasy` command line: what clap parses (`Cli`, one module per subcommand group) and
//! how its flags become the configuration. `main.rs` only dispatches on it.
//!
//! Options that hold for a whole group (`admin`'s `--config`, `--admin-url`, `--token-file` and
//! `--json`) are `global`, so they may stand anywhere after the group's name:
//! `certeasy admin eab create --config FILE` and `certeasy admin --config FILE eab create` are
//! the same command.

pub mod admin;

use std::path::Path;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use clap::Subcommand;

use crate::config;
use crate::config::Config;

/// Certeasy: an ACME (RFC 8555) certificate authority for internal PKI.
///
/// Point certbot, lego or any ACME client at the directory URL printed by `certeasy serve`, and
/// give the clients the root certificate it names.
#[derive(Debug, Parser)]
#[command(name = "certeasy", version, about, long_about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
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
    /// The key ceremony and the offline root: `ca init`, `ca new-intermediate`,
    /// `ca move-root-key` (run on this machine's files; no server needed).
    Ca {
        #[command(subcommand)]
        command: crate::ca_cli::CaCommand,
    },
    /// The audit log checked on the database itself, with no server (`certeasy admin audit`
    /// asks a running one).
    Audit {
        #[command(subcommand)]
        command: crate::audit_offline::AuditCommand,
    },
    /// Administer a running server through its admin listener (server.admin-listen).
    Admin {
        #[command(flatten)]
        options: admin::AdminOptions,
        #[command(subcommand)]
        command: admin::AdminCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
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

/// The listener addresses `certeasy serve` (and `config check`) take over the file's.
#[derive(Debug, clap::Args)]
pub struct ListenerArgs {
    /// The ACME listener's address (server.listen), e.g. 127.0.0.1:14000.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,
    /// The admin listener's address (server.admin-listen), e.g. 127.0.0.1:14001.
    #[arg(long, value_name = "ADDR")]
    pub admin_listen: Option<std::net::SocketAddr>,
    /// The CRL listener's address (crl.listen), e.g. 127.0.0.1:14002.
    #[arg(long, value_name = "ADDR")]
    pub crl_listen: Option<std::net::SocketAddr>,
}

impl ListenerArgs {
    fn apply(&self, config: &mut Config) {
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
pub struct TestModeArgs {
    /// Run an ephemeral instance for testing ACME clients: a fresh CA and state in a temporary
    /// directory removed on exit (unless --data-dir), listener on 127.0.0.1:14000, loopback
    /// validation allowed on ports 5002 (http-01) and 5001 (tls-alpn-01), rate limits off.
    /// Prints the directory URL and the root certificate. Same as `test-mode.enabled: true`.
    #[arg(long)]
    pub test_mode: bool,
    /// Test mode: keep state in this directory instead of a temporary one (kept on exit).
    #[arg(long, value_name = "DIR", requires = "test_mode")]
    pub data_dir: Option<PathBuf>,
    /// Test mode: the port http-01 challenges are validated on [default: 5002].
    #[arg(long, value_name = "PORT", requires = "test_mode")]
    pub http_port: Option<u16>,
    /// Test mode: the port tls-alpn-01 challenges are validated on [default: 5001].
    #[arg(long, value_name = "PORT", requires = "test_mode")]
    pub tls_alpn_port: Option<u16>,
    /// Test mode: resolve names (http-01, tls-alpn-01, dns-01 TXT) through this DNS server,
    /// IP[:PORT] (repeatable); default: the system's resolvers.
    #[arg(long = "dns-server", value_name = "ADDR", requires = "test_mode", value_parser = config::parse_resolver)]
    pub dns_servers: Vec<std::net::SocketAddr>,
    /// Test mode: every challenge is valid at once, without contacting anything (no CAA
    /// check either), so a client needs no challenge responder.
    #[arg(long, requires = "test_mode")]
    pub always_valid: bool,
    /// Test mode: refuse this percentage of valid nonces with badNonce, so the client must
    /// retry with the nonce of the refusal [default: 0].
    #[arg(long, value_name = "PERCENT", requires = "test_mode", value_parser = clap::value_parser!(u8).range(0..=100))]
    pub reject_nonces: Option<u8>,
    /// Test mode: never reuse a valid authorization; every order needs fresh validations
    /// (default: reused, as in production).
    #[arg(long, requires = "test_mode")]
    pub no_authz_reuse: bool,
    /// Test mode: the lifetime of every certificate, e.g. 1h or 2d [default: the profile's].
    #[arg(long, value_name = "DURATION", requires = "test_mode")]
    pub cert_lifetime: Option<acme_core::duration::ConfigDuration>,
    /// Test mode: enforce small real rate limits (e.g. 5 orders per account per minute) so
    /// clients meet 429 with Retry-After; without it, no rate limit applies.
    #[arg(long, requires = "test_mode")]
    pub rate_limits: bool,
    /// Test mode: print one JSON object (directory, root, root-pem, admin, data-dir) on stdout
    /// instead of the text, for scripts.
    #[arg(long, requires = "test_mode")]
    pub json: bool,
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

/// The configuration `certeasy serve` runs with: the file at `path` (or the defaults) with the
/// flags written over it, checked as a whole (test mode's refusals included, see
/// `Config::test_mode_refusals`). Creates nothing, so `config check` shares it. Problems are
/// printed; exit code 2, as for a bad file.
pub fn configure(
    path: Option<&Path>,
    listeners: &ListenerArgs,
    test_mode: &TestModeArgs,
) -> Result<Config, ExitCode> {
    let mut config = config::load_or_default(path)?;
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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;
    use clap::Parser;

    use super::Cli;

    #[test]
    fn the_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn serve_takes_its_flags() {
        let cli = Cli::try_parse_from([
            "certeasy",
            "serve",
            "--test-mode",
            "--json",
            "-c",
            "c.yaml",
            "--listen",
            "127.0.0.1:1",
        ])
        .unwrap();
        let super::Command::Serve {
            config, test_mode, ..
        } = cli.command
        else {
            panic!("not serve");
        };
        assert_eq!(config.unwrap().to_str(), Some("c.yaml"));
        assert!(test_mode.test_mode && test_mode.json);
        assert!(Cli::try_parse_from(["certeasy", "serve", "--json"]).is_err());
    }
}
