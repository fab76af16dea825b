//! CAA at issuance: which validations of an order no longer vouch for CAA when it is finalized,
//! measured with the order's stored validations and the fake clock.

use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use acme_core::status::ChallengeType;
use ra::caa::DEFAULT_RECHECK_AFTER;
use ra::caa::Recheck;
use ra::caa::rechecks;
use ra::caa::refusal as recheck_refusal;

use crate::harness::dns;
use crate::harness::harness;

#[tokio::test]
async fn validations_up_to_eight_hours_old_vouch_for_caa_and_older_ones_are_rechecked() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    h.ready_order(&account, &["old.example.com"]).await;
    h.advance(time::Duration::hours(8));
    // Reuses the old validation and adds a fresh one.
    let order = h
        .ready_order(&account, &["old.example.com", "new.example.com"])
        .await;
    let validations = h.storage.order_validations(order.id).await.unwrap();
    assert_eq!(validations.len(), 2);
    assert!(rechecks(&validations, h.now(), DEFAULT_RECHECK_AFTER).is_empty());
    h.advance(time::Duration::SECOND);
    assert_eq!(
        rechecks(&validations, h.now(), DEFAULT_RECHECK_AFTER),
        vec![Recheck {
            identifier: dns("old.example.com"),
            method: ChallengeType::Http01,
        }]
    );
}

#[tokio::test]
async fn ip_address_validations_are_never_rechecked_for_caa() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let order = h.ready_order(&account, &["192.0.2.7"]).await;
    h.advance(time::Duration::days(3));
    let validations = h.storage.order_validations(order.id).await.unwrap();
    assert!(rechecks(&validations, h.now(), DEFAULT_RECHECK_AFTER).is_empty());
}

#[tokio::test]
async fn a_refused_recheck_fails_the_order_with_a_caa_problem_naming_the_identifier() {
    let refused = recheck_refusal(
        vec![(
            dns("a.example.com"),
            Problem::new(ProblemType::Caa, "CAA record forbids issuance"),
        )],
        DEFAULT_RECHECK_AFTER,
    )
    .unwrap();
    assert_eq!(refused.kind, ProblemType::Caa);
    assert_eq!(refused.identifier, Some(dns("a.example.com")));
    assert!(refused.detail.contains("CAA record forbids issuance"));
    assert!(recheck_refusal(Vec::new(), DEFAULT_RECHECK_AFTER).is_none());
}
