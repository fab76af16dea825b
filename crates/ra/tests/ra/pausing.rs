//! Zombie pausing: an (account, identifier) pair that keeps failing is paused; its orders are
//! refused until the subscriber or an operator unpauses it.

use std::sync::Arc;

use acme_core::ids::AccountId;
use acme_core::status::ChallengeStatus;
use ra::Refusal;
use ra::pausing::PAUSE_RETRY_AFTER_SECS;
use ra::pausing::SHOWN;
use ra::verdicts::ValidationHook;
use ra::verdicts::ZombieHook;
use storage::model::ValidationRecorded;

use crate::harness::Harness;
use crate::harness::dns;
use crate::harness::harness;
use crate::harness::refusal;
use crate::harness::subscriber;
use crate::harness::who;

/// The limits with zombie pausing on: `max` consecutive failures pause a pair.
async fn zombie_harness(max: u64) -> Harness {
    harness()
        .limits(|l| {
            l.zombie_pausing.enabled = true;
            l.zombie_pausing.max_consecutive_failures = max;
        })
        .build()
        .await
}

fn zombie_hook(h: &Harness, grace: time::Duration) -> ZombieHook {
    ZombieHook::new(
        Arc::clone(h.ra.limits().limiter()),
        h.storage.clone(),
        Arc::new(h.clock.clone()),
        grace,
    )
}

async fn verdict(hook: &ZombieHook, account: AccountId, name: &str, status: ChallengeStatus) {
    hook.on_validation(&ValidationRecorded {
        account_id: account,
        authz_id: acme_core::ids::AuthzId(1),
        identifier: dns(name),
        status,
        changed: true,
    })
    .await;
}

#[tokio::test]
async fn an_order_naming_a_paused_identifier_is_refused_as_paused_with_the_names_shown() {
    let h = zombie_harness(10).await;
    let (account, _) = h.account().await;
    assert_eq!(
        h.ra.pause(account.id, &[dns("a.example.com")], &who())
            .await
            .unwrap(),
        1
    );
    match refusal(h.order(&account, &["a.example.com", "b.example.com"]).await) {
        Refusal::Paused {
            limit,
            account: paused_account,
            shown,
            more,
            at,
            info,
        } => {
            assert_eq!(limit, "zombie-pausing");
            assert_eq!(paused_account, account.id);
            assert_eq!(shown, vec!["a.example.com".to_owned()]);
            assert!(!more);
            assert_eq!(at, h.now());
            assert_eq!(info.items().len(), 1);
            assert_eq!(info.items()[0].reset_secs, PAUSE_RETRY_AFTER_SECS);
            assert_eq!(info.items()[0].remaining, 0);
        }
        other => panic!("expected Paused, got {other:?}"),
    }
    // The pair is paused for this account only, and the account's other names are free.
    h.order(&account, &["b.example.com"]).await.unwrap();
    let (other, _) = h.account().await;
    h.order(&other, &["a.example.com"]).await.unwrap();
}

#[tokio::test]
async fn a_refusal_shows_at_most_fifteen_paused_names_and_says_there_are_more() {
    let h = zombie_harness(10).await;
    let (account, _) = h.account().await;
    let names: Vec<String> = (0..SHOWN + 1)
        .map(|i| format!("n{i:02}.example.com"))
        .collect();
    let ids: Vec<_> = names.iter().map(|n| dns(n)).collect();
    assert_eq!(
        h.ra.pause(account.id, &ids, &who()).await.unwrap(),
        names.len()
    );
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    match refusal(h.order(&account, &refs).await) {
        Refusal::Paused { shown, more, .. } => {
            assert_eq!(shown.len(), SHOWN as usize);
            assert!(more);
        }
        other => panic!("expected Paused, got {other:?}"),
    }
}

#[tokio::test]
async fn pausing_a_pair_twice_counts_it_once() {
    let h = zombie_harness(10).await;
    let (account, _) = h.account().await;
    assert_eq!(
        h.ra.pause(account.id, &[dns("a.example.com")], &who())
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        h.ra.pause(account.id, &[dns("a.example.com")], &who())
            .await
            .unwrap(),
        0
    );
}

#[tokio::test]
async fn pausing_for_an_account_that_does_not_exist_is_not_found() {
    let h = zombie_harness(10).await;
    assert!(matches!(
        refusal(
            h.ra.pause(AccountId(4242), &[dns("a.example.com")], &who())
                .await
        ),
        Refusal::NotFound("account")
    ));
}

