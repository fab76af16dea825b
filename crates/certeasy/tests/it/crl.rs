//! CRLs as relying parties use them: lego issues, lego revokes, and `openssl verify -crl_check`
//! with the CRL fetched from the URL in the certificate rejects the revoked certificate and
//! accepts the other.

use std::path::Path;
use std::time::Duration;

use tokio::process::Command;
use x509_parser::prelude::FromDer;
use x509_parser::revocation_list::CertificateRevocationList;

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

fn lego(env: &TestEnv, path: &Path, port: u16) -> Command {
    let mut cmd = crate::clients::lego(&env.root_path, &env.directory_url(), path);
    cmd.args(["--http", "--http.port", &format!("127.0.0.1:{port}")]);
    cmd
}

fn http() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// Fetches `url` until its CRL satisfies `done`; returns the DER and the response headers.
async fn fetch_until(
    url: &str,
    done: impl Fn(&CertificateRevocationList<'_>) -> bool,
) -> (Vec<u8>, reqwest::header::HeaderMap) {
    crate::crlcheck::fetch_until(
        url,
        |rest, crl| {
            assert!(rest.is_empty());
            done(crl)
        },
        |status| {
            // Before the first CRL is published (404), or loaded by the server (503).
            assert!([404, 503].contains(&status.as_u16()), "{}", status);
        },
    )
    .await
}

#[tokio::test]
async fn lego_revokes_and_openssl_rejects_the_certificate_with_the_published_crl() {
    crl_end_to_end(Db::Sqlite).await;
}

#[tokio::test]
async fn crls_on_postgres() {
    crl_end_to_end(Db::Postgres).await;
}

async fn crl_end_to_end(db: Db) {
    let mut env = TestEnv::new(db).await;
    let crl_port = env.crl_port;
    // Two shards, so the certificates may land in different CRLs; a long update interval, so
    // every new CRL number below comes from a revocation.
    env.section(
        "crl",
        &format!("  listen: \"127.0.0.1:{crl_port}\"\n  shards: 2\n  update-interval: 6h\n  lifetime: 7d\n"),
    );
    let port = free_port();
    env.challenge_ports(port, env.tls.port());
    env.spawn_binary().await;
    let path = env.dir.path().join("lego");

    let revoked_name = env.name("crl-revoked");
    let kept_name = env.name("crl-kept");
    for name in [&revoked_name, &kept_name] {
        let mut cmd = lego(&env, &path, port);
        cmd.args(["--domains", name, "run"]);
        lego_ok(&env, cmd, "run").await;
    }
    let crt_of = |name: &str| path.join(format!("certificates/{name}.crt"));
    let chain_of = |name: &str| pem_ders(&std::fs::read_to_string(crt_of(name)).unwrap());
    let revoked_chain = chain_of(&revoked_name);
    let kept_chain = chain_of(&kept_name);
    let revoked_serial = serial(&revoked_chain[0]);
    let kept_serial = serial(&kept_chain[0]);

    let revoked_url = distribution_point(&revoked_chain[0]);
    let kept_url = distribution_point(&kept_chain[0]);
    for url in [&revoked_url, &kept_url] {
        assert!(
            url.starts_with(&format!("http://localhost:{crl_port}/crl/"))
                && (url.ends_with("/0.crl") || url.ends_with("/1.crl")),
            "{url}"
        );
    }
    // Both CRLs are published empty at start.
    let (_, _) = fetch_until(&revoked_url, |crl| !lists(crl, &revoked_serial)).await;

    let mut cmd = lego(&env, &path, port);
    cmd.args([
        "--domains",
        &revoked_name,
        "revoke",
        "--reason",
        "1",
        "--keep",
    ]);
    lego_ok(&env, cmd, "revoke").await;

    let (crl_der, headers) = fetch_until(&revoked_url, |crl| lists(crl, &revoked_serial)).await;
    let (_, crl) = CertificateRevocationList::from_der(&crl_der).unwrap();
    let entry = crl
        .iter_revoked_certificates()
        .find(|r| r.raw_serial() == revoked_serial.as_slice())
        .unwrap();
    let reason = entry.reason_code().map(|(_, code)| code.0);
    assert_eq!(reason, Some(1), "keyCompromise");
    assert!(!lists(&crl, &kept_serial));
    let number = crl.crl_number().unwrap().to_u64_digits();
    assert!(
        number.first().copied().unwrap_or(0) >= 2,
        "the revocation made a new CRL: {number:?}"
    );
    let this_update = crl.last_update().timestamp();
    let next_update = crl.next_update().unwrap().timestamp();
    assert_eq!(next_update - this_update, 7 * 86_400);
    assert_eq!(headers["content-type"], "application/pkix-crl");
    let cache = headers["cache-control"].to_str().unwrap();
    assert!(cache.starts_with("public, max-age="), "{cache}");
    let max_age: u64 = cache
        .trim_start_matches("public, max-age=")
        .parse()
        .unwrap();
    assert!((1..=300).contains(&max_age), "{cache}");
    assert!(headers.contains_key("last-modified"));

    // A conditional request with the ETag gets no body.
    let etag = headers["etag"].clone();
    let again = http()
        .get(&revoked_url)
        .header("if-none-match", etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);

    // The same bytes on the ACME listener.
    let file = revoked_url.rsplit('/').next().unwrap();
    let tls_client = reqwest::Client::builder()
        .no_proxy()
        .add_root_certificate(reqwest::Certificate::from_pem(env.root_pem().as_bytes()).unwrap())
        .build()
        .unwrap();
    let on_acme = tls_client
        .get(format!("{}/crl/{file}", env.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(on_acme.status(), 200);
    assert_eq!(on_acme.bytes().await.unwrap().to_vec(), crl_der);

    // What a relying party concludes.
    let dir = env.dir.path().to_owned();
    let (ok, out) = openssl_verify(
        &dir,
        "revoked",
        &crt_of(&revoked_name),
        &crl_der,
        &env.root_path,
    )
    .await;
    assert!(!ok, "openssl accepted a revoked certificate:\n{out}");
    assert!(out.contains("certificate revoked"), "{out}");

    let (kept_crl, _) = fetch_until(&kept_url, |crl| !lists(crl, &kept_serial)).await;
    let (ok, out) =
        openssl_verify(&dir, "kept", &crt_of(&kept_name), &kept_crl, &env.root_path).await;
    assert!(ok, "openssl rejected a valid certificate:\n{out}");
    assert!(out.contains(": OK"), "{out}");

    // Unknown shards and names are 404.
    for bad in ["7.crl", "x.crl", "0.pem"] {
        let response = http()
            .get(format!("http://127.0.0.1:{crl_port}/crl/{bad}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404, "{bad}");
    }
}

/// Writes `text` to `dir/name` and returns the path.
fn write(dir: &Path, name: &str, text: impl AsRef<[u8]>) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// `openssl verify -crl_check` of `leaf` (PEM file) with the intermediate from `chain` (PEM
/// file), the root, and exactly the CRL in `crl` (PEM file).
async fn verify_with(root: &Path, chain: &Path, crl: &Path, leaf: &Path) -> (bool, String) {
    let mut verify = Command::new("openssl");
    verify
        .args(["verify", "-crl_check", "-CAfile"])
        .arg(root)
        .arg("-untrusted")
        .arg(chain)
        .arg("-CRLfile")
        .arg(crl)
        .arg(leaf);
    run(verify, TIMEOUT).await
}

/// One issued certificate: its chain and leaf as files, DER, serial and CRL URL.
struct Issued {
    der: Vec<u8>,
    chain: std::path::PathBuf,
    leaf: std::path::PathBuf,
    serial: Vec<u8>,
    url: String,
}

/// Every shard's CRL names exactly its own URL in a critical issuing distribution point; with it,
/// openssl rejects each shard's revoked certificate, accepts its unrevoked one, and refuses to
/// take another shard's CRL as the word on a certificate (without the IDP it would accept the
/// revoked certificate against a CRL that merely does not list it).
#[tokio::test]
async fn every_shard_names_its_url_and_openssl_checks_each_certificate_against_its_own_shard() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let crl_port = env.crl_port;
    env.section(
        "crl",
        &format!("  listen: \"127.0.0.1:{crl_port}\"\n  shards: 4\n"),
    );
    // Certificates land in shards at random: allow the orders it takes to fill all four.
    env.section(
        "rate-limiting",
        "  whitelist: [\"127.0.0.1\"]\n  order-creation:\n    orders-per-account-per-hour: 1000\n    order-burst: 100\n    san-budget-per-account-per-hour: 1000\n",
    );
    env.start().await;
    let account = env.account().await;
    let dir = env.dir.path().to_owned();

    // Issue until every shard holds two certificates: one to revoke, one to keep.
    let mut by_url: std::collections::BTreeMap<String, Vec<Issued>> = Default::default();
    for i in 0..80 {
        if by_url.len() == 4 && by_url.values().all(|certs| certs.len() >= 2) {
            break;
        }
        let name = env.name(&format!("shard{i}"));
        let chain = crate::flow::issue(
            &env,
            &account,
            &[instant_acme::Identifier::Dns(name)],
            instant_acme::ChallengeType::Http01,
        )
        .await;
        let ders = pem_ders(&chain);
        let url = distribution_point(&ders[0]);
        let end = "-----END CERTIFICATE-----";
        let leaf_pem = format!("{}{end}\n", chain.split(end).next().unwrap());
        let issued = Issued {
            der: ders[0].clone(),
            chain: write(&dir, &format!("chain{i}.pem"), &chain),
            leaf: write(&dir, &format!("leaf{i}.pem"), leaf_pem),
            serial: serial(&ders[0]),
            url: url.clone(),
        };
        by_url.entry(url).or_default().push(issued);
    }
    assert_eq!(by_url.len(), 4, "certificates landed in every shard");
    for (shard, (url, certs)) in by_url.iter().enumerate() {
        assert_eq!(url, &format!("http://localhost:{crl_port}/crl/{shard}.crl"));
        assert!(certs.iter().all(|cert| &cert.url == url));
    }

    for certs in by_url.values() {
        account
            .revoke(&instant_acme::RevocationRequest {
                certificate: &rustls_pki_types::CertificateDer::from(certs[0].der.clone()),
                reason: None,
            })
            .await
            .unwrap();
    }

    // Each shard's CRL, once it lists its revoked certificate, as DER and PEM files.
    let mut crl_files = Vec::new();
    for (shard, (url, certs)) in by_url.iter().enumerate() {
        let (der, _) = fetch_until(url, |crl| lists(crl, &certs[0].serial)).await;
        let (_, crl) = CertificateRevocationList::from_der(&der).unwrap();
        assert!(!lists(&crl, &certs[1].serial));
        let der_path = write(&dir, &format!("shard{shard}.der"), &der);
        let pem_path = dir.join(format!("shard{shard}.pem"));
        let mut convert = Command::new("openssl");
        convert
            .args(["crl", "-inform", "DER", "-in"])
            .arg(&der_path)
            .arg("-out")
            .arg(&pem_path);
        let (ok, out) = run(convert, TIMEOUT).await;
        assert!(ok, "{out}");

        // What openssl reads in it: a critical IDP whose full name is the certificates' URL.
        let mut text = Command::new("openssl");
        text.args(["crl", "-noout", "-text", "-in"]).arg(&pem_path);
        let (ok, out) = run(text, TIMEOUT).await;
        assert!(ok, "{out}");
        let idp = out
            .split("X509v3 Issuing Distribution Point: critical")
            .nth(1)
            .unwrap_or_else(|| panic!("no critical issuing distribution point:\n{out}"));
        let full_name = idp
            .split("Full Name:")
            .nth(1)
            .unwrap_or_else(|| panic!("no full name:\n{out}"));
        let uri = full_name
            .split_whitespace()
            .next()
            .and_then(|word| word.strip_prefix("URI:"))
            .unwrap_or_else(|| panic!("no URI:\n{out}"));
        assert_eq!(uri, url, "the IDP names exactly the certificates' CRL URL");
        assert!(idp.contains("Only User Certificates"), "{out}");
        crl_files.push(pem_path);
    }

    let root = &env.root_path;
    for (shard, certs) in by_url.values().enumerate() {
        let (revoked, kept) = (&certs[0], &certs[1]);
        let own = &crl_files[shard];
        let (ok, out) = verify_with(root, &revoked.chain, own, &revoked.leaf).await;
        assert!(
            !ok,
            "shard {shard}: openssl accepted a revoked certificate:\n{out}"
        );
        assert!(out.contains("certificate revoked"), "shard {shard}: {out}");
        let (ok, out) = verify_with(root, &kept.chain, own, &kept.leaf).await;
        assert!(
            ok,
            "shard {shard}: openssl rejected a valid certificate:\n{out}"
        );
        assert!(out.contains(": OK"), "{out}");

        // Another shard's CRL does not list the revoked certificate, and does not pass for the
        // issuer's complete CRL either: openssl sees that its scope is another distribution
        // point.
        let other = &crl_files[(shard + 1) % crl_files.len()];
        let (ok, out) = verify_with(root, &revoked.chain, other, &revoked.leaf).await;
        assert!(
            !ok,
            "shard {shard}: another shard's CRL was taken for the whole CRL:\n{out}"
        );
        assert!(out.contains("different CRL scope"), "{out}");
    }
}
