//! External account binding (RFC 8555 §7.3.4): when a binding is required, which bindings are
//! honoured, and the bound key's policy on every order of its accounts.

use acme_core::eab_policy::EabPolicy;
use acme_core::problem::ProblemType;
use acme_core::status::AccountStatus;
use acme_jose::eab::EabBinding;
use acme_jose::eab::MacAlgorithm;
use acme_jose::sign::SigningKey;
use acme_jose::sign::eab_binding;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ra::Refusal;
use ra::accounts::AccountRequest;
use ra::eab::KeyRequest;
use storage::model::Account;
use storage::model::EabKey;

use crate::harness::Harness;
use crate::harness::account_request;
use crate::harness::harness;
use crate::harness::key;
use crate::harness::problem_kind;
use crate::harness::refusal;
use crate::harness::who;

const NEW_ACCOUNT_URL: &str = "https://ca.example/acme/new-account";

/// A new-account request for `key` bound with `kid` and `hmac_key`.
fn bound_request(key: &SigningKey, kid: &str, hmac_key: &[u8]) -> AccountRequest {
    let jwk = key.public_jwk();
    let value = eab_binding(kid, hmac_key, MacAlgorithm::Hs256, NEW_ACCOUNT_URL, &jwk);
    let binding = EabBinding::parse(&value, NEW_ACCOUNT_URL, &jwk).unwrap();
    AccountRequest {
        external_account_binding: Some(binding),
        ..account_request(jwk)
    }
}

async fn eab_key(h: &Harness, request: KeyRequest) -> (EabKey, Vec<u8>) {
    let (key, hmac) = h.ra.create_eab_key(request, &who()).await.unwrap();
    (key, URL_SAFE_NO_PAD.decode(hmac).unwrap())
}

fn single_use(policy: EabPolicy) -> KeyRequest {
    KeyRequest {
        policy,
        expires_in: None,
        reusable: false,
    }
}

async fn bound_account(h: &Harness, policy: EabPolicy) -> Account {
    let (eab, hmac) = eab_key(h, single_use(policy)).await;
    h.register(bound_request(&key(), &eab.kid.0, &hmac)).await
}

fn unauthorized_detail(refused: Refusal) -> String {
    match refused {
        Refusal::Problem(p) if p.kind == ProblemType::Unauthorized => p.detail,
        other => panic!("expected unauthorized, got {other:?}"),
    }
}

#[tokio::test]
async fn a_new_account_without_a_binding_is_refused_when_the_ca_requires_one() {
    let h = harness()
        .settings(|s| s.external_account_required = true)
        .build()
        .await;
    assert_eq!(
        problem_kind(h.ra.new_account(account_request(key().public_jwk())).await),
        ProblemType::ExternalAccountRequired
    );
}

#[tokio::test]
async fn a_valid_binding_creates_an_account_bound_to_the_key() {
    let h = harness()
        .settings(|s| s.external_account_required = true)
        .build()
        .await;
    let (eab, hmac) = eab_key(&h, single_use(EabPolicy::default())).await;
    assert_eq!(eab.kid.0.len(), 32, "16 random bytes in hex");
    let account = h.register(bound_request(&key(), &eab.kid.0, &hmac)).await;
    assert_eq!(account.eab_kid, Some(eab.kid.clone()));
    let stored = h.storage.eab_key(&eab.kid).await.unwrap().unwrap();
    assert_eq!(stored.bound_accounts, 1);
    assert_eq!(
        stored.hmac_key, None,
        "a single-use key's HMAC key is erased"
    );
}

#[tokio::test]
async fn a_binding_is_honoured_when_the_ca_does_not_require_one() {
    let h = harness().build().await;
    let (eab, hmac) = eab_key(&h, single_use(EabPolicy::default())).await;
    let account = h.register(bound_request(&key(), &eab.kid.0, &hmac)).await;
    assert_eq!(account.eab_kid, Some(eab.kid));
}

#[tokio::test]
async fn a_binding_with_an_unknown_key_identifier_is_unauthorized() {
    let h = harness().build().await;
    let detail = unauthorized_detail(refusal(
        h.ra.new_account(bound_request(&key(), "nosuchkid", &[7; 32]))
            .await,
    ));
    assert!(detail.contains("\"nosuchkid\""), "{detail}");
}

#[tokio::test]
async fn a_binding_maced_with_the_wrong_key_is_refused() {
    let h = harness().build().await;
    let (eab, _) = eab_key(&h, single_use(EabPolicy::default())).await;
    let outcome =
        h.ra.new_account(bound_request(&key(), &eab.kid.0, &[7; 32]))
            .await;
    assert!(
        matches!(refusal(outcome), Refusal::Problem(_)),
        "a bad MAC is a plain refusal"
    );
    let stored = h.storage.eab_key(&eab.kid).await.unwrap().unwrap();
    assert_eq!(stored.bound_accounts, 0);
}

#[tokio::test]
async fn a_single_use_key_binds_one_account_only() {
    let h = harness().build().await;
    let (eab, hmac) = eab_key(&h, single_use(EabPolicy::default())).await;
    h.register(bound_request(&key(), &eab.kid.0, &hmac)).await;
    let detail = unauthorized_detail(refusal(
        h.ra.new_account(bound_request(&key(), &eab.kid.0, &hmac))
            .await,
    ));
    assert!(detail.contains("single-use and already bound"), "{detail}");
}

#[tokio::test]
async fn a_reusable_key_binds_several_accounts() {
    let h = harness().build().await;
    let (eab, hmac) = eab_key(
        &h,
        KeyRequest {
            reusable: true,
            ..single_use(EabPolicy::default())
        },
    )
    .await;
    h.register(bound_request(&key(), &eab.kid.0, &hmac)).await;
    h.register(bound_request(&key(), &eab.kid.0, &hmac)).await;
    let stored = h.storage.eab_key(&eab.kid).await.unwrap().unwrap();
    assert_eq!(stored.bound_accounts, 2);
}

