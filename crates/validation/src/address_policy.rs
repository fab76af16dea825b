//! The one target-address policy: which addresses the validator may connect to.
//!
//! Every address a challenge check would connect to passes through [`AddressPolicy::refusal`]:
//! the addresses a name resolves to (http-01, tls-alpn-01, and every redirect target through the
//! reqwest resolver), IP literals in redirects, and IP identifiers. CAA and dns-01 only talk to
//! the configured nameservers, which the operator chose, so they are not judged here.
//!
//! Always refused, because a subscriber must not be able to point the CA at them: the unspecified
//! address, `0.0.0.0/8` ("this network"), link-local (`169.254.0.0/16`, `fe80::/10`), cloud
//! metadata endpoints (`169.254.169.254`, `fd00:ec2::254`), multicast, and the limited broadcast
//! address. Loopback is refused unless `allow_loopback` (tests). Private ranges are allowed: a
//! private CA validates private names. The operator adds more with `deny-target-cidrs`.
//!
//! An IPv6 address that carries an IPv4 address is judged as that IPv4 address too, because
//! connecting to it can reach that IPv4 host: the IPv4-mapped (`::ffff:a.b.c.d`) and
//! IPv4-compatible (`::a.b.c.d`) forms reach it through the local dual-stack socket, the NAT64
//! well-known prefix (`64:ff9b::/96`, RFC 6052) through a NAT64 gateway, and 6to4
//! (`2002:aabb:ccdd::/48`, RFC 3056) through a 6to4 relay.
//!
//! Private networks ([`private_network`]: RFC 1918, the RFC 6598 shared address space, IPv6
//! unique local addresses) are allowed as targets of names and IP identifiers, but http-01 only
//! follows a redirect into them when the identifier itself is or resolved to a private address
//! (or `allow-private-redirects` is set): otherwise a subscriber's redirect could make the CA
//! probe the networks it sits in.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use acme_core::problem::{Problem, ProblemType};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// AWS, GCP, Azure and most other clouds serve instance metadata (credentials) here.
const METADATA_V4: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);
/// The IPv6 instance-metadata address of AWS (Nitro).
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);

/// The private networks a redirect may lead into only from a private identifier: RFC 1918,
/// RFC 6598 (carrier-grade NAT shared space) and RFC 4193 unique local addresses.
const PRIVATE_NETWORKS: [IpNet; 5] = [
    IpNet::V4(Ipv4Net::new_assert(Ipv4Addr::new(10, 0, 0, 0), 8)),
    IpNet::V4(Ipv4Net::new_assert(Ipv4Addr::new(172, 16, 0, 0), 12)),
    IpNet::V4(Ipv4Net::new_assert(Ipv4Addr::new(192, 168, 0, 0), 16)),
    IpNet::V4(Ipv4Net::new_assert(Ipv4Addr::new(100, 64, 0, 0), 10)),
    IpNet::V6(Ipv6Net::new_assert(
        Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0),
        7,
    )),
];

/// The private network `ip` lies in, if any; an IPv6 address carrying an IPv4 one (mapped,
/// compatible, NAT64, 6to4) is judged as that IPv4 address too, as the address policy does.
pub(crate) fn private_network(ip: IpAddr) -> Option<IpNet> {
    let within = |ip: IpAddr| {
        PRIVATE_NETWORKS
            .iter()
            .find(|net| net.contains(&ip))
            .copied()
    };
    within(ip).or_else(|| match ip {
        IpAddr::V6(v6) => carried_v4(v6).and_then(|(_, v4)| within(IpAddr::V4(v4))),
        IpAddr::V4(_) => None,
    })
}

/// What the validator may connect to. Built once from the settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AddressPolicy {
    allow_loopback: bool,
    deny: Vec<IpNet>,
}

/// Why an address is refused; its `Display` completes "`<address>` is …".
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    class: Class,
    /// Set when the class was found in an IPv4 address carried inside the IPv6 one.
    carried: Option<(Carrier, Ipv4Addr)>,
}

