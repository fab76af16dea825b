//! CSR policy, leaf issuance, Certeasy's own TLS identity and CRLs.

// Test helpers outside #[test] functions unwrap too: a panic is the failure report.
#![allow(clippy::unwrap_used)]

mod common;

use acme_core::ids::Serial;
use acme_core::status::RevocationReason;
use issuance::Ca;
use issuance::Error;
use issuance::KeyAlgorithm;
use issuance::RevokedEntry;
use issuance::check_csr;
use rcgen::BasicConstraints;
use rcgen::ExtendedKeyUsagePurpose;
use rcgen::IsCa;
use rcgen::KeyUsagePurpose;
use time::Duration;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::ParsedExtension;
use x509_parser::oid_registry::OID_X509_EXT_SUBJECT_ALT_NAME;
use x509_parser::prelude::FromDer;
use x509_parser::revocation_list::CertificateRevocationList;

use common::NOW;
use common::SignNow;
use common::csr;
use common::csr_der;
use common::csr_params;
use common::ids;
use common::is_ca;
use common::new_ca;
use common::parse;
use common::pem_certs;
use common::sans;
use common::server_client;
use common::subject_key;

fn intermediate(ca: &Ca) -> Vec<u8> {
    pem_certs(ca.chain_pem()).remove(0)
}

fn ski(cert: &X509Certificate<'_>) -> Option<Vec<u8>> {
    cert.iter_extensions()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::SubjectKeyIdentifier(k) => Some(k.0.to_vec()),
            _ => None,
        })
}

fn aki(cert: &X509Certificate<'_>) -> Option<Vec<u8>> {
    cert.iter_extensions()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::AuthorityKeyIdentifier(k) => {
                k.key_identifier.as_ref().map(|k| k.0.to_vec())
            }
            _ => None,
        })
}

/// Checks everything the leaf profile promises.
fn assert_leaf(ca: &Ca, der: &[u8], names: &[&str], rsa: bool) {
    let int_der = intermediate(ca);
    let int = parse(&int_der);
    let root_der = pem_certs(ca.root_pem()).remove(0);
    let root = parse(&root_der);
    let leaf = parse(der);
    assert_eq!(leaf.version(), x509_parser::x509::X509Version::V3);
    leaf.verify_signature(Some(int.public_key())).unwrap();
    int.verify_signature(Some(root.public_key())).unwrap();
    assert_eq!(leaf.issuer().as_raw(), int.subject().as_raw());
    assert_eq!(sans(&leaf), names);
    assert!(!is_ca(&leaf));
    assert!(leaf.basic_constraints().unwrap().unwrap().critical);
    let ku = leaf.key_usage().unwrap().unwrap().value;
    assert!(ku.digital_signature());
    assert_eq!(ku.key_encipherment(), rsa);
    assert!(!ku.key_cert_sign() && !ku.crl_sign());
    let eku = leaf.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.server_auth && eku.client_auth && !eku.code_signing && eku.other.is_empty());
    assert_eq!(aki(&leaf), ski(&int));
    assert!(ski(&leaf).is_some());
    assert_eq!(leaf.raw_serial().len(), 16);
    assert!(leaf.raw_serial()[0] != 0 && leaf.raw_serial()[0] < 0x80);
}