#[tokio::test]
async fn a_revoked_key_binds_no_new_account() {
    let h = harness().build().await;
    let (eab, hmac) = eab_key(&h, single_use(EabPolicy::default())).await;
    let revoked = h.ra.revoke_eab_key(&eab.kid, false, &who()).await.unwrap();
    assert_eq!(revoked.key.revoked_at, Some(h.now()));
    let detail = unauthorized_detail(refusal(
        h.ra.new_account(bound_request(&key(), &eab.kid.0, &hmac))
            .await,
    ));
    assert!(detail.contains("was revoked at"), "{detail}");
}

#[tokio::test]
async fn an_expired_key_binds_no_new_account() {
    let h = harness().build().await;
    let (eab, hmac) = eab_key(
        &h,
        KeyRequest {
            expires_in: Some(time::Duration::days(1)),
            ..single_use(EabPolicy::default())
        },
    )
    .await;
    assert_eq!(eab.expires_at, Some(h.now() + time::Duration::days(1)));
    h.advance(time::Duration::days(1) + time::Duration::SECOND);
    let detail = unauthorized_detail(refusal(
        h.ra.new_account(bound_request(&key(), &eab.kid.0, &hmac))
            .await,
    ));
    assert!(detail.contains("expired at"), "{detail}");
}

#[tokio::test]
async fn revoking_an_unknown_key_is_not_found() {
    let h = harness().build().await;
    assert!(matches!(
        refusal(
            h.ra.revoke_eab_key(&acme_core::ids::EabKid("nosuch".to_owned()), false, &who())
                .await
        ),
        Refusal::NotFound("external account key")
    ));
}

#[tokio::test]
async fn revoking_a_key_twice_is_a_conflict() {
    let h = harness().build().await;
    let (eab, _) = eab_key(&h, single_use(EabPolicy::default())).await;
    h.ra.revoke_eab_key(&eab.kid, false, &who()).await.unwrap();
    assert!(matches!(
        refusal(h.ra.revoke_eab_key(&eab.kid, false, &who()).await),
        Refusal::Conflict(_)
    ));
}

#[tokio::test]
async fn revoking_a_key_with_its_accounts_deactivates_them_even_when_revoked_before() {
    let h = harness().build().await;
    let (eab, hmac) = eab_key(
        &h,
        KeyRequest {
            reusable: true,
            ..single_use(EabPolicy::default())
        },
    )
    .await;
    let first = h.register(bound_request(&key(), &eab.kid.0, &hmac)).await;
    let second = h.register(bound_request(&key(), &eab.kid.0, &hmac)).await;
    let (unbound, _) = h.account().await;
    h.ra.revoke_eab_key(&eab.kid, false, &who()).await.unwrap();
    let revocation = h.ra.revoke_eab_key(&eab.kid, true, &who()).await.unwrap();
    assert_eq!(revocation.deactivated_accounts, 2);
    for id in [first.id, second.id] {
        let account = h.storage.account(id).await.unwrap().unwrap();
        assert_eq!(account.status, AccountStatus::Deactivated);
    }
    let untouched = h.storage.account(unbound.id).await.unwrap().unwrap();
    assert_eq!(untouched.status, AccountStatus::Valid);
}

#[tokio::test]
async fn a_bound_account_may_order_only_the_names_its_key_allows() {
    let h = harness().build().await;
    let policy = EabPolicy::new(&["example.com".to_owned()], Vec::new(), Vec::new(), None).unwrap();
    let account = bound_account(&h, policy).await;
    h.order(&account, &["www.example.com"]).await.unwrap();
    assert_eq!(
        problem_kind(h.order(&account, &["www.example.org"]).await),
        ProblemType::RejectedIdentifier
    );
}

#[tokio::test]
async fn a_bound_account_may_order_only_the_profiles_its_key_allows() {
    let h = harness().build().await;
    let policy = EabPolicy::new(&[], Vec::new(), vec!["short-lived".to_owned()], None).unwrap();
    let account = bound_account(&h, policy).await;
    let mut short = crate::harness::order_request(&["a.example.com"]);
    short.profile = Some("short-lived".to_owned());
    h.ra.new_order(&account, short).await.unwrap();
    // The default profile is not among the key's.
    assert_eq!(
        problem_kind(h.order(&account, &["a.example.com"]).await),
        ProblemType::Malformed
    );
}

#[tokio::test]
async fn a_bound_accounts_order_without_not_after_gets_the_keys_maximum_validity() {
    let h = harness().build().await;
    let policy =
        EabPolicy::new(&[], Vec::new(), Vec::new(), Some(time::Duration::days(10))).unwrap();
    let account = bound_account(&h, policy).await;
    let order = h.order(&account, &["a.example.com"]).await.unwrap().order;
    // The default profile's window starts a backdate before now.
    assert_eq!(
        order.not_after,
        Some(h.now() - time::Duration::minutes(1) + time::Duration::days(10))
    );
}

#[tokio::test]
async fn a_bound_accounts_order_asking_for_more_than_the_keys_maximum_is_refused() {
    let h = harness().build().await;
    let policy =
        EabPolicy::new(&[], Vec::new(), Vec::new(), Some(time::Duration::days(10))).unwrap();
    let account = bound_account(&h, policy).await;
    let mut long = crate::harness::order_request(&["a.example.com"]);
    long.not_after = Some(h.now() + time::Duration::days(30));
    assert_eq!(
        problem_kind(h.ra.new_order(&account, long).await),
        ProblemType::Malformed
    );
}
