//! Running `certeasy admin ...` against a test's server, the way an operator would.
//!
//! testkit cannot depend on the `certeasy` binary (a library cannot name another package's
//! binary target), so the caller passes its path: `env!("CARGO_BIN_EXE_certeasy")`.

use std::ffi::OsString;
use std::path::Path;
use std::path::PathBuf;
use std::process::Command;
use std::process::Output;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

/// Variables of the developer's shell that would point the CLI somewhere else than the test
/// says.
const AMBIENT: [&str; 3] = [
    "CERTEASY_CONFIG",
    "CERTEASY_ADMIN_URL",
    "CERTEASY_ADMIN_TOKEN_FILE",
];

/// The CLI aimed at one server.
#[derive(Debug, Clone)]
pub struct AdminCli {
    bin: PathBuf,
    /// The arguments after `admin` that name the server.
    target: Vec<OsString>,
}

/// What one run printed.
#[derive(Debug)]
pub struct CliOutput {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl CliOutput {
    fn from_output(out: &Output) -> Self {
        Self {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Standard output then standard error, as a terminal shows them.
    pub fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }

    /// Success and [`CliOutput::text`], for `let (ok, out) = ...`.
    pub fn into_pair(self) -> (bool, String) {
        let text = self.text();
        (self.ok, text)
    }

    /// The standard output as the one JSON document `--json` prints.
    ///
    /// # Panics
    ///
    /// When the command failed or printed something else: the test fails with what it printed.
    pub fn json(&self) -> Value {
        assert!(self.ok, "command failed: {}{}", self.stdout, self.stderr);
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not one JSON document ({e}): {}", self.stdout))
    }
}

impl AdminCli {
    /// The CLI reading the server's configuration file (`--config`), as on the server's host.
    pub fn with_config(bin: impl Into<PathBuf>, config: &Path) -> Self {
        Self {
            bin: bin.into(),
            target: vec!["--config".into(), config.into()],
        }
    }

    /// The CLI naming the admin listener and the token file only, as from another host.
    pub fn with_url(bin: impl Into<PathBuf>, admin_url: &str, token_file: &Path) -> Self {
        Self {
            bin: bin.into(),
            target: vec![
                "--admin-url".into(),
                admin_url.into(),
                "--token-file".into(),
                token_file.into(),
            ],
        }
    }

    /// `certeasy admin <target> <args>`, for a test that needs more than [`AdminCli::run`].
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        for name in AMBIENT {
            cmd.env_remove(name);
        }
        cmd.arg("admin")
            .args(&self.target)
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `certeasy admin <target> <args>` to the end.
    ///
    /// # Panics
    ///
    /// When the binary cannot be started.
    pub fn run(&self, args: &[&str]) -> CliOutput {
        let out = self
            .command(args)
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.bin.display()));
        CliOutput::from_output(&out)
    }

    /// [`AdminCli::run`] without blocking the runtime (the server under test may run on it),
    /// killed after `within`.
    ///
    /// # Panics
    ///
    /// When the binary cannot be started or does not finish within `within`.
    pub async fn run_async(&self, args: &[&str], within: Duration) -> CliOutput {
        let mut cmd = tokio::process::Command::from(self.command(args));
        cmd.kill_on_drop(true);
        let out = tokio::time::timeout(within, cmd.output())
            .await
            .unwrap_or_else(|_| panic!("certeasy admin {args:?} did not finish within {within:?}"))
            .unwrap_or_else(|e| panic!("running {}: {e}", self.bin.display()));
        CliOutput::from_output(&out)
    }
}
