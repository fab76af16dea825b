//! Current certbot from PyPI (in the clients' virtualenv, beside Debian's older one) against the
//! real `certeasy serve` binary: it chooses the shipped `short-lived` profile with
//! `--preferred-profile` and gets its 7-day certificate, and `certbot renew` follows Certeasy's
//! ARI window (RFC 9773): it leaves a fresh certificate alone and renews, with the same profile,
//! once an operator marks the certificate for early renewal.

use std::path::Path;
use std::time::Duration;

use tokio::process::Command;
use x509_parser::prelude::FromDer;
use x509_parser::prelude::X509Certificate;

use crate::certcheck::assert_chain;
use crate::clients::leaf_of;
use crate::clients::renew_early;
use crate::harness::Db;
use crate::harness::TestEnv;
use crate::harness::free_port;
use crate::harness::run;

const TIMEOUT: Duration = Duration::from_secs(180);

fn certbot(env: &TestEnv, dir: &Path) -> Command {
    crate::clients::certbot_pypi(&env.root_path, &env.directory_url(), dir)
}

async fn certbot_ok(env: &TestEnv, cmd: Command, what: &str) -> String {
    let (ok, out) = run(cmd, TIMEOUT).await;
    assert!(
        ok,
        "certbot {what} failed:\n{out}\n--- server log ---\n{}",
        env.server_log()
    );
    out
}

fn lifetime(der: &[u8]) -> time::Duration {
    let (_, cert) = X509Certificate::from_der(der).unwrap();
    cert.validity().not_after.to_datetime() - cert.validity().not_before.to_datetime()
}

/// `certbot certonly --standalone --preferred-profile short-lived` for `name`; returns the chain.
async fn short_lived(env: &TestEnv, dir: &Path, port: u16, name: &str) -> String {
    let mut cmd = certbot(env, dir);
    cmd.args([
        "certonly",
        "--standalone",
        "--agree-tos",
        "-m",
        "certbot@example.com",
        "--preferred-profile",
        "short-lived",
        "--http-01-address",
        "127.0.0.1",
        "--http-01-port",
        &port.to_string(),
        "-d",
        name,
    ]);
    certbot_ok(env, cmd, "certonly").await;
    let chain = std::fs::read_to_string(live(dir, name)).unwrap();
    let leaf = assert_chain(&chain, &env.root_pem(), &[name]);
    assert_eq!(lifetime(&leaf), time::Duration::days(7), "short-lived");
    let renewal = std::fs::read_to_string(dir.join(format!("config/renewal/{name}.conf"))).unwrap();
    assert!(
        renewal.contains("preferred_profile = short-lived"),
        "the profile is kept for renewals:\n{renewal}"
    );
    chain
}

fn live(dir: &Path, name: &str) -> std::path::PathBuf {
    dir.join(format!("config/live/{name}/fullchain.pem"))
}

/// Two certificates, one of them marked for early renewal, and one `certbot renew`: certbot asks
/// Certeasy's renewalInfo for each (it then waits the answer's `Retry-After` before asking
/// again, so each certificate is asked once) and renews only the one whose window says "now".
#[tokio::test]
async fn current_certbot_chooses_a_profile_and_renews_on_the_ari_window() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let port = free_port();
    env.challenge_ports(port, env.tls.port());
    env.spawn_binary().await;
    let (fresh, marked) = (env.name("certbot-fresh"), env.name("certbot-marked"));
    let dir = env.dir.path().join("certbot");
    let fresh_chain = short_lived(&env, &dir, port, &fresh).await;
    let marked_chain = short_lived(&env, &dir, port, &marked).await;

    // A fresh certificate's ARI window lies ahead (and more than half its lifetime is left);
    // the operator moves the other one's into the past.
    renew_early(&env, &leaf_of(&marked_chain)).await;
    let mut cmd = certbot(&env, &dir);
    cmd.args(["renew", "--no-random-sleep-on-renew"]);
    let out = certbot_ok(&env, cmd, "renew").await;

    assert_eq!(
        std::fs::read_to_string(live(&dir, &fresh)).unwrap(),
        fresh_chain,
        "the fresh certificate is not due:\n{out}"
    );
    let not_due = out
        .split("not due for renewal yet:")
        .nth(1)
        .unwrap_or_else(|| panic!("certbot lists what is not due:\n{out}"));
    let first = not_due.lines().find(|l| !l.trim().is_empty());
    assert!(first.is_some_and(|l| l.contains(&fresh)), "{out}");

    let renewed = std::fs::read_to_string(live(&dir, &marked)).unwrap();
    assert_ne!(
        renewed, marked_chain,
        "the marked certificate is renewed:\n{out}"
    );
    let renewed_leaf = assert_chain(&renewed, &env.root_pem(), &[&marked]);
    assert_ne!(renewed_leaf, leaf_of(&marked_chain));
    assert_eq!(
        lifetime(&renewed_leaf),
        time::Duration::days(7),
        "renewed with the same profile"
    );
}
