//! The background pruner of the real server, on real time: an expired order disappears, an issued
//! certificate stays downloadable.

use std::time::Duration;

use instant_acme::ChallengeType;
use instant_acme::Identifier;
use instant_acme::NewOrder;
use instant_acme::OrderStatus;
use instant_acme::RetryPolicy;

use crate::harness::Db;
use crate::harness::TestEnv;

const PRUNING: &str = "  prune-after: 0s\n  prune-interval: 1s\n";

#[tokio::test]
async fn an_expired_order_is_pruned_and_an_issued_certificate_stays() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.section("database", PRUNING);
    env.start().await;
    let account = env.account().await;

    // Issued under the default order lifetime, so that it cannot expire while it is issued.
    let ids = [Identifier::Dns(env.name("kept"))];
    let mut issued = account.new_order(&NewOrder::new(&ids)).await.unwrap();
    let mut authorizations = issued.authorizations();
    let mut authz = authorizations.next().await.unwrap().unwrap();
    let mut challenge = authz.challenge(ChallengeType::Http01).unwrap();
    env.http
        .add(&challenge.token, challenge.key_authorization().as_str());
    challenge.set_ready().await.unwrap();
    assert_eq!(
        issued.poll_ready(&RetryPolicy::default()).await.unwrap(),
        OrderStatus::Ready
    );
    issued.finalize().await.unwrap();
    let pem = issued
        .poll_certificate(&RetryPolicy::default())
        .await
        .unwrap();

    // Restarted with orders that expire at once; the pruner deletes them a second later.
    env.server.take().unwrap().shutdown().await;
    env.section("acme", "  order-lifetime: 1s\n");
    env.start().await;
    let mut abandoned = account
        .new_order(&NewOrder::new(&[Identifier::Dns(env.name("abandoned"))]))
        .await
        .unwrap();
    let mut gone = None;
    for _ in 0..240 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if let Err(e) = abandoned.refresh().await {
            gone = Some(e.to_string());
            break;
        }
    }
    let gone = gone.expect("the expired order was never pruned");
    assert!(gone.contains("order not found"), "{gone}");

    let state = issued.refresh().await.unwrap();
    assert_eq!(state.status, OrderStatus::Valid);
    assert_eq!(issued.certificate().await.unwrap(), Some(pem));
    env.server.take().unwrap().shutdown().await;
}
