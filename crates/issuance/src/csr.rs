//! CSR policy (RFC 8555 §7.4): which CSRs Certeasy will sign for an order.
//!
//! Only the public key and the requested names are ever taken from a CSR. Everything else the
//! certificate contains comes from policy, so a CSR that asks for `cA=true`, extra key usages or
//! odd extensions gets none of them.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::net::Ipv4Addr;
use std::net::Ipv6Addr;

use acme_core::identifier::Identifier;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::cri_attributes::ParsedCriAttribute;
use x509_parser::extensions::GeneralName;
use x509_parser::extensions::ParsedExtension;
use x509_parser::oid_registry::OID_EC_P256;
use x509_parser::oid_registry::OID_KEY_TYPE_EC_PUBLIC_KEY;
use x509_parser::oid_registry::OID_NIST_EC_P384;
use x509_parser::oid_registry::OID_PKCS1_RSAENCRYPTION;
use x509_parser::oid_registry::OID_PKCS1_SHA1WITHRSA;
use x509_parser::oid_registry::OID_SHA1_WITH_RSA;
use x509_parser::oid_registry::OID_X509_EXT_SUBJECT_ALT_NAME;
use x509_parser::prelude::FromDer;
use x509_parser::public_key::PublicKey;
use x509_parser::x509::SubjectPublicKeyInfo;

use crate::error::Error;
use crate::key_algorithm::KeyAlgorithm;

/// The RSA modulus sizes accepted for subscriber keys, with their profile names.
const RSA_SIZES: [(usize, KeyAlgorithm); 3] = [
    (2048, KeyAlgorithm::Rsa2048),
    (3072, KeyAlgorithm::Rsa3072),
    (4096, KeyAlgorithm::Rsa4096),
];

/// A CSR that passed every check for a given order; only its public key is kept.
#[derive(Debug, Clone)]
pub struct CheckedCsr {
    spki_der: Vec<u8>,
    pub(crate) key: rcgen::SubjectPublicKeyInfo,
    /// Type and size of the key: profiles choose by it, and RSA keys get keyEncipherment.
    pub(crate) key_algorithm: KeyAlgorithm,
    /// The names the CSR was checked to request, so issuing for another set is caught.
    pub(crate) names: BTreeSet<Identifier>,
}

impl CheckedCsr {
    /// DER of the subject public key info, as it will appear in the certificate.
    pub fn spki_der(&self) -> &[u8] {
        &self.spki_der
    }

    /// Type and size of the CSR's key, under the names profiles list them by.
    pub fn key_algorithm(&self) -> KeyAlgorithm {
        self.key_algorithm
    }
}

/// Parses `der` and checks it against the order's `identifiers` (RFC 8555 §7.4).
///
/// The signature must verify with the CSR's own key; the key must be RSA 2048/3072/4096 or
/// ECDSA P-256/P-384, with an RSA exponent that `acme_jose::goodkey` accepts (odd, at least
/// 65537; the modulus checks of goodkey and the operator's blocklist are `ra`'s, at finalize)
/// (otherwise [`Error::BadCsr`]:
/// RFC 8555 keeps `badPublicKey` for JWS keys, and a CSR's key is part of the CSR); the SAN dNSName and iPAddress entries
/// plus the subject common name (which must be one of them) must be exactly the identifiers:
/// both missing and extra names are refused with [`Error::BadCsr`], naming them.
pub fn check_csr(der: &[u8], identifiers: &[Identifier]) -> Result<CheckedCsr, Error> {
    let (rest, csr) = X509CertificationRequest::from_der(der)
        .map_err(|e| Error::BadCsr(format!("the CSR is not a valid DER PKCS#10 request: {e}")))?;
    if !rest.is_empty() {
        return Err(Error::BadCsr(
            "the CSR has trailing data after the request".to_owned(),
        ));
    }
    let spki = &csr.certification_request_info.subject_pki;
    let key_algorithm = check_public_key(spki)?;
    let sig_alg = &csr.signature_algorithm.algorithm;
    if *sig_alg == OID_PKCS1_SHA1WITHRSA || *sig_alg == OID_SHA1_WITH_RSA {
        return Err(Error::BadCsr(
            "the CSR is signed with SHA-1, which is not accepted".to_owned(),
        ));
    }
    csr.verify_signature().map_err(|e| {
        Error::BadCsr(format!(
            "the CSR signature does not verify with the CSR's public key: {e}"
        ))
    })?;
    let requested = requested_names(&csr)?;
    compare_names(&requested, identifiers)?;
    let key = rcgen::SubjectPublicKeyInfo::from_der(spki.raw)
        .map_err(|e| Error::BadCsr(format!("the CSR's public key cannot be certified: {e}")))?;
    Ok(CheckedCsr {
        spki_der: spki.raw.to_vec(),
        key,
        key_algorithm,
        names: requested,
    })
}

