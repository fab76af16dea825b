//! Helpers shared by the issuance integration tests: CSRs and CAs made with rcgen.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use acme_core::identifier::Identifier;
use issuance::Ca;
use issuance::CaSettings;
use issuance::KeyAlgorithm;
use rcgen::CertificateParams;
use rcgen::DistinguishedName;
use rcgen::DnType;
use rcgen::KeyPair;
use rcgen::RsaKeySize;
use rcgen::SignatureAlgorithm;
use tempfile::TempDir;
use time::OffsetDateTime;
use time::macros::datetime;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::pem::Pem;

/// The fixed "now" of every test.
pub const NOW: OffsetDateTime = datetime!(2026-11-22 12:00:00 UTC);

/// Identifiers from strings; `ip:` marks an IP identifier.
pub fn ids(names: &[&str]) -> Vec<Identifier> {
    names
        .iter()
        .map(|n| match n.strip_prefix("ip:") {
            Some(ip) => Identifier::ip(ip).unwrap(),
            None => Identifier::dns(n).unwrap(),
        })
        .collect()
}

/// A subscriber key of the given kind.
pub fn subject_key(alg: &'static SignatureAlgorithm) -> KeyPair {
    if alg == &rcgen::PKCS_RSA_SHA256 {
        KeyPair::generate_rsa_for(alg, RsaKeySize::_2048).unwrap()
    } else {
        KeyPair::generate_for(alg).unwrap()
    }
}

/// CSR params with the given SANs (`ip:` prefix for addresses) and CN.
pub fn csr_params(sans: &[&str], cn: Option<&str>) -> CertificateParams {
    let plain: Vec<String> = sans
        .iter()
        .map(|s| s.strip_prefix("ip:").unwrap_or(s).to_owned())
        .collect();
    let mut params = CertificateParams::new(plain).unwrap();
    let mut dn = DistinguishedName::new();
    if let Some(cn) = cn {
        dn.push(DnType::CommonName, cn);
    }
    params.distinguished_name = dn;
    params
}

/// DER CSR signed by `key`.
pub fn csr_der(params: &CertificateParams, key: &KeyPair) -> Vec<u8> {
    params.serialize_request(key).unwrap().der().to_vec()
}

/// A plain CSR for `sans` with CN = first SAN and a fresh key of `alg`.
pub fn csr(alg: &'static SignatureAlgorithm, sans: &[&str]) -> Vec<u8> {
    let cn = sans.first().map(|s| s.strip_prefix("ip:").unwrap_or(s));
    csr_der(&csr_params(sans, cn), &subject_key(alg))
}

/// Settings for a generated CA in a fresh temporary directory.
pub fn settings(alg: KeyAlgorithm) -> (TempDir, CaSettings) {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = CaSettings::new(dir.path().join("ca"));
    settings.key_algorithm = alg;
    (dir, settings)
}

/// A freshly generated CA of `alg`.
pub fn new_ca(alg: KeyAlgorithm) -> (TempDir, Ca) {
    let (dir, settings) = settings(alg);
    let ca = Ca::load_or_create(&settings, NOW).unwrap();
    (dir, ca)
}

/// DER of every certificate in a PEM text.
pub fn pem_certs(text: &str) -> Vec<Vec<u8>> {
    Pem::iter_from_buffer(text.as_bytes())
        .map(|p| {
            let p = p.unwrap();
            assert_eq!(p.label, "CERTIFICATE");
            p.contents
        })
        .collect()
}

pub fn parse(der: &[u8]) -> X509Certificate<'_> {
    let (rest, cert) = x509_parser::parse_x509_certificate(der).unwrap();
    assert!(rest.is_empty());
    cert
}

/// (DNS names, IP addresses as strings) of a certificate's SAN.
pub fn sans(cert: &X509Certificate<'_>) -> Vec<String> {
    let san = cert.subject_alternative_name().unwrap().unwrap();
    san.value
        .general_names
        .iter()
        .map(|n| match n {
            GeneralName::DNSName(d) => (*d).to_owned(),
            GeneralName::IPAddress(b) if b.len() == 4 => {
                format!(
                    "ip:{}",
                    std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*b).unwrap())
                )
            }
            GeneralName::IPAddress(b) => {
                format!(
                    "ip:{}",
                    std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*b).unwrap())
                )
            }
            other => panic!("unexpected SAN {other:?}"),
        })
        .collect()
}

