//! Bounded work: one attempt ends within `timeout` whatever the targets do, and a name's extra
//! addresses are never tried.

use std::time::{Duration, Instant};

use acme_core::problem::ProblemType;
use acme_core::status::ChallengeType::{Http01, TlsAlpn01};
use validation::MAX_ADDRESSES_PER_NAME;

use crate::common::{Env, KEY_AUTH, account, dns};
use crate::hosts::{bind_same_port, loopback, ok, serve, silent, unresponsive};

const TOKEN: &str = "tok3n";

/// Scheduling slack on a loaded 2-core machine, on top of the documented worst case.
const SLACK: Duration = Duration::from_secs(3);

#[tokio::test]
async fn many_silent_addresses_end_within_the_attempt_timeout() {
    let env = Env::start().await;
    let ips: Vec<_> = (2..=11).map(loopback).collect();
    env.dns.set_a_records("many.test", &ips);
    let (port, sockets) = bind_same_port(&ips);
    let targets: Vec<_> = sockets.into_iter().map(silent).collect();
    let timeout = Duration::from_secs(3);
    let mut settings = env.settings();
    settings.http_port = port;
    settings.tls_alpn_port = port;
    settings.timeout = timeout;
    let worst = settings.worst_case_attempt();
    assert!(worst >= timeout);
    let validator = validation::Validator::new(settings).unwrap();
    assert_eq!(validator.worst_case_attempt(), worst);

    for challenge in [Http01, TlsAlpn01] {
        let started = Instant::now();
        let problem = validator
            .validate(&dns("many.test"), challenge, TOKEN, KEY_AUTH, &account())
            .await
            .unwrap_err();
        let took = started.elapsed();
        assert_eq!(problem.kind, ProblemType::Connection, "{problem:?}");
        assert!(took < worst + SLACK, "{challenge:?} took {took:?}");
        // Every target accepts at once, so only the first is ever needed; the cap is proven below.
        assert!(
            problem.detail.contains("timed out") || problem.detail.contains("exceeded"),
            "{}",
            problem.detail
        );
    }
    let contacted: Vec<_> = targets.iter().map(|t| t.count()).collect();
    assert!(
        contacted
            .iter()
            .skip(MAX_ADDRESSES_PER_NAME)
            .all(|&n| n == 0),
        "{contacted:?}"
    );
    assert!(contacted[0] >= 1, "{contacted:?}");
}

#[tokio::test]
async fn a_silent_http_peer_is_cut_off_by_the_attempt_deadline() {
    let env = Env::start().await;
    let (port, mut sockets) = bind_same_port(&[loopback(2)]);
    env.dns.set_a("slow.test", loopback(2));
    let target = silent(sockets.remove(0));
    let validator = env.validator_with(|s| {
        s.http_port = port;
        s.timeout = Duration::from_secs(2);
    });
    let started = Instant::now();
    let problem = validator
        .validate(&dns("slow.test"), Http01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(2), "{took:?}");
    assert!(took < Duration::from_secs(2) + SLACK, "{took:?}");
    assert_eq!(problem.kind, ProblemType::Connection);
    assert_eq!(
        problem.detail,
        "The http-01 validation attempt for slow.test exceeded the time limit of 2s and was abandoned"
    );
    assert_eq!(target.count(), 1);
}

