//! Redirects cannot map the network the CA sits in: they lead into private networks only from a
//! private identifier, and nothing another host answered is reported.
//!
//! The private addresses (10.x, fd00::/8) only ever appear in Location headers and DNS answers;
//! the validator refuses them before connecting, so no packet leaves loopback. The identifiers
//! here are on loopback, which `allow_loopback` admits but which is not a private network, so
//! they are public identifiers as far as the private-redirect rule goes.

use acme_core::problem::ProblemType;
use acme_core::status::ChallengeType::Http01;
use validation::Retry;

use crate::common::{Env, KEY_AUTH, account, dns, ip};
use crate::hosts::{bind_same_port, found, loopback, ok, serve, serve_by_path, silent};

#[tokio::test]
async fn redirects_to_private_literals_are_refused_before_connecting() {
    let env = Env::start().await;
    let port = env.http.port();
    let cases = [
        (format!("http://10.9.8.7:{port}/"), "10.0.0.0/8"),
        (format!("http://172.16.5.4:{port}/"), "172.16.0.0/12"),
        (format!("http://192.168.77.1:{port}/"), "192.168.0.0/16"),
        (format!("http://100.64.0.9:{port}/"), "100.64.0.0/10"),
        (format!("http://[fd00::9]:{port}/"), "fc00::/7"),
        (format!("http://[::ffff:10.9.8.7]:{port}/"), "10.0.0.0/8"),
    ];
    let validator = env.validator();
    for (index, (location, net)) in cases.iter().enumerate() {
        let token = format!("private{index}");
        env.http
            .add_redirect(&format!("/.well-known/acme-challenge/{token}"), location);
        for identifier in [ip("127.0.0.1"), dns("a.test")] {
            let failure = validator
                .attempt(&identifier, Http01, &token, KEY_AUTH, &account())
                .await
                .unwrap_err();
            let problem = &failure.problem;
            assert_eq!(problem.kind, ProblemType::Connection, "{location}");
            assert_eq!(failure.retry, Retry::Definite, "{location}");
            // The refusal of the redirect rules, which run before any connection to the target.
            assert!(
                problem.detail.contains("refused: ")
                    && problem
                        .detail
                        .contains(&format!("is in the private network {net}")),
                "{location}: {}",
                problem.detail
            );
        }
    }
}

#[tokio::test]
async fn redirects_to_names_resolving_only_to_private_addresses_are_refused() {
    let env = Env::start().await;
    let port = env.http.port();
    env.dns
        .set_a("intranet.test", "10.20.30.40".parse().unwrap());
    env.dns
        .set_aaaa("ula.test", "fd12:3456::1".parse().unwrap());
    let validator = env.validator();
    for name in ["intranet.test", "ula.test"] {
        let token = format!("to-{}", name.replace('.', "-"));
        env.http.add_redirect(
            &format!("/.well-known/acme-challenge/{token}"),
            &format!("http://{name}:{port}/.well-known/acme-challenge/{token}"),
        );
        let failure = validator
            .attempt(&dns("a.test"), Http01, &token, KEY_AUTH, &account())
            .await
            .unwrap_err();
        assert_eq!(failure.problem.kind, ProblemType::IncorrectResponse);
        assert_eq!(failure.retry, Retry::Definite);
        let detail = &failure.problem.detail;
        assert!(
            detail.contains("a redirect led to another host"),
            "{detail}"
        );
        for leaked in ["10.20", "fd12", "private", "resolves"] {
            assert!(!detail.contains(leaked), "{leaked}: {detail}");
        }
    }
}

#[tokio::test]
async fn private_redirects_setting_does_not_open_refused_classes() {
    let env = Env::start().await;
    let port = env.http.port();
    env.http.add_redirect(
        "/.well-known/acme-challenge/meta",
        &format!("http://169.254.169.254:{port}/"),
    );
    let problem = env
        .validator_with(|s| s.allow_private_redirects = true)
        .validate(&ip("127.0.0.1"), Http01, "meta", KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::Connection);
    assert!(
        problem.detail.contains("cloud metadata"),
        "{}",
        problem.detail
    );
}

