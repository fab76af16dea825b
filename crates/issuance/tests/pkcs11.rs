//! The issuing CA key on a PKCS#11 token (SoftHSM2): generated there, certificates and CRLs
//! signed there and accepted by openssl, and each misconfiguration refused with an error naming
//! what is wrong. Each test runs in a process of its own with a fresh SoftHSM2 directory
//! (`testkit::softhsm::isolated`).

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::path::PathBuf;

use acme_core::ids::Serial;
use acme_core::status::RevocationReason;
use issuance::Ca;
use issuance::CaKey;
use issuance::CaSettings;
use issuance::CrlDistribution;
use issuance::ExistingCa;
use issuance::KeyAlgorithm;
use issuance::KeySource;
use issuance::Pkcs11Key;
use issuance::RevokedEntry;
use issuance::TokenSelector;
use rcgen::Issuer;
use rcgen::KeyPair;
use testkit::softhsm::SoftHsm;
use testkit::softhsm::ca_params;
use time::Duration;
use time::OffsetDateTime;

use common::issue_for;

const PIN: &str = "user-pin-5678";

fn key_on(hsm: &SoftHsm, token: &testkit::softhsm::TestToken, label: &str) -> Pkcs11Key {
    Pkcs11Key {
        module: hsm.module(),
        token: TokenSelector::Label(token.label.clone()),
        key_label: label.to_owned(),
        pin_file: token.pin_file.clone(),
    }
}

/// A file root (self-signed) and its issuer, written to `dir/root.pem`.
fn file_root(dir: &Path, now: OffsetDateTime) -> (PathBuf, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = ca_params("Token Test Root", None);
    params.not_before = now - Duration::hours(1);
    params.not_after = now + Duration::days(365);
    let cert = params.self_signed(&key).unwrap();
    let path = dir.join("root.pem");
    std::fs::write(&path, cert.pem()).unwrap();
    (path, Issuer::new(params, key))
}

/// The issuing CA certificate of `key` (on the token) under `root`, written to `dir/name`.
fn issuing_cert(
    dir: &Path,
    name: &str,
    key: &CaKey,
    root: &Issuer<'static, KeyPair>,
    now: OffsetDateTime,
) -> PathBuf {
    let mut params = ca_params(&format!("Token Issuing CA {name}"), Some(0));
    params.not_before = now - Duration::hours(1);
    params.not_after = now + Duration::days(180);
    let cert = params.signed_by(key, root).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, cert.pem()).unwrap();
    path
}

fn settings_with(dir: &Path, certificate: PathBuf, key: KeySource, chain: PathBuf) -> CaSettings {
    let mut settings = CaSettings::new(dir.join("generated-ca"));
    settings.existing = Some(ExistingCa {
        certificate,
        private_key: key,
        chain: Some(chain),
    });
    settings
}

/// For each key type: the key is generated on the token, a `Ca` loaded with it issues a leaf
/// and a CRL listing it revoked, and openssl accepts both under the root.
#[test]
fn a_ca_key_on_a_token_signs_certificates_and_crls_openssl_accepts() {
    let Some(hsm) = testkit::softhsm::isolated(
        "a_ca_key_on_a_token_signs_certificates_and_crls_openssl_accepts",
    ) else {
        return;
    };
    let token = hsm.init_token("certeasy-ca", PIN);
    let now = OffsetDateTime::now_utc();
    let dir = hsm.dir();
    let (root_path, root) = file_root(dir, now);
    for (alg, label) in [
        (KeyAlgorithm::EcdsaP256, "issuing-p256"),
        (KeyAlgorithm::EcdsaP384, "issuing-p384"),
        (KeyAlgorithm::Rsa2048, "issuing-rsa"),
    ] {
        let key = key_on(&hsm, &token, label);
        let generated = issuance::generate_key_on_token(&key, alg).unwrap();
        assert!(matches!(generated, CaKey::Token(_)), "{generated:?}");
        let cert_path = issuing_cert(dir, &format!("{label}.pem"), &generated, &root, now);
        drop(generated);

        let settings = settings_with(
            dir,
            cert_path.clone(),
            KeySource::Pkcs11(key.clone()),
            root_path.clone(),
        );
        let ca = Ca::load_or_create(&settings, now)
            .unwrap()
            .with_crl_distribution(CrlDistribution {
                base_url: "http://crl.example/crl".to_owned(),
                shards: 1,
            });

        let issued = issue_for(
            &ca,
            "token.example",
            now - Duration::minutes(1),
            now + Duration::days(7),
        );
        let leaf = dir.join(format!("{label}-leaf.pem"));
        std::fs::write(&leaf, issued.pem()).unwrap();
        let (ok, out) = testkit::openssl::verify(&root_path, &cert_path, &leaf);
        assert!(ok, "{alg:?}: openssl verify refused the leaf: {out}");

        let crl = ca
            .crl(
                0,
                &[RevokedEntry {
                    serial: Serial::from_bytes(issued.serial.as_bytes().to_vec()),
                    revoked_at: now,
                    reason: RevocationReason::KeyCompromise,
                }],
                1,
                now,
                now + Duration::days(1),
            )
            .unwrap();
        let crl_path = dir.join(format!("{label}.crl"));
        std::fs::write(&crl_path, crl).unwrap();
        let (ok, out) = testkit::openssl::verify_crl(&crl_path, &cert_path);
        assert!(ok && out.contains("verify OK"), "{alg:?}: {out}");
        let serial_hex: String = issued
            .serial
            .as_bytes()
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect();
        assert!(
            out.contains(&serial_hex),
            "{alg:?}: the CRL lists the leaf: {out}"
        );

        // A second key of the same label is refused: the token's key is never replaced.
        let again = issuance::generate_key_on_token(&key, alg).unwrap_err();
        assert!(again.to_string().contains("already holds"), "{again}");
    }
}

