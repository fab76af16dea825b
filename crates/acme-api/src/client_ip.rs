//! Which address a request comes from: the peer, or the client a trusted proxy names in
//! `X-Forwarded-For`. Per-IP limits, the whitelist and the logs all key on this one address, so
//! every form of an address is canonicalised here: an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`,
//! what a `[::]` listener reports for IPv4 clients) is the IPv4 address, or it would get a bucket
//! of its own and escape the whitelist.

use std::net::IpAddr;
use std::net::SocketAddr;

use axum::http::HeaderMap;
use ipnet::IpNet;

/// The client address of a request from `peer` carrying `headers`.
///
/// When the peer is a trusted proxy, `X-Forwarded-For` is walked from the right, because only the
/// hops our own proxies appended are trustworthy: a client can write anything on the left. The
/// first untrusted hop is the client. An unparseable hop ends the walk, since whoever wrote it
/// is not vouched for by anyone to its right; the client is then the nearest address we could
/// still parse (the hop just right of it, or the peer). When every hop is trusted, the leftmost
/// one is the client.
pub(crate) fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let peer = peer.to_canonical();
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|n| n.contains(ip));
    if !is_trusted(&peer) {
        return peer;
    }
    // Several header lines are one list, in order (RFC 9110 §5.3).
    let mut nearest = peer;
    for line in headers.get_all("x-forwarded-for").iter().rev() {
        // A line that is not even text is one unparseable hop.
        let Ok(line) = line.to_str() else {
            return nearest;
        };
        for hop in line.rsplit(',').map(str::trim) {
            if hop.is_empty() {
                // `a, , b` or a trailing comma: no hop was written here, nothing to distrust.
                continue;
            }
            let Some(ip) = parse_hop(hop) else {
                return nearest;
            };
            if !is_trusted(&ip) {
                return ip;
            }
            nearest = ip;
        }
    }
    nearest
}

/// One `X-Forwarded-For` entry: an address, optionally with a port (`1.2.3.4:80`,
/// `[2001:db8::1]:443`) or in brackets, canonicalised.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let ip = hop
        .parse::<IpAddr>()
        .ok()
        .or_else(|| hop.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .or_else(|| {
            hop.strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .and_then(|h| h.parse::<IpAddr>().ok())
        })?;
    Some(ip.to_canonical())
}

/// Trusted-proxy networks written as IPv4-mapped IPv6 (`::ffff:10.0.0.1/128`) as their IPv4
/// network, since the addresses they are compared with are canonical.
pub(crate) fn canonical_nets(nets: Vec<IpNet>) -> Vec<IpNet> {
    nets.into_iter()
        .map(ratelimits::config::canonical_net)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use axum::http::HeaderMap;
    use axum::http::HeaderValue;
    use ipnet::IpNet;

    use super::canonical_nets;
    use super::client_ip;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn nets(list: &[&str]) -> Vec<IpNet> {
        canonical_nets(
            list.iter()
                .map(|s| s.parse().unwrap_or_else(|_| IpNet::from(ip(s))))
                .collect(),
        )
    }

    fn xff(lines: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for l in lines {
            h.append("x-forwarded-for", HeaderValue::from_str(l).unwrap());
        }
        h
    }

    const PROXY: &str = "192.0.2.10";

    #[test]
    fn an_untrusted_peer_is_the_client_and_its_header_is_ignored() {
        let got = client_ip(ip("198.51.100.1"), &xff(&["203.0.113.9"]), &nets(&[PROXY]));
        assert_eq!(got, ip("198.51.100.1"));
    }

    #[test]
    fn mapped_peers_are_their_ipv4_address() {
        assert_eq!(
            client_ip(ip("::ffff:127.0.0.1"), &HeaderMap::new(), &[]),
            ip("127.0.0.1")
        );
        // A mapped proxy is trusted by its IPv4 entry, and mapped hops are canonical too.
        let got = client_ip(
            ip("::ffff:192.0.2.10"),
            &xff(&["::ffff:203.0.113.9"]),
            &nets(&[PROXY]),
        );
        assert_eq!(got, ip("203.0.113.9"));
        // A trusted network written in mapped form matches the IPv4 peer.
        let got = client_ip(
            ip("192.0.2.10"),
            &xff(&["203.0.113.9"]),
            &nets(&["::ffff:192.0.2.10/128"]),
        );
        assert_eq!(got, ip("203.0.113.9"));
    }

    #[test]
    fn the_walk_goes_right_to_left_through_trusted_hops_only() {
        let trusted = nets(&[PROXY, "192.0.2.11"]);
        // The client prepended a lie; the proxies appended the truth on the right.
        let got = client_ip(
            ip(PROXY),
            &xff(&["6.6.6.6, 203.0.113.9, 192.0.2.11"]),
            &trusted,
        );
        assert_eq!(got, ip("203.0.113.9"));
        // Several header lines form one list.
        let got = client_ip(
            ip(PROXY),
            &xff(&["6.6.6.6", "203.0.113.9", "192.0.2.11"]),
            &trusted,
        );
        assert_eq!(got, ip("203.0.113.9"));
        // Ports and brackets are accepted.
        let got = client_ip(ip(PROXY), &xff(&["[2001:db8::7]:443"]), &trusted);
        assert_eq!(got, ip("2001:db8::7"));
        let got = client_ip(ip(PROXY), &xff(&["203.0.113.9:5000"]), &trusted);
        assert_eq!(got, ip("203.0.113.9"));
    }

    #[test]
    fn an_unparseable_hop_stops_the_walk_at_the_nearest_parsed_address() {
        let trusted = nets(&[PROXY, "192.0.2.11"]);
        // The bad hop is right of the client's claim: the claim is never reached, and the
        // nearest parsed hop (the inner proxy) is the key.
        let got = client_ip(
            ip(PROXY),
            &xff(&["203.0.113.9, unknown, 192.0.2.11"]),
            &trusted,
        );
        assert_eq!(got, ip("192.0.2.11"));
        // A bad rightmost hop: the peer itself is the nearest parsed address.
        let got = client_ip(ip(PROXY), &xff(&["203.0.113.9, garbage"]), &trusted);
        assert_eq!(got, ip(PROXY));
        // A bad hop left of the first untrusted one changes nothing.
        let got = client_ip(ip(PROXY), &xff(&["_hidden, 203.0.113.9"]), &trusted);
        assert_eq!(got, ip("203.0.113.9"));
        // A header line that is not even text is unparseable too.
        let mut headers = xff(&["203.0.113.9"]);
        headers.append(
            "x-forwarded-for",
            HeaderValue::from_bytes(b"\xff\xfe").unwrap(),
        );
        assert_eq!(client_ip(ip(PROXY), &headers, &trusted), ip(PROXY));
    }

    #[test]
    fn all_trusted_hops_give_the_leftmost_and_no_header_gives_the_peer() {
        let trusted = nets(&["192.0.2.0/28"]);
        let got = client_ip(ip(PROXY), &xff(&["192.0.2.3, 192.0.2.4"]), &trusted);
        assert_eq!(got, ip("192.0.2.3"));
        assert_eq!(client_ip(ip(PROXY), &HeaderMap::new(), &trusted), ip(PROXY));
        // Empty list elements are skipped, not treated as garbage.
        let got = client_ip(ip(PROXY), &xff(&["203.0.113.9, , "]), &trusted);
        assert_eq!(got, ip("203.0.113.9"));
    }
}