fn check_public_key(spki: &SubjectPublicKeyInfo<'_>) -> Result<KeyAlgorithm, Error> {
    let alg = &spki.algorithm.algorithm;
    if *alg == OID_PKCS1_RSAENCRYPTION {
        let Ok(PublicKey::RSA(rsa)) = spki.parsed() else {
            return Err(Error::BadCsr(
                "the RSA public key cannot be parsed".to_owned(),
            ));
        };
        let bits = bit_length(rsa.modulus);
        let Some(algorithm) = RSA_SIZES
            .iter()
            .find_map(|(size, alg)| (*size == bits).then_some(*alg))
        else {
            return Err(Error::BadCsr(format!(
                "RSA keys must be 2048, 3072 or 4096 bits; this one has {bits}"
            )));
        };
        // The exponent rule is goodkey's, the one account keys are held to as well; it runs
        // here, before the signature is verified, so the refusal names the exponent.
        if let Err(weakness) = acme_jose::goodkey::check_rsa_exponent(rsa.exponent) {
            return Err(Error::BadCsr(format!("the CSR's public key: {weakness}")));
        }
        return Ok(algorithm);
    }
    if *alg == OID_KEY_TYPE_EC_PUBLIC_KEY {
        let curve = spki
            .algorithm
            .parameters
            .as_ref()
            .and_then(|p| p.as_oid().ok());
        let point = spki.subject_public_key.data.as_ref();
        return match curve {
            Some(c) if c == OID_EC_P256 || c == OID_NIST_EC_P384 => {
                // Uncompressed points only: RFC 5480 makes compressed ones optional for clients.
                let coordinate = if c == OID_EC_P256 { 32 } else { 48 };
                if point.len() == 1 + 2 * coordinate && point[0] == 0x04 {
                    Ok(if c == OID_EC_P256 {
                        KeyAlgorithm::EcdsaP256
                    } else {
                        KeyAlgorithm::EcdsaP384
                    })
                } else {
                    Err(Error::BadCsr(
                        "the EC public key must be an uncompressed point".to_owned(),
                    ))
                }
            }
            Some(c) => Err(Error::BadCsr(format!(
                "EC keys must be on P-256 or P-384; curve {c} is not accepted"
            ))),
            None => Err(Error::BadCsr(
                "the EC key does not name its curve".to_owned(),
            )),
        };
    }
    Err(Error::BadCsr(format!(
        "key algorithm {alg} is not accepted; use RSA (2048, 3072, 4096 bits) or ECDSA (P-256, P-384)"
    )))
}

/// Number of significant bits of a big-endian unsigned integer.
fn bit_length(bytes: &[u8]) -> usize {
    let mut digits = bytes.iter().skip_while(|b| **b == 0);
    match digits.next() {
        Some(first) => (8 - first.leading_zeros() as usize) + 8 * digits.count(),
        None => 0,
    }
}

