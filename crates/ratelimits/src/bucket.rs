//! Bucket ids and keys: `"<limit>:<id>"`.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::error::Error;
use crate::error::Result;
use crate::limit::IdKind;
use crate::limit::LimitName;

/// Whom a bucket counts. The kind must match the limit's [`IdKind`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BucketId {
    /// A client address. IPv6 clients are keyed by their prefix (see [`ip_bucket`]).
    Ip(IpNet),
    /// An account id.
    Account(i64),
    /// An account id and an identifier value, e.g. a DNS name.
    AccountIdentifier { account: i64, identifier: String },
}

/// The bucket network for a client address: IPv4 addresses as /32, IPv6 addresses by their
/// `/ipv6_prefix` network, because a single subscriber usually holds a whole /64 and could
/// otherwise rotate addresses to escape every per-IP limit.
pub fn ip_bucket(ip: IpAddr, ipv6_prefix: u8) -> IpNet {
    match ip {
        IpAddr::V4(v4) => IpNet::from(IpAddr::V4(v4)),
        IpAddr::V6(v6) => IpNet::new(IpAddr::V6(v6), ipv6_prefix.min(128))
            .map_or_else(|_| IpNet::from(IpAddr::V6(v6)), |net| net.trunc()),
    }
}

/// The id part of a bucket key for a client address; see [`ip_bucket`].
pub fn ip_key(ip: IpAddr, ipv6_prefix: u8) -> String {
    BucketId::Ip(ip_bucket(ip, ipv6_prefix)).to_string()
}

impl BucketId {
    /// What kind of limit this id belongs to.
    pub fn kind(&self) -> IdKind {
        match self {
            Self::Ip(_) => IdKind::Ip,
            Self::Account(_) => IdKind::Account,
            Self::AccountIdentifier { .. } => IdKind::AccountIdentifier,
        }
    }

    /// The account, for limits keyed by one; overrides of per-(account, identifier) limits are
    /// given per account and apply to all of its identifiers.
    pub fn account(&self) -> Option<i64> {
        match self {
            Self::Ip(_) => None,
            Self::Account(account) | Self::AccountIdentifier { account, .. } => Some(*account),
        }
    }

    /// Parses the id part of a key as written by operators (`show`/`reset`): an IP or CIDR, an
    /// account id, or `account:identifier`.
    pub fn parse(limit: LimitName, text: &str) -> Result<Self> {
        let invalid = |reason: &str| Error::InvalidId {
            limit: limit.to_string(),
            id: text.to_owned(),
            reason: reason.to_owned(),
        };
        match limit.id_kind() {
            IdKind::Ip => crate::config::parse_ip_or_cidr(text)
                .map(Self::Ip)
                .map_err(|e| invalid(&e)),
            IdKind::Account => parse_account(text)
                .map(Self::Account)
                .ok_or_else(|| invalid("not an account id")),
            IdKind::AccountIdentifier => {
                let (account, identifier) = text
                    .split_once(':')
                    .ok_or_else(|| invalid("expected <account id>:<identifier>"))?;
                let account = parse_account(account).ok_or_else(|| invalid("not an account id"))?;
                if identifier.is_empty() {
                    return Err(invalid("empty identifier"));
                }
                Ok(Self::AccountIdentifier {
                    account,
                    identifier: identifier.to_owned(),
                })
            }
        }
    }

    /// The full bucket key, `"<limit>:<id>"`; refuses an id of the wrong kind for the limit.
    /// This is the textual form operators and logs see; the request path works on
    /// [`crate::bucket_key::BucketKey`], whose `Display` writes the same text.
    pub fn key(&self, limit: LimitName) -> Result<String> {
        self.check_kind(limit)?;
        Ok(format!("{limit}:{self}"))
    }

    /// Refuses an id of the wrong kind for `limit` (an IP for an account limit, say).
    pub fn check_kind(&self, limit: LimitName) -> Result<()> {
        if self.kind() != limit.id_kind() {
            return Err(Error::InvalidId {
                limit: limit.to_string(),
                id: self.to_string(),
                reason: format!("expected a {:?} id", limit.id_kind()),
            });
        }
        Ok(())
    }
}

/// Account ids as written in keys and overrides files: decimal, non-negative.
pub(crate) fn parse_account(text: &str) -> Option<i64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

impl fmt::Display for BucketId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Single addresses are written without a prefix length.
            Self::Ip(net) if net.prefix_len() == net.max_prefix_len() => {
                write!(f, "{}", net.addr())
            }
            Self::Ip(net) => write!(f, "{net}"),
            Self::Account(account) => write!(f, "{account}"),
            Self::AccountIdentifier {
                account,
                identifier,
            } => write!(f, "{account}:{identifier}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::BucketId;
    use super::ip_bucket;
    use super::ip_key;
    use crate::limit::LimitName;

    #[test]
    fn keys_and_ipv6_prefixes() {
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        assert_eq!(ip_key(v4, 64), "192.0.2.7");
        let v6: IpAddr = "2001:db8:1:2:3:4:5:6".parse().unwrap();
        assert_eq!(ip_key(v6, 64), "2001:db8:1:2::/64");
        assert_eq!(ip_key(v6, 48), "2001:db8:1::/48");
        assert_eq!(ip_key(v6, 128), "2001:db8:1:2:3:4:5:6");
        let id = BucketId::Ip(ip_bucket(v4, 64));
        assert_eq!(id.key(LimitName::GlobalPerIp).unwrap(), "global:192.0.2.7");
        assert!(id.key(LimitName::NewOrdersPerAccount).is_err());
        let pair = BucketId::AccountIdentifier {
            account: 42,
            identifier: "example.com".into(),
        };
        assert_eq!(
            pair.key(LimitName::FailedValidationPerAccountIdentifier)
                .unwrap(),
            "failed-validation:42:example.com"
        );
        assert_eq!(
            BucketId::parse(
                LimitName::FailedValidationPerAccountIdentifier,
                "42:example.com"
            )
            .unwrap(),
            pair
        );
        assert_eq!(
            BucketId::parse(LimitName::NewOrdersPerAccount, "7").unwrap(),
            BucketId::Account(7)
        );
        assert!(BucketId::parse(LimitName::NewOrdersPerAccount, "-7").is_err());
        assert!(BucketId::parse(LimitName::GlobalPerIp, "7").is_err());
        assert_eq!(
            BucketId::parse(LimitName::GlobalPerIp, "2001:db8:1:2::/64").unwrap(),
            BucketId::Ip(ip_bucket(v6, 64))
        );
    }
}
