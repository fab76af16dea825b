//! Ca::issue per second with the issuing key in a file against the same kind of key on a
//! PKCS#11 token (SoftHSM2), side by side: what keeping the key in an HSM costs per certificate.
//!
//! `cargo bench -p issuance --bench signing -- --warm-up-time 1 --measurement-time 5`; the
//! bench runs itself again in a process of its own whose SoftHSM2 directory is fresh
//! (`testkit::softhsm::in_own_process`). Needs the Debian package softhsm2.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::path::PathBuf;

use acme_core::identifier::Identifier;
use criterion::Criterion;
use criterion::Throughput;
use issuance::Ca;
use issuance::CaKey;
use issuance::CaSettings;
use issuance::ExistingCa;
use issuance::KeyAlgorithm;
use issuance::KeySource;
use issuance::Pkcs11Key;
use issuance::TokenSelector;
use rcgen::BasicConstraints;
use rcgen::CertificateParams;
use rcgen::DnType;
use rcgen::IsCa;
use rcgen::Issuer;
use rcgen::KeyPair;
use rcgen::KeyUsagePurpose;
use time::Duration;
use time::OffsetDateTime;

fn ca_params(cn: &str, now: OffsetDateTime) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = now - Duration::hours(1);
    params.not_after = now + Duration::days(365);
    params
}

/// A `Ca` whose issuing certificate (under `root`) is for `key`, found at `source`.
fn ca_with(
    dir: &Path,
    name: &str,
    key: &CaKey,
    source: KeySource,
    root: &Issuer<'static, KeyPair>,
    root_path: &Path,
    now: OffsetDateTime,
) -> Ca {
    let cert = ca_params(name, now).signed_by(key, root).unwrap();
    let cert_path = dir.join(format!("{name}.pem"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    let mut settings = CaSettings::new(dir.join("unused"));
    settings.existing = Some(ExistingCa {
        certificate: cert_path,
        private_key: source,
        chain: Some(root_path.to_path_buf()),
    });
    Ca::load_or_create(&settings, now).unwrap()
}

fn file_key(dir: &Path, alg: KeyAlgorithm) -> (CaKey, KeySource) {
    let key = match alg {
        KeyAlgorithm::Rsa2048 => {
            KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_2048).unwrap()
        }
        _ => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap(),
    };
    let path: PathBuf = dir.join(format!("{}.key", alg.as_str()));
    std::fs::write(&path, key.serialize_pem()).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    (CaKey::File(key), KeySource::File(path))
}

fn main() {
    let hsm = testkit::softhsm::in_own_process();
    let token = hsm.init_token("bench", "bench-pin-1357");
    let now = OffsetDateTime::now_utc();
    let dir = hsm.dir().to_path_buf();
    let root_key = KeyPair::generate().unwrap();
    let root_params = ca_params("Bench Root", now);
    let root_cert = root_params.self_signed(&root_key).unwrap();
    let root_path = dir.join("root.pem");
    std::fs::write(&root_path, root_cert.pem()).unwrap();
    let root = Issuer::new(root_params, root_key);

    let names = vec![Identifier::dns("bench.example").unwrap()];
    let leaf_key = KeyPair::generate().unwrap();
    let mut csr_params = CertificateParams::new(vec!["bench.example".to_owned()]).unwrap();
    csr_params.distinguished_name = rcgen::DistinguishedName::new();
    let csr = csr_params.serialize_request(&leaf_key).unwrap();
    let checked = issuance::check_csr(csr.der(), &names).unwrap();
    let profile = issuance::Profiles::shipped()
        .select(Some("tls-server-client"))
        .unwrap()
        .clone();

    let mut criterion = Criterion::default().configure_from_args();
    let mut group = criterion.benchmark_group("ca_issue");
    group.throughput(Throughput::Elements(1));
    for alg in [KeyAlgorithm::EcdsaP256, KeyAlgorithm::Rsa2048] {
        let (key, source) = file_key(&dir, alg);
        let file_ca = ca_with(
            &dir,
            &format!("file-{}", alg.as_str()),
            &key,
            source,
            &root,
            &root_path,
            now,
        );
        let pkcs11 = Pkcs11Key {
            module: hsm.module(),
            token: TokenSelector::Label(token.label.clone()),
            key_label: alg.as_str().to_owned(),
            pin_file: token.pin_file.clone(),
        };
        let on_token = issuance::generate_key_on_token(&pkcs11, alg).unwrap();
        let token_ca = ca_with(
            &dir,
            &format!("token-{}", alg.as_str()),
            &on_token,
            KeySource::Pkcs11(pkcs11),
            &root,
            &root_path,
            now,
        );
        drop(on_token);
        for (kind, ca) in [("file", &file_ca), ("token", &token_ca)] {
            let intent = ca
                .prepare(&checked, &names, &profile, now, now + Duration::days(7))
                .unwrap();
            group.bench_function(format!("{}/{kind}", alg.as_str()), |b| {
                b.iter(|| ca.issue(&checked, &names, &profile, &intent).unwrap());
            });
        }
    }
    group.finish();
    criterion.final_summary();
}
