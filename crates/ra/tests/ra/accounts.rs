//! New accounts, their updates, deactivation and key change (RFC 8555 §7.3).

use acme_core::problem::ProblemType;
use acme_core::status::AccountStatus;
use ra::Refusal;
use ra::accounts::AccountUpdate;
use ra::accounts::Registered;

use crate::harness::account_request;
use crate::harness::harness;
use crate::harness::key;
use crate::harness::problem_kind;
use crate::harness::refusal;
use crate::harness::who;

#[tokio::test]
async fn a_new_key_gets_a_new_valid_account_with_its_contacts() {
    let h = harness().build().await;
    let key = key();
    let mut request = account_request(key.public_jwk());
    request.contacts = Some(vec!["mailto:admin@example.com".to_owned()]);
    let Registered::Created { account, .. } = h.ra.new_account(request).await.unwrap() else {
        panic!("a new key makes a new account");
    };
    assert_eq!(account.status, AccountStatus::Valid);
    assert_eq!(
        account.contacts,
        vec!["mailto:admin@example.com".to_owned()]
    );
    assert_eq!(account.thumbprint, key.public_jwk().thumbprint());
    assert_eq!(account.created_at, h.now());
}

#[tokio::test]
async fn a_registered_key_is_answered_with_its_existing_account() {
    let h = harness().build().await;
    let (account, key) = h.account().await;
    let again = h.ra.new_account(account_request(key.public_jwk())).await;
    let Ok(Registered::Existing(existing)) = again else {
        panic!("expected the existing account, got {again:?}");
    };
    assert_eq!(existing.id, account.id);
}

#[tokio::test]
async fn only_return_existing_for_an_unknown_key_is_account_does_not_exist() {
    let h = harness().build().await;
    let mut request = account_request(key().public_jwk());
    request.only_return_existing = true;
    assert_eq!(
        problem_kind(h.ra.new_account(request).await),
        ProblemType::AccountDoesNotExist
    );
}

#[tokio::test]
async fn only_return_existing_for_a_registered_key_returns_the_account_and_creates_none() {
    let h = harness().build().await;
    let (account, key) = h.account().await;
    let mut request = account_request(key.public_jwk());
    request.only_return_existing = true;
    let Ok(Registered::Existing(found)) = h.ra.new_account(request).await else {
        panic!("the existing account is returned");
    };
    assert_eq!(found.id, account.id);
}

#[tokio::test]
async fn terms_of_service_not_agreed_are_refused_when_the_ca_has_terms() {
    let h = harness()
        .settings(|s| s.terms_of_service = Some("https://ca.example/terms".to_owned()))
        .build()
        .await;
    let mut request = account_request(key().public_jwk());
    request.terms_of_service_agreed = false;
    match refusal(h.ra.new_account(request).await) {
        Refusal::TermsNotAgreed { terms } => assert_eq!(terms, "https://ca.example/terms"),
        other => panic!("expected TermsNotAgreed, got {other:?}"),
    }
}

#[tokio::test]
async fn terms_need_no_agreement_when_the_ca_has_none() {
    let h = harness().build().await;
    let mut request = account_request(key().public_jwk());
    request.terms_of_service_agreed = false;
    let account = h.register(request).await;
    assert!(!account.tos_agreed);
}

#[tokio::test]
async fn a_contact_that_is_not_mailto_is_unsupported_contact() {
    let h = harness().build().await;
    let mut request = account_request(key().public_jwk());
    request.contacts = Some(vec!["tel:+15555550100".to_owned()]);
    assert_eq!(
        problem_kind(h.ra.new_account(request).await),
        ProblemType::UnsupportedContact
    );
}

#[tokio::test]
async fn a_mailto_contact_without_a_valid_address_is_invalid_contact() {
    let h = harness().build().await;
    for bad in [
        "mailto:admin@localhost",
        "mailto:admin@example.com?subject=x",
        "mailto:@example.com",
    ] {
        let mut request = account_request(key().public_jwk());
        request.contacts = Some(vec![bad.to_owned()]);
        assert_eq!(
            problem_kind(h.ra.new_account(request).await),
            ProblemType::InvalidContact,
            "{bad}"
        );
    }
}

#[tokio::test]
async fn more_contacts_than_allowed_are_invalid_contact() {
    let h = harness().settings(|s| s.max_contacts = 2).build().await;
    let mut request = account_request(key().public_jwk());
    request.contacts = Some(
        (0..3)
            .map(|i| format!("mailto:admin{i}@example.com"))
            .collect(),
    );
    assert_eq!(
        problem_kind(h.ra.new_account(request).await),
        ProblemType::InvalidContact
    );
}

#[tokio::test]
async fn a_deactivated_accounts_key_is_refused_as_account_not_valid() {
    let h = harness().build().await;
    let (account, key) = h.account().await;
    let deactivated = h.ra.deactivate_account(account.id, &who()).await.unwrap();
    assert_eq!(deactivated.status, AccountStatus::Deactivated);
    match refusal(h.ra.new_account(account_request(key.public_jwk())).await) {
        Refusal::AccountNotValid(status) => assert_eq!(status, AccountStatus::Deactivated),
        other => panic!("expected AccountNotValid, got {other:?}"),
    }
}

