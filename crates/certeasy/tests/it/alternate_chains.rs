//! Alternate chains (RFC 8555 §7.4.2): an issuing key certified under an ECDSA root and under an
//! RSA root, loaded through `ca.existing` with `alternate-chains`. The download links the other
//! chain, each chain verifies with `openssl verify` under its own root, and lego and certbot get
//! the chain they ask for with `--preferred-chain` (the default one without it). The same
//! hierarchy as an issuer of `ca.issuers` offers its alternate chain the same way.

use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;

use acme_jose::Algorithm;
use rcgen::BasicConstraints;
use rcgen::CertificateParams;
use rcgen::DnType;
use rcgen::IsCa;
use rcgen::Issuer;
use rcgen::KeyPair;
use rcgen::KeyUsagePurpose;
use serde_json::json;
use time::OffsetDateTime;
use tokio::process::Command;

use crate::certcheck::assert_chain;
use crate::certcheck::issuer_cn;
use crate::certcheck::pem_ders;
use crate::harness::Db;
use crate::harness::TestEnv;
use crate::harness::free_port;
use crate::harness::run;
use crate::raw::Raw;
use crate::raw::Reply;
use crate::rfc_answers::csr;
use crate::rfc_answers::ready_order;
use crate::rfc_answers::wait_for_status;

const ROOT_E1: &str = "Certeasy Root E1";
const ROOT_R1: &str = "Certeasy Root R1";
const TIMEOUT: Duration = Duration::from_secs(180);

/// The operator's files: root E1 (ECDSA P-256) and root R1 (RSA-2048); the issuing key
/// certified by E1 (`issuing.pem`, primary chain `root-e1.pem`) and by R1 under the same subject
/// (`cross-r1.pem`, followed by R1); the listener's intermediate under E1 beside them.
struct Hierarchy {
    root_e1: PathBuf,
    root_r1: PathBuf,
    /// The `ca:` section that loads it.
    section: String,
    /// The `ca:` section that loads it as issuer `i1` of `ca.issuers` instead, made active,
    /// beside the generated CA.
    issuer_section: String,
}

fn ca_params(cn: &str) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(DnType::OrganizationName, "Certeasy Test");
    params.distinguished_name.push(DnType::CommonName, cn);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let now = OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(5 * 365);
    params
}

fn write_pem(path: &Path, ders: &[&[u8]]) {
    use base64::Engine as _;
    let mut text = String::new();
    for der in ders {
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        text.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in b64.as_bytes().chunks(64) {
            text.push_str(std::str::from_utf8(line).unwrap());
            text.push('\n');
        }
        text.push_str("-----END CERTIFICATE-----\n");
    }
    std::fs::write(path, text).unwrap();
}

fn hierarchy(dir: &Path) -> Hierarchy {
    std::fs::create_dir_all(dir).unwrap();
    let e1_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let e1 = ca_params(ROOT_E1).self_signed(&e1_key).unwrap();
    let r1_key =
        KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_2048).unwrap();
    let r1 = ca_params(ROOT_R1).self_signed(&r1_key).unwrap();
    let e1_issuer = Issuer::from_ca_cert_der(e1.der(), e1_key).unwrap();
    let r1_issuer = Issuer::from_ca_cert_der(r1.der(), r1_key).unwrap();

    let issuing_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let under_e1 = ca_params("Certeasy Issuing I1")
        .signed_by(&issuing_key, &e1_issuer)
        .unwrap();
    let under_r1 = ca_params("Certeasy Issuing I1")
        .signed_by(&issuing_key, &r1_issuer)
        .unwrap();
    let listener_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let listener = ca_params("Certeasy Listener")
        .signed_by(&listener_key, &e1_issuer)
        .unwrap();

    let h = Hierarchy {
        root_e1: dir.join("root-e1.pem"),
        root_r1: dir.join("root-r1.pem"),
        section: format!(
            "  existing:\n    certificate: \"{d}/issuing.pem\"\n    private-key: \"{d}/issuing.key\"\n    chain: \"{d}/root-e1.pem\"\n    alternate-chains: [\"{d}/cross-r1.pem\"]\n",
            d = dir.display()
        ),
        issuer_section: format!(
            "  issuers:\n    - name: i1\n      certificate: \"{d}/issuing.pem\"\n      private-key: \"{d}/issuing.key\"\n      chain: \"{d}/root-e1.pem\"\n      alternate-chains: [\"{d}/cross-r1.pem\"]\n  active-issuer: i1\n",
            d = dir.display()
        ),
    };
    write_pem(&h.root_e1, &[e1.der()]);
    write_pem(&h.root_r1, &[r1.der()]);
    write_pem(&dir.join("issuing.pem"), &[under_e1.der()]);
    write_pem(&dir.join("cross-r1.pem"), &[under_r1.der(), r1.der()]);
    write_pem(&dir.join("listener.pem"), &[listener.der()]);
    for (name, key) in [
        ("issuing.key", &issuing_key),
        ("listener.key", &listener_key),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, key.serialize_pem()).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
    }
    h
}

