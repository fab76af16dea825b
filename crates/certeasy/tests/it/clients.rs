//! The real ACME clients the end-to-end tests drive, set up once: trusting the test CA's root,
//! talking to the given directory, keeping their state under the test's directory, and never
//! going through a proxy from the environment (tests reach loopback only).

use std::path::Path;
use std::time::Duration;

use tokio::process::Command;

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
    let mut cmd = Command::new("certbot");
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
