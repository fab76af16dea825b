//! PEM encoding and decoding of certificates and keys, both with the `pem` crate (the one rcgen
//! writes with), so one PEM implementation is linked for both directions.

use std::path::Path;

use crate::error::Error;

/// PEM text of one DER object, 64 characters a line as RFC 7468 asks, LF line ends.
pub(crate) fn encode(label: &str, der: &[u8]) -> String {
    pem::encode_config(
        &pem::Pem::new(label, der),
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    )
}

/// PEM text of a certificate.
pub(crate) fn encode_certificate(der: &[u8]) -> String {
    encode("CERTIFICATE", der)
}

/// The DER of every `CERTIFICATE` block in `text`; other blocks are refused so a key pasted
/// into a certificate file is noticed.
pub(crate) fn decode_certificates(text: &[u8], path: &Path) -> Result<Vec<Vec<u8>>, Error> {
    let blocks = pem::parse_many(text)
        .map_err(|e| Error::InvalidCa(format!("{}: not a valid PEM file: {e}", path.display())))?;
    let mut certs = Vec::with_capacity(blocks.len());
    for block in blocks {
        if block.tag() != "CERTIFICATE" {
            return Err(Error::InvalidCa(format!(
                "{}: expected only CERTIFICATE blocks, found {:?}",
                path.display(),
                block.tag()
            )));
        }
        certs.push(block.into_contents());
    }
    if certs.is_empty() {
        return Err(Error::InvalidCa(format!(
            "{}: holds no PEM certificate",
            path.display()
        )));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::decode_certificates;
    use super::encode;
    use super::encode_certificate;
    use crate::error::Error;

    #[test]
    fn encode_then_decode_round_trips() {
        let der: Vec<u8> = (0..=255u8).cycle().take(700).collect();
        let text = encode_certificate(&der);
        assert!(text.lines().all(|l| l.len() <= 64));
        let both = format!("{text}{text}");
        let back = decode_certificates(both.as_bytes(), Path::new("x.pem")).unwrap();
        assert_eq!(back, vec![der.clone(), der]);
    }

    #[test]
    fn keys_and_empty_files_are_refused() {
        let key = encode("PRIVATE KEY", b"abc");
        assert!(
            matches!(decode_certificates(key.as_bytes(), Path::new("k.pem")), Err(Error::InvalidCa(m)) if m.contains("PRIVATE KEY"))
        );
        assert!(
            matches!(decode_certificates(b"", Path::new("e.pem")), Err(Error::InvalidCa(m)) if m.contains("e.pem"))
        );
    }
}
