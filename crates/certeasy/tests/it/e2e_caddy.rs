//! Caddy 2.6 (Debian's `caddy`), with its built-in ACME client, gets its site's certificate from
//! the real `certeasy serve` binary over http-01 and over tls-alpn-01 and serves it: the test
//! connects to Caddy's HTTPS port on loopback and checks the certificate it presents.
//!
//! Caddy runs unprivileged on loopback high ports (`http_port`, `https_port`, `default_bind`),
//! with only Certeasy as its CA (`acme_ca` and the site's issuer; Caddy's default would also try
//! public CAs), no OCSP stapling (nothing fetched from outside) and no admin endpoint.

use std::path::Path;

use crate::clients::Daemon;
use crate::clients::wait_served;
use crate::harness::Db;
use crate::harness::TestEnv;
use crate::harness::free_port;

/// Which challenge Caddy may answer; it is told to leave the other one alone.
#[derive(Clone, Copy)]
enum Challenge {
    Http01,
    TlsAlpn01,
}

/// The Caddyfile of one site, `name`, whose certificate comes from `env`'s Certeasy only.
fn caddyfile(env: &TestEnv, dir: &Path, http: u16, https: u16, name: &str, c: Challenge) -> String {
    let directory = env.directory_url();
    let root = env.root_path.display();
    let disable = match c {
        Challenge::Http01 => "disable_tlsalpn_challenge",
        Challenge::TlsAlpn01 => "disable_http_challenge",
    };
    format!(
        "{{
\tadmin off
\thttp_port {http}
\thttps_port {https}
\tdefault_bind 127.0.0.1
\tstorage file_system {storage}
\tacme_ca {directory}
\tacme_ca_root {root}
\temail caddy@example.com
\tocsp_stapling off
\tskip_install_trust
}}
{name} {{
\ttls {{
\t\tissuer acme {{
\t\t\tdir {directory}
\t\t\ttrusted_roots {root}
\t\t\t{disable}
\t\t}}
\t}}
\trespond \"served by caddy\"
}}
",
        storage = dir.join("data").display()
    )
}

async fn caddy_obtains_and_serves(c: Challenge, label: &str) {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let (http, https) = (free_port(), free_port());
    // Certeasy validates on Caddy's ports: http-01 on its HTTP port, tls-alpn-01 on its HTTPS one.
    env.challenge_ports(http, https);
    env.spawn_binary().await;
    let name = env.name(label);
    let dir = env.dir.path().join("caddy");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("Caddyfile");
    std::fs::write(&config, caddyfile(&env, &dir, http, https, &name, c)).unwrap();

    let mut cmd = std::process::Command::new("caddy");
    cmd.args(["run", "--adapter", "caddyfile", "--config"])
        .arg(&config)
        .env("HOME", &dir)
        .env("XDG_DATA_HOME", dir.join("xdg-data"))
        .env("XDG_CONFIG_HOME", dir.join("xdg-config"));
    let mut caddy = Daemon::spawn("caddy", cmd, dir.join("caddy.log"));
    wait_served(&env, &mut caddy, https, &name, |_| true).await;

    let log = caddy.log();
    let solved = match c {
        Challenge::Http01 => "http-01",
        Challenge::TlsAlpn01 => "tls-alpn-01",
    };
    assert!(
        log.contains(&format!("\"challenge_type\":\"{solved}\"")),
        "Caddy answered {solved}:\n{log}"
    );
}

#[tokio::test]
async fn caddy_obtains_over_http01_and_serves_the_certificate() {
    caddy_obtains_and_serves(Challenge::Http01, "caddy-http").await;
}

#[tokio::test]
async fn caddy_obtains_over_tls_alpn01_and_serves_the_certificate() {
    caddy_obtains_and_serves(Challenge::TlsAlpn01, "caddy-tls").await;
}
