//! What an operator may do through the admin API: deactivate accounts, revoke certificates one
//! by one or in bulk, and look them up.

use acme_core::ids::AccountId;
use acme_core::ids::Serial;
use acme_core::status::AccountStatus;
use acme_core::status::RevocationReason;
use ra::Refusal;
use ra::operator::bulk_selection;
use ra::operator::list_limit;
use ra::operator::revoke_batch_size;
use storage::model::AccountFilter;
use storage::model::CertificateFilter;
use storage::model::Page;

use crate::harness::client_ip;
use crate::harness::dns;
use crate::harness::harness;
use crate::harness::refusal;
use crate::harness::who;

#[tokio::test]
async fn an_operator_deactivates_a_valid_account_and_it_can_no_longer_register_its_key() {
    let h = harness().build().await;
    let (account, key) = h.account().await;
    let order = h.order(&account, &["a.example.com"]).await.unwrap().order;
    let deactivated = h.ra.operator_deactivates(account.id, &who()).await.unwrap();
    assert_eq!(deactivated.status, AccountStatus::Deactivated);
    let order = h.stored_order(&order).await;
    assert_eq!(order.status, acme_core::status::OrderStatus::Invalid);
    assert!(matches!(
        refusal(
            h.ra.new_account(crate::harness::account_request(key.public_jwk()))
                .await
        ),
        Refusal::AccountNotValid(AccountStatus::Deactivated)
    ));
}

#[tokio::test]
async fn deactivating_an_account_twice_is_account_not_valid_for_the_operator_and_its_holder_alike()
{
    let h = harness().build().await;
    let (account, _) = h.account().await;
    h.ra.operator_deactivates(account.id, &who()).await.unwrap();
    assert!(matches!(
        refusal(h.ra.operator_deactivates(account.id, &who()).await),
        Refusal::AccountNotValid(AccountStatus::Deactivated)
    ));
    // The holder's request, authenticated before the operator's deactivation committed.
    assert!(matches!(
        refusal(h.ra.deactivate_account(account.id, &who()).await),
        Refusal::AccountNotValid(AccountStatus::Deactivated)
    ));
    // And the other way round.
    let (other, _) = h.account().await;
    h.ra.deactivate_account(other.id, &who()).await.unwrap();
    assert!(matches!(
        refusal(h.ra.operator_deactivates(other.id, &who()).await),
        Refusal::AccountNotValid(AccountStatus::Deactivated)
    ));
}

#[tokio::test]
async fn deactivating_an_account_that_does_not_exist_is_not_found() {
    let h = harness().build().await;
    assert!(matches!(
        refusal(h.ra.operator_deactivates(AccountId(4242), &who()).await),
        Refusal::NotFound("account")
    ));
    assert!(matches!(
        refusal(h.ra.show_account(AccountId(4242)).await),
        Refusal::NotFound("account")
    ));
}

#[tokio::test]
async fn an_account_is_shown_with_what_it_holds() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    h.issue(&account, &["b.example.com"]).await;
    h.ra.revoke_stored(&cert, RevocationReason::Superseded, &who())
        .await
        .unwrap();
    let detail = h.ra.show_account(account.id).await.unwrap();
    assert_eq!(detail.account.id, account.id);
    assert_eq!(detail.counts.orders, 2);
    assert_eq!(detail.counts.certificates, 2);
    assert_eq!(detail.counts.revoked_certificates, 1);
}

#[tokio::test]
async fn accounts_are_listed_by_status_newest_first() {
    let h = harness().build().await;
    let (first, _) = h.account().await;
    let (second, _) = h.account().await;
    let (third, _) = h.account().await;
    h.ra.operator_deactivates(second.id, &who()).await.unwrap();
    let valid =
        h.ra.list_accounts(
            &AccountFilter {
                status: Some(AccountStatus::Valid),
                contact: None,
            },
            Page {
                before: None,
                limit: list_limit(None),
            },
        )
        .await
        .unwrap();
    let ids: Vec<AccountId> = valid.iter().map(|a| a.id).collect();
    assert_eq!(ids, vec![third.id, first.id]);
}

#[tokio::test]
async fn a_certificate_is_shown_with_its_names() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["b.example.com", "a.example.com"]).await;
    let detail = h.ra.show_certificate(&cert.serial).await.unwrap();
    assert_eq!(detail.certificate.id, cert.id);
    assert_eq!(
        detail.identifiers,
        vec![dns("a.example.com"), dns("b.example.com")]
    );
    assert!(matches!(
        refusal(
            h.ra.show_certificate(&Serial::from_bytes(vec![1, 2, 3]))
                .await
        ),
        Refusal::NotFound("certificate")
    ));
}