#[tokio::test]
async fn an_update_replaces_the_contacts() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let updated =
        h.ra.update_account(
            &account,
            AccountUpdate {
                status: None,
                contacts: Some(vec!["mailto:new@example.com".to_owned()]),
            },
            &who(),
        )
        .await
        .unwrap();
    assert_eq!(updated.contacts, vec!["mailto:new@example.com".to_owned()]);
}

#[tokio::test]
async fn an_update_with_bad_contacts_is_refused_and_keeps_the_old_ones() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let outcome =
        h.ra.update_account(
            &account,
            AccountUpdate {
                status: None,
                contacts: Some(vec!["https://example.com".to_owned()]),
            },
            &who(),
        )
        .await;
    assert_eq!(problem_kind(outcome), ProblemType::UnsupportedContact);
    let stored = h.storage.account(account.id).await.unwrap().unwrap();
    assert!(stored.contacts.is_empty());
}

#[tokio::test]
async fn an_update_to_a_status_other_than_deactivated_is_malformed() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let outcome =
        h.ra.update_account(
            &account,
            AccountUpdate {
                status: Some("valid".to_owned()),
                contacts: None,
            },
            &who(),
        )
        .await;
    assert_eq!(problem_kind(outcome), ProblemType::Malformed);
}

#[tokio::test]
async fn an_update_to_deactivated_deactivates_the_account_and_its_pending_authorizations() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let order = h.order(&account, &["a.example.com"]).await.unwrap().order;
    let updated =
        h.ra.update_account(
            &account,
            AccountUpdate {
                status: Some("deactivated".to_owned()),
                contacts: None,
            },
            &who(),
        )
        .await
        .unwrap();
    assert_eq!(updated.status, AccountStatus::Deactivated);
    let authz = h
        .storage
        .authorization(order.authz_ids[0], h.now())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(authz.status, acme_core::status::AuthzStatus::Deactivated);
}

#[tokio::test]
async fn a_key_change_to_a_fresh_key_moves_the_account_to_it() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let new_key = key();
    let changed =
        h.ra.change_key(&account, &new_key.public_jwk(), &who())
            .await
            .unwrap();
    assert_eq!(changed.id, account.id);
    assert_eq!(changed.thumbprint, new_key.public_jwk().thumbprint());
    let found = h
        .storage
        .account_by_thumbprint(&new_key.public_jwk().thumbprint())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.id, account.id);
}

#[tokio::test]
async fn a_key_change_to_the_same_key_is_malformed() {
    let h = harness().build().await;
    let (account, key) = h.account().await;
    assert_eq!(
        problem_kind(h.ra.change_key(&account, &key.public_jwk(), &who()).await),
        ProblemType::Malformed
    );
}

#[tokio::test]
async fn a_key_change_to_another_accounts_key_is_key_in_use_naming_that_account() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (other, other_key) = h.account().await;
    match refusal(
        h.ra.change_key(&account, &other_key.public_jwk(), &who())
            .await,
    ) {
        Refusal::KeyInUse(holder) => assert_eq!(holder, other.id),
        refused => panic!("expected KeyInUse, got {refused:?}"),
    }
}

#[tokio::test]
async fn a_key_change_from_a_key_another_change_replaced_is_a_conflict() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    // Both requests were authenticated with the old key; the first one wins.
    h.ra.change_key(&account, &key().public_jwk(), &who())
        .await
        .unwrap();
    let late = h.ra.change_key(&account, &key().public_jwk(), &who()).await;
    assert!(
        matches!(refusal(late), Refusal::Conflict(_)),
        "the losing key change is a conflict"
    );
}

#[tokio::test]
async fn deactivating_an_account_twice_is_refused_with_its_state() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    h.ra.deactivate_account(account.id, &who()).await.unwrap();
    assert!(matches!(
        refusal(h.ra.deactivate_account(account.id, &who()).await),
        Refusal::AccountNotValid(AccountStatus::Deactivated)
    ));
}

#[tokio::test]
async fn an_order_of_an_account_deactivated_since_the_request_was_authenticated_is_refused() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    // `account` is the request's view, read before the deactivation committed.
    h.ra.deactivate_account(account.id, &who()).await.unwrap();
    assert!(matches!(
        refusal(h.order(&account, &["a.example.com"]).await),
        Refusal::AccountNotValid(AccountStatus::Deactivated)
    ));
}

#[tokio::test]
async fn only_return_existing_for_a_deactivated_accounts_key_is_account_not_valid() {
    let h = harness().build().await;
    let (account, key) = h.account().await;
    h.ra.deactivate_account(account.id, &who()).await.unwrap();
    let mut request = account_request(key.public_jwk());
    request.only_return_existing = true;
    assert!(matches!(
        refusal(h.ra.new_account(request).await),
        Refusal::AccountNotValid(AccountStatus::Deactivated)
    ));
}