/// A refused kind of address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Unspecified,
    ThisNetwork,
    Loopback,
    Metadata,
    LinkLocal,
    Multicast,
    Broadcast,
    Denied(IpNet),
}

/// How an IPv6 address carries an IPv4 one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Carrier {
    Mapped,
    Compatible,
    Nat64,
    SixToFour,
}

impl AddressPolicy {
    pub(crate) fn new(allow_loopback: bool, deny: Vec<IpNet>) -> Self {
        Self {
            allow_loopback,
            deny,
        }
    }

    /// Why `ip` must not be contacted, or `None` when it may be.
    pub(crate) fn refusal(&self, ip: IpAddr) -> Option<Refusal> {
        if let Some(class) = self.class_of(ip) {
            return Some(Refusal {
                class,
                carried: None,
            });
        }
        let IpAddr::V6(v6) = ip else { return None };
        let (carrier, v4) = carried_v4(v6)?;
        self.class_of(IpAddr::V4(v4)).map(|class| Refusal {
            class,
            carried: Some((carrier, v4)),
        })
    }

    /// Refuses an IP identifier the validator must not connect to. It is the identifier itself
    /// that cannot be validated, hence `rejectedIdentifier` rather than `connection`.
    pub(crate) fn check_identifier(&self, ip: IpAddr) -> Result<(), Problem> {
        match self.refusal(ip) {
            None => Ok(()),
            Some(why) => Err(Problem::new(
                ProblemType::RejectedIdentifier,
                format!("{ip} is {why}; this CA does not validate it"),
            )),
        }
    }

    /// The refused class of `ip` itself, without looking inside it.
    fn class_of(&self, ip: IpAddr) -> Option<Class> {
        let class = match ip {
            IpAddr::V4(v4) => v4_class(v4),
            IpAddr::V6(v6) => v6_class(v6),
        };
        match class {
            Some(Class::Loopback) if self.allow_loopback => {}
            Some(class) => return Some(class),
            None => {}
        }
        self.deny
            .iter()
            .find(|net| net.contains(&ip))
            .map(|net| Class::Denied(*net))
    }
}

fn v4_class(v4: Ipv4Addr) -> Option<Class> {
    if v4.is_unspecified() {
        Some(Class::Unspecified)
    } else if v4.octets()[0] == 0 {
        Some(Class::ThisNetwork)
    } else if v4.is_loopback() {
        Some(Class::Loopback)
    } else if v4 == METADATA_V4 {
        Some(Class::Metadata)
    } else if v4.is_link_local() {
        Some(Class::LinkLocal)
    } else if v4.is_multicast() {
        Some(Class::Multicast)
    } else if v4.is_broadcast() {
        Some(Class::Broadcast)
    } else {
        None
    }
}

fn v6_class(v6: Ipv6Addr) -> Option<Class> {
    if v6.is_unspecified() {
        Some(Class::Unspecified)
    } else if v6.is_loopback() {
        Some(Class::Loopback)
    } else if v6 == METADATA_V6 {
        Some(Class::Metadata)
    } else if v6.is_unicast_link_local() {
        Some(Class::LinkLocal)
    } else if v6.is_multicast() {
        Some(Class::Multicast)
    } else {
        None
    }
}