#[tokio::test]
async fn an_operator_revokes_by_serial_with_any_reason_once() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    let revoked =
        h.ra.revoke_by_serial(&cert.serial, RevocationReason::CessationOfOperation, &who())
            .await
            .unwrap();
    assert_eq!(revoked.revoked_at, Some(h.now()));
    assert!(matches!(
        refusal(
            h.ra.revoke_by_serial(&cert.serial, RevocationReason::KeyCompromise, &who())
                .await
        ),
        Refusal::State(ra::error::StateRefusal::AlreadyRevoked)
    ));
    assert!(matches!(
        refusal(
            h.ra.revoke_by_serial(
                &Serial::from_bytes(vec![9, 9, 9]),
                RevocationReason::Unspecified,
                &who()
            )
            .await
        ),
        Refusal::NotFound("certificate")
    ));
}

#[tokio::test]
async fn a_certificate_the_operator_revoked_is_already_revoked_for_its_holder() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    h.ra.revoke_by_serial(&cert.serial, RevocationReason::KeyCompromise, &who())
        .await
        .unwrap();
    assert!(matches!(
        refusal(
            h.ra.revoke(
                ra::revocation::Revoker::Account(account.id),
                &cert.der,
                None,
                client_ip()
            )
            .await
        ),
        Refusal::State(ra::error::StateRefusal::AlreadyRevoked)
    ));
}

#[tokio::test]
async fn a_certificate_its_holder_revoked_is_already_revoked_for_the_operator() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;
    h.ra.revoke(
        ra::revocation::Revoker::Account(account.id),
        &cert.der,
        None,
        client_ip(),
    )
    .await
    .unwrap();
    assert!(matches!(
        refusal(
            h.ra.revoke_by_serial(&cert.serial, RevocationReason::KeyCompromise, &who())
                .await
        ),
        Refusal::State(ra::error::StateRefusal::AlreadyRevoked)
    ));
}

#[test]
fn a_bulk_revocation_without_a_filter_or_of_revoked_certificates_is_refused() {
    assert!(matches!(
        bulk_selection(&CertificateFilter::default()),
        Err(Refusal::Conflict(_))
    ));
    let revoked_only = CertificateFilter {
        account: Some(AccountId(1)),
        revoked: Some(true),
        ..CertificateFilter::default()
    };
    assert!(matches!(
        bulk_selection(&revoked_only),
        Err(Refusal::Conflict(_))
    ));
    let selection = bulk_selection(&CertificateFilter {
        account: Some(AccountId(1)),
        ..CertificateFilter::default()
    })
    .unwrap();
    assert_eq!(selection.revoked, Some(false), "only unrevoked ones");
}

#[test]
fn page_and_batch_sizes_are_clamped_to_their_bounds() {
    assert_eq!(list_limit(None), ra::operator::DEFAULT_LIST_LIMIT);
    assert_eq!(list_limit(Some(0)), 1);
    assert_eq!(list_limit(Some(1_000_000)), ra::operator::MAX_LIST_LIMIT);
    assert_eq!(revoke_batch_size(None), ra::operator::DEFAULT_REVOKE_BATCH);
    assert_eq!(revoke_batch_size(Some(0)), 1);
    assert_eq!(
        revoke_batch_size(Some(1_000_000)),
        ra::operator::MAX_REVOKE_BATCH
    );
}

#[tokio::test]
async fn a_bulk_revocation_revokes_the_selection_batch_by_batch_and_skips_the_revoked() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (other, _) = h.account().await;
    let (already, _) = h.issue(&account, &["a.example.com"]).await;
    h.issue(&account, &["b.example.com"]).await;
    h.issue(&account, &["c.example.com"]).await;
    let (untouched, _) = h.issue(&other, &["a.example.com"]).await;
    h.ra.revoke_stored(&already, RevocationReason::Superseded, &who())
        .await
        .unwrap();
    let filter = CertificateFilter {
        account: Some(account.id),
        ..CertificateFilter::default()
    };
    assert_eq!(h.ra.count_revocable(&filter).await.unwrap(), 2);
    let first =
        h.ra.revoke_batch(&filter, None, 1, RevocationReason::KeyCompromise, &who())
            .await
            .unwrap();
    assert_eq!(first.revoked.len(), 1);
    assert!(first.next.is_some());
    let second =
        h.ra.revoke_batch(
            &filter,
            first.next,
            1,
            RevocationReason::KeyCompromise,
            &who(),
        )
        .await
        .unwrap();
    assert_eq!(second.revoked.len(), 1);
    let last =
        h.ra.revoke_batch(
            &filter,
            second.next,
            1,
            RevocationReason::KeyCompromise,
            &who(),
        )
        .await
        .unwrap();
    assert!(last.revoked.is_empty());
    assert_eq!(last.next, None);
    assert_eq!(h.ra.count_revocable(&filter).await.unwrap(), 0);
    let other_cert = h.storage.certificate(untouched.id).await.unwrap().unwrap();
    assert_eq!(other_cert.revoked_at, None);
}
