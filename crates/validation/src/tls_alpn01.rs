//! tls-alpn-01 (RFC 8737, and RFC 8738 §6 for IP identifiers): a TLS handshake with ALPN
//! `acme-tls/1` whose certificate carries the key authorization digest.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use acme_core::identifier::{Identifier, IdentifierKind};
use acme_core::problem::{Problem, ProblemType};
use rustls::ClientConfig;
use rustls::client::Resumption;
use rustls::crypto::CryptoProvider;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use x509_parser::extensions::GeneralName;

use crate::context::CheckContext;
use crate::error::Error;
use crate::evidence::Seen;
use crate::failure::Failure;
use crate::key_authorization;
use crate::quote::quote_prefix;
use crate::tls_verifier::AcceptAnyCertificate;

/// The ALPN protocol id of RFC 8737 §6.2.
const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// `id-pe-acmeIdentifier` (RFC 8737 §6.1).
const ACME_IDENTIFIER_OID: &str = "1.3.6.1.5.5.7.1.31";

/// Builds the client configuration once: aws-lc-rs explicitly (never the process default), ALPN
/// `acme-tls/1` only, no session resumption (each attempt must see a fresh handshake).
pub(crate) fn client_config() -> Result<Arc<ClientConfig>, Error> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier = Arc::new(AcceptAnyCertificate::new(
        provider.signature_verification_algorithms,
    ));
    let mut config =
        ClientConfig::builder_with_provider(Arc::clone(&provider) as Arc<CryptoProvider>)
            .with_safe_default_protocol_versions()
            .map_err(Error::Tls)?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
    config.alpn_protocols = vec![ACME_TLS_ALPN.to_vec()];
    config.resumption = Resumption::disabled();
    Ok(Arc::new(config))
}

pub(crate) async fn validate(
    context: &CheckContext,
    identifier: &Identifier,
    key_authorization: &str,
) -> Result<Seen, Failure> {
    let port = context.settings.tls_alpn_port;
    let (addresses, sni) = match identifier.kind() {
        IdentifierKind::Dns => {
            let name = identifier.base_name();
            (context.dns.lookup_ips(name).await?, name.to_owned())
        }
        IdentifierKind::Ip => {
            let Some(ip) = identifier.ip_addr() else {
                return Err(Problem::new(
                    ProblemType::Malformed,
                    format!("{} is not an IP address", identifier.value()),
                )
                .into());
            };
            context.policy.check_identifier(ip)?;
            (vec![ip], reverse_dns_name(ip))
        }
    };
    let server_name = ServerName::try_from(sni.clone()).map_err(|e| {
        Problem::new(
            ProblemType::Malformed,
            format!("{sni:?} cannot be sent as TLS SNI: {e}"),
        )
    })?;
    // Connecting and the handshake each get a share of the attempt, so a silent address or peer is
    // reported as such before the attempt's own deadline cuts everything off.
    let budget = context.settings.connect_budget();
    let (stream, addr) = connect_first(&addresses, port, budget, identifier).await?;

    let connector = TlsConnector::from(Arc::clone(&context.tls));
    let handshake = tokio::time::timeout(budget, connector.connect(server_name, stream)).await;
    let tls = match handshake {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            let problem = Problem::new(
                ProblemType::Tls,
                format!(
                    "TLS handshake with {addr} (SNI {sni}) for {identifier} failed: {e}; it must offer ALPN acme-tls/1"
                ),
            );
            // A connection cut off mid-handshake is the network or a restarting peer; a TLS
            // error (an alert, no common ALPN protocol) is the peer's answer.
            let cut_off = matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::UnexpectedEof
                    | std::io::ErrorKind::BrokenPipe
            );
            return Err(if cut_off {
                Failure::transient(problem)
            } else {
                Failure::definite(problem)
            });
        }
        Err(_) => {
            return Err(Failure::transient(Problem::new(
                ProblemType::Connection,
                format!(
                    "TLS handshake with {addr} for {identifier} timed out after {}s",
                    budget.as_secs_f64()
                ),
            )));
        }
    };
    let (_, connection) = tls.get_ref();
    if connection.alpn_protocol() != Some(ACME_TLS_ALPN) {
        let got = connection.alpn_protocol().map_or_else(
            || "none".to_owned(),
            |p| format!("{:?}", String::from_utf8_lossy(p)),
        );
        return Err(Problem::new(
            ProblemType::Tls,
            format!(
                "{addr} (SNI {sni}) negotiated ALPN {got}; tls-alpn-01 requires \"acme-tls/1\""
            ),
        )
        .into());
    }
    let Some(certificate) = connection
        .peer_certificates()
        .and_then(|certs| certs.first())
    else {
        return Err(Problem::new(
            ProblemType::Tls,
            format!("{addr} (SNI {sni}) presented no certificate"),
        )
        .into());
    };
    check_certificate(certificate.as_ref(), identifier, key_authorization)
        .map(|()| Seen {
            addresses: vec![addr.to_string()],
            observed: format!(
                "acmeIdentifier extension matched the key authorization digest in the certificate for {} presented by {addr} (SNI {sni}, ALPN acme-tls/1)",
                identifier.value()
            ),
        })
        .map_err(|why| Failure::definite(Problem::new(ProblemType::IncorrectResponse, format!("Incorrect validation certificate for tls-alpn-01 challenge from {addr} (SNI {sni}): {why}"))))
}

