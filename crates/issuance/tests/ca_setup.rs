//! Creating, reloading and importing CAs.

// Test helpers outside #[test] functions unwrap too: a panic is the failure report.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use issuance::Ca;
use issuance::Error;
use issuance::ExistingCa;
use issuance::GeneratedRootKey;
use issuance::KeyAlgorithm;
use issuance::KeySource;
use rcgen::BasicConstraints;
use rcgen::CertificateParams;
use rcgen::DnType;
use rcgen::IsCa;
use rcgen::Issuer;
use rcgen::KeyPair;
use rcgen::KeyUsagePurpose;
use time::Duration;

use common::NOW;
use common::is_ca;
use common::issue_for;
use common::new_ca;
use common::parse;
use common::pem_certs;
use common::settings;

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Generates a CA of `alg` and checks files, modes, extensions, chaining, and reload.
fn create_and_reload(alg: KeyAlgorithm) {
    let (_tmp, settings) = settings(alg);
    let ca = Ca::load_or_create(&settings, NOW).unwrap();
    let dir = &settings.dir;
    assert_eq!(mode(dir), 0o700);
    // The root key is never in the CA directory: beside it, private, for the operator to take
    // offline.
    assert!(!dir.join("root.key").exists());
    let GeneratedRootKey::KeepAt(root_key) = &settings.generated_root_key else {
        panic!("the default keeps the root key");
    };
    assert!(!root_key.starts_with(dir), "{}", root_key.display());
    assert_eq!(mode(root_key), 0o600);
    assert_eq!(mode(root_key.parent().unwrap()), 0o700);
    assert_eq!(mode(&dir.join("intermediate.key")), 0o600);
    assert_eq!(ca.root_path(), Some(dir.join("root.pem").as_path()));
    assert_eq!(
        fs::read_to_string(dir.join("root.pem")).unwrap(),
        ca.root_pem()
    );

    let roots = pem_certs(ca.root_pem());
    let chain = pem_certs(ca.chain_pem());
    assert_eq!((roots.len(), chain.len()), (1, 1));
    let root = parse(&roots[0]);
    let intermediate = parse(&chain[0]);

    root.verify_signature(None).unwrap();
    intermediate
        .verify_signature(Some(root.public_key()))
        .unwrap();
    assert_eq!(intermediate.issuer().as_raw(), root.subject().as_raw());
    let root_bc = root.basic_constraints().unwrap().unwrap().value;
    assert!(root_bc.ca && root_bc.path_len_constraint.is_none());
    let root_ku = root.key_usage().unwrap().unwrap().value;
    assert!(root_ku.key_cert_sign() && root_ku.crl_sign() && !root_ku.digital_signature());
    let int_bc = intermediate.basic_constraints().unwrap().unwrap().value;
    assert!(int_bc.ca);
    assert_eq!(int_bc.path_len_constraint, Some(0));
    let int_ku = intermediate.key_usage().unwrap().unwrap().value;
    assert!(int_ku.key_cert_sign() && int_ku.crl_sign() && int_ku.digital_signature());
    assert_eq!(
        root.subject().to_string(),
        "O=Certeasy, CN=Certeasy Root CA"
    );
    assert_eq!(
        intermediate.subject().to_string(),
        "O=Certeasy, CN=Certeasy Intermediate CA"
    );
    assert!(intermediate.validity().not_after <= root.validity().not_after);
    assert!(
        intermediate
            .validity()
            .is_valid_at(x509_parser::time::ASN1Time::from(NOW))
    );
    let expected_key_oid = if alg.is_rsa() {
        x509_parser::oid_registry::OID_PKCS1_RSAENCRYPTION
    } else {
        x509_parser::oid_registry::OID_KEY_TYPE_EC_PUBLIC_KEY
    };
    assert_eq!(
        intermediate.public_key().algorithm.algorithm,
        expected_key_oid
    );
    assert_eq!(root.raw_serial().len(), 16);

    // The listener's intermediate: a sibling of the issuing one under the root, for TLS only.
    assert_eq!(mode(&dir.join("listener.key")), 0o600);
    let listener_der = pem_certs(&fs::read_to_string(dir.join("listener.pem")).unwrap()).remove(0);
    let listener = parse(&listener_der);
    listener.verify_signature(Some(root.public_key())).unwrap();
    assert_ne!(listener.public_key().raw, intermediate.public_key().raw);
    let listener_bc = listener.basic_constraints().unwrap().unwrap().value;
    assert!(listener_bc.ca);
    assert_eq!(listener_bc.path_len_constraint, Some(0));
    let listener_ku = listener.key_usage().unwrap().unwrap().value;
    assert!(listener_ku.key_cert_sign() && !listener_ku.crl_sign());
    let eku = listener.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.server_auth && eku.client_auth && !eku.any);
    assert_eq!(
        listener.subject().to_string(),
        "O=Certeasy, CN=Certeasy Listener CA"
    );
    let identity = ca
        .issue_server_tls(&["localhost".to_owned()], &[], NOW, Duration::days(1))
        .unwrap();
    assert_eq!(identity.cert_chain[1].as_ref(), listener_der.as_slice());

    let again = Ca::load_or_create(&settings, NOW + Duration::days(30)).unwrap();
    assert_eq!(
        pem_certs(&fs::read_to_string(dir.join("listener.pem")).unwrap()).remove(0),
        listener_der,
        "the listener's intermediate is kept"
    );
    assert_eq!(again.root_pem(), ca.root_pem());
    assert_eq!(again.chain_pem(), ca.chain_pem());
    assert_eq!(again.issuing_not_after(), ca.issuing_not_after());
}