/// What happens at another host (a 500 with a secret page, a 404, a wrong body, a refused
/// connection, an unknown name, a redirect of its own to a refused address) all reads the same:
/// one detail, one type, never retried.
#[tokio::test]
async fn failures_at_another_host_are_reported_alike_and_reveal_nothing() {
    let env = Env::start().await;
    const SECRET: &str = "SECRET-admin-panel root:hunter2";
    let (port, mut sockets) = bind_same_port(&[loopback(1), loopback(2), loopback(3)]);
    // 127.0.0.3 is bound but never listens: connecting there is refused.
    let closed = sockets.remove(2);
    let other = serve_by_path(sockets.remove(1), move |path| {
        match path.trim_start_matches("/.well-known/acme-challenge/") {
            "error" => format!(
                "HTTP/1.1 500 Internal Server Error\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{SECRET}",
                SECRET.len()
            ),
            "wrong" => ok(SECRET),
            "onward" => found("http://169.254.169.254/latest/meta-data/"),
            _ => format!(
                "HTTP/1.1 404 Not Found\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{SECRET}",
                SECRET.len()
            ),
        }
    });
    env.dns.set_a("other.test", loopback(2));
    env.dns.set_a("closed.test", loopback(3));
    let targets = [
        format!("http://other.test:{port}/.well-known/acme-challenge/error"),
        format!("http://other.test:{port}/.well-known/acme-challenge/wrong"),
        format!("http://other.test:{port}/.well-known/acme-challenge/missing"),
        format!("http://other.test:{port}/.well-known/acme-challenge/onward"),
        format!("http://closed.test:{port}/.well-known/acme-challenge/x"),
        format!("http://unknown.test:{port}/.well-known/acme-challenge/x"),
    ];
    let routes = targets.clone();
    // The identifier's host, 127.0.0.1, redirects case{i} to targets[i].
    let origin = serve_by_path(sockets.remove(0), move |path| {
        path.strip_prefix("/.well-known/acme-challenge/case")
            .and_then(|i| i.parse::<usize>().ok())
            .and_then(|i| routes.get(i))
            .map_or_else(|| ok("not here"), |location| found(location))
    });
    let validator = env.validator_with(|s| s.http_port = port);
    let mut details = Vec::new();
    for (index, target) in targets.iter().enumerate() {
        let token = format!("case{index}");
        let failure = validator
            .attempt(&dns("a.test"), Http01, &token, KEY_AUTH, &account())
            .await
            .unwrap_err();
        assert_eq!(
            failure.problem.kind,
            ProblemType::IncorrectResponse,
            "{target}"
        );
        assert_eq!(failure.retry, Retry::Definite, "{target}");
        let detail = failure.problem.detail;
        for leaked in [
            "SECRET", "hunter2", "500", "404", "Internal", "refused", "NXDOMAIN", "169.254",
            "metadata", "127.0.0",
        ] {
            assert!(!detail.contains(leaked), "{target}: {leaked} in {detail}");
        }
        assert!(
            detail.starts_with(&format!(
                "Fetching http://a.test:{port}/.well-known/acme-challenge/{token}: a redirect led to another host"
            )),
            "{target}: {detail}"
        );
        details.push(detail.replace(&token, "TOKEN"));
    }
    assert!(
        details.windows(2).all(|pair| pair[0] == pair[1]),
        "{details:#?}"
    );
    assert_eq!(origin.count(), targets.len());
    assert_eq!(
        other.count(),
        4,
        "the other host was reached for its four cases"
    );
    drop(closed);

    // The same from an IP identifier redirected to another address.
    let (port, mut sockets) = bind_same_port(&[loopback(1), loopback(2)]);
    let other = serve(
        sockets.remove(1),
        format!(
            "HTTP/1.1 500 Internal Server Error\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{SECRET}",
            SECRET.len()
        ),
    );
    let origin = serve(
        sockets.remove(0),
        found(&format!(
            "http://127.0.0.2:{port}/.well-known/acme-challenge/t"
        )),
    );
    let failure = env
        .validator_with(|s| s.http_port = port)
        .attempt(&ip("127.0.0.1"), Http01, "t", KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(failure.problem.kind, ProblemType::IncorrectResponse);
    assert_eq!(failure.retry, Retry::Definite);
    let detail = &failure.problem.detail;
    assert!(
        detail.contains("a redirect led to another host"),
        "{detail}"
    );
    for leaked in ["SECRET", "500", "Internal", "127.0.0.2"] {
        assert!(!detail.contains(leaked), "{leaked} in {detail}");
    }
    assert_eq!((origin.count(), other.count()), (1, 1));
}

#[tokio::test]
async fn failures_back_on_the_identifiers_host_are_still_reported() {
    let env = Env::start().await;
    let port = env.http.port();
    // a.test -> b.test (another host) -> a.test, which answers 404 with its own detail.
    env.http.add_redirect(
        "/.well-known/acme-challenge/out",
        &format!("http://b.test:{port}/.well-known/acme-challenge/back"),
    );
    env.http.add_redirect(
        "/.well-known/acme-challenge/back",
        &format!("http://a.test:{port}/.well-known/acme-challenge/gone"),
    );
    let problem = env
        .validator()
        .validate(&dns("a.test"), Http01, "out", KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::IncorrectResponse);
    assert!(
        problem.detail.contains(&format!(
            "Fetching http://a.test:{port}/.well-known/acme-challenge/gone: the server answered 404"
        )),
        "{}",
        problem.detail
    );
}

/// A host that accepts the connection and never answers is reported like every other failure at
/// another host, not as the attempt's time limit (which would say that something listens there).
#[tokio::test]
async fn a_silent_host_after_a_redirect_is_not_reported_as_the_time_limit() {
    let env = Env::start().await;
    let (port, mut sockets) = bind_same_port(&[loopback(1), loopback(2)]);
    let held = silent(sockets.remove(1));
    env.dns.set_a("quiet.test", loopback(2));
    let origin = serve(
        sockets.remove(0),
        found(&format!(
            "http://quiet.test:{port}/.well-known/acme-challenge/t"
        )),
    );
    let failure = env
        .validator_with(|s| {
            s.http_port = port;
            s.timeout = std::time::Duration::from_secs(2);
        })
        .attempt(&dns("a.test"), Http01, "t", KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(failure.problem.kind, ProblemType::IncorrectResponse);
    assert_eq!(failure.retry, Retry::Definite);
    let detail = &failure.problem.detail;
    assert!(
        detail.contains("a redirect led to another host"),
        "{detail}"
    );
    assert!(!detail.contains("time limit"), "{detail}");
    assert_eq!((origin.count(), held.count()), (1, 1));
}
