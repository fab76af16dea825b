//! New orders (identifier policy, their authorizations and challenges), reading them, and
//! finalization (RFC 8555 §7.4).

use acme_core::problem::ProblemType;
use acme_core::status::AccountStatus;
use acme_core::status::ChallengeType;
use acme_core::status::OrderStatus;
use ra::Refusal;
use ra::error::StateRefusal;

use rcgen::PublicKeyData;

use crate::harness::FinalizeAnswer;
use crate::harness::Handed;
use crate::harness::b64;
use crate::harness::client_ip;
use crate::harness::csr_for;
use crate::harness::csr_with;
use crate::harness::dns;
use crate::harness::harness;
use crate::harness::order_request;
use crate::harness::problem_kind;
use crate::harness::refusal;

#[tokio::test]
async fn an_order_gets_one_pending_authorization_per_identifier_with_the_lifetimes_configured() {
    let h = harness()
        .settings(|s| {
            s.order_lifetime = time::Duration::days(2);
            s.authorization_lifetime = time::Duration::days(3);
        })
        .build()
        .await;
    let (account, _) = h.account().await;
    let order = h
        .order(
            &account,
            &["b.example.com", "A.example.com", "a.example.com"],
        )
        .await
        .unwrap()
        .order;
    assert_eq!(order.status, OrderStatus::Pending);
    // Normalised, sorted and without duplicates.
    assert_eq!(
        order.identifiers,
        vec![dns("a.example.com"), dns("b.example.com")]
    );
    assert_eq!(order.authz_ids.len(), 2);
    assert_eq!(order.expires_at, h.now() + time::Duration::days(2));
    let authz =
        h.ra.authorization_of(account.id, order.authz_ids[0])
            .await
            .unwrap();
    assert_eq!(authz.expires_at, h.now() + time::Duration::days(3));
}

#[tokio::test]
async fn a_name_is_offered_http_dns_and_tls_alpn_a_wildcard_only_dns_and_an_ip_no_dns() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let order = h
        .order(&account, &["www.example.com", "*.example.com", "192.0.2.7"])
        .await
        .unwrap()
        .order;
    let mut offered = Vec::new();
    for id in &order.authz_ids {
        let authz = h.ra.authorization_of(account.id, *id).await.unwrap();
        let mut kinds: Vec<&str> = authz.challenges.iter().map(|c| c.kind.as_str()).collect();
        kinds.sort_unstable();
        offered.push((authz.identifier.value().to_owned(), kinds));
    }
    offered.sort();
    assert_eq!(
        offered,
        vec![
            (
                "*.example.com".to_owned(),
                vec![ChallengeType::Dns01.as_str()]
            ),
            (
                "192.0.2.7".to_owned(),
                vec![
                    ChallengeType::Http01.as_str(),
                    ChallengeType::TlsAlpn01.as_str()
                ]
            ),
            (
                "www.example.com".to_owned(),
                vec![
                    ChallengeType::Dns01.as_str(),
                    ChallengeType::Http01.as_str(),
                    ChallengeType::TlsAlpn01.as_str()
                ]
            ),
        ]
    );
}

#[tokio::test]
async fn an_order_without_identifiers_is_malformed() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    assert_eq!(
        problem_kind(h.order(&account, &[]).await),
        ProblemType::Malformed
    );
}

#[tokio::test]
async fn an_order_with_more_identifiers_than_allowed_is_rejected_identifier() {
    let h = harness()
        .settings(|s| s.max_identifiers_per_order = 2)
        .build()
        .await;
    let (account, _) = h.account().await;
    assert_eq!(
        problem_kind(
            h.order(
                &account,
                &["a.example.com", "b.example.com", "c.example.com"]
            )
            .await
        ),
        ProblemType::RejectedIdentifier
    );
}

#[tokio::test]
async fn an_unknown_identifier_type_is_unsupported_identifier() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let mut request = order_request(&["a.example.com"]);
    request.identifiers[0].kind = "email".to_owned();
    assert_eq!(
        problem_kind(h.ra.new_order(&account, request).await),
        ProblemType::UnsupportedIdentifier
    );
}

#[tokio::test]
async fn every_refused_identifier_is_a_subproblem_of_one_refusal() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let outcome = h
        .order(
            &account,
            &["ok.example.com", "bad_name..example", "-x.example.com"],
        )
        .await;
    let Refusal::Problem(problem) = refusal(outcome) else {
        panic!("a problem refusal");
    };
    assert_eq!(problem.kind, ProblemType::RejectedIdentifier);
    assert_eq!(problem.subproblems.len(), 2, "{problem:?}");
    assert!(
        problem
            .subproblems
            .iter()
            .all(|p| p.kind == ProblemType::RejectedIdentifier)
    );
}

#[tokio::test]
async fn an_order_of_another_account_is_not_found() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (other, _) = h.account().await;
    let order = h.order(&account, &["a.example.com"]).await.unwrap().order;
    assert_eq!(
        h.ra.order_of(account.id, order.id).await.unwrap().id,
        order.id
    );
    assert!(matches!(
        refusal(h.ra.order_of(other.id, order.id).await),
        Refusal::NotFound("order")
    ));
}