#[tokio::test]
async fn an_unpaused_pair_may_order_again() {
    let h = zombie_harness(10).await;
    let (account, _) = h.account().await;
    h.ra.pause(
        account.id,
        &[dns("a.example.com"), dns("b.example.com")],
        &who(),
    )
    .await
    .unwrap();
    let unpaused =
        h.ra.unpause(account.id, &[dns("a.example.com")], &subscriber(account.id))
            .await
            .unwrap();
    assert_eq!(unpaused, vec![dns("a.example.com")]);
    h.order(&account, &["a.example.com"]).await.unwrap();
    assert_eq!(
        h.ra.paused_for_account(account.id, 10).await.unwrap(),
        vec![dns("b.example.com")]
    );
}

#[tokio::test]
async fn unpausing_without_names_unpauses_every_pair_of_the_account() {
    let h = zombie_harness(10).await;
    let (account, _) = h.account().await;
    h.ra.pause(
        account.id,
        &[dns("a.example.com"), dns("b.example.com")],
        &who(),
    )
    .await
    .unwrap();
    let mut unpaused = h.ra.unpause(account.id, &[], &who()).await.unwrap();
    unpaused.sort();
    assert_eq!(unpaused, vec![dns("a.example.com"), dns("b.example.com")]);
    assert!(
        h.ra.paused_for_account(account.id, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn the_nth_consecutive_failure_pauses_the_pair() {
    let h = zombie_harness(3).await;
    let (account, _) = h.account().await;
    let hook = zombie_hook(&h, time::Duration::hours(1));
    verdict(&hook, account.id, "a.example.com", ChallengeStatus::Invalid).await;
    verdict(&hook, account.id, "a.example.com", ChallengeStatus::Invalid).await;
    h.order(&account, &["a.example.com"]).await.unwrap();
    verdict(&hook, account.id, "a.example.com", ChallengeStatus::Invalid).await;
    assert!(matches!(
        refusal(h.order(&account, &["a.example.com"]).await),
        Refusal::Paused { .. }
    ));
}

#[tokio::test]
async fn a_success_forgives_the_failures_before_it() {
    let h = zombie_harness(2).await;
    let (account, _) = h.account().await;
    let hook = zombie_hook(&h, time::Duration::hours(1));
    verdict(&hook, account.id, "a.example.com", ChallengeStatus::Invalid).await;
    verdict(&hook, account.id, "a.example.com", ChallengeStatus::Valid).await;
    verdict(&hook, account.id, "a.example.com", ChallengeStatus::Invalid).await;
    h.order(&account, &["a.example.com"]).await.unwrap();
    verdict(&hook, account.id, "a.example.com", ChallengeStatus::Invalid).await;
    assert!(matches!(
        refusal(h.order(&account, &["a.example.com"]).await),
        Refusal::Paused { .. }
    ));
}

#[tokio::test]
async fn failures_within_the_repause_grace_after_an_unpause_are_not_counted() {
    let h = zombie_harness(1).await;
    let (account, _) = h.account().await;
    let hook = zombie_hook(&h, time::Duration::hours(1));
    verdict(&hook, account.id, "a.example.com", ChallengeStatus::Invalid).await;
    assert!(matches!(
        refusal(h.order(&account, &["a.example.com"]).await),
        Refusal::Paused { .. }
    ));
    h.ra.unpause(account.id, &[dns("a.example.com")], &subscriber(account.id))
        .await
        .unwrap();
    h.advance(time::Duration::minutes(59));
    verdict(&hook, account.id, "a.example.com", ChallengeStatus::Invalid).await;
    h.order(&account, &["a.example.com"]).await.unwrap();
    // After the grace the count starts afresh, and one failure is enough again.
    h.advance(time::Duration::minutes(1));
    verdict(&hook, account.id, "a.example.com", ChallengeStatus::Invalid).await;
    assert!(matches!(
        refusal(h.order(&account, &["a.example.com"]).await),
        Refusal::Paused { .. }
    ));
}

#[tokio::test]
async fn unpausing_a_pair_that_is_not_paused_unpauses_nothing() {
    let h = zombie_harness(10).await;
    let (account, _) = h.account().await;
    h.ra.pause(account.id, &[dns("a.example.com")], &who())
        .await
        .unwrap();
    let unpaused =
        h.ra.unpause(account.id, &[dns("b.example.com")], &subscriber(account.id))
            .await
            .unwrap();
    assert!(unpaused.is_empty());
    assert_eq!(
        h.ra.paused_for_account(account.id, 10).await.unwrap(),
        vec![dns("a.example.com")]
    );
}
