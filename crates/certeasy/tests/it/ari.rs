//! ACME Renewal Information (RFC 9773) with instant-acme's client: the directory's
//! `renewalInfo`, the suggested window and its `Retry-After`, a window in the past for a revoked
//! certificate or one an operator marked, and `replaces` checked, recorded and exempt from the
//! order-creation limit when the renewal is due and the certificate not revoked; never from the
//! duplicate-certificate limit.

use instant_acme::Account;
use instant_acme::CertificateIdentifier;
use instant_acme::ChallengeType;
use instant_acme::Identifier;
use instant_acme::NewOrder;
use instant_acme::RevocationRequest;
use rustls_pki_types::CertificateDer;
use time::OffsetDateTime;
use x509_parser::prelude::FromDer;
use x509_parser::prelude::X509Certificate;

use crate::admin_records::admin;
use crate::certcheck::pem_ders;
use crate::flow::issue;
use crate::flow::issue_order;
use crate::harness::Db;
use crate::harness::TestEnv;

async fn env_with_one_duplicate() -> TestEnv {
    env_with_limits("  whitelist: [\"127.0.0.1\"]\n  duplicate-certificate:\n    max-per-window: 1\n    window: 7d\n").await
}

async fn env_with_limits(limits: &str) -> TestEnv {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.section("rate-limiting", limits);
    env.start().await;
    env
}

/// Issues a certificate for `name` and returns its DER.
async fn issued(env: &TestEnv, account: &Account, name: &str) -> Vec<u8> {
    let ids = [Identifier::Dns(name.to_owned())];
    let chain = issue(env, account, &ids, ChallengeType::Http01).await;
    pem_ders(&chain).remove(0)
}

fn validity(der: &[u8]) -> (OffsetDateTime, OffsetDateTime) {
    let (_, cert) = X509Certificate::from_der(der).unwrap();
    (
        cert.validity().not_before.to_datetime(),
        cert.validity().not_after.to_datetime(),
    )
}

/// `certeasy admin certificates renew-early ARGS --json`, through the real CLI: how many were
/// marked.
async fn renew_early(env: &TestEnv, args: &[&str]) -> u64 {
    let mut all = vec!["certificates", "renew-early", "--json"];
    all.extend_from_slice(args);
    admin(env, &all).await.json()["count"].as_u64().unwrap()
}

fn problem_type(e: &instant_acme::Error) -> String {
    match e {
        instant_acme::Error::Api(p) => p.r#type.clone().unwrap_or_default(),
        other => format!("not a problem: {other}"),
    }
}

#[tokio::test]
async fn the_window_lies_inside_the_lifetime_and_moves_into_the_past_when_marked_or_revoked() {
    let env = env_with_one_duplicate().await;
    let account = env.account().await;
    let der = issued(&env, &account, &env.name("ari-window")).await;
    let cert = CertificateDer::from(der.clone());
    let id = CertificateIdentifier::try_from(&cert).unwrap();
    let (not_before, not_after) = validity(&der);
    let lifetime = not_after - not_before;

    let (info, retry) = account.renewal_info(&id).await.unwrap();
    let w = info.suggested_window;
    // 60 % to 75 % of the lifetime, moved later by at most 5 % (whole seconds stored).
    let slack = time::Duration::seconds(2);
    assert!(w.start >= not_before + lifetime * 0.60 - slack, "{w:?}");
    assert!(w.start <= not_before + lifetime * 0.65 + slack, "{w:?}");
    assert!(w.end >= not_before + lifetime * 0.75 - slack, "{w:?}");
    assert!(w.end <= not_before + lifetime * 0.80 + slack, "{w:?}");
    assert!(w.start < w.end && w.end < not_after);
    assert!(
        retry.as_secs() > 5 * 3600 && retry.as_secs() <= 6 * 3600,
        "Retry-After of 6 h: {retry:?}"
    );
    // The same certificate gets the same window at every poll.
    let (again, _) = account.renewal_info(&id).await.unwrap();
    assert_eq!(again.suggested_window.start, w.start);

    // An operator marks it: the window is now in the past.
    let serial = hex_serial(&der);
    assert_eq!(renew_early(&env, &[&serial]).await, 1);
    let (marked, _) = account.renewal_info(&id).await.unwrap();
    let now = OffsetDateTime::now_utc();
    assert!(marked.suggested_window.end <= now, "{marked:?}");
    assert!(marked.suggested_window.start < marked.suggested_window.end);
    // Marking again changes nothing.
    assert_eq!(renew_early(&env, &[&serial]).await, 0);

    // A revoked certificate's window is in the past too.
    let other = issued(&env, &account, &env.name("ari-revoked")).await;
    let other_cert = CertificateDer::from(other.clone());
    let other_id = CertificateIdentifier::try_from(&other_cert).unwrap();
    account
        .revoke(&RevocationRequest {
            certificate: &other_cert,
            reason: None,
        })
        .await
        .unwrap();
    let (revoked, _) = account.renewal_info(&other_id).await.unwrap();
    assert!(revoked.suggested_window.end <= OffsetDateTime::now_utc());

    // By account: the one certificate of this account still unexpired, unrevoked and unmarked.
    let third = issued(&env, &account, &env.name("ari-account")).await;
    let third_cert = CertificateDer::from(third);
    let third_id = CertificateIdentifier::try_from(&third_cert).unwrap();
    let id_text = account.id().rsplit('/').next().unwrap().to_owned();
    assert_eq!(renew_early(&env, &["--account", &id_text]).await, 1);
    let (third_info, _) = account.renewal_info(&third_id).await.unwrap();
    assert!(third_info.suggested_window.end <= OffsetDateTime::now_utc());
}

