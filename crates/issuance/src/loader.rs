//! Loading an issuing CA (certificate, key, chain) and proving it can sign before it is used.
//!
//! Both an operator-supplied CA and a generated one go through here, so a damaged CA directory
//! is caught at start-up with an error that names the file, not at the first finalization.

use std::path::Path;
use std::path::PathBuf;

use rcgen::IsCa;
use rcgen::Issuer;
use rcgen::KeyPair;
use rcgen::PublicKeyData as _;
use rustls_pki_types::CertificateDer;
use time::Duration;
use time::OffsetDateTime;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::ParsedExtension;

use crate::ca_key::CaKey;
use crate::error::Error;
use crate::files;
use crate::pem;
use crate::pkcs11::TokenKey;
use crate::serial;
use crate::settings::KeySource;

/// A validated issuing CA, ready to sign.
pub(crate) struct LoadedCa {
    pub(crate) issuer: Issuer<'static, CaKey>,
    pub(crate) issuing_ski: Option<Vec<u8>>,
    pub(crate) issuing_not_after: OffsetDateTime,
    /// The issuing certificate and the CA certificates above it, without a self-signed root.
    pub(crate) chain_der: Vec<Vec<u8>>,
    /// The top of the chain: what clients trust.
    pub(crate) root_der: Vec<u8>,
    pub(crate) root_path: Option<PathBuf>,
    pub(crate) key_is_rsa: bool,
    /// The issuing certificate allows CRL signing: no keyUsage, or one with cRLSign.
    pub(crate) may_sign_crls: bool,
}

/// One certificate with the file it came from, for error messages.
struct Sourced<'a> {
    path: &'a Path,
    certs_in_file: usize,
    der: Vec<u8>,
}

pub(crate) fn load(
    certificate: &Path,
    private_key: &KeySource,
    chain: Option<&Path>,
    now: OffsetDateTime,
) -> Result<LoadedCa, Error> {
    let mut sourced = read_certs(certificate)?;
    if let Some(chain) = chain {
        sourced.extend(read_certs(chain)?);
    }
    let mut parsed = Vec::with_capacity(sourced.len());
    for s in &sourced {
        let (_, cert) = x509_parser::parse_x509_certificate(&s.der).map_err(|e| {
            Error::InvalidCa(format!(
                "{}: a certificate cannot be parsed: {e}",
                s.path.display()
            ))
        })?;
        check_is_ca(&cert, s.path)?;
        parsed.push(cert);
    }
    for (i, pair) in parsed.windows(2).enumerate() {
        if pair[0]
            .verify_signature(Some(pair[1].public_key()))
            .is_err()
        {
            return Err(Error::InvalidCa(format!(
                "{}: certificate {:?} is not signed by the next certificate of the chain, {:?} (from {}); list the chain from the issuing CA up to the root",
                sourced[i].path.display(),
                pair[0].subject().to_string(),
                pair[1].subject().to_string(),
                sourced[i + 1].path.display(),
            )));
        }
    }
    let issuing = &parsed[0];
    let issuing_not_after = issuing.validity().not_after.to_datetime();
    if issuing_not_after <= now {
        return Err(Error::InvalidCa(format!(
            "{}: the issuing CA certificate expired at {issuing_not_after}",
            certificate.display()
        )));
    }

    let key = open_key(private_key)?;
    if key.der_bytes() != issuing.public_key().subject_public_key.data.as_ref() {
        return Err(Error::InvalidCa(format!(
            "{}: this private key does not belong to the certificate in {}",
            describe(private_key),
            certificate.display()
        )));
    }
    let key_is_rsa = issuing.public_key().algorithm.algorithm
        == x509_parser::oid_registry::OID_PKCS1_RSAENCRYPTION;
    let issuer = Issuer::from_ca_cert_der(&CertificateDer::from(sourced[0].der.as_slice()), key)
        .map_err(|e| {
            Error::InvalidCa(format!(
                "{}: this certificate cannot be used to issue: {e}",
                certificate.display()
            ))
        })?;
    probe(&issuer, &sourced[0].der, issuing, certificate, now)?;

    let may_sign_crls = match issuing.key_usage() {
        Ok(Some(ku)) => ku.value.crl_sign(),
        _ => true,
    };
    let issuing_ski = issuing
        .iter_extensions()
        .find_map(|ext| match ext.parsed_extension() {
            ParsedExtension::SubjectKeyIdentifier(ski) => Some(ski.0.to_vec()),
            _ => None,
        });
    let top = parsed.len() - 1;
    let top_self_signed = parsed[top].subject().as_raw() == parsed[top].issuer().as_raw()
        && parsed[top].verify_signature(None).is_ok();
    let chain_end = if top_self_signed { top } else { top + 1 };
    let chain_der = sourced[..chain_end].iter().map(|s| s.der.clone()).collect();
    let root_path = (sourced[top].certs_in_file == 1).then(|| sourced[top].path.to_path_buf());
    if !top_self_signed {
        tracing::warn!(
            subject = %parsed[top].subject(),
            "the top of the CA chain is not self-signed; clients are given it as the certificate to trust"
        );
    }
    Ok(LoadedCa {
        issuer,
        issuing_ski,
        issuing_not_after,
        chain_der,
        root_der: sourced[top].der.clone(),
        root_path,
        key_is_rsa,
        may_sign_crls,
    })
}