#[test]
fn leaves_for_ec_and_rsa_keys_follow_the_profile() {
    let (_tmp, ca) = new_ca(KeyAlgorithm::EcdsaP256);
    let names = ["a.example.com", "b.example.com"];
    for alg in [
        &rcgen::PKCS_ECDSA_P256_SHA256,
        &rcgen::PKCS_ECDSA_P384_SHA384,
        &rcgen::PKCS_RSA_SHA256,
    ] {
        let der = csr(alg, &names);
        let order = ids(&["B.Example.com", "a.example.com."]);
        let checked = check_csr(&der, &order).unwrap();
        let (_, req) =
            x509_parser::certification_request::X509CertificationRequest::from_der(&der).unwrap();
        assert_eq!(
            checked.spki_der(),
            req.certification_request_info.subject_pki.raw
        );

        let not_before = NOW + Duration::nanoseconds(123_456_789);
        let not_after = NOW + Duration::days(90);
        let issued = ca
            .sign_now(&checked, &order, &server_client(), not_before, not_after)
            .unwrap();
        let rsa = alg == &rcgen::PKCS_RSA_SHA256;
        // SANs follow the order's order of identifiers.
        assert_leaf(&ca, &issued.der, &["b.example.com", "a.example.com"], rsa);
        let leaf = parse(&issued.der);
        assert_eq!(leaf.public_key().raw, checked.spki_der());
        assert_eq!(leaf.validity().not_before.to_datetime(), NOW);
        assert_eq!(leaf.validity().not_after.to_datetime(), not_after);
        assert_eq!((issued.not_before, issued.not_after), (NOW, not_after));
        assert_eq!(issued.serial.as_bytes(), leaf.raw_serial());
        assert_eq!(leaf.subject().to_string(), "CN=b.example.com");
        assert_eq!(pem_certs(&issued.pem()), vec![issued.der.clone()]);
        assert_eq!(
            pem_certs(&issued.chain_pem()),
            vec![issued.der.clone(), intermediate(&ca)]
        );
    }
}

#[test]
fn rsa_ca_issues_verifiable_leaves() {
    let (_tmp, ca) = new_ca(KeyAlgorithm::Rsa2048);
    let order = ids(&["rsa.example.org"]);
    let checked = check_csr(
        &csr(&rcgen::PKCS_ECDSA_P256_SHA256, &["rsa.example.org"]),
        &order,
    )
    .unwrap();
    let issued = ca
        .sign_now(
            &checked,
            &order,
            &server_client(),
            NOW,
            NOW + Duration::days(1),
        )
        .unwrap();
    assert_leaf(&ca, &issued.der, &["rsa.example.org"], false);
}

#[test]
fn serials_differ_between_certificates() {
    let (_tmp, ca) = new_ca(KeyAlgorithm::EcdsaP256);
    let order = ids(&["x.example.com"]);
    let checked = check_csr(
        &csr(&rcgen::PKCS_ECDSA_P256_SHA256, &["x.example.com"]),
        &order,
    )
    .unwrap();
    let a = ca
        .sign_now(
            &checked,
            &order,
            &server_client(),
            NOW,
            NOW + Duration::days(1),
        )
        .unwrap();
    let b = ca
        .sign_now(
            &checked,
            &order,
            &server_client(),
            NOW,
            NOW + Duration::days(1),
        )
        .unwrap();
    assert_ne!(a.serial, b.serial);
    assert_eq!(a.serial.as_bytes().len(), 16);
}

#[test]
fn a_csr_asking_for_ca_powers_gets_a_plain_leaf() {
    let (_tmp, ca) = new_ca(KeyAlgorithm::EcdsaP256);
    let mut params = csr_params(&["evil.example.com"], Some("evil.example.com"));
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::CodeSigning];
    let der = csr_der(&params, &subject_key(&rcgen::PKCS_ECDSA_P256_SHA256));
    let (_, req) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&der).unwrap();
    let asks_for_ca = req
        .requested_extensions()
        .unwrap()
        .any(|e| matches!(e, ParsedExtension::BasicConstraints(bc) if bc.ca));
    assert!(asks_for_ca, "the test CSR must really request cA=true");
    let order = ids(&["evil.example.com"]);
    let checked = check_csr(&der, &order).unwrap();
    let issued = ca
        .sign_now(
            &checked,
            &order,
            &server_client(),
            NOW,
            NOW + Duration::days(1),
        )
        .unwrap();
    assert_leaf(&ca, &issued.der, &["evil.example.com"], false);
}

