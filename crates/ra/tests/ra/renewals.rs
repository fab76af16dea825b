//! ACME Renewal Information (RFC 9773): the suggested window, `replaces` on new orders, and the
//! operator's early-renewal mark.

use acme_core::problem::ProblemType;
use acme_core::status::RevocationReason;
use ra::Refusal;
use ra::renewals::RenewEarlyTarget;
use ra::revocation::Revoker;
use storage::model::Certificate;

use crate::harness::Harness;
use crate::harness::client_ip;
use crate::harness::harness;
use crate::harness::order_request;
use crate::harness::problem_kind;
use crate::harness::rate_limited;
use crate::harness::refusal;
use crate::harness::who;

fn replacing(h: &Harness, cert: &Certificate, names: &[&str]) -> ra::orders::OrderRequest {
    let mut request = order_request(names);
    request.replaces = Some(h.cert_id(cert));
    request
}

#[tokio::test]
async fn the_renewal_window_lies_between_the_configured_fractions_of_the_lifetime() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    let window = h.ra.renewal_info(&h.cert_id(&cert)).await.unwrap();
    let lifetime = cert.not_after - cert.not_before;
    let r = h.ra.settings().renewal;
    let earliest = cert.not_before + lifetime * r.window_start;
    let latest_jitter = lifetime * r.jitter;
    assert!(window.start >= earliest && window.start <= earliest + latest_jitter);
    let span = lifetime * (r.window_end - r.window_start);
    assert!(((window.end - window.start) - span).abs() < time::Duration::milliseconds(1));
    assert!(window.end < cert.not_after);
    assert_eq!(window.retry_after, r.retry_after);
    // The same certificate always gets the same window.
    assert_eq!(h.ra.renewal_info(&h.cert_id(&cert)).await.unwrap(), window);
}

#[tokio::test]
async fn a_revoked_certificates_window_is_in_the_past() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    h.advance(time::Duration::days(2));
    h.ra.revoke_stored(&cert, RevocationReason::KeyCompromise, &who())
        .await
        .unwrap();
    h.advance(time::Duration::hours(3));
    let window = h.ra.renewal_info(&h.cert_id(&cert)).await.unwrap();
    assert_eq!(window.end, h.now() - time::Duration::hours(3));
    assert_eq!(window.start, window.end - time::Duration::hours(1));
}

#[tokio::test]
async fn a_certificate_marked_for_early_renewal_gets_a_window_in_the_past() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    let (unmarked, _) = h.issue(&account, &["b.example.com"]).await;
    h.advance(time::Duration::days(1));
    assert_eq!(
        h.ra.renew_early(&RenewEarlyTarget::Serial(cert.serial.clone()), &who())
            .await
            .unwrap(),
        1
    );
    // Marked once only.
    assert_eq!(
        h.ra.renew_early(&RenewEarlyTarget::Serial(cert.serial.clone()), &who())
            .await
            .unwrap(),
        0
    );
    let window = h.ra.renewal_info(&h.cert_id(&cert)).await.unwrap();
    assert!(window.end <= h.now());
    let other = h.ra.renewal_info(&h.cert_id(&unmarked)).await.unwrap();
    assert!(other.start > h.now());
}

#[tokio::test]
async fn early_renewal_by_account_or_name_marks_every_matching_certificate() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (other, _) = h.account().await;
    h.issue(&account, &["a.example.com"]).await;
    h.issue(&account, &["b.example.com"]).await;
    h.issue(&other, &["a.example.com"]).await;
    assert_eq!(
        h.ra.renew_early(
            &RenewEarlyTarget::Name(crate::harness::dns("a.example.com")),
            &who()
        )
        .await
        .unwrap(),
        2
    );
    assert_eq!(
        h.ra.renew_early(&RenewEarlyTarget::Account(account.id), &who())
            .await
            .unwrap(),
        1,
        "the account's a.example.com certificate was marked already"
    );
}

#[tokio::test]
async fn renewal_info_for_an_unknown_certificate_is_not_found() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    let id = h.cert_id(&cert);
    let (aki, _) = id.split_once('.').unwrap();
    assert!(matches!(
        refusal(h.ra.renewal_info(&format!("{aki}.AQIDBA")).await),
        Refusal::NotFound("certificate")
    ));
    // The serial of ours under another issuer's key identifier is not ours either.
    let (_, serial) = id.split_once('.').unwrap();
    assert!(matches!(
        refusal(
            h.ra.renewal_info(&format!("aYhba4dGQEHhs3uEe6CuLN4ByNQ.{serial}"))
                .await
        ),
        Refusal::NotFound("certificate")
    ));
}

#[tokio::test]
async fn a_malformed_certificate_identifier_is_malformed() {
    let h = harness().build().await;
    assert_eq!(
        problem_kind(h.ra.renewal_info("no-dot-here").await),
        ProblemType::Malformed
    );
}

#[tokio::test]
async fn an_order_replacing_a_certificate_records_what_it_replaces() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    let order =
        h.ra.new_order(&account, replacing(&h, &cert, &["a.example.com"]))
            .await
            .unwrap()
            .order;
    assert_eq!(order.replaces, Some(h.cert_id(&cert)));
}

