//! Whether a failed attempt may be propagating (repeated later by the workers), transient (final,
//! but may pass with a new order) or definite, against real servers: the classification is made
//! where the failure is seen, and an attempt repeated once the cause is gone succeeds.

use std::net::{Ipv4Addr, SocketAddr};

use acme_core::problem::ProblemType;
use acme_core::status::ChallengeType;
use acme_core::status::ChallengeType::{Dns01, Http01, TlsAlpn01};
use testkit::http01::Http01Responder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use validation::{Failure, Retry, Validator};

use crate::common::{Env, KEY_AUTH, account, closed_port, dns};
use crate::dns01::txt_value;

const TOKEN: &str = "tok3n";

/// One attempt at the `a.test` challenge of `kind`, as a worker makes it.
async fn attempt(validator: &Validator, kind: ChallengeType) -> Result<(), Failure> {
    // The evidence of a success is looked at in evidence.rs.
    validator
        .attempt(&dns("a.test"), kind, TOKEN, KEY_AUTH, &account())
        .await
        .map(drop)
}

#[tokio::test]
async fn dns01_servfail_then_nxdomain_then_the_record() {
    let env = Env::start().await;
    let validator = env.validator();
    let name = "_acme-challenge.a.test";
    env.dns.set_servfail(name, true);
    let failure = attempt(&validator, Dns01).await.unwrap_err();
    assert_eq!(failure.retry, Retry::Transient, "{failure:?}");
    assert_eq!(failure.problem.kind, ProblemType::Dns);
    assert!(
        failure.problem.detail.contains("Server Failure"),
        "{}",
        failure.problem.detail
    );

    env.dns.remove(name);
    let failure = attempt(&validator, Dns01).await.unwrap_err();
    assert_eq!(failure.retry, Retry::Propagation, "{failure:?}");
    assert!(
        failure.problem.detail.contains("NXDOMAIN"),
        "{}",
        failure.problem.detail
    );

    // The record propagates: the same attempt now passes.
    env.dns.add_txt(name, &txt_value(KEY_AUTH));
    attempt(&validator, Dns01).await.unwrap();
}

/// No TXT record, or a set without our value, is what propagation of an update looks like: the
/// one class the workers retry.
#[tokio::test]
async fn dns01_missing_or_stale_txt_may_be_propagating() {
    let env = Env::start().await;
    let validator = env.validator();
    env.dns.clear_txt("_acme-challenge.a.test");
    let failure = attempt(&validator, Dns01).await.unwrap_err();
    assert_eq!(
        (failure.retry, failure.problem.kind),
        (Retry::Propagation, ProblemType::Unauthorized)
    );
    env.dns
        .add_txt("_acme-challenge.a.test", "value-of-an-earlier-order");
    let failure = attempt(&validator, Dns01).await.unwrap_err();
    assert_eq!(
        (failure.retry, failure.problem.kind),
        (Retry::Propagation, ProblemType::IncorrectResponse)
    );
}

#[tokio::test]
async fn http01_refused_then_served() {
    let env = Env::start().await;
    let port = closed_port();
    let validator = env.validator_with(|s| s.http_port = port);
    let failure = attempt(&validator, Http01).await.unwrap_err();
    assert_eq!(failure.retry, Retry::Transient, "{failure:?}");
    assert_eq!(failure.problem.kind, ProblemType::Connection);
    assert!(
        failure.problem.detail.contains("connection refused"),
        "{}",
        failure.problem.detail
    );

    // The web server comes up on that port.
    let responder = Http01Responder::start_on(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
        .await
        .expect("start the responder on the closed port");
    responder.add(TOKEN, KEY_AUTH);
    attempt(&validator, Http01).await.unwrap();
}

#[tokio::test]
async fn http01_wrong_content_and_404_are_definite() {
    let env = Env::start().await;
    let validator = env.validator();
    let failure = attempt(&validator, Http01).await.unwrap_err();
    assert_eq!(failure.retry, Retry::Definite, "404: {failure:?}");
    env.http.add(TOKEN, "tok3n.someone-else");
    let failure = attempt(&validator, Http01).await.unwrap_err();
    assert_eq!(
        (failure.retry, failure.problem.kind),
        (Retry::Definite, ProblemType::IncorrectResponse)
    );
}

/// A target that answers 503 (a proxy whose backend restarts) may answer 200 next time.
#[tokio::test]
async fn http01_server_errors_are_transient() {
    let env = Env::start().await;
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut buf = [0_u8; 2048];
            let _ = stream.read(&mut buf).await;
            let _ = stream
                .write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .await;
        }
    });
    let validator = env.validator_with(|s| s.http_port = port);
    let failure = attempt(&validator, Http01).await.unwrap_err();
    server.abort();
    assert_eq!(failure.retry, Retry::Transient, "{failure:?}");
    assert!(
        failure.problem.detail.contains("503"),
        "{}",
        failure.problem.detail
    );
}

/// The validator must not become a scanner: a target the address policy refuses is never
/// contacted again.
#[tokio::test]
async fn refused_addresses_are_definite() {
    let env = Env::start().await;
    let validator = env.validator_with(|s| s.allow_loopback = false);
    for challenge in [Http01, TlsAlpn01] {
        let failure = attempt(&validator, challenge).await.unwrap_err();
        assert_eq!(failure.retry, Retry::Definite, "{challenge:?}: {failure:?}");
    }
}

#[tokio::test]
async fn tls_alpn01_refused_connection_is_transient() {
    let env = Env::start().await;
    let port = closed_port();
    let validator = env.validator_with(|s| s.tls_alpn_port = port);
    let failure = attempt(&validator, TlsAlpn01).await.unwrap_err();
    assert_eq!(failure.retry, Retry::Transient, "{failure:?}");
}

/// A name that does not resolve (NXDOMAIN) is transient for http-01: final, never retried, as
/// only a dns-01 record may be propagating.
#[tokio::test]
async fn http01_unresolved_name_is_transient() {
    let env = Env::start().await;
    let failure = env
        .validator()
        .attempt(&dns("not-yet.test"), Http01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(
        (failure.retry, failure.problem.kind),
        (Retry::Transient, ProblemType::Dns)
    );
}