#[test]
fn wildcard_and_ip_identifiers_are_certified() {
    let (_tmp, ca) = new_ca(KeyAlgorithm::EcdsaP384);
    let names = [
        "*.example.com",
        "example.com",
        "ip:192.0.2.7",
        "ip:2001:db8::1",
    ];
    let order = ids(&names);
    let checked = check_csr(&csr(&rcgen::PKCS_ECDSA_P256_SHA256, &names), &order).unwrap();
    let issued = ca
        .sign_now(
            &checked,
            &order,
            &server_client(),
            NOW,
            NOW + Duration::days(1),
        )
        .unwrap();
    assert_leaf(&ca, &issued.der, &names, false);
    assert_eq!(parse(&issued.der).subject().to_string(), "CN=*.example.com");

    // IP only: empty subject, critical SAN.
    let ip_names = ["ip:192.0.2.7"];
    let order = ids(&ip_names);
    let checked = check_csr(&csr(&rcgen::PKCS_ECDSA_P256_SHA256, &ip_names), &order).unwrap();
    let issued = ca
        .sign_now(
            &checked,
            &order,
            &server_client(),
            NOW,
            NOW + Duration::days(1),
        )
        .unwrap();
    assert_leaf(&ca, &issued.der, &ip_names, false);
    let leaf = parse(&issued.der);
    assert_eq!(leaf.subject().iter().count(), 0);
    assert!(
        leaf.get_extension_unique(&OID_X509_EXT_SUBJECT_ALT_NAME)
            .unwrap()
            .unwrap()
            .critical
    );
}

fn bad_csr_detail(result: Result<issuance::CheckedCsr, Error>) -> String {
    match result {
        Err(Error::BadCsr(detail)) => detail,
        other => panic!("expected BadCsr, got {other:?}"),
    }
}

#[test]
fn names_must_match_the_order_exactly() {
    let der = csr(
        &rcgen::PKCS_ECDSA_P256_SHA256,
        &["a.example.com", "extra.example.com"],
    );
    let detail = bad_csr_detail(check_csr(&der, &ids(&["a.example.com"])));
    assert!(
        detail.contains("not in the order") && detail.contains("dns:extra.example.com"),
        "{detail}"
    );
    assert!(!detail.contains("missing"), "{detail}");

    let der = csr(&rcgen::PKCS_ECDSA_P256_SHA256, &["a.example.com"]);
    let detail = bad_csr_detail(check_csr(&der, &ids(&["a.example.com", "ip:192.0.2.1"])));
    assert!(
        detail.contains("missing") && detail.contains("ip:192.0.2.1"),
        "{detail}"
    );

    // A wildcard is not its base name.
    let der = csr(&rcgen::PKCS_ECDSA_P256_SHA256, &["*.example.com"]);
    let detail = bad_csr_detail(check_csr(&der, &ids(&["example.com"])));
    assert!(
        detail.contains("dns:example.com") && detail.contains("dns:*.example.com"),
        "{detail}"
    );

    // The CN counts as a requested name and must be one of the SANs.
    let der = csr_der(
        &csr_params(&["a.example.com"], Some("b.example.com")),
        &subject_key(&rcgen::PKCS_ECDSA_P256_SHA256),
    );
    let detail = bad_csr_detail(check_csr(&der, &ids(&["a.example.com", "b.example.com"])));
    assert!(detail.contains("common name"), "{detail}");

    // No CN at all is fine; case and trailing dots do not matter.
    let der = csr_der(
        &csr_params(&["A.Example.COM."], None),
        &subject_key(&rcgen::PKCS_ECDSA_P256_SHA256),
    );
    check_csr(&der, &ids(&["a.example.com"])).unwrap();
}

#[test]
fn other_san_kinds_are_refused() {
    let mut params = csr_params(&["a.example.com"], None);
    params.subject_alt_names.push(rcgen::SanType::Rfc822Name(
        "me@example.com".to_owned().try_into().unwrap(),
    ));
    let der = csr_der(&params, &subject_key(&rcgen::PKCS_ECDSA_P256_SHA256));
    let detail = bad_csr_detail(check_csr(&der, &ids(&["a.example.com"])));
    assert!(detail.contains("rfc822Name"), "{detail}");
}

