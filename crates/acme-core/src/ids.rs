//! Typed database ids, so that one kind of id can never be used for another.

use std::fmt;
use std::str::FromStr;

macro_rules! typed_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub i64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = std::num::ParseIntError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                s.parse::<i64>().map(Self)
            }
        }
    };
}

typed_id!(
    /// An ACME account.
    AccountId
);
typed_id!(
    /// An order.
    OrderId
);
typed_id!(
    /// An authorization.
    AuthzId
);
typed_id!(
    /// A challenge.
    ChallengeId
);
typed_id!(
    /// An issued certificate.
    CertificateId
);
typed_id!(
    /// A durable job in the work queue.
    JobId
);

/// A certificate serial number: at least 64 random bits, kept as big-endian bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Serial(Vec<u8>);

impl Serial {
    /// Wraps the big-endian bytes of a serial number.
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }

    /// The big-endian bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Lower-case hex, the form used in storage, URLs and logs.
    pub fn to_hex(&self) -> String {
        hex::encode(&self.0)
    }

    /// Parses lower- or upper-case hex.
    pub fn from_hex(s: &str) -> Option<Self> {
        hex::decode(s).ok().filter(|b| !b.is_empty()).map(Self)
    }
}

impl fmt::Display for Serial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serial_hex_round_trip() {
        let s = Serial::from_bytes(vec![0x01, 0xab, 0xff]);
        assert_eq!(s.to_hex(), "01abff");
        assert_eq!(Serial::from_hex("01ABFF"), Some(s));
        assert_eq!(Serial::from_hex(""), None);
        assert_eq!(Serial::from_hex("zz"), None);
    }

    #[test]
    fn ids_parse_and_print() {
        let id: AccountId = "42".parse().unwrap();
        assert_eq!(id, AccountId(42));
        assert_eq!(id.to_string(), "42");
        assert!("x".parse::<OrderId>().is_err());
    }
}

/// The key identifier of an external-account-binding key (RFC 8555 §7.3.4 `kid`): an opaque,
/// random string the operator hands to a subscriber together with the HMAC key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EabKid(pub String);

impl fmt::Display for EabKid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