#[test]
fn ecdsa_p256_ca_is_created_and_reloaded() {
    create_and_reload(KeyAlgorithm::EcdsaP256);
}

#[test]
fn ecdsa_p384_ca_is_created_and_reloaded() {
    create_and_reload(KeyAlgorithm::EcdsaP384);
}

#[test]
fn rsa_2048_ca_is_created_and_reloaded() {
    create_and_reload(KeyAlgorithm::Rsa2048);
}

#[test]
fn rsa_3072_ca_is_created_and_reloaded() {
    create_and_reload(KeyAlgorithm::Rsa3072);
}

#[test]
fn rsa_ca_sizes_are_as_configured() {
    let (_tmp, ca) = new_ca(KeyAlgorithm::Rsa2048);
    let chain = pem_certs(ca.chain_pem());
    let intermediate = parse(&chain[0]);
    assert_eq!(intermediate.public_key().parsed().unwrap().key_size(), 2048);
}

#[test]
fn missing_intermediate_with_root_present_is_refused() {
    let (_tmp, settings) = settings(KeyAlgorithm::EcdsaP256);
    Ca::load_or_create(&settings, NOW).unwrap();
    fs::remove_file(settings.dir.join("intermediate.key")).unwrap();
    let err = Ca::load_or_create(&settings, NOW).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidCa(m) if m.contains("intermediate.key")),
        "{err}"
    );
}

#[test]
fn a_ca_directory_from_before_the_listener_intermediate_gets_one_from_the_root() {
    let (_tmp, settings) = settings(KeyAlgorithm::EcdsaP256);
    let before = Ca::load_or_create(&settings, NOW).unwrap();
    // A directory made by an older Certeasy: root and issuing intermediate only.
    fs::remove_file(settings.dir.join("listener.pem")).unwrap();
    fs::remove_file(settings.dir.join("listener.key")).unwrap();
    let ca = Ca::load_or_create(&settings, NOW + Duration::days(1)).unwrap();
    assert_eq!(
        ca.chain_pem(),
        before.chain_pem(),
        "the issuing CA is unchanged"
    );
    assert_eq!(mode(&settings.dir.join("listener.key")), 0o600);
    let root_der = pem_certs(ca.root_pem()).remove(0);
    let listener_der =
        pem_certs(&fs::read_to_string(settings.dir.join("listener.pem")).unwrap()).remove(0);
    parse(&listener_der)
        .verify_signature(Some(parse(&root_der).public_key()))
        .unwrap();
    let identity = ca
        .issue_server_tls(&["localhost".to_owned()], &[], NOW, Duration::days(1))
        .unwrap();
    assert_eq!(identity.cert_chain[1].as_ref(), listener_der.as_slice());
}

