//! The key ceremony and the offline root, with the real binary: `certeasy ca init` keeps the
//! root key where it is told and never in the data directory, its name constraints are
//! enforced by OpenSSL, `serve` runs without the root key, a first start with no ceremony keeps
//! the root key beside the data directory and warns until `ca move-root-key` takes it away, and
//! `ca new-intermediate` makes the next issuer from the offline root or as a CSR.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use instant_acme::ChallengeType;
use instant_acme::Identifier;
use rcgen::CertificateParams;
use rcgen::DnType;
use rcgen::IsCa;
use rcgen::Issuer;
use rcgen::KeyPair;
use rcgen::SanType;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use crate::harness::Db;
use crate::harness::TestEnv;

/// Runs `certeasy ca ARGS`: (exit code, stdout, stderr).
fn ca(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_certeasy"))
        .arg("ca")
        .args(args)
        .env_remove("CERTEASY_CONFIG")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `certeasy ca init` with the arguments `before`, making the issuing key `int-2026` on `token`
/// of the PKCS#11 `module`: (exit code, stdout, stderr).
fn init_on_token(
    module: &Path,
    token: &testkit::softhsm::TestToken,
    before: &[&str],
) -> (i32, String, String) {
    let mut args = vec!["init"];
    args.extend_from_slice(before);
    args.extend_from_slice(&[
        "--pkcs11-module",
        s(module),
        "--token-label",
        &token.label,
        "--key-label",
        "int-2026",
        "--pin-file",
        s(&token.pin_file),
    ]);
    ca(&args)
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// `openssl verify` of `leaf` under `root` through `untrusted`: (verified, output).
fn openssl_verify(root: &Path, untrusted: Option<&Path>, leaf: &Path) -> (bool, String) {
    match untrusted {
        Some(untrusted) => testkit::openssl::verify(root, untrusted, leaf),
        None => testkit::openssl::openssl(&["verify", "-CAfile", s(root), s(leaf)]),
    }
}

/// A leaf for `names`, signed directly with the intermediate's key: what a thief holding that
/// key could make, bypassing Certeasy's identifier policy.
fn forged_leaf(ca_dir: &Path, names: &[SanType], out: &Path) {
    let key = KeyPair::from_pem(&std::fs::read_to_string(ca_dir.join("intermediate.key")).unwrap())
        .unwrap();
    let der = CertificateDer::from_pem_file(ca_dir.join("intermediate.pem")).unwrap();
    let issuer = Issuer::from_ca_cert_der(&der, key).unwrap();
    let mut params = CertificateParams::default();
    params.subject_alt_names = names.to_vec();
    params.is_ca = IsCa::ExplicitNoCa;
    if let Some(SanType::DnsName(name)) = names.first() {
        params
            .distinguished_name
            .push(DnType::CommonName, name.as_str());
    }
    let leaf_key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&leaf_key, &issuer).unwrap();
    std::fs::write(out, cert.pem()).unwrap();
}

fn dns(name: &str) -> SanType {
    SanType::DnsName(name.to_owned().try_into().unwrap())
}

#[test]
fn init_keeps_the_root_key_where_told_and_openssl_enforces_its_name_constraints() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let config = tmp.path().join("certeasy.yaml");
    std::fs::write(
        &config,
        format!(
            "data-dir: \"{}\"\nidentifiers:\n  allow-domains: [corp.example]\n  deny-domains: [secret.corp.example]\n  allow-cidrs: [10.0.0.0/8]\n",
            data.display()
        ),
    )
    .unwrap();
    let (code, help, _) = ca(&["init", "--help"]);
    assert_eq!(code, 0);
    assert!(
        help.contains("--root-key-out")
            && help.contains("offline")
            && help.contains("--name-constraints"),
        "{help}"
    );

    // The root key is refused in the data directory unless the operator insists.
    let inside = data.join("keys/root.key");
    let (code, _, err) = ca(&["init", "--config", s(&config), "--root-key-out", s(&inside)]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("inside") && err.contains("--allow-root-key-in-data-dir"),
        "{err}"
    );
    assert!(!data.join("ca/root.pem").exists() && !inside.exists());

    let root_key = tmp.path().join("offline/root.key");
    let (code, out, err) = ca(&[
        "init",
        "--config",
        s(&config),
        "--root-key-out",
        s(&root_key),
        "--name-constraints",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ca_dir = data.join("ca");
    assert_eq!(mode(&root_key), 0o600);
    assert_eq!(report["root"]["key"], s(&root_key));
    assert_eq!(report["root"]["certificate"], s(&ca_dir.join("root.pem")));
    assert_eq!(
        report["root"]["sha256-fingerprint"].as_str().unwrap().len(),
        95
    );
    assert!(
        report["intermediate"]["name-constraints"][0]
            .as_str()
            .unwrap()
            .contains("corp.example"),
        "{report}"
    );
    for name in ["intermediate.key", "listener.key"] {
        assert_eq!(mode(&ca_dir.join(name)), 0o600, "{name}");
    }
    assert!(!ca_dir.join("root.key").exists());
    let listing: Vec<String> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        listing,
        ["ca"],
        "nothing but the CA directory in the data directory"
    );

    // Never over an existing CA.
    let (code, _, err) = ca(&[
        "init",
        "--config",
        s(&config),
        "--root-key-out",
        s(&tmp.path().join("offline/second.key")),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("already"), "{err}");

    // OpenSSL accepts leaves inside the constraints and refuses the others, although each is
    // signed by the genuine intermediate.
    let root = ca_dir.join("root.pem");
    let intermediate = ca_dir.join("intermediate.pem");
    let cases: [(&str, Vec<SanType>, bool); 5] = [
        ("inside", vec![dns("www.corp.example")], true),
        (
            "ip-inside",
            vec![SanType::IpAddress([10, 1, 2, 3].into())],
            true,
        ),
        ("outside", vec![dns("www.bank.example")], false),
        ("excluded", vec![dns("db.secret.corp.example")], false),
        (
            "ip-outside",
            vec![SanType::IpAddress([192, 168, 1, 1].into())],
            false,
        ),
    ];
    for (label, names, accepted) in cases {
        let leaf = tmp.path().join(format!("{label}.pem"));
        forged_leaf(&ca_dir, &names, &leaf);
        let (verified, output) = openssl_verify(&root, Some(&intermediate), &leaf);
        assert_eq!(verified, accepted, "{label}: {output}");
        if !accepted {
            assert!(
                output.contains("subtree violation"),
                "{label}: refused for the constraints: {output}"
            );
        }
    }
    let text = Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in", s(&intermediate)])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("X509v3 Name Constraints: critical"), "{text}");
}

/// After the ceremony, `serve` issues with the root key nowhere near it, and says nothing
/// about a root key.
#[tokio::test]
async fn serve_issues_after_the_ceremony_without_the_root_key() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.section(
        "identifiers",
        "  allow-domains: [certeasy.test]\n  allow-cidrs: [127.0.0.0/8]\n",
    );
    env.write_config_for_test();
    let offline = tempfile::tempdir().unwrap();
    let root_key = offline.path().join("root.key");
    let (code, out, err) = ca(&[
        "init",
        "--config",
        s(&env.config_path),
        "--root-key-out",
        s(&root_key),
        "--name-constraints",
    ]);
    assert_eq!(code, 0, "{err}");
    for what in [
        "KEEP OFFLINE",
        "DISTRIBUTE",
        "STAYS ON THE SERVER",
        "certeasy.test",
    ] {
        assert!(out.contains(what), "{what}: {out}");
    }
    env.spawn_binary().await;
    let account = env.account().await;
    let name = env.name("ceremony");
    let chain = crate::flow::issue(
        &env,
        &account,
        &[Identifier::Dns(name.clone())],
        ChallengeType::Http01,
    )
    .await;
    crate::certcheck::assert_chain(&chain, &env.root_pem(), &[&name]);
    let leaf = offline.path().join("issued.pem");
    std::fs::write(&leaf, &chain).unwrap();
    let (verified, output) = openssl_verify(&env.root_path, Some(&leaf), &leaf);
    assert!(verified, "{output}");
    let log = env.server_log();
    assert!(!log.contains("move-root-key"), "{log}");
    assert!(!env.dir.path().join("data.root-offline").exists());
    env.kill_binary();
}

/// A first start with no ceremony: the root key goes beside the data directory, every start
/// warns, `ca move-root-key` takes it away and the warnings stop; a root key an older
/// Certeasy left in the CA directory is warned about too.
#[tokio::test]
async fn a_first_start_keeps_the_root_key_out_of_the_data_directory_until_it_is_moved() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.spawn_binary().await;
    let data = env.dir.path().join("data");
    let beside = env.dir.path().join("data.root-offline/root.key");
    assert_eq!(mode(&beside), 0o600);
    assert_eq!(mode(beside.parent().unwrap()), 0o700);
    assert!(!data.join("ca/root.key").exists());
    let log = env.server_log();
    assert!(
        log.contains("NOT in the data directory") && log.contains(s(&beside)),
        "{log}"
    );
    env.kill_binary();
    env.spawn_binary().await;
    let log = env.server_log();
    assert!(
        log.contains("still on this machine") && log.contains("move-root-key"),
        "{log}"
    );
    env.kill_binary();

    // Not into the data directory; then to the operator's media.
    let (code, _, err) = ca(&[
        "move-root-key",
        "--config",
        s(&env.config_path),
        "--to",
        s(&data.join("root.key")),
    ]);
    assert_eq!(code, 2, "{err}");
    let usb = env.dir.path().join("usb/root.key");
    let (code, out, err) = ca(&[
        "move-root-key",
        "--config",
        s(&env.config_path),
        "--to",
        s(&usb),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("checked against"), "{out}");
    assert_eq!(mode(&usb), 0o600);
    assert!(!beside.exists() && !beside.parent().unwrap().exists());
    env.spawn_binary().await;
    let log = env.server_log();
    assert!(!log.contains("move-root-key"), "{log}");
    env.kill_binary();

    // An older Certeasy's data directory, with the root key in it: it still starts, warned.
    std::fs::copy(&usb, data.join("ca/root.key")).unwrap();
    env.spawn_binary().await;
    let log = env.server_log();
    assert!(
        log.contains("in the data directory") && log.contains("certeasy ca move-root-key"),
        "{log}"
    );
    env.kill_binary();

    // The next intermediate, signed with the offline root, and as a CSR an offline OpenSSL
    // root signs with the constraints it asks for.
    let issuers = env.dir.path().join("issuers");
    let root_pem = data.join("ca/root.pem");
    let (code, out, err) = ca(&[
        "new-intermediate",
        "--config",
        s(&env.config_path),
        "--name",
        "int-2027",
        "--root-cert",
        s(&root_pem),
        "--root-key",
        s(&usb),
        "--out-dir",
        s(&issuers),
    ]);
    assert_eq!(code, 0, "{err}");
    let cert = issuers.join("int-2027.pem");
    for line in [
        "- name: int-2027".to_owned(),
        format!("certificate: {}", cert.display()),
        format!("private-key: {}", issuers.join("int-2027.key").display()),
        format!("chain: {}", root_pem.display()),
    ] {
        assert!(out.contains(&line), "{line}: {out}");
    }
    assert_eq!(mode(&issuers.join("int-2027.key")), 0o600);
    let (verified, output) = openssl_verify(&root_pem, None, &cert);
    assert!(verified, "{output}");

    std::fs::write(
        &env.config_path,
        format!(
            "{}identifiers:\n  allow-domains: [certeasy.test]\n",
            std::fs::read_to_string(&env.config_path).unwrap()
        ),
    )
    .unwrap();
    let csr = env.dir.path().join("int-2028.csr");
    let (code, out, err) = ca(&[
        "new-intermediate",
        "--config",
        s(&env.config_path),
        "--name",
        "int-2028",
        "--csr-out",
        s(&csr),
        "--out-dir",
        s(&issuers),
        "--name-constraints",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("- name: int-2028"), "{out}");
    let signed = issuers.join("int-2028.pem");
    let sign = Command::new("openssl")
        .args([
            "x509",
            "-req",
            "-in",
            s(&csr),
            "-CA",
            s(&root_pem),
            "-CAkey",
            s(&usb),
        ])
        .args([
            "-copy_extensions",
            "copy",
            "-days",
            "30",
            "-out",
            s(&signed),
        ])
        .output()
        .unwrap();
    assert!(
        sign.status.success(),
        "{}",
        String::from_utf8_lossy(&sign.stderr)
    );
    let text = Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in", s(&signed)])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("X509v3 Name Constraints: critical") && text.contains("DNS:certeasy.test"),
        "{text}"
    );
    let (verified, output) = openssl_verify(&root_pem, None, &signed);
    assert!(verified, "{output}");
}

/// `ca init` with the issuing key made on a PKCS#11 token (SoftHSM2): no key file, the
/// intermediate under the root, and the CA loads with the key on the token (the loader proves
/// the key matches the certificate and signs a probe there). In a process of its own with its
/// own SoftHSM2 directory.
#[test]
fn init_makes_the_issuing_key_on_a_token() {
    let Some(hsm) = testkit::softhsm::isolated("ceremony::init_makes_the_issuing_key_on_a_token")
    else {
        return;
    };
    let token = hsm.init_token("ceremony", "user-pin-5678");
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let config = tmp.path().join("certeasy.yaml");
    std::fs::write(&config, format!("data-dir: \"{}\"\n", data.display())).unwrap();
    let root_key = tmp.path().join("offline/root.key");
    let module = hsm.module();
    let (code, out, err) = init_on_token(
        &module,
        &token,
        &["--config", s(&config), "--root-key-out", s(&root_key)],
    );
    assert_eq!(code, 0, "{err}");
    let ca_dir = data.join("ca");
    assert!(!ca_dir.join("intermediate.key").exists());
    assert!(
        out.contains("on the token") && out.contains("existing:"),
        "{out}"
    );
    assert!(
        out.contains("key-label: int-2026") && out.contains("pkcs11:"),
        "{out}"
    );
    let (verified, output) = openssl_verify(
        &ca_dir.join("root.pem"),
        None,
        &ca_dir.join("intermediate.pem"),
    );
    assert!(verified, "{output}");
    let mut settings = issuance::CaSettings::new(&ca_dir);
    settings.existing = Some(issuance::ExistingCa {
        certificate: ca_dir.join("intermediate.pem"),
        private_key: issuance::KeySource::Pkcs11(issuance::Pkcs11Key {
            module,
            token: issuance::TokenSelector::Label(token.label.clone()),
            key_label: "int-2026".to_owned(),
            pin_file: token.pin_file.clone(),
        }),
        chain: Some(ca_dir.join("root.pem")),
    });
    let loaded = issuance::Ca::load_or_create(&settings, time::OffsetDateTime::now_utc()).unwrap();
    assert_eq!(
        loaded.root_pem(),
        std::fs::read_to_string(ca_dir.join("root.pem")).unwrap()
    );
    // The same label again is refused: the token keeps one key per label.
    let (code, _, err) = init_on_token(
        &hsm.module(),
        &token,
        &[
            "--config",
            s(&config),
            "--ca-dir",
            s(&tmp.path().join("second")),
            "--root-key-out",
            s(&tmp.path().join("offline/second.key")),
        ],
    );
    assert_eq!(code, 1, "{err}");
}
