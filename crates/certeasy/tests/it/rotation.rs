//! Issuer rotation end to end: a second intermediate under the same root is configured beside
//! the generated one, `certeasy admin ca activate` switches issuance to it without a restart,
//! lego's next certificate is signed by it and names its own CRL URL, and a certificate of the
//! old intermediate revoked afterwards appears on the old intermediate's CRL, which openssl
//! verifies against the old intermediate, while the new issuer's CRL names its own URL.

use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;

use tokio::process::Command;
use x509_parser::prelude::FromDer;
use x509_parser::revocation_list::CertificateRevocationList;

use crate::certcheck::issuer_cn;
use crate::certcheck::pem_ders;
use crate::clients::lego_ok;
use crate::crlcheck::distribution_point;
use crate::crlcheck::lists;
use crate::crlcheck::openssl_verify;
use crate::crlcheck::serial;
use crate::harness::Db;
use crate::harness::TestEnv;
use crate::harness::free_port;
use crate::harness::run;

const TIMEOUT: Duration = Duration::from_secs(120);
const ROTATED: &str = "int-2027";
const ROTATED_CN: &str = "Certeasy Intermediate 2027";

fn lego(env: &TestEnv, path: &Path, port: u16) -> Command {
    let mut cmd = crate::clients::lego(&env.root_path, &env.directory_url(), path);
    cmd.args(["--http", "--http.port", &format!("127.0.0.1:{port}")]);
    cmd
}

async fn sh(cmd: &str) {
    let mut c = Command::new("bash");
    c.args(["-euc", cmd]);
    let (ok, out) = run(c, TIMEOUT).await;
    assert!(ok, "{cmd}\n{out}");
}

