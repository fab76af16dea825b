//! Certificate profiles: every field of every certificate Certeasy signs is decided here, from
//! policy, never from a CSR.

use std::net::IpAddr;

use acme_core::identifier::Identifier;
use acme_core::identifier::IdentifierKind;
use rcgen::BasicConstraints;
use rcgen::CertificateParams;
use rcgen::DistinguishedName;
use rcgen::DnType;
use rcgen::ExtendedKeyUsagePurpose;
use rcgen::IsCa;
use rcgen::KeyUsagePurpose;
use rcgen::NameConstraints;
use rcgen::SanType;
use rcgen::SerialNumber;
use time::OffsetDateTime;

use crate::error::Error;
use crate::profiles::ExtendedKeyUsage;
use crate::profiles::KeyUsage;

/// Longest value allowed in a common name (RFC 5280 ub-common-name).
const MAX_CN_LEN: usize = 64;

/// A self-signed root: may sign anything below it, nothing else.
pub(crate) fn root(
    organization: &str,
    common_name: &str,
    serial: &[u8],
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
) -> CertificateParams {
    let mut params = base(serial, not_before, not_after);
    params.distinguished_name = ca_name(organization, common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
}

/// The issuing intermediate: pathLen 0 so it can only sign end-entity certificates. With
/// `name_constraints` (from the identifier policy, `certeasy ca init --name-constraints`) it
/// carries them in a critical extension, so relying parties refuse any name outside them even
/// if the intermediate's key is used by someone else.
pub(crate) fn intermediate(
    organization: &str,
    common_name: &str,
    serial: &[u8],
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
    name_constraints: Option<NameConstraints>,
) -> CertificateParams {
    let mut params = base(serial, not_before, not_after);
    params.name_constraints = name_constraints;
    params.distinguished_name = ca_name(organization, common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
    ];
    params.use_authority_key_identifier_extension = true;
    params
}

/// The listener's own issuing CA, beside the ACME intermediate under the same root: pathLen 0,
/// and extended key usages that hold every certificate under it to TLS, since it signs only
/// Certeasy's listener certificates (which the database does not record, so the ACME
/// intermediate must never sign them). No cRLSign: nothing it signs is ever revoked.
pub(crate) fn listener_intermediate(
    organization: &str,
    common_name: &str,
    serial: &[u8],
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
) -> CertificateParams {
    let mut params = intermediate(
        organization,
        common_name,
        serial,
        not_before,
        not_after,
        None,
    );
    params
        .key_usages
        .retain(|usage| *usage != KeyUsagePurpose::CrlSign);
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params
}

/// What a leaf certifies its key for: from a certificate profile, or fixed for the listener.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Usages<'a> {
    pub(crate) key_usages: &'a [KeyUsage],
    pub(crate) extended_key_usages: &'a [ExtendedKeyUsage],
}

/// Certeasy's own listener: a TLS server that also connects out as a client.
pub(crate) const LISTENER_USAGES: Usages<'static> = Usages {
    key_usages: &[KeyUsage::DigitalSignature],
    extended_key_usages: &[ExtendedKeyUsage::ServerAuth, ExtendedKeyUsage::ClientAuth],
};

/// A subscriber TLS certificate for exactly `names`, in the given order. keyEncipherment is
/// kept only for an RSA key, whatever `usages` says: an ECDSA key cannot encipher.
pub(crate) fn leaf(
    names: &[SanType],
    serial: &[u8],
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
    usages: Usages<'_>,
    rsa_key: bool,
) -> CertificateParams {
    let mut params = base(serial, not_before, not_after);
    params.distinguished_name = leaf_subject(names);
    params.subject_alt_names = names.to_vec();
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = usages
        .key_usages
        .iter()
        .filter_map(|usage| match usage {
            KeyUsage::DigitalSignature => Some(KeyUsagePurpose::DigitalSignature),
            KeyUsage::KeyEncipherment => rsa_key.then_some(KeyUsagePurpose::KeyEncipherment),
        })
        .collect();
    params.extended_key_usages = usages
        .extended_key_usages
        .iter()
        .map(|usage| match usage {
            ExtendedKeyUsage::ServerAuth => ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsage::ClientAuth => ExtendedKeyUsagePurpose::ClientAuth,
        })
        .collect();
    params.use_authority_key_identifier_extension = true;
    params
}