#[tokio::test]
async fn replacing_a_certificate_twice_is_already_replaced() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    h.ra.new_order(&account, replacing(&h, &cert, &["a.example.com"]))
        .await
        .unwrap();
    assert_eq!(
        problem_kind(
            h.ra.new_order(&account, replacing(&h, &cert, &["a.example.com"]))
                .await
        ),
        ProblemType::AlreadyReplaced
    );
}

#[tokio::test]
async fn a_certificate_whose_replacing_order_expired_may_be_replaced_again() {
    let h = harness()
        .settings(|s| s.order_lifetime = time::Duration::hours(1))
        .build()
        .await;
    let (account, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    h.ra.new_order(&account, replacing(&h, &cert, &["a.example.com"]))
        .await
        .unwrap();
    h.advance(time::Duration::hours(1) + time::Duration::SECOND);
    let again =
        h.ra.new_order(&account, replacing(&h, &cert, &["a.example.com"]))
            .await
            .unwrap()
            .order;
    assert_eq!(again.replaces, Some(h.cert_id(&cert)));
}

#[tokio::test]
async fn a_certificate_for_ip_addresses_may_be_replaced_by_an_order_for_them() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let names = ["192.0.2.7", "2001:db8::1"];
    let (cert, _) = h.issue(&account, &names).await;
    let order =
        h.ra.new_order(&account, replacing(&h, &cert, &["2001:db8:0:0::1"]))
            .await
            .unwrap()
            .order;
    assert_eq!(order.replaces, Some(h.cert_id(&cert)));
}

#[tokio::test]
async fn replacing_another_accounts_certificate_is_unauthorized() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (other, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    assert_eq!(
        problem_kind(
            h.ra.new_order(&other, replacing(&h, &cert, &["a.example.com"]))
                .await
        ),
        ProblemType::Unauthorized
    );
}

#[tokio::test]
async fn replacing_a_certificate_that_shares_no_name_with_the_order_is_malformed() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    assert_eq!(
        problem_kind(
            h.ra.new_order(&account, replacing(&h, &cert, &["b.example.com"]))
                .await
        ),
        ProblemType::Malformed
    );
}

#[tokio::test]
async fn replacing_a_certificate_this_ca_did_not_issue_is_malformed() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let mut request = order_request(&["a.example.com"]);
    request.replaces = Some("aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE".to_owned());
    assert_eq!(
        problem_kind(h.ra.new_order(&account, request).await),
        ProblemType::Malformed
    );
}

/// Order creation at one order an hour, burst 1.
async fn one_order_an_hour() -> Harness {
    harness()
        .limits(|l| {
            l.order_creation.enabled = true;
            l.order_creation.orders_per_account_per_hour = 1;
            l.order_creation.order_burst = 1;
        })
        .build()
        .await
}

#[tokio::test]
async fn a_due_renewal_skips_the_order_creation_limit() {
    let h = one_order_an_hour().await;
    let (account, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    let window = h.ra.renewal_info(&h.cert_id(&cert)).await.unwrap();
    h.clock.set(window.start);
    // Spend the hour's order, then renew.
    h.order(&account, &["b.example.com"]).await.unwrap();
    assert_eq!(
        rate_limited(h.order(&account, &["c.example.com"]).await).0,
        "order-creation"
    );
    h.ra.new_order(&account, replacing(&h, &cert, &["a.example.com"]))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_renewal_before_its_window_is_held_to_the_order_creation_limit() {
    let h = one_order_an_hour().await;
    let (account, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    h.advance(time::Duration::hours(1));
    h.order(&account, &["b.example.com"]).await.unwrap();
    assert_eq!(
        rate_limited(
            h.ra.new_order(&account, replacing(&h, &cert, &["a.example.com"]))
                .await
        )
        .0,
        "order-creation"
    );
}

#[tokio::test]
async fn the_renewal_of_a_revoked_certificate_is_held_to_the_order_creation_limit() {
    let h = one_order_an_hour().await;
    let (account, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    h.ra.revoke(Revoker::Account(account.id), &cert.der, None, client_ip())
        .await
        .unwrap();
    h.advance(time::Duration::hours(1));
    h.order(&account, &["b.example.com"]).await.unwrap();
    assert_eq!(
        rate_limited(
            h.ra.new_order(&account, replacing(&h, &cert, &["a.example.com"]))
                .await
        )
        .0,
        "order-creation"
    );
}

#[tokio::test]
async fn a_due_renewal_is_still_held_to_the_duplicate_certificate_limit() {
    let h = harness()
        .limits(|l| {
            l.duplicate_certificate.enabled = true;
            l.duplicate_certificate.max_per_window = 1;
        })
        .build()
        .await;
    let (account, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    let window = h.ra.renewal_info(&h.cert_id(&cert)).await.unwrap();
    h.ra.renew_early(&RenewEarlyTarget::Serial(cert.serial.clone()), &who())
        .await
        .unwrap();
    assert!(window.start > h.now());
    assert_eq!(
        rate_limited(
            h.ra.new_order(&account, replacing(&h, &cert, &["a.example.com"]))
                .await
        )
        .0,
        "duplicate-certificate"
    );
}