fn requested_names(csr: &X509CertificationRequest<'_>) -> Result<BTreeSet<Identifier>, Error> {
    let mut sans = BTreeSet::new();
    for attr in csr.certification_request_info.iter_attributes() {
        let ParsedCriAttribute::ExtensionRequest(request) = attr.parsed_attribute() else {
            continue;
        };
        for ext in &request.extensions {
            if ext.oid != OID_X509_EXT_SUBJECT_ALT_NAME {
                continue;
            }
            let ParsedExtension::SubjectAlternativeName(san) = ext.parsed_extension() else {
                return Err(Error::BadCsr(
                    "the CSR's subjectAltName extension cannot be parsed".to_owned(),
                ));
            };
            for name in &san.general_names {
                sans.insert(general_name(name)?);
            }
        }
    }
    let mut names = sans.clone();
    for cn in csr.certification_request_info.subject.iter_common_name() {
        let value = cn
            .as_str()
            .map_err(|_| Error::BadCsr("the CSR's common name is not a string".to_owned()))?;
        let id = match value.parse::<IpAddr>() {
            Ok(ip) => Identifier::from_ip(ip),
            Err(_) => Identifier::dns(value)
                .map_err(|e| Error::BadCsr(format!("the CSR's common name is invalid: {e}")))?,
        };
        if !sans.contains(&id) {
            return Err(Error::BadCsr(format!(
                "the CSR's common name {value:?} is not among its subjectAltName entries"
            )));
        }
        names.insert(id);
    }
    Ok(names)
}

fn general_name(name: &GeneralName<'_>) -> Result<Identifier, Error> {
    match name {
        GeneralName::DNSName(dns) => Identifier::dns(dns)
            .map_err(|e| Error::BadCsr(format!("the CSR names an invalid DNS name: {e}"))),
        GeneralName::IPAddress(bytes) => match bytes.len() {
            4 => {
                let mut octets = [0u8; 4];
                octets.copy_from_slice(bytes);
                Ok(Identifier::from_ip(IpAddr::V4(Ipv4Addr::from(octets))))
            }
            16 => {
                let mut octets = [0u8; 16];
                octets.copy_from_slice(bytes);
                Ok(Identifier::from_ip(IpAddr::V6(Ipv6Addr::from(octets))))
            }
            n => Err(Error::BadCsr(format!(
                "the CSR has an iPAddress entry of {n} bytes"
            ))),
        },
        other => Err(Error::BadCsr(format!(
            "the CSR asks for a subjectAltName of another kind ({}); only DNS names and IP addresses are certified",
            general_name_kind(other)
        ))),
    }
}

fn general_name_kind(name: &GeneralName<'_>) -> &'static str {
    match name {
        GeneralName::OtherName(..) => "otherName",
        GeneralName::RFC822Name(_) => "rfc822Name",
        GeneralName::DNSName(_) => "dNSName",
        GeneralName::X400Address(_) => "x400Address",
        GeneralName::DirectoryName(_) => "directoryName",
        GeneralName::EDIPartyName(_) => "ediPartyName",
        GeneralName::URI(_) => "uniformResourceIdentifier",
        GeneralName::IPAddress(_) => "iPAddress",
        GeneralName::RegisteredID(_) => "registeredID",
        GeneralName::Invalid(..) => "invalid",
    }
}

fn compare_names(
    requested: &BTreeSet<Identifier>,
    identifiers: &[Identifier],
) -> Result<(), Error> {
    let ordered: BTreeSet<&Identifier> = identifiers.iter().collect();
    let missing: Vec<String> = ordered
        .iter()
        .filter(|id| !requested.contains(id))
        .map(|id| id.to_string())
        .collect();
    let extra: Vec<String> = requested
        .iter()
        .filter(|id| !ordered.contains(id))
        .map(ToString::to_string)
        .collect();
    let mut problems = Vec::new();
    if !missing.is_empty() {
        problems.push(format!(
            "the CSR is missing identifiers of the order: {}",
            missing.join(", ")
        ));
    }
    if !extra.is_empty() {
        problems.push(format!(
            "the CSR names identifiers that are not in the order: {}",
            extra.join(", ")
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Error::BadCsr(problems.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::bit_length;
    use super::check_csr;
    use crate::error::Error;

    #[test]
    fn bit_length_ignores_leading_zeros() {
        assert_eq!(bit_length(&[]), 0);
        assert_eq!(bit_length(&[0, 0]), 0);
        assert_eq!(bit_length(&[0, 0x80, 0]), 16);
        assert_eq!(bit_length(&[0x01, 0xff]), 9);
        let mut modulus = vec![0u8];
        modulus.extend(std::iter::repeat_n(0xffu8, 256));
        assert_eq!(bit_length(&modulus), 2048);
    }

    #[test]
    fn garbage_is_a_bad_csr() {
        assert!(matches!(check_csr(b"not der", &[]), Err(Error::BadCsr(_))));
    }
}