#[test]
fn a_broken_signature_is_refused() {
    let mut der = csr(&rcgen::PKCS_ECDSA_P256_SHA256, &["a.example.com"]);
    let order = ids(&["a.example.com"]);
    check_csr(&der, &order).unwrap();
    // Flip a bit inside the subject name's "example" text: the DER stays valid, the signature does not.
    let pos = der.windows(7).position(|w| w == b"example").unwrap();
    der[pos] ^= 0x20;
    let detail = bad_csr_detail(check_csr(&der, &ids(&["a.Example.com"])));
    assert!(detail.contains("signature"), "{detail}");
    assert!(matches!(
        check_csr(&der[..der.len() - 3], &order),
        Err(Error::BadCsr(_))
    ));
}

#[test]
fn unsupported_keys_are_bad_csrs() {
    let order = ids(&["a.example.com"]);
    for (alg, what) in [
        (&rcgen::PKCS_ECDSA_P521_SHA512, "curve"),
        (&rcgen::PKCS_ED25519, "key algorithm"),
    ] {
        let der = csr(alg, &["a.example.com"]);
        let detail = bad_csr_detail(check_csr(&der, &order));
        assert!(detail.contains(what), "{detail}");
    }
    // RSA keys the CA refuses: too small, and a public exponent of 3. The key is checked before
    // the signature, so a CSR carrying such a key with a dummy signature is enough.
    for (bits, exponent, what) in [
        (1024, 65537, "1024"),
        (2048, 3, "exponent"),
        (2048, 65536 + 1024, "exponent"),
    ] {
        let der = common::rsa_csr_with_fake_signature(bits, exponent, "a.example.com");
        let detail = bad_csr_detail(check_csr(&der, &order));
        assert!(detail.contains(what), "{bits}/{exponent}: {detail}");
    }
    // The same construction with an acceptable key is refused only for its dummy signature, so
    // the refusals above are about the key.
    let der = common::rsa_csr_with_fake_signature(2048, 65537, "a.example.com");
    let detail = bad_csr_detail(check_csr(&der, &order));
    assert!(detail.contains("signature"), "{detail}");
}

#[test]
fn issuing_rules_are_enforced() {
    let (_tmp, ca) = new_ca(KeyAlgorithm::EcdsaP256);
    let order = ids(&["a.example.com"]);
    let checked = check_csr(
        &csr(&rcgen::PKCS_ECDSA_P256_SHA256, &["a.example.com"]),
        &order,
    )
    .unwrap();
    // Identifiers other than those checked.
    let err = ca
        .sign_now(
            &checked,
            &ids(&["b.example.com"]),
            &server_client(),
            NOW,
            NOW + Duration::days(1),
        )
        .unwrap_err();
    assert!(matches!(err, Error::InvalidRequest(_)), "{err}");
    // Empty window.
    let err = ca
        .sign_now(&checked, &order, &server_client(), NOW, NOW)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidRequest(_)), "{err}");
    // Outliving the intermediate.
    let too_late = ca.issuing_not_after() + Duration::days(1);
    let err = ca
        .sign_now(&checked, &order, &server_client(), NOW, too_late)
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidRequest(m) if m.contains("outlive")),
        "{err}"
    );
}