#[tokio::test]
async fn a_valid_authorization_is_reused_by_the_next_order_for_the_name() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let first = h.ready_order(&account, &["a.example.com"]).await;
    let second = h.order(&account, &["a.example.com"]).await.unwrap().order;
    assert_eq!(second.authz_ids, first.authz_ids);
    assert_eq!(second.status, OrderStatus::Ready);
}

#[tokio::test]
async fn no_authorization_is_reused_when_reuse_is_off() {
    let h = harness()
        .settings(|s| s.reuse_valid_authorizations = false)
        .build()
        .await;
    let (account, _) = h.account().await;
    let first = h.ready_order(&account, &["a.example.com"]).await;
    let second = h.order(&account, &["a.example.com"]).await.unwrap().order;
    assert_ne!(second.authz_ids, first.authz_ids);
    assert_eq!(second.status, OrderStatus::Pending);
}

#[tokio::test]
async fn finalizing_an_order_that_is_not_ready_is_order_not_ready() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let order = h.order(&account, &["a.example.com"]).await.unwrap().order;
    let (csr, _) = csr_for(&["a.example.com"]);
    assert!(matches!(
        refusal(
            h.ra.finalize(&account, order, &b64(&csr), client_ip())
                .await
        ),
        Refusal::State(StateRefusal::OrderNotReady(OrderStatus::Pending))
    ));
}

#[tokio::test]
async fn a_csr_that_is_not_base64url_is_bad_csr() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let order = h.ready_order(&account, &["a.example.com"]).await;
    assert_eq!(
        problem_kind(
            h.ra.finalize(&account, order, "not base64!", client_ip())
                .await
        ),
        ProblemType::BadCsr
    );
}

#[tokio::test]
async fn a_csr_for_other_names_than_the_order_is_bad_csr_and_the_order_stays_ready() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let order = h.ready_order(&account, &["a.example.com"]).await;
    let (csr, _) = csr_for(&["a.example.com", "b.example.com"]);
    assert_eq!(
        problem_kind(
            h.ra.finalize(&account, order.clone(), &b64(&csr), client_ip())
                .await
        ),
        ProblemType::BadCsr
    );
    assert_eq!(h.stored_order(&order).await.status, OrderStatus::Ready);
    assert!(h.jobs.handed().is_empty());
}

#[tokio::test]
async fn a_csr_carrying_the_accounts_own_key_is_bad_csr() {
    let h = harness().build().await;
    let key = rcgen::KeyPair::generate().unwrap();
    let jwk = acme_jose::Jwk::from_spki_der(&key.subject_public_key_info()).unwrap();
    let account = h.register(crate::harness::account_request(jwk)).await;
    let order = h.ready_order(&account, &["a.example.com"]).await;
    let csr = csr_with(&key, &["a.example.com"]);
    let Refusal::Problem(problem) = refusal(
        h.ra.finalize(&account, order, &b64(&csr), client_ip())
            .await,
    ) else {
        panic!("a problem refusal");
    };
    assert_eq!(problem.kind, ProblemType::BadCsr);
    assert!(
        problem.detail.contains("this account's key"),
        "{}",
        problem.detail
    );
}

#[tokio::test]
async fn a_csr_carrying_another_accounts_key_is_bad_csr() {
    let h = harness().build().await;
    let key = rcgen::KeyPair::generate().unwrap();
    let jwk = acme_jose::Jwk::from_spki_der(&key.subject_public_key_info()).unwrap();
    h.register(crate::harness::account_request(jwk)).await;
    let (account, _) = h.account().await;
    let order = h.ready_order(&account, &["a.example.com"]).await;
    let csr = csr_with(&key, &["a.example.com"]);
    let Refusal::Problem(problem) = refusal(
        h.ra.finalize(&account, order, &b64(&csr), client_ip())
            .await,
    ) else {
        panic!("a problem refusal");
    };
    assert_eq!(problem.kind, ProblemType::BadCsr);
    assert!(
        problem.detail.contains("an ACME account"),
        "{}",
        problem.detail
    );
}

#[tokio::test]
async fn finalizing_without_a_free_worker_place_queues_the_order_as_processing_and_wakes_a_worker()
{
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let order = h.ready_order(&account, &["a.example.com"]).await;
    let (csr, _) = csr_for(&["a.example.com"]);
    let processing =
        h.ra.finalize(&account, order, &b64(&csr), client_ip())
            .await
            .unwrap();
    assert_eq!(processing.status, OrderStatus::Processing);
    assert_eq!(
        processing.finalize_client_ip,
        Some(client_ip()),
        "the request's address is stored with the order for the issuance's audit record"
    );
    assert_eq!(h.jobs.wakes(), 1);
    assert!(h.jobs.handed().is_empty(), "nothing runs at once");
    assert_eq!(
        h.storage.order_csr(processing.id).await.unwrap(),
        Some(csr),
        "the CSR is stored for the job"
    );
}

