//! Certificate profiles (draft-ietf-acme-profiles): which profile an order gets, and whether its
//! identifiers and window fit it.

use acme_core::problem::ProblemType;
use ra::Refusal;

use crate::harness::harness;
use crate::harness::order_request;
use crate::harness::problem_kind;
use crate::harness::refusal;

#[tokio::test]
async fn an_order_without_a_profile_gets_the_default_profile() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let order = h.order(&account, &["a.example.com"]).await.unwrap().order;
    assert_eq!(
        order.profile.as_deref(),
        Some(h.ra.settings().profiles.select(None).unwrap().name())
    );
}

#[tokio::test]
async fn an_order_naming_an_offered_profile_gets_it() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let mut request = order_request(&["a.example.com"]);
    request.profile = Some("short-lived".to_owned());
    let order = h.ra.new_order(&account, request).await.unwrap().order;
    assert_eq!(order.profile.as_deref(), Some("short-lived"));
}

#[tokio::test]
async fn a_profile_that_is_not_offered_is_invalid_profile_naming_those_that_are() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let mut request = order_request(&["a.example.com"]);
    request.profile = Some("code-signing".to_owned());
    let Refusal::Problem(problem) = refusal(h.ra.new_order(&account, request).await) else {
        panic!("a problem refusal");
    };
    assert_eq!(problem.kind, ProblemType::InvalidProfile);
    assert!(problem.detail.contains("short-lived"), "{}", problem.detail);
}

#[tokio::test]
async fn a_not_after_beyond_the_profiles_maximum_validity_is_malformed() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let mut request = order_request(&["a.example.com"]);
    request.profile = Some("short-lived".to_owned());
    request.not_after = Some(h.now() + time::Duration::days(30));
    assert_eq!(
        problem_kind(h.ra.new_order(&account, request.clone()).await),
        ProblemType::Malformed
    );
    // The same window fits the default profile.
    request.profile = None;
    h.ra.new_order(&account, request).await.unwrap();
}

#[tokio::test]
async fn a_not_after_in_the_past_is_malformed() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let mut request = order_request(&["a.example.com"]);
    request.not_after = Some(h.now() - time::Duration::hours(1));
    assert_eq!(
        problem_kind(h.ra.new_order(&account, request).await),
        ProblemType::Malformed
    );
}

#[tokio::test]
async fn an_identifier_type_the_profile_does_not_certify_is_rejected_one_by_one() {
    let mut definitions = std::collections::BTreeMap::new();
    definitions.insert(
        "dns-only".to_owned(),
        issuance::profiles::ProfileDefinition {
            identifier_types: vec![acme_core::identifier::IdentifierKind::Dns],
            ..Default::default()
        },
    );
    let profiles = issuance::Profiles::new(
        "dns-only",
        &definitions,
        time::Duration::days(90),
        time::Duration::days(90),
    )
    .unwrap();
    let h = harness().settings(|s| s.profiles = profiles).build().await;
    let (account, _) = h.account().await;
    // The configured default profile, not the shipped one `order_request` picks for addresses.
    let mut request = order_request(&["a.example.com", "192.0.2.7", "198.51.100.7"]);
    request.profile = None;
    let Refusal::Problem(problem) = refusal(h.ra.new_order(&account, request).await) else {
        panic!("a problem refusal");
    };
    assert_eq!(problem.kind, ProblemType::RejectedIdentifier);
    assert_eq!(problem.subproblems.len(), 2);
}

#[tokio::test]
async fn a_certificate_of_an_order_asking_for_a_window_gets_that_window() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let mut request = order_request(&["a.example.com"]);
    let not_after = h.now() + time::Duration::days(10);
    request.not_after = Some(not_after);
    let order = h.ra.new_order(&account, request).await.unwrap().order;
    assert_eq!(order.not_after, Some(not_after));
    let order = h.validate_all(&order).await;
    let (cert, _) = h.issue_order(&account, order, &["a.example.com"]).await;
    assert_eq!(cert.not_after, not_after);
}

#[tokio::test]
async fn a_window_whose_not_after_passed_before_signing_is_malformed_at_signing() {
    let h = harness().build().await;
    let profile = h.ra.settings().profiles.select(None).unwrap();
    let not_after = h.now() + time::Duration::hours(1);
    h.advance(time::Duration::hours(2));
    let problem = ra::orders::signing_window(
        profile,
        None,
        Some(not_after),
        h.now(),
        h.ra.settings().backdate,
    )
    .unwrap_err();
    assert_eq!(problem.kind, ProblemType::Malformed);
}

#[tokio::test]
async fn a_requested_not_before_that_fell_far_behind_moves_up_to_a_backdate_before_signing() {
    let h = harness().build().await;
    let profile = h.ra.settings().profiles.select(None).unwrap();
    let not_before = h.now();
    h.advance(time::Duration::days(3));
    let (start, _) = ra::orders::signing_window(
        profile,
        Some(not_before),
        None,
        h.now(),
        h.ra.settings().backdate,
    )
    .unwrap();
    assert_eq!(start, h.now() - h.ra.settings().backdate);
}