/// SAN entries for ACME identifiers, de-duplicated, in order.
pub(crate) fn identifier_sans(identifiers: &[Identifier]) -> Result<Vec<SanType>, Error> {
    let mut sans: Vec<SanType> = Vec::with_capacity(identifiers.len());
    for id in identifiers {
        let san = match (id.kind(), id.ip_addr()) {
            (IdentifierKind::Ip, Some(ip)) => SanType::IpAddress(ip),
            (IdentifierKind::Ip, None) => {
                return Err(Error::InvalidRequest(format!("{id} is not an IP address")));
            }
            (IdentifierKind::Dns, _) => dns_san(id.value())?,
        };
        if !sans.contains(&san) {
            sans.push(san);
        }
    }
    if sans.is_empty() {
        return Err(Error::InvalidRequest(
            "a certificate needs at least one identifier".to_owned(),
        ));
    }
    Ok(sans)
}

/// SAN entries for Certeasy's own listener.
pub(crate) fn server_sans(dns_names: &[String], ips: &[IpAddr]) -> Result<Vec<SanType>, Error> {
    let mut sans: Vec<SanType> = Vec::with_capacity(dns_names.len() + ips.len());
    for name in dns_names {
        let san = dns_san(name)?;
        if !sans.contains(&san) {
            sans.push(san);
        }
    }
    for ip in ips {
        let san = SanType::IpAddress(*ip);
        if !sans.contains(&san) {
            sans.push(san);
        }
    }
    if sans.is_empty() {
        return Err(Error::InvalidRequest(
            "the server certificate needs at least one DNS name or IP address".to_owned(),
        ));
    }
    Ok(sans)
}

fn dns_san(name: &str) -> Result<SanType, Error> {
    let ia5 = name
        .to_owned()
        .try_into()
        .map_err(|e| Error::InvalidRequest(format!("{name:?} cannot be a DNS name: {e}")))?;
    Ok(SanType::DnsName(ia5))
}

/// CN = the first DNS name short enough for a CN. With none (IP-only certificates) the subject
/// is empty, and rcgen then marks the SAN extension critical as RFC 5280 §4.2.1.6 requires.
fn leaf_subject(names: &[SanType]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    let first_dns = names.iter().find_map(|san| match san {
        SanType::DnsName(name) if name.as_str().len() <= MAX_CN_LEN => Some(name.as_str()),
        _ => None,
    });
    if let Some(name) = first_dns {
        dn.push(DnType::CommonName, name);
    }
    dn
}

fn ca_name(organization: &str, common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    if !organization.is_empty() {
        dn.push(DnType::OrganizationName, organization);
    }
    dn.push(DnType::CommonName, common_name);
    dn
}

fn base(serial: &[u8], not_before: OffsetDateTime, not_after: OffsetDateTime) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.serial_number = Some(SerialNumber::from_slice(serial));
    params.not_before = not_before;
    params.not_after = not_after;
    params.distinguished_name = DistinguishedName::new();
    params
}

#[cfg(test)]
mod tests {
    use acme_core::identifier::Identifier;
    use rcgen::DnType;
    use time::OffsetDateTime;

    use super::LISTENER_USAGES;
    use super::identifier_sans;
    use super::leaf;
    use super::leaf_subject;
    use super::server_sans;
    use crate::error::Error;

    #[test]
    fn ip_only_leaves_have_an_empty_subject() {
        let sans = identifier_sans(&[Identifier::ip("192.0.2.1").unwrap()]).unwrap();
        let params = leaf(
            &sans,
            &[1; 16],
            OffsetDateTime::UNIX_EPOCH,
            OffsetDateTime::UNIX_EPOCH,
            LISTENER_USAGES,
            false,
        );
        assert_eq!(params.distinguished_name.iter().count(), 0);
    }

    #[test]
    fn long_first_name_is_skipped_for_the_cn() {
        let long = format!("{}.example.com", "a".repeat(60));
        let sans = identifier_sans(&[
            Identifier::dns(&long).unwrap(),
            Identifier::dns("short.example.com").unwrap(),
            Identifier::dns("short.example.com").unwrap(),
        ])
        .unwrap();
        assert_eq!(sans.len(), 2);
        let dn = leaf_subject(&sans);
        let cn = dn.get(&DnType::CommonName).unwrap();
        assert_eq!(
            cn,
            &rcgen::DnValue::Utf8String("short.example.com".to_owned())
        );
    }

    #[test]
    fn no_names_is_refused() {
        assert!(matches!(
            identifier_sans(&[]),
            Err(Error::InvalidRequest(_))
        ));
        assert!(matches!(
            server_sans(&[], &[]),
            Err(Error::InvalidRequest(_))
        ));
    }
}