/// A test environment whose CA is the [`Hierarchy`]; clients trust root E1 (the listener's).
async fn env_with_hierarchy() -> (TestEnv, Hierarchy) {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let h = hierarchy(&env.dir.path().join("operator-ca"));
    env.section("ca", &h.section);
    env.root_path = h.root_e1.clone();
    (env, h)
}

/// The common name of the issuer of the topmost certificate of a PEM chain: what both lego and
/// certbot match `--preferred-chain` against.
fn top_issuer_cn(chain_pem: &str) -> String {
    let ders = pem_ders(chain_pem);
    let top = ders.last().expect("a certificate");
    issuer_cn(top)
}

/// `openssl verify` of the chain's leaf, trusting only `root`, with the rest of the chain as
/// untrusted intermediates.
fn openssl_verifies(chain_pem: &str, root: &Path, dir: &Path) -> (bool, String) {
    let ders = pem_ders(chain_pem);
    let leaf = dir.join("verify-leaf.pem");
    let rest = dir.join("verify-untrusted.pem");
    write_pem(&leaf, &[&ders[0]]);
    let intermediates: Vec<&[u8]> = ders[1..].iter().map(Vec::as_slice).collect();
    write_pem(&rest, &intermediates);
    testkit::openssl::verify(root, &rest, &leaf)
}

/// Every `Link: rel="alternate"` URL of a response.
fn alternate_links(reply: &Reply) -> Vec<String> {
    reply
        .headers
        .get_all("link")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .filter(|v| v.ends_with(";rel=\"alternate\""))
        .map(|v| {
            v.trim_start_matches('<')
                .split('>')
                .next()
                .unwrap()
                .to_owned()
        })
        .collect()
}

