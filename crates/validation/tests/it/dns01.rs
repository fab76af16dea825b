use std::time::Duration;

use acme_core::problem::ProblemType;
use acme_core::status::ChallengeType::Dns01;
use aws_lc_rs::digest;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::common::{Env, KEY_AUTH, account, closed_port, dns, ip};

const TOKEN: &str = "tok3n";

pub(crate) fn txt_value(key_authorization: &str) -> String {
    URL_SAFE_NO_PAD.encode(digest::digest(
        &digest::SHA256,
        key_authorization.as_bytes(),
    ))
}

#[tokio::test]
async fn finds_the_txt_record() {
    let env = Env::start().await;
    env.dns.add_txt("_acme-challenge.a.test", "unrelated");
    env.dns
        .add_txt("_acme-challenge.a.test", &txt_value(KEY_AUTH));
    env.validator()
        .validate(&dns("a.test"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();
}

#[tokio::test]
async fn names_are_case_insensitive() {
    let env = Env::start().await;
    env.dns
        .add_txt("_ACME-Challenge.A.Test.", &txt_value(KEY_AUTH));
    env.validator()
        .validate(&dns("a.test"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();
}

#[tokio::test]
async fn wildcards_validate_the_base_name() {
    let env = Env::start().await;
    env.dns
        .add_txt("_acme-challenge.example.com", &txt_value(KEY_AUTH));
    env.validator()
        .validate(&dns("*.example.com"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();
}

#[tokio::test]
async fn wrong_txt_lists_what_was_found() {
    let env = Env::start().await;
    env.dns.add_txt("_acme-challenge.a.test", "x");
    let problem = env
        .validator()
        .validate(&dns("a.test"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::IncorrectResponse);
    assert!(
        problem
            .detail
            .starts_with("Incorrect TXT record \"x\" found at _acme-challenge.a.test"),
        "{}",
        problem.detail
    );
    assert!(
        problem.detail.contains(&txt_value(KEY_AUTH)),
        "{}",
        problem.detail
    );
}

#[tokio::test]
async fn no_txt_record_is_unauthorized() {
    let env = Env::start().await;
    env.dns.add_txt("_acme-challenge.a.test", "old");
    env.dns.clear_txt("_acme-challenge.a.test");
    let problem = env
        .validator()
        .validate(&dns("a.test"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::Unauthorized);
    assert!(
        problem
            .detail
            .contains("No TXT record found at _acme-challenge.a.test"),
        "{}",
        problem.detail
    );
}

#[tokio::test]
async fn nxdomain_is_a_dns_problem() {
    let env = Env::start().await;
    let problem = env
        .validator()
        .validate(&dns("a.test"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::Dns);
    assert!(
        problem
            .detail
            .contains("NXDOMAIN looking up TXT for _acme-challenge.a.test"),
        "{}",
        problem.detail
    );
}

#[tokio::test]
async fn cnames_are_followed() {
    let env = Env::start().await;
    env.dns
        .set_cname("_acme-challenge.a.test", "a.validation.test");
    env.dns
        .set_cname("a.validation.test", "final.validation.test");
    env.dns
        .add_txt("final.validation.test", &txt_value(KEY_AUTH));
    env.validator()
        .validate(&dns("a.test"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();
}

#[tokio::test]
async fn cname_to_a_missing_name_is_a_dns_problem() {
    let env = Env::start().await;
    env.dns
        .set_cname("_acme-challenge.a.test", "gone.validation.test");
    let problem = env
        .validator()
        .validate(&dns("a.test"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::Dns);
    assert!(problem.detail.contains("NXDOMAIN"), "{}", problem.detail);
}

#[tokio::test]
async fn ip_identifiers_are_refused() {
    let env = Env::start().await;
    let problem = env
        .validator()
        .validate(&ip("127.0.0.1"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::Malformed);
}

#[tokio::test]
async fn an_unreachable_nameserver_is_a_dns_problem() {
    let env = Env::start().await;
    let port = closed_port();
    let validator = env.validator_with(|s| {
        s.dns_servers = vec![([127, 0, 0, 1], port).into()];
        s.timeout = Duration::from_millis(500);
    });
    let problem = validator
        .validate(&dns("a.test"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::Dns);
    assert!(
        problem
            .detail
            .contains("looking up TXT for _acme-challenge.a.test"),
        "{}",
        problem.detail
    );
}

/// Posts `body` to the test DNS server's control endpoint the way a shell hook would.
async fn control(env: &Env, path: &str, body: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = env
        .dns
        .control_url()
        .trim_start_matches("http://")
        .to_owned();
    let mut stream = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect to the control endpoint");
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send the request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("read the response");
    response
}

#[tokio::test]
async fn the_control_endpoint_sets_and_clears_txt_records() {
    let env = Env::start().await;
    let set = format!(
        r#"{{"host":"_acme-challenge.a.test.","value":"{}"}}"#,
        txt_value(KEY_AUTH)
    );
    assert!(
        control(&env, "/set-txt", &set)
            .await
            .starts_with("HTTP/1.1 200")
    );
    env.validator()
        .validate(&dns("a.test"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap();

    let clear = r#"{"host":"_acme-challenge.a.test."}"#;
    assert!(
        control(&env, "/clear-txt", clear)
            .await
            .starts_with("HTTP/1.1 200")
    );
    let problem = env
        .validator()
        .validate(&dns("a.test"), Dns01, TOKEN, KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::Unauthorized);

    assert!(
        control(&env, "/set-txt", "not json")
            .await
            .starts_with("HTTP/1.1 400")
    );
}