#[test]
fn server_tls_identity_chains_and_matches_its_key() {
    let (tmp, ca) = new_ca(KeyAlgorithm::EcdsaP256);
    let listener_ca =
        pem_certs(&std::fs::read_to_string(tmp.path().join("ca/listener.pem")).unwrap()).remove(0);
    let ips = ["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()];
    let identity = ca
        .issue_server_tls(
            &["localhost".to_owned(), "acme.internal".to_owned()],
            &ips,
            NOW,
            Duration::days(30),
        )
        .unwrap();
    // Under the listener's intermediate, never the ACME issuing one (whose every certificate
    // the database records).
    assert_eq!(identity.cert_chain.len(), 2);
    assert_eq!(identity.cert_chain[1].as_ref(), listener_ca.as_slice());
    assert_ne!(listener_ca, intermediate(&ca));
    assert_eq!(
        pem_certs(&identity.cert_chain_pem),
        identity
            .cert_chain
            .iter()
            .map(|c| c.to_vec())
            .collect::<Vec<_>>()
    );
    let leaf = parse(identity.cert_chain[0].as_ref());
    assert_eq!(
        sans(&leaf),
        ["localhost", "acme.internal", "ip:127.0.0.1", "ip:::1"]
    );
    leaf.verify_signature(Some(parse(&listener_ca).public_key()))
        .unwrap();
    assert!(
        leaf.verify_signature(Some(parse(&intermediate(&ca)).public_key()))
            .is_err()
    );
    assert_eq!(
        leaf.issuer().as_raw(),
        parse(&listener_ca).subject().as_raw()
    );
    assert!(!is_ca(&leaf));
    assert_eq!(
        ca.leaves_signed(),
        0,
        "no subscriber certificate was signed"
    );
    assert_eq!(
        leaf.validity().not_after.to_datetime(),
        NOW + Duration::days(30)
    );
    assert_eq!(identity.not_after, NOW + Duration::days(30));
    assert!(leaf.validity().not_before.to_datetime() < NOW);
    let key = rcgen::KeyPair::try_from(identity.key.secret_pkcs8_der()).unwrap();
    assert_eq!(
        key.public_key_raw(),
        leaf.public_key().subject_public_key.data.as_ref()
    );
    assert_eq!(
        rcgen::KeyPair::from_pem(&identity.key_pem)
            .unwrap()
            .public_key_raw(),
        key.public_key_raw()
    );
    assert!(matches!(
        ca.issue_server_tls(&[], &[], NOW, Duration::days(1)),
        Err(Error::InvalidRequest(_))
    ));
}

#[test]
fn crl_lists_revoked_serials_and_verifies() {
    let (_tmp, ca) = new_ca(KeyAlgorithm::EcdsaP256);
    assert!(
        matches!(
            ca.crl(0, &[], 1, NOW, NOW + Duration::days(1)),
            Err(Error::InvalidRequest(_))
        ),
        "a CRL without a distribution point to name is refused"
    );
    let ca = ca.with_crl_distribution(issuance::CrlDistribution {
        base_url: "http://crl.example:14002/crl".to_owned(),
        shards: 4,
    });
    let revoked = [
        RevokedEntry {
            serial: Serial::from_hex("7f0102030405060708090a0b0c0d0e0f").unwrap(),
            revoked_at: NOW - Duration::hours(2),
            reason: RevocationReason::KeyCompromise,
        },
        RevokedEntry {
            serial: Serial::from_hex("01aa").unwrap(),
            revoked_at: NOW - Duration::hours(1),
            reason: RevocationReason::Unspecified,
        },
    ];
    let der = ca
        .crl(3, &revoked, 300, NOW, NOW + Duration::days(7))
        .unwrap();
    let (rest, crl) = CertificateRevocationList::from_der(&der).unwrap();
    assert!(rest.is_empty());
    let int_der = intermediate(&ca);
    let int = parse(&int_der);
    crl.verify_signature(int.public_key()).unwrap();
    assert_eq!(crl.issuer().as_raw(), int.subject().as_raw());
    assert_eq!(crl.crl_number().unwrap().to_string(), "300");
    assert_eq!(crl.last_update().to_datetime(), NOW);
    assert_eq!(
        crl.next_update().unwrap().to_datetime(),
        NOW + Duration::days(7)
    );
    let entries: Vec<_> = crl.iter_revoked_certificates().collect();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].raw_serial(), revoked[0].serial.as_bytes());
    assert_eq!(entries[1].raw_serial(), revoked[1].serial.as_bytes());
    assert_eq!(
        entries[0].revocation_date.to_datetime(),
        NOW - Duration::hours(2)
    );
    assert_eq!(entries[0].reason_code().map(|(_, r)| r.0), Some(1));
    assert!(entries[1].reason_code().is_none());
    let crl_aki = crl
        .extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::AuthorityKeyIdentifier(k) => {
                k.key_identifier.as_ref().map(|k| k.0.to_vec())
            }
            _ => None,
        });
    assert_eq!(crl_aki, ski(&int));
    // A critical issuing distribution point naming exactly shard 3's URL, user certificates only.
    let idp = crl
        .extensions()
        .iter()
        .find(|e| e.oid == x509_parser::oid_registry::OID_X509_EXT_ISSUER_DISTRIBUTION_POINT)
        .expect("an issuing distribution point");
    assert!(idp.critical, "RFC 5280 §5.2.5: the IDP is critical");
    let ParsedExtension::IssuingDistributionPoint(point) = idp.parsed_extension() else {
        panic!("unparsed IDP: {:?}", idp.parsed_extension());
    };
    let Some(x509_parser::extensions::DistributionPointName::FullName(names)) =
        &point.distribution_point
    else {
        panic!("no fullName: {point:?}");
    };
    assert_eq!(
        names,
        &vec![x509_parser::extensions::GeneralName::URI(
            "http://crl.example:14002/crl/3.crl"
        )]
    );
    assert!(point.only_contains_user_certs);
    assert!(!point.only_contains_ca_certs);

    let empty = ca.crl(0, &[], 1, NOW, NOW + Duration::days(1)).unwrap();
    let (_, empty) = CertificateRevocationList::from_der(&empty).unwrap();
    assert_eq!(empty.iter_revoked_certificates().count(), 0);
    assert!(matches!(
        ca.crl(0, &[], 2, NOW, NOW),
        Err(Error::InvalidRequest(_))
    ));
}