#[tokio::test]
async fn addresses_beyond_the_cap_are_never_tried() {
    let env = Env::start().await;
    let ips: Vec<_> = (2..=11).map(loopback).collect();
    env.dns.set_a_records("capped.test", &ips);
    // The first MAX_ADDRESSES_PER_NAME addresses refuse connections (bound, not listening); every
    // later one would answer correctly, so trying any of them would make the attempt succeed.
    let (port, mut sockets) = bind_same_port(&ips);
    let answering = sockets.split_off(MAX_ADDRESSES_PER_NAME);
    let later: Vec<_> = answering
        .into_iter()
        .map(|socket| serve(socket, ok(KEY_AUTH)))
        .collect();
    let validator = env.validator_with(|s| {
        s.http_port = port;
        s.tls_alpn_port = port;
    });
    for challenge in [Http01, TlsAlpn01] {
        let problem = validator
            .validate(&dns("capped.test"), challenge, TOKEN, KEY_AUTH, &account())
            .await
            .unwrap_err();
        assert_eq!(problem.kind, ProblemType::Connection, "{problem:?}");
        assert!(
            problem.detail.contains("connection refused"),
            "{}",
            problem.detail
        );
    }
    let contacted: Vec<_> = later.iter().map(|t| t.count()).collect();
    assert!(contacted.iter().all(|&n| n == 0), "{contacted:?}");
    drop(sockets);
}

#[tokio::test]
async fn a_refused_first_address_falls_back_to_the_second() {
    let env = Env::start().await;
    let (port, mut sockets) = bind_same_port(&[loopback(2), loopback(3)]);
    env.dns
        .set_a_records("fallback.test", &[loopback(2), loopback(3)]);
    let second = serve(sockets.remove(1), ok(KEY_AUTH));
    let validator = env.validator_with(|s| s.http_port = port);
    validator
        .validate(&dns("fallback.test"), Http01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();
    assert_eq!(second.count(), 1);
    drop(sockets);
}

#[tokio::test]
async fn an_unresponsive_first_address_leaves_time_for_the_second() {
    let env = Env::start().await;
    let (port, mut sockets) = bind_same_port(&[loopback(2), loopback(3)]);
    env.dns
        .set_a_records("blackhole.test", &[loopback(2), loopback(3)]);
    let second = serve(sockets.remove(1), ok(KEY_AUTH));
    let _first = unresponsive(sockets.remove(0)).await;
    let timeout = Duration::from_secs(4);
    let validator = env.validator_with(|s| {
        s.http_port = port;
        s.timeout = timeout;
    });
    let started = Instant::now();
    validator
        .validate(&dns("blackhole.test"), Http01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();
    // The first address was tried (and waited for) but got only its share of the connect
    // budget, not the whole attempt.
    let took = started.elapsed();
    assert!(took >= timeout / 8, "{took:?}");
    assert!(took < timeout, "{took:?}");
    assert_eq!(second.count(), 1);
}

/// A nameserver that takes queries and never answers (over UDP and TCP) holds every lookup of
/// the attempt: A/AAAA, TXT and the CAA walk. The attempt still ends by its deadline.
#[tokio::test]
async fn a_silent_nameserver_cannot_hold_an_attempt_past_its_deadline() {
    // A UDP port whose TCP twin is free too (another test may hold it over TCP): the same port
    // over TCP accepts and never answers, for hickory's TCP fallback.
    let (udp, tcp, addr) = (0..50)
        .find_map(|_| {
            let udp = std::net::UdpSocket::bind("127.0.0.1:0").ok()?;
            let addr = udp.local_addr().ok()?;
            let tcp = std::net::TcpListener::bind(addr).ok()?;
            Some((udp, tcp, addr))
        })
        .expect("a UDP port whose TCP twin is free");
    let env = Env::start().await;
    let mut settings = env.settings();
    settings.dns_servers = vec![addr];
    settings.caa_identities = vec!["ca.test".to_owned()];
    settings.timeout = Duration::from_secs(3);
    let worst = settings.worst_case_attempt();
    let validator = validation::Validator::new(settings).unwrap();
    for challenge in [Http01, acme_core::status::ChallengeType::Dns01] {
        let started = Instant::now();
        let problem = validator
            .validate(
                &dns("silent-ns.test"),
                challenge,
                TOKEN,
                KEY_AUTH,
                &account(),
            )
            .await
            .unwrap_err();
        let took = started.elapsed();
        assert!(
            matches!(problem.kind, ProblemType::Dns | ProblemType::Connection),
            "{problem:?}"
        );
        assert!(took < worst + SLACK, "{challenge:?} took {took:?}");
    }
    drop((udp, tcp));
}
