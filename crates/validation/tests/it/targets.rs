//! The target-address policy end to end: DNS answers and redirects that land on refused
//! addresses fail with a `connection` problem before any connection is made.
//!
//! Refused non-loopback addresses (169.254.169.254, fe80::1, …) only ever appear in DNS answers
//! and Location headers; the policy refuses them before connecting, so no packet leaves loopback.
//! That nothing connects is proven with loopback targets denied by `deny_target_cidrs`.

use acme_core::problem::ProblemType;
use acme_core::status::ChallengeType::{Http01, TlsAlpn01};

use crate::common::{Env, KEY_AUTH, account, dns, ip};
use crate::hosts::{bind_same_port, found, loopback, ok, serve, serve_by_path};

const TOKEN: &str = "tok3n";

#[tokio::test]
async fn dns_answers_with_only_refused_addresses_are_connection_problems() {
    let env = Env::start().await;
    env.dns
        .set_a("meta.test", "169.254.169.254".parse().unwrap());
    env.dns
        .set_aaaa("mapped.test", "::ffff:169.254.169.254".parse().unwrap());
    env.dns
        .set_aaaa("compat.test", "::169.254.169.254".parse().unwrap());
    env.dns.set_aaaa("ll.test", "fe80::1".parse().unwrap());
    env.dns
        .set_aaaa("imds6.test", "fd00:ec2::254".parse().unwrap());
    env.dns
        .set_aaaa("nat64.test", "64:ff9b::a9fe:a9fe".parse().unwrap());
    env.dns
        .set_aaaa("sixtofour.test", "2002:a9fe:a9fe::1".parse().unwrap());
    env.dns
        .set_a("bcast.test", "255.255.255.255".parse().unwrap());
    env.dns.set_a("mcast.test", "224.0.0.1".parse().unwrap());
    env.dns.set_a("zero.test", "0.0.0.0".parse().unwrap());
    env.dns.set_a("thisnet.test", "0.1.2.3".parse().unwrap());
    let validator = env.validator();
    let cases = [
        ("meta.test", "169.254.169.254 (a cloud metadata address)"),
        (
            "mapped.test",
            "::ffff:169.254.169.254 (the IPv4-mapped form of 169.254.169.254, which is a cloud metadata address)",
        ),
        ("compat.test", "the IPv4-compatible form of 169.254.169.254"),
        ("ll.test", "fe80::1 (a link-local address)"),
        ("imds6.test", "fd00:ec2::254 (a cloud metadata address)"),
        ("nat64.test", "NAT64 (64:ff9b::/96) form of 169.254.169.254"),
        ("sixtofour.test", "6to4 (2002::/16) form of 169.254.169.254"),
        ("bcast.test", "255.255.255.255 (the broadcast address)"),
        ("mcast.test", "224.0.0.1 (a multicast address)"),
        ("zero.test", "0.0.0.0 (the unspecified address)"),
        ("thisnet.test", "0.1.2.3 (in 0.0.0.0/8"),
    ];
    for (name, why) in cases {
        for challenge in [Http01, TlsAlpn01] {
            let problem = validator
                .validate(&dns(name), challenge, TOKEN, KEY_AUTH, &account())
                .await
                .unwrap_err();
            assert_eq!(problem.kind, ProblemType::Connection, "{name}: {problem:?}");
            assert!(
                problem
                    .detail
                    .contains(&format!("{name} resolves only to addresses")),
                "{name}: {}",
                problem.detail
            );
            assert!(problem.detail.contains(why), "{name}: {}", problem.detail);
        }
    }
}

#[tokio::test]
async fn mapped_loopback_answers_are_refused_unless_loopback_is_allowed() {
    let env = Env::start().await;
    env.http.add(TOKEN, KEY_AUTH);
    env.dns
        .set_aaaa("mapped-lo.test", "::ffff:127.0.0.1".parse().unwrap());
    let strict = env.validator_with(|s| s.allow_loopback = false);
    let problem = strict
        .validate(&dns("mapped-lo.test"), Http01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::Connection);
    assert!(
        problem
            .detail
            .contains("the IPv4-mapped form of 127.0.0.1, which is a loopback address"),
        "{}",
        problem.detail
    );
}

#[tokio::test]
async fn redirects_to_refused_ip_literals_are_connection_problems() {
    let env = Env::start().await;
    let port = env.http.port();
    let cases = [
        (
            format!("http://169.254.169.254:{port}/latest/meta-data/"),
            "169.254.169.254 is a cloud metadata address",
        ),
        // Port 80 is not the test's http port: the address is still what is reported.
        (
            "http://169.254.169.254/latest/meta-data/".to_owned(),
            "169.254.169.254 is a cloud metadata address",
        ),
        (
            format!("http://[::ffff:169.254.169.254]:{port}/"),
            "the IPv4-mapped form of 169.254.169.254",
        ),
        (
            format!("http://[::169.254.169.254]:{port}/"),
            "the IPv4-compatible form of 169.254.169.254",
        ),
        (format!("http://[fe80::1]:{port}/"), "a link-local address"),
        (
            format!("http://[fd00:ec2::254]:{port}/"),
            "a cloud metadata address",
        ),
        (
            format!("http://255.255.255.255:{port}/"),
            "the broadcast address",
        ),
    ];
    let validator = env.validator();
    for (index, (location, why)) in cases.iter().enumerate() {
        let token = format!("redir{index}");
        env.http
            .add_redirect(&format!("/.well-known/acme-challenge/{token}"), location);
        for identifier in [ip("127.0.0.1"), dns("a.test")] {
            let problem = validator
                .validate(&identifier, Http01, &token, KEY_AUTH, &account())
                .await
                .unwrap_err();
            assert_eq!(problem.kind, ProblemType::Connection, "{location}");
            assert!(
                problem.detail.contains("refused") && problem.detail.contains(why),
                "{location}: {}",
                problem.detail
            );
        }
    }
}

