//! Deserializers for values that are parsed from strings one entry at a time.
//!
//! Each list element is parsed while the deserializer still stands on it, so an error such as a
//! malformed CIDR is reported at the element's own line rather than at the end of the list. The
//! serializers write such values back as the names those parsers read (`certeasy-loadgen bench`
//! writes each server's file from the model).

use std::fmt::Display;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;

use acme_core::duration::ConfigDuration;
use acme_core::identifier::IdentifierKind;
use ipnet::IpNet;
use issuance::KeyAlgorithm;
use issuance::profiles::{ExtendedKeyUsage, KeyUsage};
use ratelimits::config::parse_ip_or_cidr;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serializer};

/// The port a resolver listed without one is queried on.
const DNS_PORT: u16 = 53;

/// A path where the empty string (or null) means "not set", matching the shipped file's `""`.
pub(crate) fn deserialize_optional_path<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<PathBuf>, D::Error> {
    let raw = Option::<String>::deserialize(d)?;
    Ok(raw.filter(|s| !s.trim().is_empty()).map(PathBuf::from))
}

/// A list of strings where a bare `key:` (null) means the empty list.
pub(crate) fn deserialize_strings<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Vec<String>, D::Error> {
    Ok(Option::<Vec<String>>::deserialize(d)?.unwrap_or_default())
}

/// A duration where the empty string (or null) means "not set".
pub(crate) fn deserialize_optional_duration<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<ConfigDuration>, D::Error> {
    let raw = Option::<String>::deserialize(d)?;
    raw.filter(|s| !s.trim().is_empty())
        .map(|s| s.parse().map_err(D::Error::custom))
        .transpose()
}

/// A list of names read with their type's own parser (key types, usages, identifier types),
/// so the file accepts exactly the names the error message lists.
pub(crate) fn deserialize_names<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: Display,
{
    let raw = Option::<Vec<NameEntry<T>>>::deserialize(d)?;
    Ok(raw
        .unwrap_or_default()
        .into_iter()
        .map(|NameEntry(value)| value)
        .collect())
}

/// A value the file states by name: the name its type's own parser reads back.
pub(crate) trait ConfigName {
    fn config_name(&self) -> &'static str;
}

impl ConfigName for KeyAlgorithm {
    fn config_name(&self) -> &'static str {
        self.as_str()
    }
}

impl ConfigName for KeyUsage {
    fn config_name(&self) -> &'static str {
        self.as_str()
    }
}

impl ConfigName for ExtendedKeyUsage {
    fn config_name(&self) -> &'static str {
        self.as_str()
    }
}

impl ConfigName for acme_core::status::ChallengeType {
    fn config_name(&self) -> &'static str {
        self.as_str()
    }
}

impl ConfigName for IdentifierKind {
    fn config_name(&self) -> &'static str {
        self.as_str()
    }
}

/// Writes a value read by a name parser (`ca.key-algorithm`) as that name.
pub(crate) fn serialize_name<S: Serializer, T: ConfigName>(
    value: &T,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_str(value.config_name())
}

/// Writes a list read by [`deserialize_names`] as its names.
pub(crate) fn serialize_names<S: Serializer, T: ConfigName>(
    values: &[T],
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_seq(values.iter().map(ConfigName::config_name))
}

struct NameEntry<T>(T);

impl<'de, T> Deserialize<'de> for NameEntry<T>
where
    T: FromStr,
    T::Err: Display,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map(NameEntry).map_err(D::Error::custom)
    }
}

/// A list of networks; a bare address is a /32 or /128.
pub(crate) fn deserialize_cidrs<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<IpNet>, D::Error> {
    let raw = Option::<Vec<CidrEntry>>::deserialize(d)?;
    Ok(raw
        .unwrap_or_default()
        .into_iter()
        .map(|CidrEntry(net)| net)
        .collect())
}

/// A list of resolver addresses; a bare IP means port 53.
pub(crate) fn deserialize_resolvers<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Vec<SocketAddr>, D::Error> {
    let raw = Option::<Vec<ResolverEntry>>::deserialize(d)?;
    Ok(raw
        .unwrap_or_default()
        .into_iter()
        .map(|ResolverEntry(addr)| addr)
        .collect())
}

struct CidrEntry(IpNet);

impl<'de> Deserialize<'de> for CidrEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_ip_or_cidr(&text)
            .map(CidrEntry)
            .map_err(D::Error::custom)
    }
}

struct ResolverEntry(SocketAddr);

impl<'de> Deserialize<'de> for ResolverEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_resolver(&text)
            .map(ResolverEntry)
            .map_err(D::Error::custom)
    }
}

/// Parses `192.0.2.53:53`, `[2001:db8::53]:53`, or a bare address.
pub(crate) fn parse_resolver(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    text.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, DNS_PORT)).map_err(|_| {
        format!("{text:?} is not a resolver address: write an IP address and port, e.g. 192.0.2.53:53")
    })
}