#[test]
fn without_the_root_key_the_listener_intermediate_is_not_made_and_the_issuing_ca_still_issues() {
    let (_tmp, settings) = settings(KeyAlgorithm::EcdsaP256);
    Ca::load_or_create(&settings, NOW).unwrap();
    // The root key moved offline, as the start-up warning asks, and no listener intermediate.
    let GeneratedRootKey::KeepAt(root_key) = &settings.generated_root_key else {
        panic!("the default keeps the root key");
    };
    fs::remove_file(root_key).unwrap();
    for name in ["listener.pem", "listener.key"] {
        fs::remove_file(settings.dir.join(name)).unwrap();
    }
    let ca = Ca::load_or_create(&settings, NOW).unwrap();
    assert!(!settings.dir.join("listener.pem").exists());
    // The listener gets nothing from the issuing intermediate; the refusal says what to do.
    let err = ca
        .issue_server_tls(&["localhost".to_owned()], &[], NOW, Duration::days(1))
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidCa(m) if m.contains("listener.pem") && m.contains("root.key") && m.contains("server.tls-certificate")),
        "{err}"
    );
    issue_for(&ca, "www.example.com", NOW, NOW + Duration::days(1));
}

#[test]
fn leftovers_of_an_interrupted_creation_are_replaced() {
    let (_tmp, settings) = settings(KeyAlgorithm::EcdsaP256);
    fs::create_dir_all(&settings.dir).unwrap();
    fs::write(settings.dir.join("intermediate.key"), "garbage").unwrap();
    fs::set_permissions(
        settings.dir.join("intermediate.key"),
        fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let ca = Ca::load_or_create(&settings, NOW).unwrap();
    assert!(!ca.chain_pem().is_empty());
    assert_eq!(mode(&settings.dir.join("intermediate.key")), 0o600);
}

#[test]
fn an_expired_intermediate_is_refused() {
    let (_tmp, settings) = settings(KeyAlgorithm::EcdsaP256);
    Ca::load_or_create(&settings, NOW).unwrap();
    let err = Ca::load_or_create(&settings, NOW + Duration::days(6 * 365)).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidCa(m) if m.contains("expired")),
        "{err}"
    );
}

#[test]
fn ca_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<Ca>();
}

/// A root and an intermediate made outside Certeasy, written to `dir`.
struct Foreign {
    root_pem: String,
    intermediate_pem: String,
    intermediate_key_pem: String,
    /// A second intermediate under the root, for the listener.
    listener_pem: String,
    listener_key_pem: String,
}

fn foreign_ca(alg: &'static rcgen::SignatureAlgorithm) -> Foreign {
    foreign_ca_with(alg, true)
}

/// A foreign CA whose intermediate has cRLSign in its keyUsage only when `crl_sign`.
fn foreign_ca_with(alg: &'static rcgen::SignatureAlgorithm, crl_sign: bool) -> Foreign {
    let root_key = common::subject_key(alg);
    let mut root_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    root_params
        .distinguished_name
        .push(DnType::CommonName, "Foreign Root");
    root_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    root_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let root = root_params.self_signed(&root_key).unwrap();
    let root_issuer = Issuer::from_params(&root_params, &root_key);

    let int_key = common::subject_key(alg);
    let mut int_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    int_params
        .distinguished_name
        .push(DnType::CommonName, "Foreign Issuing CA");
    int_params
        .distinguished_name
        .push(DnType::OrganizationName, "Elsewhere Ltd");
    int_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    int_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    if crl_sign {
        int_params.key_usages.push(KeyUsagePurpose::CrlSign);
    }
    int_params.use_authority_key_identifier_extension = true;
    let intermediate = int_params.signed_by(&int_key, &root_issuer).unwrap();
    let listener_key = common::subject_key(alg);
    let mut listener_params = int_params.clone();
    listener_params.distinguished_name = rcgen::DistinguishedName::new();
    listener_params
        .distinguished_name
        .push(DnType::CommonName, "Foreign Listener CA");
    let listener = listener_params
        .signed_by(&listener_key, &root_issuer)
        .unwrap();
    Foreign {
        root_pem: root.pem(),
        intermediate_pem: intermediate.pem(),
        intermediate_key_pem: int_key.serialize_pem(),
        listener_pem: listener.pem(),
        listener_key_pem: listener_key.serialize_pem(),
    }
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    fs::write(&path, text).unwrap();
    path
}

