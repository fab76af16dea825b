//! What a problem detail may quote of what targets served: a short escaped prefix of the
//! identifier's own host's answer, and nothing of another host's.

use acme_core::problem::ProblemType;
use acme_core::status::ChallengeType::Http01;

use crate::common::{Env, KEY_AUTH, account, dns};

#[tokio::test]
async fn bodies_served_by_another_host_after_a_redirect_are_never_quoted() {
    let env = Env::start().await;
    let port = env.http.port();
    // b.test is another host (the same responder answers for every name).
    env.http.add_redirect(
        "/.well-known/acme-challenge/away",
        &format!("http://b.test:{port}/.well-known/acme-challenge/secret"),
    );
    env.http
        .add("secret", "AccessKeyId=AKIAEXAMPLE SecretAccessKey=hunter2");
    let problem = env
        .validator()
        .validate(&dns("a.test"), Http01, "away", KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::IncorrectResponse);
    for leaked in ["AccessKeyId", "AKIAEXAMPLE", "hunter2"] {
        assert!(!problem.detail.contains(leaked), "{}", problem.detail);
    }
    assert!(
        problem
            .detail
            .contains("a redirect led to another host, which did not serve the key authorization"),
        "{}",
        problem.detail
    );
    assert!(problem.detail.contains(KEY_AUTH), "{}", problem.detail);
}

#[tokio::test]
async fn a_redirect_on_the_same_host_still_quotes_the_body() {
    let env = Env::start().await;
    env.http.add_redirect(
        "/.well-known/acme-challenge/moved",
        "/.well-known/acme-challenge/here",
    );
    env.http.add("here", "tok3n.wrong-thumbprint");
    let problem = env
        .validator()
        .validate(&dns("a.test"), Http01, "moved", KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::IncorrectResponse);
    assert!(
        problem.detail.contains("got \"tok3n.wrong-thumbprint\""),
        "{}",
        problem.detail
    );
}

#[tokio::test]
async fn quoted_bodies_are_short_and_escaped() {
    let env = Env::start().await;
    let body = format!("tok3n.wrong\u{1b}[2J\u{7}\r\n\u{202e}{}", "A".repeat(4000));
    env.http.add("tok3n", &body);
    let problem = env
        .validator()
        .validate(&dns("a.test"), Http01, "tok3n", KEY_AUTH, &account())
        .await
        .unwrap_err();
    assert_eq!(problem.kind, ProblemType::IncorrectResponse);
    let detail = &problem.detail;
    assert!(
        detail.contains("got \"tok3n.wrong\\x1b[2J\\x07\\r\\n\\xe2\\x80\\xae"),
        "{detail}"
    );
    assert!(detail.ends_with("\"..."), "{detail}");
    // Only a 64-byte prefix: most of the 4000 bytes are not there.
    assert!(!detail.contains(&"A".repeat(64)), "{detail}");
    assert!(detail.len() < 600, "{} bytes: {detail}", detail.len());
    assert!(
        detail.chars().all(|c| c == ' ' || c.is_ascii_graphic()),
        "{detail:?}"
    );
}