/// The IPv4 address an IPv6 address carries, for the forms that can reach it.
fn carried_v4(v6: Ipv6Addr) -> Option<(Carrier, Ipv4Addr)> {
    let s = v6.segments();
    let o = v6.octets();
    let low = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some((Carrier::Mapped, low)),
        // `::` and `::1` are IPv6 addresses of their own (RFC 4291 §2.5.5.1), judged as such.
        [0, 0, 0, 0, 0, 0, _, _] if !v6.is_unspecified() && !v6.is_loopback() => {
            Some((Carrier::Compatible, low))
        }
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some((Carrier::Nat64, low)),
        [0x2002, _, _, _, _, _, _, _] => {
            Some((Carrier::SixToFour, Ipv4Addr::new(o[2], o[3], o[4], o[5])))
        }
        _ => None,
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unspecified => f.write_str("the unspecified address"),
            Self::ThisNetwork => f.write_str("in 0.0.0.0/8 (\"this network\")"),
            Self::Loopback => f.write_str("a loopback address"),
            Self::Metadata => f.write_str("a cloud metadata address"),
            Self::LinkLocal => f.write_str("a link-local address"),
            Self::Multicast => f.write_str("a multicast address"),
            Self::Broadcast => f.write_str("the broadcast address"),
            Self::Denied(net) => write!(f, "in {net}, which this CA does not connect to"),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some((carrier, v4)) = self.carried else {
            return write!(f, "{}", self.class);
        };
        let form = match carrier {
            Carrier::Mapped => "the IPv4-mapped form",
            Carrier::Compatible => "the IPv4-compatible form",
            Carrier::Nat64 => "the NAT64 (64:ff9b::/96) form",
            Carrier::SixToFour => "a 6to4 (2002::/16) form",
        };
        write!(f, "{form} of {v4}, which is {}", self.class)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strict() -> AddressPolicy {
        AddressPolicy::new(false, Vec::new())
    }

    fn refused(policy: &AddressPolicy, ip: &str) -> Option<String> {
        policy
            .refusal(ip.parse().unwrap())
            .map(|refusal| refusal.to_string())
    }

    #[test]
    fn every_class_is_refused_with_its_name() {
        let cases = [
            ("0.0.0.0", "the unspecified address"),
            ("::", "the unspecified address"),
            ("0.1.2.3", "0.0.0.0/8"),
            ("127.0.0.1", "a loopback address"),
            ("127.8.9.10", "a loopback address"),
            ("::1", "a loopback address"),
            ("169.254.169.254", "a cloud metadata address"),
            ("fd00:ec2::254", "a cloud metadata address"),
            ("169.254.0.1", "a link-local address"),
            ("169.254.255.255", "a link-local address"),
            ("fe80::1", "a link-local address"),
            ("febf::1", "a link-local address"),
            ("224.0.0.1", "a multicast address"),
            ("239.255.255.250", "a multicast address"),
            ("ff02::1", "a multicast address"),
            ("ff0e::1", "a multicast address"),
            ("255.255.255.255", "the broadcast address"),
        ];
        for (ip, class) in cases {
            let why = refused(&strict(), ip).unwrap_or_else(|| panic!("{ip} was allowed"));
            assert!(why.contains(class), "{ip}: {why}");
        }
    }

    #[test]
    fn public_and_private_addresses_are_allowed() {
        for ip in [
            "192.0.2.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "169.253.255.255",
            "169.255.0.1",
            "223.255.255.255",
            "255.255.255.254",
            "2001:db8::1",
            "fd00::1",
            "fd00:ec2::253",
            "fec0::1",
            "::ffff:192.0.2.1",
            "::192.0.2.1",
            "64:ff9b::c000:201",
            "2002:c000:201::1",
        ] {
            assert_eq!(refused(&strict(), ip), None, "{ip}");
        }
    }

    #[test]
    fn carried_ipv4_addresses_are_judged_as_ipv4() {
        let cases = [
            ("::ffff:169.254.169.254", "IPv4-mapped", "cloud metadata"),
            ("::ffff:127.0.0.1", "IPv4-mapped", "loopback"),
            ("::ffff:0.0.0.0", "IPv4-mapped", "unspecified"),
            ("::ffff:0.9.9.9", "IPv4-mapped", "0.0.0.0/8"),
            ("::ffff:169.254.1.1", "IPv4-mapped", "link-local"),
            ("::ffff:224.0.0.1", "IPv4-mapped", "multicast"),
            ("::ffff:255.255.255.255", "IPv4-mapped", "broadcast"),
            ("::169.254.169.254", "IPv4-compatible", "cloud metadata"),
            ("::127.0.0.1", "IPv4-compatible", "loopback"),
            ("::169.254.1.1", "IPv4-compatible", "link-local"),
            ("::224.0.0.1", "IPv4-compatible", "multicast"),
            ("::255.255.255.255", "IPv4-compatible", "broadcast"),
            ("::0.0.0.2", "IPv4-compatible", "0.0.0.0/8"),
            ("64:ff9b::a9fe:a9fe", "NAT64", "cloud metadata"),
            ("64:ff9b::7f00:1", "NAT64", "loopback"),
            ("64:ff9b::e000:1", "NAT64", "multicast"),
            ("2002:a9fe:a9fe::1", "6to4", "cloud metadata"),
            ("2002:7f00:1::", "6to4", "loopback"),
            ("2002:ffff:ffff::1", "6to4", "broadcast"),
        ];
        for (ip, form, class) in cases {
            let why = refused(&strict(), ip).unwrap_or_else(|| panic!("{ip} was allowed"));
            assert!(why.contains(form) && why.contains(class), "{ip}: {why}");
        }
    }

    #[test]
    fn loopback_in_every_form_follows_allow_loopback() {
        let lab = AddressPolicy::new(true, Vec::new());
        for ip in [
            "127.0.0.1",
            "127.8.9.10",
            "::1",
            "::ffff:127.0.0.1",
            "::127.0.0.1",
            "64:ff9b::7f00:1",
            "2002:7f00:1::1",
        ] {
            assert!(refused(&strict(), ip).unwrap().contains("loopback"), "{ip}");
            assert_eq!(refused(&lab, ip), None, "{ip}");
        }
        // allow-loopback never opens the other classes.
        for ip in ["0.0.0.0", "::", "169.254.169.254", "::ffff:169.254.169.254"] {
            assert!(refused(&lab, ip).is_some(), "{ip}");
        }
    }

    #[test]
    fn private_networks_are_rfc1918_shared_space_and_ula_in_every_form() {
        let cases = [
            ("10.0.0.1", "10.0.0.0/8"),
            ("10.255.255.255", "10.0.0.0/8"),
            ("172.16.0.1", "172.16.0.0/12"),
            ("172.31.255.254", "172.16.0.0/12"),
            ("192.168.1.1", "192.168.0.0/16"),
            ("100.64.0.1", "100.64.0.0/10"),
            ("100.127.255.254", "100.64.0.0/10"),
            ("fc00::1", "fc00::/7"),
            ("fd12:3456::1", "fc00::/7"),
            ("::ffff:10.1.2.3", "10.0.0.0/8"),
            ("::192.168.0.9", "192.168.0.0/16"),
            ("64:ff9b::ac10:1", "172.16.0.0/12"),
            ("2002:6440:1::1", "100.64.0.0/10"),
        ];
        for (ip, net) in cases {
            let found = private_network(ip.parse().unwrap());
            assert_eq!(found, Some(net.parse().unwrap()), "{ip}");
        }
        for ip in [
            "9.255.255.255",
            "11.0.0.1",
            "172.15.255.255",
            "172.32.0.1",
            "192.167.255.255",
            "192.169.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "127.0.0.1",
            "192.0.2.1",
            "fe00::1",
            "2001:db8::1",
            "::1",
            "::ffff:192.0.2.1",
        ] {
            assert_eq!(private_network(ip.parse().unwrap()), None, "{ip}");
        }
    }

    #[test]
    fn denied_networks_apply_to_every_form() {
        let deny: Vec<IpNet> = ["10.0.0.0/8", "2001:db8:bad::/48", "127.0.0.0/8"]
            .iter()
            .map(|n| n.parse().unwrap())
            .collect();
        let policy = AddressPolicy::new(true, deny);
        for ip in [
            "10.1.2.3",
            "::ffff:10.1.2.3",
            "::10.1.2.3",
            "64:ff9b::a01:203",
            "2002:a01:203::1",
            "2001:db8:bad::1",
            // A denied network beats allow-loopback.
            "127.0.0.1",
            "::ffff:127.0.0.1",
        ] {
            let why = refused(&policy, ip).unwrap_or_else(|| panic!("{ip} was allowed"));
            assert!(
                why.contains("which this CA does not connect to"),
                "{ip}: {why}"
            );
        }
        for ip in ["11.0.0.1", "2001:db8:bbd::1", "::1", "192.168.0.1"] {
            assert_eq!(refused(&policy, ip), None, "{ip}");
        }
    }
}