fn read_certs(path: &Path) -> Result<Vec<Sourced<'_>>, Error> {
    let text = files::read(path)?;
    let ders = pem::decode_certificates(&text, path)?;
    let certs_in_file = ders.len();
    Ok(ders
        .into_iter()
        .map(|der| Sourced {
            path,
            certs_in_file,
            der,
        })
        .collect())
}

/// The signer of `source`: the key read from its file, or a handle to it on its token.
pub(crate) fn open_key(source: &KeySource) -> Result<CaKey, Error> {
    match source {
        KeySource::File(path) => load_key(path).map(CaKey::File),
        KeySource::Pkcs11(key) => TokenKey::open(key).map(CaKey::Token),
    }
}

/// What names the key in an error message (never a PIN).
fn describe(source: &KeySource) -> String {
    match source {
        KeySource::File(path) => path.display().to_string(),
        KeySource::Pkcs11(key) => format!(
            "the key labelled {:?} on the PKCS#11 token {}",
            key.key_label,
            match &key.token {
                crate::settings::TokenSelector::Label(label) => format!("labelled {label:?}"),
                crate::settings::TokenSelector::Slot(slot) => format!("in slot {slot}"),
            }
        ),
    }
}

pub(crate) fn load_key(path: &Path) -> Result<KeyPair, Error> {
    let text = files::read_to_string(path)?;
    files::warn_if_exposed(path);
    KeyPair::from_pem(&text).map_err(|e| {
        Error::InvalidCa(format!(
            "{}: not a usable private key (expected an unencrypted PKCS#8 PEM EC or RSA key): {e}",
            path.display()
        ))
    })
}

pub(crate) fn check_is_ca(cert: &X509Certificate<'_>, path: &Path) -> Result<(), Error> {
    let subject = cert.subject().to_string();
    let is_ca = cert
        .basic_constraints()
        .ok()
        .flatten()
        .is_some_and(|bc| bc.value.ca);
    if !is_ca {
        return Err(Error::InvalidCa(format!(
            "{}: certificate {subject:?} is not a CA certificate (basicConstraints cA is not true)",
            path.display()
        )));
    }
    if let Ok(Some(ku)) = cert.key_usage()
        && !ku.value.key_cert_sign()
    {
        return Err(Error::InvalidCa(format!(
            "{}: certificate {subject:?} may not sign certificates (keyUsage lacks keyCertSign)",
            path.display()
        )));
    }
    Ok(())
}

/// Checks, without the CA key ever signing a certificate (every certificate the issuing key
/// signs is recorded in the database first, and a probe would not be), that the key really signs
/// for the certificate: a signature over random bytes verifies under the certificate's public
/// key. And that the issuer name rcgen writes is byte-identical to the CA's subject (name
/// chaining in many clients compares bytes): a certificate is made under that name with a
/// throw-away key, not the CA's.
fn probe(
    issuer: &Issuer<'static, CaKey>,
    issuing_der: &[u8],
    issuing: &X509Certificate<'_>,
    path: &Path,
    now: OffsetDateTime,
) -> Result<(), Error> {
    use rcgen::SigningKey as _;

    let key = issuer.key();
    let mut message = [0_u8; 32];
    aws_lc_rs::rand::SecureRandom::fill(&aws_lc_rs::rand::SystemRandom::new(), &mut message)
        .map_err(|_| Error::Signing("the system random number generator failed".to_owned()))?;
    let signature = key.sign(&message).map_err(Error::signing)?;
    if let Some(verification) = verification_of(key.algorithm()) {
        aws_lc_rs::signature::UnparsedPublicKey::new(
            verification,
            issuing.public_key().subject_public_key.data.as_ref(),
        )
        .verify(&message, &signature)
        .map_err(|_| {
            Error::InvalidCa(format!(
                "{}: signatures made with the configured key do not verify under this certificate",
                path.display()
            ))
        })?;
    }

    let throwaway = KeyPair::generate().map_err(Error::signing)?;
    let namesake = Issuer::from_ca_cert_der(&CertificateDer::from(issuing_der), throwaway)
        .map_err(|e| {
            Error::InvalidCa(format!(
                "{}: this certificate cannot be used to issue: {e}",
                path.display()
            ))
        })?;
    let serial = serial::random_serial()?;
    let mut params = rcgen::CertificateParams::default();
    params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
    params.not_before = now;
    params.not_after = now + Duration::minutes(1);
    params.is_ca = IsCa::ExplicitNoCa;
    let der = params
        .signed_by(namesake.key(), &namesake)
        .map_err(Error::signing)?;
    let (_, probe) = x509_parser::parse_x509_certificate(der.der()).map_err(|e| {
        Error::Signing(format!(
            "a probe certificate made under this CA's name cannot be parsed: {e}"
        ))
    })?;
    if probe.issuer().as_raw() != issuing.subject().as_raw() {
        return Err(Error::InvalidCa(format!(
            "{}: the subject name of this certificate cannot be reproduced exactly when issuing (unusual string types or multi-valued names)",
            path.display()
        )));
    }
    Ok(())
}

