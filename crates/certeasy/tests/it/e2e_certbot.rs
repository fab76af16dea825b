//! The real certbot against the real `certeasy serve` binary: http-01 (standalone), dns-01
//! (manual hooks), a 5-name certificate, RSA and ECDSA keys, renew, revoke by account and by the
//! certificate's own key.

use std::path::Path;
use std::time::Duration;

use tokio::process::Command;

use crate::certcheck::assert_chain;
use crate::harness::Db;
use crate::harness::TestEnv;
use crate::harness::free_port;
use crate::harness::run;

const TIMEOUT: Duration = Duration::from_secs(180);

fn certbot(env: &TestEnv, dir: &Path) -> Command {
    crate::clients::certbot(&env.root_path, &env.directory_url(), dir)
}

async fn check(result: (bool, String), env: &TestEnv, what: &str) {
    let (ok, out) = result;
    assert!(
        ok,
        "certbot {what} failed:\n{out}\n--- server log ---\n{}",
        env.server_log()
    );
}

fn read_live(dir: &Path, name: &str, file: &str) -> String {
    std::fs::read_to_string(dir.join(format!("config/live/{name}/{file}"))).unwrap()
}

fn write_hook(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

#[tokio::test]
async fn certbot_http01_ecdsa_renew_and_revoke() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let port = free_port();
    env.challenge_ports(port, env.tls.port());
    env.spawn_binary().await;
    let name = env.name("certbot-http");
    let dir = env.dir.path().join("certbot");
    let mut cmd = certbot(&env, &dir);
    cmd.args([
        "certonly",
        "--standalone",
        "--agree-tos",
        "-m",
        "certbot@example.com",
        "--key-type",
        "ecdsa",
    ])
    .args([
        "--http-01-address",
        "127.0.0.1",
        "--http-01-port",
        &port.to_string(),
        "-d",
        &name,
    ]);
    check(run(cmd, TIMEOUT).await, &env, "certonly").await;
    let first = read_live(&dir, &name, "fullchain.pem");
    assert_chain(&first, &env.root_pem(), &[&name]);

    let mut cmd = certbot(&env, &dir);
    cmd.args([
        "renew",
        "--force-renewal",
        "--no-random-sleep-on-renew",
        "--cert-name",
        &name,
    ]);
    check(run(cmd, TIMEOUT).await, &env, "renew").await;
    let renewed = read_live(&dir, &name, "fullchain.pem");
    assert_chain(&renewed, &env.root_pem(), &[&name]);
    assert_ne!(first, renewed);

    let mut cmd = certbot(&env, &dir);
    cmd.args([
        "revoke",
        "--cert-name",
        &name,
        "--reason",
        "keycompromise",
        "--no-delete-after-revoke",
    ]);
    check(run(cmd, TIMEOUT).await, &env, "revoke").await;
}

#[tokio::test]
async fn certbot_dns01_five_names_rsa_and_revoke_by_certificate_key() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.spawn_binary().await;
    let names: Vec<String> = (1..=5).map(|i| env.name(&format!("cb{i}"))).collect();
    let dir = env.dir.path().join("certbot");
    std::fs::create_dir_all(&dir).unwrap();
    let url = env.dns.control_url();
    let auth = dir.join("auth.sh");
    write_hook(
        &auth,
        &format!(
            "curl -sf -X POST -d \"{{\\\"host\\\":\\\"_acme-challenge.$CERTBOT_DOMAIN.\\\",\\\"value\\\":\\\"$CERTBOT_VALIDATION\\\"}}\" {url}/set-txt"
        ),
    );
    let cleanup = dir.join("cleanup.sh");
    write_hook(
        &cleanup,
        &format!(
            "curl -sf -X POST -d \"{{\\\"host\\\":\\\"_acme-challenge.$CERTBOT_DOMAIN.\\\"}}\" {url}/clear-txt"
        ),
    );
    let mut cmd = certbot(&env, &dir);
    cmd.args([
        "certonly",
        "--manual",
        "--preferred-challenges",
        "dns",
        "--agree-tos",
        "-m",
        "certbot@example.com",
    ])
    .args([
        "--key-type",
        "rsa",
        "--rsa-key-size",
        "2048",
        "--cert-name",
        "five",
    ])
    .arg("--manual-auth-hook")
    .arg(&auth)
    .arg("--manual-cleanup-hook")
    .arg(&cleanup);
    for n in &names {
        cmd.args(["-d", n]);
    }
    check(run(cmd, TIMEOUT).await, &env, "certonly").await;
    let chain = read_live(&dir, "five", "fullchain.pem");
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_chain(&chain, &env.root_pem(), &refs);

    // Revoke with the certificate's own key (a JWS with "jwk" = the certificate key).
    let mut cmd = certbot(&env, &dir);
    cmd.arg("revoke")
        .arg("--cert-path")
        .arg(dir.join("config/live/five/cert.pem"))
        .arg("--key-path")
        .arg(dir.join("config/live/five/privkey.pem"))
        .args(["--reason", "superseded", "--no-delete-after-revoke"]);
    check(run(cmd, TIMEOUT).await, &env, "revoke by key").await;
}
