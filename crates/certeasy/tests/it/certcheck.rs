//! Checks every issued certificate the same way: it chains to the CA root and holds exactly the
//! requested names, and it is not a CA.

use std::collections::BTreeSet;
use std::net::IpAddr;

use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::pem::Pem;
use x509_parser::prelude::FromDer;

/// DER blocks of a PEM bundle.
pub fn pem_ders(pem: &str) -> Vec<Vec<u8>> {
    Pem::iter_from_buffer(pem.as_bytes())
        .map(|p| p.unwrap().contents)
        .collect()
}

/// The common name of the certificate's issuer (empty without one): how the tests tell which
/// intermediate or root signed, as clients matching `--preferred-chain` do.
pub fn issuer_cn(der: &[u8]) -> String {
    let (_, cert) = X509Certificate::from_der(der).unwrap();
    cert.issuer()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// Asserts `chain_pem` (leaf first) chains to `root_pem` and the leaf names are exactly `names`.
/// Returns the leaf DER.
pub fn assert_chain(chain_pem: &str, root_pem: &str, names: &[&str]) -> Vec<u8> {
    let chain = pem_ders(chain_pem);
    assert!(
        chain.len() >= 2,
        "the chain must hold the leaf and the intermediate, got {}",
        chain.len()
    );
    let roots = pem_ders(root_pem);
    assert_eq!(roots.len(), 1);
    let (_, root) = X509Certificate::from_der(&roots[0]).unwrap();
    root.verify_signature(None).expect("root is self-signed");
    let parsed: Vec<X509Certificate<'_>> = chain
        .iter()
        .map(|d| X509Certificate::from_der(d).unwrap().1)
        .collect();
    for pair in parsed.windows(2) {
        assert_eq!(
            pair[0].issuer(),
            pair[1].subject(),
            "issuer/subject chain broken"
        );
        pair[0]
            .verify_signature(Some(pair[1].public_key()))
            .expect("signature in chain verifies");
    }
    let top = parsed.last().unwrap();
    assert_eq!(
        top.issuer(),
        root.subject(),
        "the chain must end under the root"
    );
    top.verify_signature(Some(root.public_key()))
        .expect("top of chain is signed by the root");

    let leaf = &parsed[0];
    let bc = leaf.basic_constraints().unwrap();
    assert!(bc.is_none_or(|b| !b.value.ca), "leaf must not be a CA");
    let mut found = BTreeSet::new();
    let san = leaf
        .subject_alternative_name()
        .unwrap()
        .expect("leaf has SANs");
    for gn in &san.value.general_names {
        match gn {
            GeneralName::DNSName(d) => {
                found.insert(d.to_string());
            }
            GeneralName::IPAddress(bytes) => {
                let ip = match bytes.len() {
                    4 => IpAddr::from(<[u8; 4]>::try_from(*bytes).unwrap()),
                    16 => IpAddr::from(<[u8; 16]>::try_from(*bytes).unwrap()),
                    n => panic!("bad IP SAN length {n}"),
                };
                found.insert(ip.to_string());
            }
            other => panic!("unexpected SAN {other:?}"),
        }
    }
    let expected: BTreeSet<String> = names.iter().map(|n| n.to_ascii_lowercase()).collect();
    assert_eq!(
        found, expected,
        "the certificate must hold exactly the requested names"
    );
    chain[0].clone()
}
