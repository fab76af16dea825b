//! Full issuance flows in process, with instant-acme as the client.

use std::net::IpAddr;
use std::net::Ipv4Addr;

use instant_acme::Account;
use instant_acme::ChallengeType;
use instant_acme::Identifier;
use instant_acme::NewOrder;
use instant_acme::OrderStatus;
use instant_acme::RetryPolicy;
use rustls_pki_types::CertificateDer;

use crate::certcheck::assert_chain;
use crate::certcheck::pem_ders;
use crate::harness::Db;
use crate::harness::TestEnv;

/// Orders, answers each authorization with `kind` through the test servers, finalizes, and returns
/// the chain PEM.
pub async fn issue(
    env: &TestEnv,
    account: &Account,
    identifiers: &[Identifier],
    kind: ChallengeType,
) -> String {
    issue_order(env, account, &NewOrder::new(identifiers), kind)
        .await
        .0
}

/// [`issue`] for any new-order request; also returns the order's `profile` as the server
/// echoed it.
pub async fn issue_order(
    env: &TestEnv,
    account: &Account,
    new_order: &NewOrder<'_>,
    kind: ChallengeType,
) -> (String, Option<String>) {
    let mut order = account.new_order(new_order).await.unwrap();
    let mut authorizations = order.authorizations();
    while let Some(authz) = authorizations.next().await {
        let mut authz = authz.unwrap();
        if authz.status == instant_acme::AuthorizationStatus::Valid {
            continue;
        }
        let mut challenge = authz
            .challenge(kind.clone())
            .expect("challenge type offered");
        let key_auth = challenge.key_authorization();
        let id = challenge.identifier().identifier.clone();
        match (&kind, &id) {
            (ChallengeType::Http01, _) => env.http.add(&challenge.token, key_auth.as_str()),
            (ChallengeType::Dns01, Identifier::Dns(name)) => {
                env.dns
                    .add_txt(&format!("_acme-challenge.{name}"), &key_auth.dns_value());
            }
            (ChallengeType::TlsAlpn01, Identifier::Dns(name)) => {
                env.tls.add(name, key_auth.as_str()).unwrap()
            }
            (ChallengeType::TlsAlpn01, Identifier::Ip(ip)) => {
                env.tls.add_ip(*ip, key_auth.as_str()).unwrap()
            }
            other => panic!("unsupported combination {other:?}"),
        }
        challenge.set_ready().await.unwrap();
    }
    let status = order.poll_ready(&RetryPolicy::default()).await.unwrap();
    assert_eq!(
        status,
        OrderStatus::Ready,
        "order state: {:?}",
        order.state()
    );
    order.finalize().await.unwrap();
    let chain = order
        .poll_certificate(&RetryPolicy::default())
        .await
        .unwrap();
    (chain, order.state().profile.clone())
}

async fn started(db: Db) -> TestEnv {
    let mut env = TestEnv::new(db).await;
    env.start().await;
    env
}

#[tokio::test]
async fn http01_issues_a_certificate_that_chains_to_the_root() {
    let env = started(Db::Sqlite).await;
    let account = env.account().await;
    let name = env.name("www");
    let chain = issue(
        &env,
        &account,
        &[Identifier::Dns(name.clone())],
        ChallengeType::Http01,
    )
    .await;
    assert_chain(&chain, &env.root_pem(), &[&name]);
}

#[tokio::test]
async fn dns01_wildcard_and_base_name() {
    let env = started(Db::Sqlite).await;
    let account = env.account().await;
    let base = env.name("zone");
    let wildcard = format!("*.{base}");
    let ids = [
        Identifier::Dns(wildcard.clone()),
        Identifier::Dns(base.clone()),
    ];
    let chain = issue(&env, &account, &ids, ChallengeType::Dns01).await;
    assert_chain(&chain, &env.root_pem(), &[&wildcard, &base]);
}

#[tokio::test]
async fn tls_alpn01_for_a_dns_name_and_an_ip_address() {
    let env = started(Db::Sqlite).await;
    let account = env.account().await;
    let name = env.name("alpn");
    let chain = issue(
        &env,
        &account,
        &[Identifier::Dns(name.clone())],
        ChallengeType::TlsAlpn01,
    )
    .await;
    assert_chain(&chain, &env.root_pem(), &[&name]);
    // IP addresses are certified by the shipped short-lived profile only.
    let ip = [Identifier::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST))];
    let (chain, _) = issue_order(
        &env,
        &account,
        &NewOrder::new(&ip).profile("short-lived"),
        ChallengeType::TlsAlpn01,
    )
    .await;
    assert_chain(&chain, &env.root_pem(), &["127.0.0.1"]);
}

