//! Object statuses of RFC 8555 §7.1.6 and the challenge types Certeasy offers.

use std::str::FromStr;

/// Error for a status string that storage holds but this build does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {value:?}")]
pub struct UnknownStatus {
    what: &'static str,
    value: String,
}

impl UnknownStatus {
    /// An unknown `what` (e.g. "order status") with the offending value.
    pub fn new(what: &'static str, value: &str) -> Self {
        Self {
            what,
            value: value.to_owned(),
        }
    }
}

macro_rules! wire_enum {
    ($(#[$doc:meta])* $name:ident, $what:literal, { $($(#[$vdoc:meta])* $variant:ident => $wire:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant),+
        }

        impl $name {
            /// The RFC 8555 wire (and storage) name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $wire),+
                }
            }
        }

        impl FromStr for $name {
            type Err = UnknownStatus;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($wire => Ok(Self::$variant),)+
                    other => Err(UnknownStatus { what: $what, value: other.to_owned() }),
                }
            }
        }
    };
}

wire_enum!(
    /// Account status.
    AccountStatus, "account status", {
        /// Usable.
        Valid => "valid",
        /// Deactivated by its holder; final.
        Deactivated => "deactivated",
        /// Revoked by the server; final.
        Revoked => "revoked",
    }
);

wire_enum!(
    /// Order status.
    OrderStatus, "order status", {
        /// Some authorizations are not yet valid.
        Pending => "pending",
        /// All authorizations valid; waiting for finalize.
        Ready => "ready",
        /// Finalize accepted; the certificate is being issued.
        Processing => "processing",
        /// The certificate is issued.
        Valid => "valid",
        /// An authorization failed, the order expired, or issuance failed.
        Invalid => "invalid",
    }
);

wire_enum!(
    /// Authorization status.
    AuthzStatus, "authorization status", {
        /// Waiting for a challenge to succeed.
        Pending => "pending",
        /// A challenge succeeded.
        Valid => "valid",
        /// A challenge failed.
        Invalid => "invalid",
        /// Deactivated by the client.
        Deactivated => "deactivated",
        /// Passed its expiry.
        Expired => "expired",
        /// Revoked by the server.
        Revoked => "revoked",
    }
);

wire_enum!(
    /// Challenge status.
    ChallengeStatus, "challenge status", {
        /// Not yet attempted.
        Pending => "pending",
        /// The client asked for validation; a worker will attempt it.
        Processing => "processing",
        /// Validation succeeded.
        Valid => "valid",
        /// Validation failed.
        Invalid => "invalid",
    }
);

wire_enum!(
    /// Challenge types.
    ChallengeType, "challenge type", {
        /// RFC 8555 §8.3.
        Http01 => "http-01",
        /// RFC 8555 §8.4.
        Dns01 => "dns-01",
        /// RFC 8737.
        TlsAlpn01 => "tls-alpn-01",
        /// draft-ietf-acme-dns-account-label-02: dns-01 at a label derived from the account URL,
        /// so several accounts can validate one name at once. Offered only when enabled.
        DnsAccount01 => "dns-account-01",
        /// draft-ietf-acme-dns-persist-02: a standing TXT record naming this CA and the account.
        /// Offered only when enabled.
        DnsPersist01 => "dns-persist-01",
    }
);

wire_enum!(
    /// Revocation reason codes RFC 5280 §5.3.1 allows a subscriber to give.
    RevocationReason, "revocation reason", {
        /// 0
        Unspecified => "unspecified",
        /// 1
        KeyCompromise => "keyCompromise",
        /// 3
        AffiliationChanged => "affiliationChanged",
        /// 4
        Superseded => "superseded",
        /// 5
        CessationOfOperation => "cessationOfOperation",
    }
);

impl RevocationReason {
    /// Maps an RFC 5280 reason code; codes a subscriber may not use give `None`.
    pub fn from_code(code: i64) -> Option<Self> {
        match code {
            0 => Some(Self::Unspecified),
            1 => Some(Self::KeyCompromise),
            3 => Some(Self::AffiliationChanged),
            4 => Some(Self::Superseded),
            5 => Some(Self::CessationOfOperation),
            _ => None,
        }
    }

    /// The RFC 5280 reason code.
    pub fn code(self) -> i64 {
        match self {
            Self::Unspecified => 0,
            Self::KeyCompromise => 1,
            Self::AffiliationChanged => 3,
            Self::Superseded => 4,
            Self::CessationOfOperation => 5,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip() {
        for s in ["pending", "ready", "processing", "valid", "invalid"] {
            assert_eq!(s.parse::<OrderStatus>().unwrap().as_str(), s);
        }
        assert_eq!(
            "tls-alpn-01".parse::<ChallengeType>().unwrap(),
            ChallengeType::TlsAlpn01
        );
        assert!("http-02".parse::<ChallengeType>().is_err());
        for s in ["dns-account-01", "dns-persist-01"] {
            assert_eq!(s.parse::<ChallengeType>().unwrap().as_str(), s);
        }
        assert_eq!(RevocationReason::from_code(2), None);
        assert_eq!(RevocationReason::from_code(4).unwrap().code(), 4);
    }
}