/// A second intermediate signed by the generated root with `openssl`, as an operator would with
/// the offline root key: its certificate and PKCS#8 key in `dir`.
async fn second_intermediate(env: &TestEnv, dir: &Path) -> (PathBuf, PathBuf) {
    let root_cert = env.dir.path().join("data/ca/root.pem");
    let root_key = [
        env.dir.path().join("data.root-offline/root.key"),
        env.dir.path().join("data/ca.root-offline/root.key"),
        env.dir.path().join("data/ca/root.key"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .expect("the first start kept the generated root key");
    let (cert, key) = (dir.join("int-2027.pem"), dir.join("int-2027.key"));
    let ext = dir.join("int.ext");
    std::fs::write(
        &ext,
        "basicConstraints=critical,CA:TRUE,pathlen:0\nkeyUsage=critical,keyCertSign,cRLSign,digitalSignature\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n",
    )
    .unwrap();
    let d = dir.display();
    sh(&format!(
        "openssl ecparam -name prime256v1 -genkey -noout -out {d}/raw.key && \
         openssl pkcs8 -topk8 -nocrypt -in {d}/raw.key -out {key} && \
         openssl req -new -key {key} -subj '/O=Certeasy/CN={ROTATED_CN}' -out {d}/int.csr && \
         openssl x509 -req -sha256 -in {d}/int.csr -CA {root} -CAkey {root_key} \
           -set_serial 0x2027 -days 1000 -extfile {ext} -out {cert}",
        key = key.display(),
        root = root_cert.display(),
        root_key = root_key.display(),
        ext = ext.display(),
        cert = cert.display(),
    ))
    .await;
    (cert, key)
}

/// Fetches `url` until its CRL satisfies `done`; returns the DER.
async fn fetch_until(url: &str, done: impl Fn(&CertificateRevocationList<'_>) -> bool) -> Vec<u8> {
    crate::crlcheck::fetch_until(url, |_, crl| done(crl), |_| {})
        .await
        .0
}

#[tokio::test]
async fn activating_a_second_issuer_switches_issuance_and_each_keeps_its_crls() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let crl_port = env.crl_port;
    env.section(
        "crl",
        &format!("  listen: \"127.0.0.1:{crl_port}\"\n  shards: 1\n  update-interval: 6h\n"),
    );
    let port = free_port();
    env.challenge_ports(port, env.tls.port());
    env.spawn_binary().await;
    let lego_dir = env.dir.path().join("lego");
    let crt_of = |name: &str| lego_dir.join(format!("certificates/{name}.crt"));
    let chain_of = |name: &str| pem_ders(&std::fs::read_to_string(crt_of(name)).unwrap());

    // A certificate of the generated intermediate ("default").
    let old_name = env.name("rotation-old");
    let mut cmd = lego(&env, &lego_dir, port);
    cmd.args(["--domains", &old_name, "run"]);
    lego_ok(&env, cmd, "run (default issuer)").await;
    let old_chain = chain_of(&old_name);
    let old_issuer = issuer_cn(&old_chain[0]);
    assert_ne!(old_issuer, ROTATED_CN);
    let old_url = distribution_point(&old_chain[0]);
    assert_eq!(old_url, format!("http://localhost:{crl_port}/crl/0.crl"));

    // The operator adds the second intermediate; a new issuer's files need one restart.
    env.kill_binary();
    let (cert, key) = second_intermediate(&env, env.dir.path()).await;
    env.section(
        "ca",
        &format!(
            "  issuers:\n    - name: {ROTATED}\n      certificate: \"{}\"\n      private-key: \"{}\"\n      chain: \"{}\"\n",
            cert.display(),
            key.display(),
            env.dir.path().join("data/ca/root.pem").display()
        ),
    );
    env.spawn_binary().await;

    let cli = env.admin_cli();
    let listed = cli.run(&["ca", "list", "--json"]);
    let docs = listed.json();
    let names: Vec<(&str, bool)> = docs
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["name"].as_str().unwrap(), d["active"].as_bool().unwrap()))
        .collect();
    assert_eq!(
        names,
        [("default", true), (ROTATED, false)],
        "{}",
        listed.text()
    );
    assert_eq!(docs[0]["certificates"], 1);

    let unknown = cli.run(&["ca", "activate", "nope"]);
    let (ok, text) = unknown.into_pair();
    assert!(
        !ok && text.contains("no issuer nope is loaded") && text.contains("admin reload"),
        "{text}"
    );

    // Activation needs no restart: the next order is signed by the new issuer.
    let (ok, text) = cli.run(&["ca", "activate", ROTATED]).into_pair();
    assert!(ok, "{text}\n{}", env.server_log());
    let new_name = env.name("rotation-new");
    let mut cmd = lego(&env, &lego_dir, port);
    cmd.args(["--domains", &new_name, "run"]);
    lego_ok(&env, cmd, "run (rotated issuer)").await;
    let new_chain = chain_of(&new_name);
    assert_eq!(issuer_cn(&new_chain[0]), ROTATED_CN);
    assert_eq!(
        issuer_cn(&new_chain[1]),
        issuer_cn(&old_chain[1]),
        "same root"
    );
    let new_url = distribution_point(&new_chain[0]);
    assert_eq!(
        new_url,
        format!("http://localhost:{crl_port}/crl/{ROTATED}/0.crl")
    );

    // The old certificate is revoked after the switch: on the old intermediate's CRL.
    let old_serial = serial(&old_chain[0]);
    let mut cmd = lego(&env, &lego_dir, port);
    cmd.args(["--domains", &old_name, "revoke", "--reason", "4", "--keep"]);
    lego_ok(&env, cmd, "revoke").await;
    let old_crl = fetch_until(&old_url, |crl| lists(crl, &old_serial)).await;
    let (_, parsed) = CertificateRevocationList::from_der(&old_crl).unwrap();
    assert_eq!(
        parsed
            .issuer()
            .iter_common_name()
            .next()
            .unwrap()
            .as_str()
            .unwrap(),
        old_issuer
    );
    let root = env.dir.path().join("data/ca/root.pem");
    let dir = env.dir.path();
    let (ok, out) = openssl_verify(dir, "old", &crt_of(&old_name), &old_crl, &root).await;
    assert!(
        !ok && out.contains("revoked"),
        "openssl must reject the revoked certificate: {out}"
    );

    // The new issuer's CRL: its own signature, its own URL in its issuing distribution point,
    // not listing the old certificate; openssl accepts the new certificate with it.
    let new_crl = fetch_until(&new_url, |crl| !lists(crl, &old_serial)).await;
    let (_, parsed) = CertificateRevocationList::from_der(&new_crl).unwrap();
    assert_eq!(
        parsed
            .issuer()
            .iter_common_name()
            .next()
            .unwrap()
            .as_str()
            .unwrap(),
        ROTATED_CN
    );
    assert!(
        new_crl
            .windows(new_url.len())
            .any(|w| w == new_url.as_bytes()),
        "the IDP names {new_url}"
    );
    assert!(
        !old_crl
            .windows(new_url.len())
            .any(|w| w == new_url.as_bytes())
    );
    let (ok, out) = openssl_verify(dir, "new", &crt_of(&new_name), &new_crl, &root).await;
    assert!(
        ok,
        "openssl accepts the new certificate with its issuer's CRL: {out}"
    );

    let docs = cli.run(&["ca", "list", "--json"]).json();
    assert_eq!(docs[1]["active"], true);
    assert_eq!(docs[1]["certificates"], 1);
}