#[tokio::test]
async fn http01_ip_identifier() {
    let env = started(Db::Sqlite).await;
    let account = env.account().await;
    // IP addresses are certified by the shipped short-lived profile only.
    let ip = [Identifier::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST))];
    let (chain, profile) = issue_order(
        &env,
        &account,
        &NewOrder::new(&ip).profile("short-lived"),
        ChallengeType::Http01,
    )
    .await;
    assert_eq!(profile.as_deref(), Some("short-lived"));
    assert_chain(&chain, &env.root_pem(), &["127.0.0.1"]);
}

#[tokio::test]
async fn five_names_on_postgres_then_revoke() {
    let env = started(Db::Postgres).await;
    let account = env.account().await;
    let names: Vec<String> = (1..=5).map(|i| env.name(&format!("n{i}"))).collect();
    let ids: Vec<Identifier> = names.iter().map(|n| Identifier::Dns(n.clone())).collect();
    let chain = issue(&env, &account, &ids, ChallengeType::Http01).await;
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let leaf = assert_chain(&chain, &env.root_pem(), &refs);
    let der = CertificateDer::from(leaf);
    account
        .revoke(&instant_acme::RevocationRequest {
            certificate: &der,
            reason: Some(instant_acme::RevocationReason::Superseded),
        })
        .await
        .unwrap();
    let again = account
        .revoke(&instant_acme::RevocationRequest {
            certificate: &der,
            reason: None,
        })
        .await
        .unwrap_err();
    let instant_acme::Error::Api(problem) = again else {
        panic!("expected a problem, got {again:?}")
    };
    assert_eq!(
        problem.r#type.as_deref(),
        Some("urn:ietf:params:acme:error:alreadyRevoked")
    );
}

#[tokio::test]
async fn failed_validation_makes_the_order_invalid_with_the_error() {
    let env = started(Db::Sqlite).await;
    let account = env.account().await;
    let name = env.name("broken");
    let ids = [Identifier::Dns(name)];
    let mut order = account.new_order(&NewOrder::new(&ids)).await.unwrap();
    let mut authorizations = order.authorizations();
    let mut authz = authorizations.next().await.unwrap().unwrap();
    // Nothing is served for this token.
    let mut challenge = authz.challenge(ChallengeType::Http01).unwrap();
    // The validation fails while the request waits for it (it takes milliseconds here), so the
    // challenge response already carries the verdict, which instant-acme returns as the
    // problem; a response sent before the verdict (`processing`) is the other correct answer.
    match challenge.set_ready().await {
        Ok(()) => {}
        Err(instant_acme::Error::Api(problem)) => assert_eq!(
            problem.r#type.as_deref(),
            Some("urn:ietf:params:acme:error:incorrectResponse"),
            "{problem:?}"
        ),
        Err(e) => panic!("answering the challenge: {e:?}"),
    }
    // instant-acme reports an invalid order through its error.
    let polled = order.poll_ready(&RetryPolicy::default()).await;
    let state = order.refresh().await.unwrap();
    assert_eq!(state.status, OrderStatus::Invalid, "{polled:?}");
    let error = state
        .error
        .as_ref()
        .expect("invalid order carries the error");
    assert_eq!(
        error.r#type.as_deref(),
        Some("urn:ietf:params:acme:error:incorrectResponse"),
        "{error:?}"
    );
    assert!(
        error.detail.as_deref().unwrap().contains("acme-challenge"),
        "{error:?}"
    );
}

#[tokio::test]
async fn account_key_rollover_contacts_and_deactivation() {
    let env = started(Db::Sqlite).await;
    let mut account = env.account().await;
    account
        .update_contacts(&["mailto:new@example.com"])
        .await
        .unwrap();
    let old_id = account.id().to_owned();
    let _credentials = account.update_key().await.unwrap();
    assert_eq!(account.id(), old_id);
    // The rolled-over key still issues.
    let name = env.name("afterroll");
    let chain = issue(
        &env,
        &account,
        &[Identifier::Dns(name.clone())],
        ChallengeType::Http01,
    )
    .await;
    assert_chain(&chain, &env.root_pem(), &[&name]);
    account.deactivate().await.unwrap();
}

#[tokio::test]
async fn root_certificate_is_served_and_matches_the_file() {
    let env = started(Db::Sqlite).await;
    let client = crate::raw::client(&env);
    let served = client
        .get(format!("{}/root.pem", env.base_url()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(pem_ders(&served), pem_ders(&env.root_pem()));
}

#[tokio::test]
async fn the_owner_deactivates_an_authorization_and_its_order_turns_invalid() {
    let env = started(Db::Sqlite).await;
    let account = env.account().await;
    let ids = [Identifier::Dns(env.name("deact"))];
    let mut order = account.new_order(&NewOrder::new(&ids)).await.unwrap();
    let mut authorizations = order.authorizations();
    let mut authz = authorizations.next().await.unwrap().unwrap();
    let state = authz.deactivate().await.unwrap();
    assert_eq!(state.status, instant_acme::AuthorizationStatus::Deactivated);
    let state = order.refresh().await.unwrap();
    assert_eq!(state.status, OrderStatus::Invalid);
}