/// How a signature of a key of `algorithm` is verified; `None` for one Certeasy does not
/// generate (its public key was still compared to the certificate's).
fn verification_of(
    algorithm: &'static rcgen::SignatureAlgorithm,
) -> Option<&'static dyn aws_lc_rs::signature::VerificationAlgorithm> {
    use aws_lc_rs::signature;
    if algorithm == &rcgen::PKCS_ECDSA_P256_SHA256 {
        Some(&signature::ECDSA_P256_SHA256_ASN1)
    } else if algorithm == &rcgen::PKCS_ECDSA_P384_SHA384 {
        Some(&signature::ECDSA_P384_SHA384_ASN1)
    } else if algorithm == &rcgen::PKCS_RSA_SHA256 {
        Some(&signature::RSA_PKCS1_2048_8192_SHA256)
    } else if algorithm == &rcgen::PKCS_RSA_SHA384 {
        Some(&signature::RSA_PKCS1_2048_8192_SHA384)
    } else if algorithm == &rcgen::PKCS_RSA_SHA512 {
        Some(&signature::RSA_PKCS1_2048_8192_SHA512)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::path::Path;

    use rcgen::BasicConstraints;
    use rcgen::CertificateParams;
    use rcgen::DnType;
    use rcgen::IsCa;
    use rcgen::Issuer;
    use rcgen::KeyPair;
    use rustls_pki_types::CertificateDer;
    use time::OffsetDateTime;

    use super::probe;
    use crate::error::Error;

    /// A self-signed CA certificate of `key`, DER.
    fn ca_cert(key: &KeyPair) -> Vec<u8> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "Probe CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.self_signed(key).unwrap().der().to_vec()
    }

    /// The probe checks the key by a signature over random bytes, for every key type the CA
    /// generates, and refuses a key whose signatures do not verify under the certificate.
    #[test]
    fn the_probe_checks_the_key_without_signing_a_certificate_with_it() {
        let now = OffsetDateTime::now_utc();
        for alg in [
            &rcgen::PKCS_ECDSA_P256_SHA256,
            &rcgen::PKCS_ECDSA_P384_SHA384,
            &rcgen::PKCS_RSA_SHA256,
        ] {
            let key = if alg == &rcgen::PKCS_RSA_SHA256 {
                KeyPair::generate_rsa_for(alg, rcgen::RsaKeySize::_2048).unwrap()
            } else {
                KeyPair::generate_for(alg).unwrap()
            };
            assert!(super::verification_of(key.algorithm()).is_some());
            let der = ca_cert(&key);
            let (_, parsed) = x509_parser::parse_x509_certificate(&der).unwrap();
            let issuer =
                Issuer::from_ca_cert_der(&CertificateDer::from(der.as_slice()), key.into())
                    .unwrap();
            probe(&issuer, &der, &parsed, Path::new("ca.pem"), now).unwrap();

            // Another key of the same type: its signatures do not verify under the certificate.
            let other = Issuer::from_ca_cert_der(
                &CertificateDer::from(der.as_slice()),
                KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
                    .unwrap()
                    .into(),
            )
            .unwrap();
            if alg == &rcgen::PKCS_ECDSA_P256_SHA256 {
                let refused = probe(&other, &der, &parsed, Path::new("ca.pem"), now);
                assert!(
                    matches!(&refused, Err(Error::InvalidCa(m)) if m.contains("do not verify")),
                    "{refused:?}"
                );
            }
        }
    }
}
