//! The real lego client against the real `certeasy serve` binary: every challenge type, a
//! wildcard, RSA and EC keys, renew and revoke.

use std::path::Path;
use std::time::Duration;

use tokio::process::Command;

use crate::certcheck::assert_chain;
use crate::certcheck::pem_ders;
use crate::harness::Db;
use crate::harness::TestEnv;
use crate::harness::free_port;
use crate::harness::run;

const TIMEOUT: Duration = Duration::from_secs(120);

fn lego(env: &TestEnv, path: &Path) -> Command {
    crate::clients::lego(&env.root_path, &env.directory_url(), path)
}

async fn check(ok_output: (bool, String), env: &TestEnv, what: &str) {
    let (ok, out) = ok_output;
    assert!(
        ok,
        "lego {what} failed:\n{out}\n--- server log ---\n{}",
        env.server_log()
    );
}

fn serial_of(pem: &str) -> Vec<u8> {
    use x509_parser::prelude::FromDer;
    let der = pem_ders(pem).remove(0);
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(&der).unwrap();
    cert.raw_serial().to_vec()
}

/// Whether the server holds the certificate as revoked, asked through the admin API: the server
/// holds its SQLite database exclusively while it runs.
async fn revoked_in_db(env: &TestEnv, serial: &[u8]) -> bool {
    let hex: String = serial.iter().map(|b| format!("{b:02x}")).collect();
    let text = reqwest::Client::new()
        .get(format!(
            "http://{}/admin/certificates/{hex}",
            env.admin_addr()
        ))
        .bearer_auth(env.admin_token())
        .send()
        .await
        .unwrap()
        .error_for_status()
        .expect("certificate stored")
        .text()
        .await
        .unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    !doc["revoked_at"].is_null()
}

#[tokio::test]
async fn lego_http01_renew_and_revoke() {
    lego_http01_renew_and_revoke_on(Db::Sqlite).await;
}

#[tokio::test]
async fn lego_http01_renew_and_revoke_on_postgres() {
    lego_http01_renew_and_revoke_on(Db::Postgres).await;
}

async fn lego_http01_renew_and_revoke_on(db: Db) {
    let mut env = TestEnv::new(db).await;
    let port = free_port();
    env.challenge_ports(port, env.tls.port());
    env.spawn_binary().await;
    let name = env.name("lego-http");
    let path = env.dir.path().join("lego");

    let mut cmd = lego(&env, &path);
    cmd.args([
        "--domains",
        &name,
        "--http",
        "--http.port",
        &format!("127.0.0.1:{port}"),
        "run",
    ]);
    check(run(cmd, TIMEOUT).await, &env, "run").await;
    let crt = path.join(format!("certificates/{name}.crt"));
    let first = std::fs::read_to_string(&crt).unwrap();
    assert_chain(&first, &env.root_pem(), &[&name]);

    let mut cmd = lego(&env, &path);
    cmd.args([
        "--domains",
        &name,
        "--http",
        "--http.port",
        &format!("127.0.0.1:{port}"),
        "renew",
        "--days",
        "400",
        "--no-random-sleep",
    ]);
    check(run(cmd, TIMEOUT).await, &env, "renew").await;
    let renewed = std::fs::read_to_string(&crt).unwrap();
    assert_chain(&renewed, &env.root_pem(), &[&name]);
    assert_ne!(
        serial_of(&first),
        serial_of(&renewed),
        "renewal issues a new certificate"
    );

    let mut cmd = lego(&env, &path);
    cmd.args(["--domains", &name, "revoke", "--reason", "4", "--keep"]);
    check(run(cmd, TIMEOUT).await, &env, "revoke").await;
    assert!(revoked_in_db(&env, &serial_of(&renewed)).await);
    assert!(!revoked_in_db(&env, &serial_of(&first)).await);
}

#[tokio::test]
async fn lego_tls_alpn01_with_rsa_keys() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let port = free_port();
    env.challenge_ports(env.http.port(), port);
    env.spawn_binary().await;
    let name = env.name("lego-tls");
    let path = env.dir.path().join("lego");
    let mut cmd = lego(&env, &path);
    cmd.args([
        "--key-type",
        "rsa2048",
        "--domains",
        &name,
        "--tls",
        "--tls.port",
        &format!("127.0.0.1:{port}"),
        "run",
    ]);
    check(run(cmd, TIMEOUT).await, &env, "run").await;
    let pem = std::fs::read_to_string(path.join(format!("certificates/{name}.crt"))).unwrap();
    assert_chain(&pem, &env.root_pem(), &[&name]);
}

#[tokio::test]
async fn lego_dns01_wildcard_through_the_test_dns_server() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.spawn_binary().await;
    let base = env.name("lego-dns");
    let wildcard = format!("*.{base}");
    let hook = env.dir.path().join("dns-hook.sh");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\n# lego exec provider: $1 = present|cleanup, $2 = FQDN, $3 = value\ncase \"$1\" in\n  present) curl -sf -X POST -d \"{{\\\"host\\\":\\\"$2\\\",\\\"value\\\":\\\"$3\\\"}}\" {url}/set-txt ;;\n  cleanup) curl -sf -X POST -d \"{{\\\"host\\\":\\\"$2\\\"}}\" {url}/clear-txt ;;\nesac\n",
            url = env.dns.control_url()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = env.dir.path().join("lego");
    let mut cmd = lego(&env, &path);
    cmd.env("EXEC_PATH", &hook)
        .env("EXEC_POLLING_INTERVAL", "1")
        .env("EXEC_SEQUENCE_INTERVAL", "1")
        .env("EXEC_PROPAGATION_TIMEOUT", "30")
        .args([
            "--key-type",
            "ec384",
            "--domains",
            &wildcard,
            "--domains",
            &base,
            "--dns",
            "exec",
            "--dns.disable-cp",
        ])
        .arg("--dns.resolvers")
        .arg(env.dns.addr().to_string())
        .arg("run");
    check(run(cmd, TIMEOUT).await, &env, "run").await;
    let pem = std::fs::read_to_string(path.join(format!("certificates/_.{base}.crt"))).unwrap();
    assert_chain(&pem, &env.root_pem(), &[&wildcard, &base]);
}