#[tokio::test]
async fn redirects_to_names_resolving_to_refused_addresses_are_connection_problems() {
    let env = Env::start().await;
    let port = env.http.port();
    env.dns
        .set_a("meta.test", "169.254.169.254".parse().unwrap());
    env.dns
        .set_aaaa("mapped.test", "::ffff:169.254.169.254".parse().unwrap());
    for (token, name) in [("tometa", "meta.test"), ("tomapped", "mapped.test")] {
        env.http.add_redirect(
            &format!("/.well-known/acme-challenge/{token}"),
            &format!("http://{name}:{port}/latest/meta-data/"),
        );
        let problem = env
            .validator()
            .validate(&dns("a.test"), Http01, token, KEY_AUTH, &account())
            .await
            .unwrap_err();
        // Refused before connecting, and reported as any failure at another host is: what the
        // validator's DNS answered for another host is not the subscriber's to read.
        assert_eq!(problem.kind, ProblemType::IncorrectResponse, "{problem:?}");
        assert!(
            problem.detail.contains("a redirect led to another host"),
            "{}",
            problem.detail
        );
        for leaked in ["169.254", "metadata", "resolves"] {
            assert!(!problem.detail.contains(leaked), "{}", problem.detail);
        }
    }
}

#[tokio::test]
async fn denied_target_cidrs_are_never_connected_to() {
    let env = Env::start().await;
    let (port, mut sockets) = bind_same_port(&[loopback(1)]);
    let target = serve(sockets.remove(0), ok(KEY_AUTH));
    let validator = env.validator_with(|s| {
        s.http_port = port;
        s.tls_alpn_port = port;
        s.allow_loopback = true;
        s.deny_target_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
    });
    for challenge in [Http01, TlsAlpn01] {
        let problem = validator
            .validate(&dns("a.test"), challenge, TOKEN, KEY_AUTH, &account())
            .await
            .unwrap_err();
        assert_eq!(problem.kind, ProblemType::Connection, "{problem:?}");
        assert!(
            problem
                .detail
                .contains("127.0.0.1 (in 127.0.0.0/8, which this CA does not connect to)"),
            "{}",
            problem.detail
        );
        let problem = validator
            .validate(&ip("127.0.0.1"), challenge, TOKEN, KEY_AUTH, &account())
            .await
            .unwrap_err();
        assert_eq!(problem.kind, ProblemType::RejectedIdentifier);
        assert!(problem.detail.contains("127.0.0.0/8"), "{}", problem.detail);
    }
    assert_eq!(target.count(), 0, "a denied target received a connection");
}

#[tokio::test]
async fn redirects_into_denied_networks_are_never_followed() {
    let env = Env::start().await;
    let (port, mut sockets) = bind_same_port(&[loopback(1), loopback(2)]);
    let denied = serve(sockets.remove(1), ok(KEY_AUTH));
    env.dns.set_a("denied.test", loopback(2));
    let cases = [
        (
            dns("a.test"),
            format!("http://denied.test:{port}/.well-known/acme-challenge/{TOKEN}"),
            // A name is resolved for the request to another host: nothing of that is reported.
            "a redirect led to another host",
        ),
        (
            ip("127.0.0.1"),
            format!("http://[::ffff:127.0.0.2]:{port}/.well-known/acme-challenge/{TOKEN}"),
            "::ffff:127.0.0.2 is the IPv4-mapped form of 127.0.0.2, which is in 127.0.0.2/32",
        ),
        (
            ip("127.0.0.1"),
            format!("http://127.0.0.2:{port}/.well-known/acme-challenge/{TOKEN}"),
            "127.0.0.2 is in 127.0.0.2/32",
        ),
    ];
    let locations: Vec<String> = cases.iter().map(|(_, l, _)| l.clone()).collect();
    // The origin on 127.0.0.1 redirects /.well-known/acme-challenge/case{i} to locations[i].
    let origin = serve_by_path(sockets.remove(0), move |path| {
        path.strip_prefix("/.well-known/acme-challenge/case")
            .and_then(|i| i.parse::<usize>().ok())
            .and_then(|i| locations.get(i))
            .map_or_else(|| ok("not here"), |location| found(location))
    });
    let validator = env.validator_with(|s| {
        s.http_port = port;
        s.allow_loopback = true;
        s.deny_target_cidrs = vec!["127.0.0.2/32".parse().unwrap()];
    });
    for (index, (identifier, location, why)) in cases.iter().enumerate() {
        let problem = validator
            .validate(
                identifier,
                Http01,
                &format!("case{index}"),
                KEY_AUTH,
                &account(),
            )
            .await
            .unwrap_err();
        let expected = if index == 0 {
            ProblemType::IncorrectResponse
        } else {
            ProblemType::Connection
        };
        assert_eq!(problem.kind, expected, "{location}");
        assert!(
            problem.detail.contains(why),
            "{location}: {}",
            problem.detail
        );
    }
    assert_eq!(origin.count(), cases.len(), "the origin served each case");
    assert_eq!(denied.count(), 0, "a denied redirect target was contacted");
}