#[test]
fn leaves_carry_their_profiles_usages() {
    let (_tmp, ca) = new_ca(KeyAlgorithm::EcdsaP256);
    let profiles = issuance::Profiles::shipped();
    let order = ids(&["a.example.com"]);
    for (alg, rsa) in [
        (&rcgen::PKCS_ECDSA_P256_SHA256, false),
        (&rcgen::PKCS_RSA_SHA256, true),
    ] {
        let checked = check_csr(&csr(alg, &["a.example.com"]), &order).unwrap();
        let issued = ca
            .sign_now(
                &checked,
                &order,
                profiles.default_profile(),
                NOW,
                NOW + Duration::days(1),
            )
            .unwrap();
        let leaf = parse(&issued.der);
        let eku = leaf.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.server_auth && !eku.client_auth && eku.other.is_empty());
        let ku = leaf.key_usage().unwrap().unwrap().value;
        // The profile grants keyEncipherment; only RSA keys can use it.
        assert!(ku.digital_signature());
        assert_eq!(ku.key_encipherment(), rsa);
    }
}

#[test]
fn a_key_type_outside_the_profile_is_a_bad_csr() {
    let (_tmp, ca) = new_ca(KeyAlgorithm::EcdsaP256);
    let mut definitions = std::collections::BTreeMap::new();
    definitions.insert(
        "p384".to_owned(),
        issuance::profiles::ProfileDefinition {
            key_types: vec![KeyAlgorithm::EcdsaP384],
            ..Default::default()
        },
    );
    let profiles =
        issuance::Profiles::new("p384", &definitions, Duration::days(90), Duration::days(90))
            .unwrap();
    let profile = profiles.default_profile();
    let order = ids(&["a.example.com"]);
    let p256 = check_csr(
        &csr(&rcgen::PKCS_ECDSA_P256_SHA256, &["a.example.com"]),
        &order,
    )
    .unwrap();
    assert_eq!(p256.key_algorithm(), KeyAlgorithm::EcdsaP256);
    let err = ca
        .sign_now(&p256, &order, profile, NOW, NOW + Duration::days(1))
        .unwrap_err();
    assert!(
        matches!(&err, Error::BadCsr(m) if m.contains("ecdsa-p256")),
        "{err}"
    );
    let p384 = check_csr(
        &csr(&rcgen::PKCS_ECDSA_P384_SHA384, &["a.example.com"]),
        &order,
    )
    .unwrap();
    profile.check_key(&p384).unwrap();
    ca.sign_now(&p384, &order, profile, NOW, NOW + Duration::days(1))
        .unwrap();
}

