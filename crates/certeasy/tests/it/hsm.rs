//! The issuing key on a PKCS#11 token, end to end: `certeasy serve` with `ca.existing.pkcs11`
//! naming a SoftHSM2 token whose key was generated there; lego issues and revokes, the CRL the
//! certificate names lists the revocation, and openssl accepts the chain and the CRL's
//! signature (made on the token) under the operator's root.

use std::path::Path;
use std::path::PathBuf;

use issuance::CaKey;
use issuance::KeyAlgorithm;
use issuance::Pkcs11Key;
use issuance::TokenSelector;
use rcgen::CertificateParams;
use rcgen::Issuer;
use rcgen::KeyPair;
use testkit::openssl::openssl;
use time::OffsetDateTime;
use x509_parser::extensions::DistributionPointName;
use x509_parser::extensions::GeneralName;
use x509_parser::extensions::ParsedExtension;
use x509_parser::prelude::FromDer;

use crate::certcheck::pem_ders;
use crate::clients::lego_ok;
use crate::crlcheck::fetch_until;
use crate::crlcheck::lists;
use crate::harness::Db;
use crate::harness::TestEnv;
use crate::harness::free_port;

/// A CA certificate's parameters: `CN=cn`, valid from an hour ago for `days`.
fn ca_params(cn: &str, path_len: Option<u8>, days: i64) -> CertificateParams {
    let now = OffsetDateTime::now_utc();
    let mut params = testkit::softhsm::ca_params(cn, path_len);
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(days);
    params
}

fn write(dir: &Path, name: &str, text: impl AsRef<[u8]>) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn crl_url(der: &[u8]) -> String {
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(der).unwrap();
    cert.extensions()
        .iter()
        .find_map(|ext| match ext.parsed_extension() {
            ParsedExtension::CRLDistributionPoints(points) => {
                points.iter().find_map(|p| match &p.distribution_point {
                    Some(DistributionPointName::FullName(names)) => {
                        names.iter().find_map(|n| match n {
                            GeneralName::URI(uri) => Some((*uri).to_owned()),
                            _ => None,
                        })
                    }
                    _ => None,
                })
            }
            _ => None,
        })
        .expect("the certificate names its CRL")
}