#[tokio::test]
async fn replaces_is_checked_recorded_and_exempts_a_due_renewal_from_the_order_limit() {
    // Two certificates per name set a week, and one order per account (a burst of 1 refilled
    // once an hour): the first issuance spends the order and half the duplicate limit.
    let env = env_with_limits(
        "  whitelist: [\"127.0.0.1\"]\n  duplicate-certificate:\n    max-per-window: 2\n    window: 7d\n  order-creation:\n    orders-per-account-per-hour: 1\n    order-burst: 1\n",
    )
    .await;
    let account = env.account().await;
    let name = env.name("ari-replace");
    let der = issued(&env, &account, &name).await;
    let cert = CertificateDer::from(der.clone());
    let id = CertificateIdentifier::try_from(&cert).unwrap();
    let ids = [Identifier::Dns(name.clone())];

    // Not yet due: the limits apply, replaces or not.
    let early = account
        .new_order(&NewOrder::new(&ids).replaces(id.clone()))
        .await
        .err()
        .expect("the order is refused");
    assert!(problem_type(&early).ends_with(":rateLimited"), "{early}");

    // Due (the operator marked it by name, as after a key compromise on one host): exempt from
    // the order-creation limit, created (the duplicate limit has room), and recorded.
    assert_eq!(renew_early(&env, &["--name", &name]).await, 1);
    let mut order = account
        .new_order(&NewOrder::new(&ids).replaces(id.clone()))
        .await
        .unwrap();
    // Ready at once: the account's valid authorization for the name is reused.
    assert_eq!(order.state().status, instant_acme::OrderStatus::Ready);

    // A second replacement of the same certificate is a conflict: alreadyReplaced.
    let twice = account
        .new_order(&NewOrder::new(&ids).replaces(id.clone()))
        .await
        .err()
        .expect("the order is refused");
    assert!(
        problem_type(&twice).ends_with(":alreadyReplaced"),
        "{twice}"
    );
    match &twice {
        instant_acme::Error::Api(p) => assert_eq!(p.status, Some(409)),
        other => panic!("{other}"),
    }

    // No shared identifier: refused.
    let unrelated = [Identifier::Dns(env.name("ari-unrelated"))];
    let e = account
        .new_order(&NewOrder::new(&unrelated).replaces(id.clone()))
        .await
        .err()
        .expect("the order is refused");
    assert!(problem_type(&e).ends_with(":malformed"), "{e}");

    // Another account may not replace this account's certificate.
    let stranger = env.account().await;
    let e = stranger
        .new_order(&NewOrder::new(&ids).replaces(id.clone()))
        .await
        .err()
        .expect("the order is refused");
    assert!(problem_type(&e).ends_with(":unauthorized"), "{e}");
}

/// Revokes the certificate `der` with its account.
async fn revoke(account: &Account, der: &[u8]) {
    account
        .revoke(&RevocationRequest {
            certificate: &CertificateDer::from(der.to_vec()),
            reason: None,
        })
        .await
        .unwrap();
}