/// Connects to the addresses in order and returns the first connection. `budget` is shared
/// equally, so every address gets its turn within it (the resolver returns only a few).
async fn connect_first(
    addresses: &[IpAddr],
    port: u16,
    budget: Duration,
    identifier: &Identifier,
) -> Result<(TcpStream, SocketAddr), Failure> {
    let share = u32::try_from(addresses.len()).unwrap_or(u32::MAX).max(1);
    let timeout = budget / share;
    let mut failures = Vec::new();
    for ip in addresses {
        let addr = SocketAddr::new(*ip, port);
        match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => return Ok((stream, addr)),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                failures.push(format!("{addr}: connection refused"));
            }
            Ok(Err(e)) => failures.push(format!("{addr}: {e}")),
            Err(_) => failures.push(format!(
                "{addr}: timed out after {}s",
                timeout.as_secs_f64()
            )),
        }
    }
    // Refused, reset or silent: all of it may pass once the target is up.
    Err(Failure::transient(Problem::new(
        ProblemType::Connection,
        format!(
            "Connecting for tls-alpn-01 validation of {identifier} failed: {}",
            failures.join("; ")
        ),
    )))
}

/// Checks the RFC 8737 §3 requirements on the validation certificate. Returns what is wrong.
fn check_certificate(
    der: &[u8],
    identifier: &Identifier,
    key_authorization: &str,
) -> Result<(), String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("the certificate cannot be parsed: {e}"))?;
    let san = cert
        .subject_alternative_name()
        .map_err(|e| format!("the subjectAltName extension is invalid: {e}"))?
        .ok_or_else(|| "the certificate has no subjectAltName extension".to_owned())?;
    let names = &san.value.general_names;
    let [only] = names.as_slice() else {
        return Err(format!(
            "the subjectAltName must hold exactly one entry ({}), found {}",
            identifier.value(),
            names.len()
        ));
    };
    let matches = match (identifier.kind(), only) {
        (IdentifierKind::Dns, GeneralName::DNSName(name)) => name
            .trim_end_matches('.')
            .eq_ignore_ascii_case(identifier.base_name()),
        (IdentifierKind::Ip, GeneralName::IPAddress(bytes)) => identifier
            .ip_addr()
            .is_some_and(|ip| ip_bytes(ip) == *bytes),
        _ => false,
    };
    if !matches {
        return Err(format!(
            "the subjectAltName {} does not match {}",
            describe_name(only),
            identifier.value()
        ));
    }

    let acme: Vec<_> = cert
        .extensions()
        .iter()
        .filter(|e| e.oid.to_id_string() == ACME_IDENTIFIER_OID)
        .collect();
    let [extension] = acme.as_slice() else {
        return Err(format!(
            "expected exactly one acmeIdentifier extension ({ACME_IDENTIFIER_OID}), found {}",
            acme.len()
        ));
    };
    if !extension.critical {
        return Err("the acmeIdentifier extension must be marked critical".to_owned());
    }
    // The extension value is the DER OCTET STRING (tag 4, length 32) of SHA-256(key authorization).
    let digest = key_authorization::sha256(key_authorization);
    let mut expected = vec![0x04, 0x20];
    expected.extend_from_slice(&digest);
    if extension.value != expected.as_slice() {
        return Err(
            "the acmeIdentifier extension does not hold SHA-256 of the key authorization"
                .to_owned(),
        );
    }
    Ok(())
}

fn ip_bytes(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

fn describe_name(name: &GeneralName<'_>) -> String {
    match name {
        GeneralName::DNSName(dns) => format!("dNSName {}", quote_prefix(dns.as_bytes())),
        GeneralName::IPAddress(bytes) => match bytes.len() {
            4 => {
                let octets: [u8; 4] = [bytes[0], bytes[1], bytes[2], bytes[3]];
                format!("iPAddress {}", IpAddr::from(octets))
            }
            16 => {
                let mut octets = [0_u8; 16];
                octets.copy_from_slice(bytes);
                format!("iPAddress {}", IpAddr::from(octets))
            }
            _ => "a malformed iPAddress".to_owned(),
        },
        other => quote_prefix(other.to_string().as_bytes()),
    }
}

/// The reverse-DNS name sent as SNI for an IP identifier (RFC 8738 §6).
fn reverse_dns_name(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, d] = v4.octets();
            format!("{d}.{c}.{b}.{a}.in-addr.arpa")
        }
        IpAddr::V6(v6) => {
            let mut labels = Vec::with_capacity(33);
            for byte in v6.octets().iter().rev() {
                labels.push(format!("{:x}", byte & 0x0f));
                labels.push(format!("{:x}", byte >> 4));
            }
            labels.push("ip6.arpa".to_owned());
            labels.join(".")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reverse_names_follow_rfc_8738() {
        assert_eq!(
            reverse_dns_name("1.2.3.4".parse().unwrap()),
            "4.3.2.1.in-addr.arpa"
        );
        assert_eq!(
            reverse_dns_name("2001:db8::1".parse().unwrap()),
            "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa"
        );
    }

    #[test]
    fn garbage_certificates_are_refused() {
        let id = Identifier::dns("a.example.com").unwrap();
        let why = check_certificate(b"not a certificate", &id, "k.a").unwrap_err();
        assert!(why.contains("cannot be parsed"), "{why}");
    }
}