#[tokio::test]
async fn finalizing_with_a_free_worker_place_hands_the_order_and_csr_to_the_runner() {
    let h = harness().slots(1).build().await;
    let (account, _) = h.account().await;
    let order = h.ready_order(&account, &["a.example.com"]).await;
    let (csr, _) = csr_for(&["a.example.com"]);
    let answered =
        h.ra.finalize(&account, order.clone(), &b64(&csr), client_ip())
            .await
            .unwrap();
    assert_eq!(answered.id, order.id);
    let handed = h.jobs.handed();
    let [
        Handed::Finalization {
            order: handed_order,
            csr_der,
            wait,
        },
    ] = handed.as_slice()
    else {
        panic!("one finalization handed over, got {handed:?}");
    };
    assert_eq!(handed_order.id, order.id);
    assert_eq!(
        handed_order.finalize_client_ip,
        Some(client_ip()),
        "the runner stores the request's address with the order"
    );
    assert_eq!(csr_der, &csr);
    assert_eq!(*wait, std::time::Duration::from_secs(2));
    assert_eq!(h.jobs.wakes(), 0, "nothing was queued");
    // Nothing was written by the policy layer itself: the runner records the outcome.
    assert_eq!(h.stored_order(&order).await.status, OrderStatus::Ready);
}

#[tokio::test]
async fn a_finalization_the_runner_finds_the_account_deactivated_for_is_account_not_valid() {
    let h = harness().slots(1).build().await;
    let (account, _) = h.account().await;
    let order = h.ready_order(&account, &["a.example.com"]).await;
    h.jobs
        .answer_finalizations_with(FinalizeAnswer::AccountNotValid(AccountStatus::Deactivated));
    let (csr, _) = csr_for(&["a.example.com"]);
    match refusal(
        h.ra.finalize(&account, order, &b64(&csr), client_ip())
            .await,
    ) {
        Refusal::AccountNotValid(status) => assert_eq!(status, AccountStatus::Deactivated),
        other => panic!("expected AccountNotValid, got {other:?}"),
    }
}

#[tokio::test]
async fn an_issued_certificate_makes_the_order_valid_with_its_certificate() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    let order = h.ra.order_of(account.id, cert.order_id).await.unwrap();
    assert_eq!(order.status, OrderStatus::Valid);
    assert_eq!(order.certificate_id, Some(cert.id));
    assert_eq!(cert.account_id, account.id);
    assert_eq!(cert.not_before, h.now() - time::Duration::minutes(1));
}

#[tokio::test]
async fn an_order_past_its_lifetime_reads_as_invalid() {
    let h = harness()
        .settings(|s| s.order_lifetime = time::Duration::hours(1))
        .build()
        .await;
    let (account, _) = h.account().await;
    let order = h.order(&account, &["a.example.com"]).await.unwrap().order;
    h.advance(time::Duration::hours(1) + time::Duration::SECOND);
    let read = h.ra.order_of(account.id, order.id).await.unwrap();
    assert_eq!(read.status, OrderStatus::Invalid);
}

#[tokio::test]
async fn a_second_finalization_of_an_order_already_processing_is_order_not_ready() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let order = h.ready_order(&account, &["a.example.com"]).await;
    let (csr, _) = csr_for(&["a.example.com"]);
    h.ra.finalize(&account, order.clone(), &b64(&csr), client_ip())
        .await
        .unwrap();
    // The second request read the order while it was still ready.
    assert!(matches!(
        refusal(
            h.ra.finalize(&account, order, &b64(&csr), client_ip())
                .await
        ),
        Refusal::State(StateRefusal::OrderNotReady(OrderStatus::Processing))
    ));
    assert_eq!(h.jobs.wakes(), 1, "only the first one queued work");
}

#[tokio::test]
async fn a_name_the_identifier_policy_denies_is_rejected_identifier_and_so_is_a_wildcard_above_it()
{
    let h = harness()
        .settings(|s| {
            s.identifier_policy.deny_domains = vec!["internal.example.com".to_owned()];
        })
        .build()
        .await;
    let (account, _) = h.account().await;
    for denied in [
        "internal.example.com",
        "db.internal.example.com",
        "*.example.com",
    ] {
        assert_eq!(
            problem_kind(h.order(&account, &[denied]).await),
            ProblemType::RejectedIdentifier,
            "{denied}"
        );
    }
    h.order(&account, &["www.example.com"]).await.unwrap();
}

#[tokio::test]
async fn only_names_and_networks_the_identifier_policy_allows_may_be_ordered() {
    let h = harness()
        .settings(|s| {
            s.identifier_policy.allow_domains = vec!["example.com".to_owned()];
            s.identifier_policy.allow_cidrs = vec!["192.0.2.0/24".parse().unwrap()];
        })
        .build()
        .await;
    let (account, _) = h.account().await;
    h.order(&account, &["www.example.com", "192.0.2.7"])
        .await
        .unwrap();
    for refused in ["www.example.org", "198.51.100.7"] {
        assert_eq!(
            problem_kind(h.order(&account, &[refused]).await),
            ProblemType::RejectedIdentifier,
            "{refused}"
        );
    }
}