/// An order for `name` made valid by http-01 and finalized: the certificate URL.
async fn issued_certificate_url(env: &TestEnv, raw: &Raw, name: &str) -> String {
    let (order_url, order) = ready_order(env, raw, name).await;
    let key = KeyPair::generate().unwrap();
    let r = raw
        .post(
            order["finalize"].as_str().unwrap(),
            Some(&json!({"csr": csr(&[name], &key)})),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let order = wait_for_status(raw, &order_url, "valid").await;
    order["certificate"].as_str().unwrap().to_owned()
}

/// The default download links alternate 1; alternate 1 is the leaf with the R1 chain and links
/// the default back; each verifies under its own root and not under the other; an alternate
/// that does not exist and another account's request get 404.
#[tokio::test]
async fn the_download_offers_the_chain_under_the_other_root() {
    let (mut env, h) = env_with_hierarchy().await;
    env.start().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("alt");
    let cert_url = issued_certificate_url(&env, &raw, &name).await;

    let default = raw.post(&cert_url, None).await;
    assert_eq!(default.status, 200, "{default:?}");
    assert_eq!(
        default.header("content-type").as_deref(),
        Some("application/pem-certificate-chain")
    );
    assert_eq!(alternate_links(&default), [format!("{cert_url}/1")]);
    assert_chain(&default.text, &env.root_pem(), &[&name]);
    assert_eq!(top_issuer_cn(&default.text), ROOT_E1);

    let alternate = raw.post(&format!("{cert_url}/1"), None).await;
    assert_eq!(alternate.status, 200, "{alternate:?}");
    assert_eq!(
        alternate.header("content-type").as_deref(),
        Some("application/pem-certificate-chain")
    );
    assert_eq!(alternate_links(&alternate), std::slice::from_ref(&cert_url));
    let root_r1 = std::fs::read_to_string(&h.root_r1).unwrap();
    assert_chain(&alternate.text, &root_r1, &[&name]);
    assert_eq!(top_issuer_cn(&alternate.text), ROOT_R1);
    assert_eq!(
        pem_ders(&alternate.text)[0],
        pem_ders(&default.text)[0],
        "the same leaf"
    );
    assert_eq!(
        pem_ders(&alternate.text).len(),
        2,
        "leaf and cross-signed issuing CA, no root"
    );

    let dir = env.dir.path().to_owned();
    for (chain, root, verifies) in [
        (&default.text, &h.root_e1, true),
        (&alternate.text, &h.root_r1, true),
        (&default.text, &h.root_r1, false),
        (&alternate.text, &h.root_e1, false),
    ] {
        let (ok, out) = openssl_verifies(chain, root, &dir);
        assert_eq!(
            ok,
            verifies,
            "openssl verify under {}: {out}",
            root.display()
        );
    }

    for missing in ["2", "0", "x"] {
        let r = raw.post(&format!("{cert_url}/{missing}"), None).await;
        assert_eq!(r.status, 404, "{missing}: {r:?}");
        assert_eq!(r.problem_type(), "urn:ietf:params:acme:error:malformed");
    }
    let mut stranger = Raw::new(&env, Algorithm::Es256);
    stranger.register().await;
    let r = stranger.post(&format!("{cert_url}/1"), None).await;
    assert_eq!(r.status, 404, "another account's certificate: {r:?}");
}

#[tokio::test]
async fn lego_gets_the_chain_it_prefers() {
    let (mut env, h) = env_with_hierarchy().await;
    let port = free_port();
    env.challenge_ports(port, env.tls.port());
    env.spawn_binary().await;
    let dir = env.dir.path().to_owned();
    for (label, preferred, top) in [
        ("lego-r1", Some(ROOT_R1), ROOT_R1),
        ("lego-default", None, ROOT_E1),
    ] {
        let name = env.name(label);
        let path = dir.join(label);
        let mut cmd = crate::clients::lego(&env.root_path, &env.directory_url(), &path);
        cmd.args([
            "--domains",
            &name,
            "--http",
            "--http.port",
            &format!("127.0.0.1:{port}"),
            "run",
        ]);
        if let Some(cn) = preferred {
            cmd.args(["--preferred-chain", cn]);
        }
        let (ok, out) = run(cmd, TIMEOUT).await;
        assert!(
            ok,
            "lego {label}:\n{out}\n--- server log ---\n{}",
            env.server_log()
        );
        let chain = std::fs::read_to_string(path.join(format!("certificates/{name}.crt"))).unwrap();
        assert_eq!(top_issuer_cn(&chain), top, "{label}");
        let root = if top == ROOT_R1 {
            &h.root_r1
        } else {
            &h.root_e1
        };
        let (ok, out) = openssl_verifies(&chain, root, &dir);
        assert!(ok, "{label}: openssl verify: {out}");
    }
}

#[tokio::test]
async fn certbot_gets_the_chain_it_prefers() {
    let (mut env, h) = env_with_hierarchy().await;
    let port = free_port();
    env.challenge_ports(port, env.tls.port());
    env.spawn_binary().await;
    let dir = env.dir.path().join("certbot");
    for (label, preferred, top) in [
        ("certbot-r1", Some(ROOT_R1), ROOT_R1),
        ("certbot-default", None, ROOT_E1),
    ] {
        let name = env.name(label);
        let mut cmd: Command = crate::clients::certbot(&env.root_path, &env.directory_url(), &dir);
        cmd.args([
            "certonly",
            "--standalone",
            "--agree-tos",
            "-m",
            "certbot@example.com",
            "--cert-name",
            label,
            "--http-01-address",
            "127.0.0.1",
            "--http-01-port",
            &port.to_string(),
            "-d",
            &name,
        ]);
        if let Some(cn) = preferred {
            cmd.args(["--preferred-chain", cn]);
        }
        let (ok, out) = run(cmd, TIMEOUT).await;
        assert!(
            ok,
            "certbot {label}:\n{out}\n--- server log ---\n{}",
            env.server_log()
        );
        let chain = std::fs::read_to_string(dir.join(format!("config/live/{label}/fullchain.pem")))
            .unwrap();
        assert_eq!(top_issuer_cn(&chain), top, "{label}");
        let root = if top == ROOT_R1 {
            &h.root_r1
        } else {
            &h.root_e1
        };
        let (ok, out) = openssl_verifies(&chain, root, env.dir.path());
        assert!(ok, "{label}: openssl verify: {out}");
    }
}

/// The hierarchy configured as issuer `i1` of `ca.issuers` (active), beside the generated CA
/// that serves the listener: its certificates are signed by it and the download offers its
/// alternate chain under R1, each verifying under its own root.
#[tokio::test]
async fn an_issuer_of_ca_issuers_offers_its_alternate_chains() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let h = hierarchy(&env.dir.path().join("operator-ca"));
    env.section("ca", &h.issuer_section);
    env.start().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let name = env.name("alt-issuer");
    let cert_url = issued_certificate_url(&env, &raw, &name).await;

    let default = raw.post(&cert_url, None).await;
    assert_eq!(default.status, 200, "{default:?}");
    assert_eq!(alternate_links(&default), [format!("{cert_url}/1")]);
    assert_eq!(
        issuer_cn(&pem_ders(&default.text)[0]),
        "Certeasy Issuing I1"
    );
    assert_eq!(top_issuer_cn(&default.text), ROOT_E1);
    let alternate = raw.post(&format!("{cert_url}/1"), None).await;
    assert_eq!(alternate.status, 200, "{alternate:?}");
    assert_eq!(alternate_links(&alternate), std::slice::from_ref(&cert_url));
    assert_eq!(top_issuer_cn(&alternate.text), ROOT_R1);
    let dir = env.dir.path().to_owned();
    for (chain, root) in [(&default.text, &h.root_e1), (&alternate.text, &h.root_r1)] {
        let (ok, out) = openssl_verifies(chain, root, &dir);
        assert!(ok, "openssl verify under {}: {out}", root.display());
    }
}