#[tokio::test]
async fn lego_issues_and_revokes_with_the_issuing_key_on_a_softhsm_token() {
    let Some(hsm) = testkit::softhsm::isolated(
        "hsm::lego_issues_and_revokes_with_the_issuing_key_on_a_softhsm_token",
    ) else {
        return;
    };
    let token = hsm.init_token("certeasy-e2e", "e2e-pin-2468");
    let mut env = TestEnv::new(Db::Sqlite).await;
    let ca_dir = env.dir.path().join("operator-ca");
    std::fs::create_dir(&ca_dir).unwrap();

    // The operator's root, in a file (offline in real life), and the issuing key made on the
    // token: only its public key leaves the token, in the issuing certificate.
    let root_key = KeyPair::generate().unwrap();
    let root_params = ca_params("HSM Test Root", None, 365);
    let root_cert = root_params.self_signed(&root_key).unwrap();
    let root_path = write(&ca_dir, "root.pem", root_cert.pem());
    let root = Issuer::new(root_params, root_key);
    let key = Pkcs11Key {
        module: hsm.module(),
        token: TokenSelector::Label(token.label.clone()),
        key_label: "issuing".to_owned(),
        pin_file: token.pin_file.clone(),
    };
    let on_token = issuance::generate_key_on_token(&key, KeyAlgorithm::EcdsaP256).unwrap();
    assert!(matches!(on_token, CaKey::Token(_)));
    let issuing = ca_params("HSM Issuing CA", Some(0), 180)
        .signed_by(&on_token, &root)
        .unwrap();
    drop(on_token);
    let issuing_path = write(&ca_dir, "issuing.pem", issuing.pem());
    // The listener's own intermediate (the issuing CA signs only recorded certificates).
    let listener_key = KeyPair::generate().unwrap();
    let listener = ca_params("HSM Listener CA", Some(0), 180)
        .signed_by(&listener_key, &root)
        .unwrap();
    write(&ca_dir, "listener.pem", listener.pem());
    let listener_key_path = write(&ca_dir, "listener.key", listener_key.serialize_pem());
    std::fs::set_permissions(
        &listener_key_path,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();

    env.root_path = root_path.clone();
    env.section(
        "ca",
        &format!(
            "  existing:\n    certificate: \"{}\"\n    chain: \"{}\"\n    pkcs11:\n      module: \"{}\"\n      token-label: \"{}\"\n      key-label: \"issuing\"\n      pin-file: \"{}\"\n",
            issuing_path.display(),
            root_path.display(),
            key.module.display(),
            token.label,
            token.pin_file.display()
        ),
    );
    let crl_port = env.crl_port;
    env.section(
        "crl",
        &format!("  listen: \"127.0.0.1:{crl_port}\"\n  shards: 2\n  update-interval: 6h\n"),
    );
    let port = free_port();
    env.challenge_ports(port, env.tls.port());
    env.spawn_binary().await;
    assert!(
        !env.server_log().contains(&token.pin),
        "the PIN is never logged"
    );

    let name = env.name("hsm");
    let path = env.dir.path().join("lego");
    let lego = |args: &[&str]| {
        let mut cmd = crate::clients::lego(&env.root_path, &env.directory_url(), &path);
        cmd.args(["--domains", &name, "--http", "--http.port"])
            .arg(format!("127.0.0.1:{port}"))
            .args(args);
        cmd
    };
    lego_ok(&env, lego(&["run"]), "run").await;
    let crt = path.join(format!("certificates/{name}.crt"));
    let chain = pem_ders(&std::fs::read_to_string(&crt).unwrap());
    assert_eq!(
        chain[1],
        pem_ders(&issuing.pem())[0],
        "the leaf is issued by the token's intermediate"
    );
    let crt_text = std::fs::read_to_string(&crt).unwrap();
    let end = "-----END CERTIFICATE-----";
    let leaf_pem = &crt_text[..crt_text.find(end).unwrap() + end.len()];
    let leaf_path = write(env.dir.path(), "leaf.pem", format!("{leaf_pem}\n"));
    let (ok, out) = testkit::openssl::verify(&root_path, &issuing_path, &leaf_path);
    assert!(ok && out.contains(": OK"), "openssl verify: {out}");

    let (_, leaf) = x509_parser::certificate::X509Certificate::from_der(&chain[0]).unwrap();
    let serial = leaf.raw_serial().to_vec();
    let url = crl_url(&chain[0]);
    lego_ok(&env, lego(&["revoke", "--reason", "1", "--keep"]), "revoke").await;

    let (crl_der, _) = fetch_until(&url, |_, crl| lists(crl, &serial), |_| {}).await;
    let crl_path = write(env.dir.path(), "shard.crl", &crl_der);
    let (ok, out) = testkit::openssl::verify_crl(&crl_path, &issuing_path);
    assert!(
        ok && out.contains("verify OK"),
        "openssl crl -verify (the CRL signed on the token): {out}"
    );
    // And what a relying party concludes with that CRL: revoked.
    let (_, out) = openssl(&["crl", "-inform", "DER", "-in", crl_path.to_str().unwrap()]);
    let crl_pem = write(env.dir.path(), "shard-crl.pem", out);
    let (ok, out) = openssl(&[
        "verify",
        "-crl_check",
        "-CAfile",
        root_path.to_str().unwrap(),
        "-untrusted",
        issuing_path.to_str().unwrap(),
        "-CRLfile",
        crl_pem.to_str().unwrap(),
        leaf_path.to_str().unwrap(),
    ]);
    assert!(!ok && out.contains("certificate revoked"), "{out}");
    assert!(
        !env.server_log().contains(&token.pin),
        "the PIN is never logged"
    );
}