#[test]
fn leaves_name_the_crl_of_their_shard() {
    let (_tmp, ca) = new_ca(KeyAlgorithm::EcdsaP256);
    assert!(ca.may_sign_crls(), "a generated intermediate signs CRLs");
    let profiles = issuance::Profiles::shipped();
    let order = ids(&["crl.example.com"]);
    let checked = check_csr(
        &csr(&rcgen::PKCS_ECDSA_P256_SHA256, &["crl.example.com"]),
        &order,
    )
    .unwrap();
    let issue = |ca: &Ca| {
        ca.sign_now(
            &checked,
            &order,
            profiles.default_profile(),
            NOW,
            NOW + Duration::days(1),
        )
        .unwrap()
    };
    let crl_urls = |der: &[u8]| -> Vec<String> {
        parse(der)
            .extensions()
            .iter()
            .filter_map(|e| match e.parsed_extension() {
                ParsedExtension::CRLDistributionPoints(points) => Some(points),
                _ => None,
            })
            .flat_map(|points| points.points.iter())
            .filter_map(|p| match &p.distribution_point {
                Some(x509_parser::extensions::DistributionPointName::FullName(names)) => {
                    Some(names)
                }
                _ => None,
            })
            .flatten()
            .filter_map(|n| match n {
                x509_parser::extensions::GeneralName::URI(uri) => Some((*uri).to_owned()),
                _ => None,
            })
            .collect()
    };

    let without = issue(&ca);
    assert_eq!(without.crl_shard, None);
    assert!(
        crl_urls(&without.der).is_empty(),
        "no CRLs, no distribution point"
    );

    let dist = issuance::CrlDistribution {
        base_url: "http://ca.example:14002/crl".to_owned(),
        shards: 16,
    };
    let ca = ca.with_crl_distribution(dist.clone());
    for _ in 0..4 {
        let issued = issue(&ca);
        let shard = issued.crl_shard.expect("a shard");
        assert_eq!(shard, dist.shard_of(&issued.serial));
        assert_eq!(
            crl_urls(&issued.der),
            vec![format!("http://ca.example:14002/crl/{shard}.crl")]
        );
    }
}

#[test]
fn a_leaf_is_signed_exactly_as_prepared_and_counted() {
    let (_tmp, ca) = new_ca(KeyAlgorithm::EcdsaP256);
    let order = ids(&["a.example.com"]);
    let checked = check_csr(
        &csr(&rcgen::PKCS_ECDSA_P256_SHA256, &["a.example.com"]),
        &order,
    )
    .unwrap();
    let profile = server_client();
    // Sub-second times are cut to what the certificate can say.
    let start = NOW + Duration::milliseconds(700);
    let intent = ca
        .prepare(&checked, &order, &profile, start, start + Duration::days(7))
        .unwrap();
    assert_eq!(intent.not_before, NOW);
    assert_eq!(intent.not_after, NOW + Duration::days(7));
    assert_eq!(ca.leaves_signed(), 0, "preparing signs nothing");

    // Signed twice from one intent (a job resumed after a crash): the same certificate but for
    // the signature.
    let first = ca.issue(&checked, &order, &profile, &intent).unwrap();
    let again = ca.issue(&checked, &order, &profile, &intent).unwrap();
    assert_eq!(ca.leaves_signed(), 2);
    for issued in [&first, &again] {
        assert_eq!(issued.serial, intent.serial);
        let leaf = parse(&issued.der);
        assert_eq!(leaf.raw_serial(), intent.serial.as_bytes());
        assert_eq!(leaf.validity().not_before.to_datetime(), intent.not_before);
        assert_eq!(leaf.validity().not_after.to_datetime(), intent.not_after);
    }
    assert_eq!(
        parse(&first.der).tbs_certificate.as_ref(),
        parse(&again.der).tbs_certificate.as_ref(),
        "one to-be-signed certificate"
    );

    // What prepare refuses, issue refuses too, and counts nothing.
    let other = ids(&["b.example.com"]);
    assert!(matches!(
        ca.issue(&checked, &other, &profile, &intent),
        Err(Error::InvalidRequest(_))
    ));
    assert!(matches!(
        ca.prepare(&checked, &other, &profile, NOW, NOW + Duration::days(1)),
        Err(Error::InvalidRequest(_))
    ));
    assert_eq!(ca.leaves_signed(), 2);
}