/// A wrong PIN, a PIN file others may read, a missing token, a missing key label and a key
/// that is not the certificate's each stop loading with an error naming what is wrong, and no
/// error shows the PIN.
#[test]
fn a_misconfigured_token_key_is_refused_with_what_is_wrong() {
    let Some(hsm) =
        testkit::softhsm::isolated("a_misconfigured_token_key_is_refused_with_what_is_wrong")
    else {
        return;
    };
    let token = hsm.init_token("certeasy-ca", PIN);
    let now = OffsetDateTime::now_utc();
    let dir = hsm.dir();
    let (root_path, root) = file_root(dir, now);
    let good = key_on(&hsm, &token, "issuing");
    let key = issuance::generate_key_on_token(&good, KeyAlgorithm::EcdsaP256).unwrap();
    let cert = issuing_cert(dir, "issuing.pem", &key, &root, now);
    drop(key);
    let other = key_on(&hsm, &token, "other");
    drop(issuance::generate_key_on_token(&other, KeyAlgorithm::EcdsaP256).unwrap());
    let load = |key: Pkcs11Key| {
        let settings = settings_with(dir, cert.clone(), KeySource::Pkcs11(key), root_path.clone());
        Ca::load_or_create(&settings, now).map(|_| ())
    };
    load(good.clone()).unwrap();

    let wrong_pin = Pkcs11Key {
        pin_file: hsm.write_pin("wrong.pin", "not-the-pin-0000"),
        ..good.clone()
    };
    let err = load(wrong_pin.clone()).unwrap_err().to_string();
    assert!(
        err.contains("PIN") && err.contains(wrong_pin.pin_file.to_str().unwrap()),
        "{err}"
    );
    assert!(
        !err.contains("not-the-pin-0000") && !err.contains(PIN),
        "{err}"
    );

    let exposed = hsm.write_pin("exposed.pin", PIN);
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&exposed, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let err = load(Pkcs11Key {
        pin_file: exposed.clone(),
        ..good.clone()
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains(exposed.to_str().unwrap()) && err.contains("chmod 600"),
        "{err}"
    );

    let err = load(Pkcs11Key {
        token: TokenSelector::Label("no-such-token".to_owned()),
        ..good.clone()
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("no initialized token labelled \"no-such-token\"")
            && err.contains("\"certeasy-ca\""),
        "{err}"
    );

    let err = load(Pkcs11Key {
        key_label: "no-such-key".to_owned(),
        ..good.clone()
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("no private key labelled \"no-such-key\"") && err.contains("\"issuing\""),
        "{err}"
    );

    let err = load(other).unwrap_err().to_string();
    assert!(
        err.contains("\"other\"")
            && err.contains("does not belong to the certificate")
            && err.contains("issuing.pem"),
        "{err}"
    );

    let err = load(Pkcs11Key {
        module: dir.join("missing-module.so"),
        ..good
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("missing-module.so"), "{err}");
}
