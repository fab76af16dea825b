//! The tls-alpn-01 certificate verifier: no chain or name checks, real handshake signature checks.
//!
//! The validation certificate is self-signed and carries the critical `acmeIdentifier` extension,
//! which webpki rejects as an unknown critical extension. So rustls' `verify_tls12_signature` and
//! `verify_tls13_signature` (which parse the certificate with webpki) cannot be used; the
//! signature is instead checked against the certificate's SubjectPublicKeyInfo directly, with the
//! aws-lc-rs provider's algorithms. The handshake thus still proves the peer holds the key.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, SubjectPublicKeyInfoDer, UnixTime};

/// Accepts any certificate (it is checked afterwards against RFC 8737) but verifies signatures.
#[derive(Debug)]
pub(crate) struct AcceptAnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl AcceptAnyCertificate {
    pub(crate) fn new(algorithms: WebPkiSupportedAlgorithms) -> Self {
        Self { algorithms }
    }
}

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let spki = spki_of(cert)?;
        let (algorithm_id, public_key) = split_spki(spki).ok_or(bad_encoding())?;
        // TLS 1.2 schemes do not pin the key type, so every algorithm mapped to the scheme whose
        // key type matches the certificate's is a candidate (as rustls does).
        let candidates = self
            .algorithms
            .mapping
            .iter()
            .find(|(scheme, _)| *scheme == dss.scheme)
            .map(|(_, algs)| *algs)
            .ok_or_else(|| {
                rustls::Error::General(format!("unsupported signature scheme {:?}", dss.scheme))
            })?;
        for alg in candidates {
            if alg.public_key_alg_id().as_ref() != algorithm_id {
                continue;
            }
            return alg
                .verify_signature(public_key, message, dss.signature())
                .map(|()| HandshakeSignatureValid::assertion())
                .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadSignature));
        }
        Err(rustls::Error::General(format!(
            "signature scheme {:?} does not match the certificate's key type",
            dss.scheme
        )))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let spki = spki_of(cert)?;
        rustls::crypto::verify_tls13_signature_with_raw_key(
            message,
            &SubjectPublicKeyInfoDer::from(spki),
            dss,
            &self.algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

fn bad_encoding() -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::BadEncoding)
}

/// The DER SubjectPublicKeyInfo of a certificate.
fn spki_of<'a>(cert: &'a CertificateDer<'_>) -> Result<&'a [u8], rustls::Error> {
    let (_, parsed) =
        x509_parser::parse_x509_certificate(cert.as_ref()).map_err(|_| bad_encoding())?;
    Ok(parsed.tbs_certificate.subject_pki.raw)
}

/// Splits `SEQUENCE { algorithm AlgorithmIdentifier, subjectPublicKey BIT STRING }` into the
/// AlgorithmIdentifier contents (the form `SignatureVerificationAlgorithm::public_key_alg_id`
/// uses) and the key bits.
fn split_spki(spki: &[u8]) -> Option<(&[u8], &[u8])> {
    let (0x30, body, []) = read_tlv(spki)? else {
        return None;
    };
    let (0x30, algorithm, rest) = read_tlv(body)? else {
        return None;
    };
    let (0x03, bits, []) = read_tlv(rest)? else {
        return None;
    };
    let (0, key) = bits.split_first()? else {
        return None;
    };
    Some((algorithm, key))
}

/// Reads one DER tag-length-value with a single-byte tag: `(tag, contents, rest)`.
fn read_tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let (bytes, after) = rest.split_at(count);
        rest = after;
        bytes
            .iter()
            .fold(0_usize, |acc, b| (acc << 8) | usize::from(*b))
    };
    if rest.len() < len {
        return None;
    }
    let (contents, rest) = rest.split_at(len);
    Some((tag, contents, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tlv_reading_handles_long_lengths_and_truncation() {
        let mut long = vec![0x04, 0x81, 0x80];
        long.extend(std::iter::repeat_n(7, 0x80));
        let (tag, contents, rest) = read_tlv(&long).unwrap();
        assert_eq!((tag, contents.len(), rest.len()), (0x04, 0x80, 0));
        assert!(read_tlv(&[0x04, 0x05, 1, 2]).is_none());
        assert!(read_tlv(&[0x04, 0x80]).is_none());
    }

    #[test]
    fn spki_splits_into_algorithm_and_key() {
        // SEQUENCE { SEQUENCE { OID 1.2.3 }, BIT STRING (0 unused) 0xAB 0xCD }
        let spki = [
            0x30, 0x0b, 0x30, 0x04, 0x06, 0x02, 0x2a, 0x03, 0x03, 0x03, 0x00, 0xab, 0xcd,
        ];
        let (algorithm, key) = split_spki(&spki).unwrap();
        assert_eq!(algorithm, &[0x06, 0x02, 0x2a, 0x03]);
        assert_eq!(key, &[0xab, 0xcd]);
        assert!(split_spki(&spki[..12]).is_none());
    }
}