#[test]
fn existing_ca_with_chain_is_loaded_and_issues() {
    for alg in [&rcgen::PKCS_ECDSA_P384_SHA384, &rcgen::PKCS_RSA_SHA256] {
        let foreign = foreign_ca(alg);
        let tmp = tempfile::tempdir().unwrap();
        let (_unused, mut settings) = settings(KeyAlgorithm::EcdsaP256);
        let chain = write(tmp.path(), "root.crt", &foreign.root_pem);
        settings.existing = Some(ExistingCa {
            certificate: write(tmp.path(), "issuing.crt", &foreign.intermediate_pem),
            private_key: KeySource::File(write(
                tmp.path(),
                "issuing.key",
                &foreign.intermediate_key_pem,
            )),
            chain: Some(chain.clone()),
        });
        let ca = Ca::load_or_create(&settings, NOW).unwrap();
        assert!(
            !settings.dir.exists(),
            "an existing CA must not create the generated-CA directory"
        );
        assert_eq!(pem_certs(ca.root_pem()), pem_certs(&foreign.root_pem));
        assert_eq!(
            pem_certs(ca.chain_pem()),
            pem_certs(&foreign.intermediate_pem)
        );
        assert_eq!(ca.root_path(), Some(chain.as_path()));

        let issued = issue_for(&ca, "www.example.com", NOW, NOW + Duration::days(7));
        let leaf = parse(&issued.der);
        let issuing_der = &pem_certs(&foreign.intermediate_pem)[0];
        let issuing = parse(issuing_der);
        leaf.verify_signature(Some(issuing.public_key())).unwrap();
        assert_eq!(leaf.issuer().as_raw(), issuing.subject().as_raw());

        // No listener intermediate beside the issuing certificate: the issuing CA does not
        // sign the listener's certificate instead.
        let err = ca
            .issue_server_tls(&["localhost".to_owned()], &[], NOW, Duration::days(1))
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidCa(m) if m.contains("listener.pem")),
            "{err}"
        );
        // With one beside it, under the same root, the listener's certificates come from it.
        write(tmp.path(), "listener.pem", &foreign.listener_pem);
        write(tmp.path(), "listener.key", &foreign.listener_key_pem);
        let ca = Ca::load_or_create(&settings, NOW).unwrap();
        let identity = ca
            .issue_server_tls(&["localhost".to_owned()], &[], NOW, Duration::days(1))
            .unwrap();
        let listener_der = pem_certs(&foreign.listener_pem).remove(0);
        assert_eq!(identity.cert_chain[1].as_ref(), listener_der.as_slice());
        parse(identity.cert_chain[0].as_ref())
            .verify_signature(Some(parse(&listener_der).public_key()))
            .unwrap();
    }
}

#[test]
fn existing_ca_bundle_in_one_file_is_split() {
    let foreign = foreign_ca(&rcgen::PKCS_ECDSA_P256_SHA256);
    let tmp = tempfile::tempdir().unwrap();
    let (_unused, mut settings) = settings(KeyAlgorithm::EcdsaP256);
    // The intermediate and its root in one file: the root is found as the top of the chain.
    let both = format!("{}{}", foreign.intermediate_pem, foreign.root_pem);
    let cert = write(tmp.path(), "bundle.pem", &both);
    settings.existing = Some(ExistingCa {
        certificate: cert,
        private_key: KeySource::File(write(
            tmp.path(),
            "issuing.key",
            &foreign.intermediate_key_pem,
        )),
        chain: None,
    });
    let ca = Ca::load_or_create(&settings, NOW).unwrap();
    assert_eq!(pem_certs(ca.root_pem()), pem_certs(&foreign.root_pem));
    assert_eq!(
        pem_certs(ca.chain_pem()),
        pem_certs(&foreign.intermediate_pem)
    );
    assert_eq!(
        ca.root_path(),
        None,
        "the root shares its file with another certificate"
    );
}