/// Issue, revoke, replace, over and over: a revoked certificate's window lies in the past, but
/// its replacement spends an order like any order, so the loop stops at the order limit.
#[tokio::test]
async fn issue_revoke_replace_repeated_is_held_to_the_order_limit() {
    // Two orders per account (a burst of 2 refilled once an hour); the duplicate limit has room.
    let env = env_with_limits(
        "  whitelist: [\"127.0.0.1\"]\n  duplicate-certificate:\n    max-per-window: 10\n    window: 7d\n  order-creation:\n    orders-per-account-per-hour: 1\n    order-burst: 2\n",
    )
    .await;
    let account = env.account().await;
    let name = env.name("ari-revoke-loop");
    let ids = [Identifier::Dns(name.clone())];
    let first = issued(&env, &account, &name).await;
    revoke(&account, &first).await;
    let first_id = CertificateIdentifier::try_from(&CertificateDer::from(first)).unwrap();
    let (chain, _) = issue_order(
        &env,
        &account,
        &NewOrder::new(&ids).replaces(first_id),
        ChallengeType::Http01,
    )
    .await;
    let second = pem_ders(&chain).remove(0);
    revoke(&account, &second).await;
    let second_id = CertificateIdentifier::try_from(&CertificateDer::from(second)).unwrap();
    let e = account
        .new_order(&NewOrder::new(&ids).replaces(second_id))
        .await
        .err()
        .expect("the order is refused");
    assert!(problem_type(&e).ends_with(":rateLimited"), "{e}");
    assert!(e.to_string().contains("too many new orders"), "{e}");
}

/// A due renewal skips the order limit, as at Let's Encrypt, but not the duplicate-certificate
/// limit: it adds a certificate for the same names like any order.
#[tokio::test]
async fn a_due_renewal_is_held_to_the_duplicate_certificate_limit() {
    // Two certificates per exact name set a week; orders are plentiful.
    let env = env_with_limits(
        "  whitelist: [\"127.0.0.1\"]\n  duplicate-certificate:\n    max-per-window: 2\n    window: 7d\n",
    )
    .await;
    let account = env.account().await;
    let name = env.name("ari-dup");
    issued(&env, &account, &name).await;
    let due = issued(&env, &account, &name).await;
    assert_eq!(renew_early(&env, &[&hex_serial(&due)]).await, 1);
    let due_id = CertificateIdentifier::try_from(&CertificateDer::from(due)).unwrap();
    let e = account
        .new_order(&NewOrder::new(&[Identifier::Dns(name)]).replaces(due_id))
        .await
        .err()
        .expect("the order is refused");
    assert!(problem_type(&e).ends_with(":rateLimited"), "{e}");
    assert!(e.to_string().contains("duplicate-certificate"), "{e}");
}

#[tokio::test]
async fn bad_and_unknown_certificate_identifiers_are_answered_exactly() {
    let env = env_with_one_duplicate().await;
    let root = reqwest::Certificate::from_pem(env.root_pem().as_bytes()).unwrap();
    let http = reqwest::Client::builder()
        .no_proxy()
        .add_root_certificate(root)
        .build()
        .unwrap();
    let directory: serde_json::Value = serde_json::from_str(
        &http
            .get(env.directory_url())
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    )
    .unwrap();
    let base = directory["renewalInfo"].as_str().unwrap().to_owned();
    assert!(base.ends_with("/acme/renewal-info"), "{base}");

    let bad = http.get(format!("{base}/not-an-id")).send().await.unwrap();
    assert_eq!(bad.status(), 400);
    let body: serde_json::Value = serde_json::from_str(&bad.text().await.unwrap()).unwrap();
    assert_eq!(body["type"], "urn:ietf:params:acme:error:malformed");

    let unknown = http
        .get(format!("{base}/aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE"))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);

    // An order naming a certificate this CA never issued is malformed.
    let account = env.account().await;
    let ids = [Identifier::Dns(env.name("ari-unknown"))];
    let unknown_id = serde_json::from_str::<CertificateIdentifier<'_>>(
        "\"aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE\"",
    )
    .unwrap();
    let e = account
        .new_order(&NewOrder::new(&ids).replaces(unknown_id))
        .await
        .err()
        .expect("the order is refused");
    assert!(problem_type(&e).ends_with(":malformed"), "{e}");
}

fn hex_serial(der: &[u8]) -> String {
    let (_, cert) = X509Certificate::from_der(der).unwrap();
    hex::encode(cert.tbs_certificate.raw_serial())
}
