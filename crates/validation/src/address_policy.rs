//! Which resolved addresses the validator may connect to.

use std::net::IpAddr;

/// Why `ip` must not be contacted, or `None` when it may be.
///
/// Loopback is refused unless allowed (tests); the unspecified address is always refused because
/// connecting to it reaches the validator's own host. IPv4-mapped IPv6 addresses are judged as the
/// IPv4 address they carry.
pub(crate) fn refusal(ip: IpAddr, allow_loopback: bool) -> Option<&'static str> {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    if ip.is_unspecified() {
        return Some("the unspecified address");
    }
    if ip.is_loopback() && !allow_loopback {
        return Some("a loopback address");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_refused_unless_allowed() {
        for ip in ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(refusal(ip, false), Some("a loopback address"), "{ip}");
            assert_eq!(refusal(ip, true), None, "{ip}");
        }
        for ip in ["0.0.0.0", "::"] {
            assert!(refusal(ip.parse().unwrap(), true).is_some());
        }
        assert_eq!(refusal("192.0.2.1".parse().unwrap(), false), None);
        assert_eq!(refusal("2001:db8::1".parse().unwrap(), false), None);
    }
}
