//! The identifiers a certificate names, read from its subjectAltName: what a record about a
//! stored certificate (a revocation, a renewal) says it concerns, in the form the audit log and
//! orders use (lower-case DNS names, IP addresses as text).

use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::extensions::ParsedExtension;
use x509_parser::prelude::FromDer;

/// The names of `cert`'s subjectAltName, in order.
pub(crate) fn of_parsed(cert: &X509Certificate<'_>) -> Vec<String> {
    let mut names = Vec::new();
    for ext in cert.extensions() {
        let ParsedExtension::SubjectAlternativeName(san) = ext.parsed_extension() else {
            continue;
        };
        for name in &san.general_names {
            match name {
                GeneralName::DNSName(d) => names.push(d.to_ascii_lowercase()),
                GeneralName::IPAddress(bytes) => {
                    let ip = match bytes.len() {
                        4 => <[u8; 4]>::try_from(*bytes)
                            .ok()
                            .map(|b| std::net::IpAddr::from(b).to_string()),
                        16 => <[u8; 16]>::try_from(*bytes)
                            .ok()
                            .map(|b| std::net::IpAddr::from(b).to_string()),
                        _ => None,
                    };
                    names.extend(ip);
                }
                _ => {}
            }
        }
    }
    names
}

/// The names of the DER certificate `der`; none when it does not parse (a stored certificate
/// always does: it was parsed when it was issued).
pub(crate) fn of_der(der: &[u8]) -> Vec<String> {
    X509Certificate::from_der(der)
        .map(|(_, cert)| of_parsed(&cert))
        .unwrap_or_default()
}