#[test]
fn existing_ca_errors_name_the_file() {
    let foreign = foreign_ca(&rcgen::PKCS_ECDSA_P256_SHA256);
    let other = foreign_ca(&rcgen::PKCS_ECDSA_P256_SHA256);
    let tmp = tempfile::tempdir().unwrap();
    let (_unused, mut settings) = settings(KeyAlgorithm::EcdsaP256);
    let cert = write(tmp.path(), "issuing.crt", &foreign.intermediate_pem);
    let wrong_key = write(tmp.path(), "wrong.key", &other.intermediate_key_pem);
    let root = write(tmp.path(), "root.crt", &foreign.root_pem);

    settings.existing = Some(ExistingCa {
        certificate: cert.clone(),
        private_key: KeySource::File(wrong_key),
        chain: Some(root.clone()),
    });
    let err = Ca::load_or_create(&settings, NOW).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidCa(m) if m.contains("wrong.key") && m.contains("does not belong")),
        "{err}"
    );

    // A chain that is not the issuer of the certificate.
    let other_root = write(tmp.path(), "other-root.crt", &other.root_pem);
    let good_key = write(tmp.path(), "good.key", &foreign.intermediate_key_pem);
    settings.existing = Some(ExistingCa {
        certificate: cert.clone(),
        private_key: KeySource::File(good_key.clone()),
        chain: Some(other_root),
    });
    let err = Ca::load_or_create(&settings, NOW).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidCa(m) if m.contains("not signed by")),
        "{err}"
    );

    // A leaf certificate is not a CA.
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["leaf.example.com".to_owned()])
        .unwrap()
        .self_signed(&leaf_key)
        .unwrap();
    let leaf_cert = write(tmp.path(), "leaf.crt", &leaf.pem());
    let leaf_key_path = write(tmp.path(), "leaf.key", &leaf_key.serialize_pem());
    settings.existing = Some(ExistingCa {
        certificate: leaf_cert,
        private_key: KeySource::File(leaf_key_path),
        chain: None,
    });
    let err = Ca::load_or_create(&settings, NOW).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidCa(m) if m.contains("leaf.crt") && m.contains("not a CA")),
        "{err}"
    );

    // Not a key at all, and a missing file.
    let junk = write(tmp.path(), "junk.key", "hello");
    settings.existing = Some(ExistingCa {
        certificate: cert,
        private_key: KeySource::File(junk),
        chain: Some(root),
    });
    let err = Ca::load_or_create(&settings, NOW).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidCa(m) if m.contains("junk.key")),
        "{err}"
    );
    settings.existing = Some(ExistingCa {
        certificate: tmp.path().join("absent.crt"),
        private_key: KeySource::File(good_key),
        chain: None,
    });
    let err = Ca::load_or_create(&settings, NOW).unwrap_err();
    assert!(
        matches!(&err, Error::Io { path, .. } if path.ends_with("absent.crt")),
        "{err}"
    );
    assert!(is_ca(&parse(&pem_certs(&foreign.root_pem)[0])));
}

#[test]
fn existing_self_signed_root_issues_directly() {
    let foreign = foreign_ca(&rcgen::PKCS_ECDSA_P256_SHA256);
    let tmp = tempfile::tempdir().unwrap();
    let (_unused, mut settings) = settings(KeyAlgorithm::EcdsaP256);
    // Re-create a root whose key we hold, used as the issuing CA itself.
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "Lab Root");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let root = params.self_signed(&key).unwrap();
    let cert = write(tmp.path(), "lab-root.crt", &root.pem());
    settings.existing = Some(ExistingCa {
        certificate: cert.clone(),
        private_key: KeySource::File(write(tmp.path(), "lab-root.key", &key.serialize_pem())),
        chain: None,
    });
    let ca = Ca::load_or_create(&settings, NOW).unwrap();
    assert_eq!(ca.chain_pem(), "");
    assert_eq!(ca.root_path(), Some(cert.as_path()));
    assert_eq!(pem_certs(ca.root_pem()), vec![root.der().to_vec()]);
    assert_ne!(pem_certs(ca.root_pem()), pem_certs(&foreign.root_pem));
}

#[test]
fn an_existing_ca_without_crl_sign_is_known_as_such() {
    for crl_sign in [true, false] {
        let foreign = foreign_ca_with(&rcgen::PKCS_ECDSA_P256_SHA256, crl_sign);
        let tmp = tempfile::tempdir().unwrap();
        let (_unused, mut settings) = settings(KeyAlgorithm::EcdsaP256);
        settings.existing = Some(ExistingCa {
            certificate: write(tmp.path(), "issuing.crt", &foreign.intermediate_pem),
            private_key: KeySource::File(write(
                tmp.path(),
                "issuing.key",
                &foreign.intermediate_key_pem,
            )),
            chain: Some(write(tmp.path(), "root.crt", &foreign.root_pem)),
        });
        let ca = Ca::load_or_create(&settings, NOW).unwrap();
        assert_eq!(ca.may_sign_crls(), crl_sign);
    }
}