pub fn is_ca(cert: &X509Certificate<'_>) -> bool {
    cert.basic_constraints()
        .unwrap()
        .is_some_and(|bc| bc.value.ca)
}

/// An RSA "key" that only has a public half: rcgen builds the CSR around it and the signature is
/// a dummy. Enough to exercise the key checks, which run before the signature is verified, with
/// keys no sane library will generate (1024 bits, exponent 3).
struct PublicOnlyRsa(Vec<u8>);

impl rcgen::PublicKeyData for PublicOnlyRsa {
    fn der_bytes(&self) -> &[u8] {
        &self.0
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        &rcgen::PKCS_RSA_SHA256
    }
}

impl rcgen::SigningKey for PublicOnlyRsa {
    fn sign(&self, _msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        Ok(vec![0x5a; 256])
    }
}

/// DER of an INTEGER holding the big-endian unsigned `bytes`.
fn der_uint(bytes: &[u8]) -> Vec<u8> {
    let mut content = bytes.to_vec();
    if content.first().is_some_and(|b| b & 0x80 != 0) {
        content.insert(0, 0);
    }
    let mut out = vec![0x02];
    out.extend(der_len(content.len()));
    out.extend(content);
    out
}

fn der_len(len: usize) -> Vec<u8> {
    match len {
        0..0x80 => vec![u8::try_from(len).unwrap()],
        0x80..0x100 => vec![0x81, u8::try_from(len).unwrap()],
        _ => vec![0x82, u8::try_from(len >> 8).unwrap(), (len & 0xff) as u8],
    }
}

/// A CSR for `name` whose RSA key has a `bits`-bit modulus and the given public exponent, with a
/// signature that does not verify.
pub fn rsa_csr_with_fake_signature(bits: usize, exponent: u64, name: &str) -> Vec<u8> {
    let mut modulus = vec![0xc3_u8; bits / 8];
    modulus[0] = 0xd5;
    let e = exponent.to_be_bytes();
    let e = &e[e.iter().position(|b| *b != 0).unwrap_or(7)..];
    let mut body = der_uint(&modulus);
    body.extend(der_uint(e));
    let mut rsa_public_key = vec![0x30];
    rsa_public_key.extend(der_len(body.len()));
    rsa_public_key.extend(body);
    let params = csr_params(&[name], Some(name));
    params
        .serialize_request(&PublicOnlyRsa(rsa_public_key))
        .unwrap()
        .der()
        .to_vec()
}

/// The shipped profile whose leaves the older tests expect: serverAuth and clientAuth.
pub fn server_client() -> issuance::Profile {
    issuance::Profiles::shipped()
        .select(Some("tls-server-client"))
        .unwrap()
        .clone()
}

/// Prepares and signs in one go, as the tests of what a certificate holds need (the server
/// records the intent between the two).
pub trait SignNow {
    fn sign_now(
        &self,
        csr: &issuance::CheckedCsr,
        identifiers: &[Identifier],
        profile: &issuance::Profile,
        not_before: OffsetDateTime,
        not_after: OffsetDateTime,
    ) -> Result<issuance::IssuedCertificate, issuance::Error>;
}

impl SignNow for Ca {
    fn sign_now(
        &self,
        csr: &issuance::CheckedCsr,
        identifiers: &[Identifier],
        profile: &issuance::Profile,
        not_before: OffsetDateTime,
        not_after: OffsetDateTime,
    ) -> Result<issuance::IssuedCertificate, issuance::Error> {
        let intent = self.prepare(csr, identifiers, profile, not_before, not_after)?;
        self.issue(csr, identifiers, profile, &intent)
    }
}

/// A leaf for `name` alone (the CSR of a fresh P-256 key, checked) signed by `ca` under the
/// server profile for `not_before..not_after`: the plain issuance a test needs around what it
/// really looks at.
pub fn issue_for(
    ca: &Ca,
    name: &str,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
) -> issuance::IssuedCertificate {
    let names = ids(&[name]);
    let checked =
        issuance::check_csr(&csr(&rcgen::PKCS_ECDSA_P256_SHA256, &[name]), &names).unwrap();
    ca.sign_now(&checked, &names, &server_client(), not_before, not_after)
        .unwrap()
}
