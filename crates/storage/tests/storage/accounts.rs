use acme_core::ids::AccountId;
use acme_core::status::AccountStatus;
use acme_core::status::AuthzStatus;
use acme_core::status::OrderStatus;
use storage::Storage;
use storage::error::Error;
use storage::model::Account;
use storage::model::KeyChange;
use storage::model::NewAccount;
use storage::model::OrderCreation;
use storage::model::OrderGuards;
use storage::model::StatusChange;

use crate::harness;
use crate::harness::Changed;
use crate::harness::Created;
use crate::harness::ev;
use crate::harness::t0;

crate::both_backends!(
    create_lookup_and_conflict,
    contacts_and_key_change,
    concurrent_key_changes_from_one_key_let_exactly_one_win,
    deactivation_cascades
);

async fn create_lookup_and_conflict(s: &Storage) {
    s.ping().await.unwrap();
    let new = NewAccount {
        jwk_json: r#"{"kty":"EC"}"#.to_owned(),
        thumbprint: "tp-1".to_owned(),
        contacts: vec![
            "mailto:a@example.com".to_owned(),
            "mailto:b@example.com".to_owned(),
        ],
        tos_agreed: true,
    };
    let created = s.create_account(new.clone(), t0(), &ev()).await.unwrap();
    assert_eq!(created.status, AccountStatus::Valid);
    assert_eq!(created.thumbprint, "tp-1");
    assert_eq!(created.jwk_json, r#"{"kty":"EC"}"#);
    assert_eq!(created.contacts, new.contacts);
    assert!(created.tos_agreed);
    assert_eq!(created.created_at, t0());

    assert_eq!(s.account(created.id).await.unwrap(), Some(created.clone()));
    assert_eq!(
        s.account_by_thumbprint("tp-1").await.unwrap(),
        Some(created.clone())
    );
    assert_eq!(s.account_by_thumbprint("tp-2").await.unwrap(), None);
    assert_eq!(
        s.account(AccountId(created.id.0 + 1000)).await.unwrap(),
        None
    );

    match s.create_account(new, t0(), &ev()).await {
        Err(Error::Conflict(id)) => assert_eq!(id, created.id.0),
        other => panic!("expected conflict, got {other:?}"),
    }

    let quiet = s
        .create_account(
            NewAccount {
                jwk_json: "{}".into(),
                thumbprint: "tp-2".into(),
                contacts: vec![],
                tos_agreed: false,
            },
            t0(),
            &ev(),
        )
        .await
        .unwrap();
    assert!(quiet.contacts.is_empty());
    assert!(!quiet.tos_agreed);
    assert_ne!(quiet.id, created.id);
}

async fn contacts_and_key_change(s: &Storage) {
    let a = harness::account(s, t0()).await;
    let b = harness::account(s, t0()).await;

    let awkward = vec![
        "mailto:x@example.com".to_owned(),
        "mailto:back\\slash@example.com".to_owned(),
    ];
    let updated = s
        .update_account_contacts(
            a.id,
            awkward.clone(),
            time::OffsetDateTime::now_utc(),
            &ev(),
        )
        .await
        .unwrap();
    assert_eq!(updated.contacts, awkward);
    assert_eq!(s.account(a.id).await.unwrap().unwrap().contacts, awkward);
    assert_eq!(
        s.update_account_contacts(a.id, vec![], time::OffsetDateTime::now_utc(), &ev())
            .await
            .unwrap()
            .contacts,
        Vec::<String>::new()
    );
    assert!(matches!(
        s.update_account_contacts(
            AccountId(999_999),
            vec![],
            time::OffsetDateTime::now_utc(),
            &ev()
        )
        .await,
        Err(Error::NotFound)
    ));

    match s
        .change_account_key(
            a.id,
            &a.thumbprint,
            "{}",
            &b.thumbprint,
            time::OffsetDateTime::now_utc(),
            &ev(),
        )
        .await
        .unwrap()
    {
        KeyChange::KeyInUse(other) => assert_eq!(other, b.id),
        other => panic!("expected the key in use, got {other:?}"),
    }
    let KeyChange::Changed(rolled) = s
        .change_account_key(
            a.id,
            &a.thumbprint,
            r#"{"kty":"OKP"}"#,
            "tp-new",
            time::OffsetDateTime::now_utc(),
            &ev(),
        )
        .await
        .unwrap()
    else {
        panic!("the key was not changed");
    };
    assert_eq!(rolled.thumbprint, "tp-new");
    assert_eq!(rolled.jwk_json, r#"{"kty":"OKP"}"#);
    assert_eq!(
        s.account_by_thumbprint("tp-new").await.unwrap().unwrap().id,
        a.id
    );
    assert_eq!(s.account_by_thumbprint(&a.thumbprint).await.unwrap(), None);
    // A change from the key the account no longer has changes nothing.
    assert_eq!(
        s.change_account_key(
            a.id,
            &a.thumbprint,
            "{}",
            "tp-other",
            time::OffsetDateTime::now_utc(),
            &ev()
        )
        .await
        .unwrap(),
        KeyChange::OldKeyReplaced
    );
    assert_eq!(s.account(a.id).await.unwrap().unwrap().thumbprint, "tp-new");
    assert_eq!(s.account_by_thumbprint("tp-other").await.unwrap(), None);
    // The old key is free again.
    let c = s
        .create_account(
            NewAccount {
                jwk_json: "{}".into(),
                thumbprint: a.thumbprint.clone(),
                contacts: vec![],
                tos_agreed: true,
            },
            t0(),
            &ev(),
        )
        .await
        .unwrap();
    assert_ne!(c.id, a.id);
    // Rolling to the key the account already has is not a conflict.
    assert!(matches!(
        s.change_account_key(a.id, "tp-new", "{}", "tp-new", time::OffsetDateTime::now_utc(), &ev())
            .await
            .unwrap(),
        KeyChange::Changed(account) if account.id == a.id
    ));
    // Every replaced key is remembered for dns-persist-01 (migration 0024), once each; an
    // account created with a key another account used has no earlier keys.
    let mut earlier = s.earlier_thumbprints(a.id).await.unwrap();
    earlier.sort();
    let mut want = vec![a.thumbprint.clone(), "tp-new".to_owned()];
    want.sort();
    assert_eq!(earlier, want);
    assert!(s.earlier_thumbprints(c.id).await.unwrap().is_empty());
    assert!(matches!(
        s.change_account_key(
            AccountId(999_999),
            "tp-x",
            "{}",
            "tp-y",
            time::OffsetDateTime::now_utc(),
            &ev()
        )
        .await,
        Err(Error::NotFound)
    ));
}

/// Many rollovers from one key race, each to a key of its own: exactly one changes the key, every
/// other finds the old key replaced, and the account ends with the winner's key.
async fn concurrent_key_changes_from_one_key_let_exactly_one_win(s: &Storage) {
    const RACERS: usize = 8;
    for round in 0..3 {
        let a = harness::account(s, t0()).await;
        let mut tasks = Vec::new();
        for racer in 0..RACERS {
            let s = s.clone();
            let old = a.thumbprint.clone();
            let new = format!("tp-race-{}-{round}-{racer}", a.id.0);
            tasks.push(tokio::spawn(async move {
                let outcome = s
                    .change_account_key(
                        a.id,
                        &old,
                        &format!(r#"{{"n":"{new}"}}"#),
                        &new,
                        time::OffsetDateTime::now_utc(),
                        &ev(),
                    )
                    .await
                    .unwrap();
                (new, outcome)
            }));
        }
        let mut winners = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                (new, KeyChange::Changed(account)) => {
                    assert_eq!(account.thumbprint, new);
                    winners.push(new);
                }
                (_, KeyChange::OldKeyReplaced) => {}
                (_, other) => panic!("unexpected outcome {other:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        let now = s.account(a.id).await.unwrap().unwrap();
        assert_eq!(now.thumbprint, winners[0]);
        assert_eq!(now.jwk_json, format!(r#"{{"n":"{}"}}"#, winners[0]));
    }
}

async fn deactivation_cascades(s: &Storage) {
    let acct = harness::account(s, t0()).await;
    let pending = s
        .create_order(
            harness::new_order(acct.id, &["p.example.com"], t0(), false),
            &OrderGuards::default(),
            t0(),
        )
        .await
        .unwrap()
        .created();
    let ready = harness::ready_order(s, acct.id, &["r.example.com"], t0()).await;
    let other = harness::account(s, t0()).await;
    let untouched = s
        .create_order(
            harness::new_order(other.id, &["p.example.com"], t0(), false),
            &OrderGuards::default(),
            t0(),
        )
        .await
        .unwrap()
        .created();

    let deactivated = s
        .deactivate_account(acct.id, t0(), &ev())
        .await
        .unwrap()
        .changed();
    assert_eq!(deactivated.status, AccountStatus::Deactivated);
    assert_eq!(
        s.account(acct.id).await.unwrap().unwrap().status,
        AccountStatus::Deactivated
    );

    assert_eq!(
        s.order(pending.id, t0()).await.unwrap().unwrap().status,
        OrderStatus::Invalid
    );
    assert_eq!(
        s.order(ready.id, t0()).await.unwrap().unwrap().status,
        OrderStatus::Invalid
    );
    let authz = s
        .authorization(pending.authz_ids[0], t0())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(authz.status, AuthzStatus::Deactivated);
    // Valid authorizations are left as they are.
    let valid = s
        .authorization(ready.authz_ids[0], t0())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(valid.status, AuthzStatus::Valid);
    // Other accounts are not touched.
    assert_eq!(
        s.order(untouched.id, t0()).await.unwrap().unwrap().status,
        OrderStatus::Pending
    );

    assert!(matches!(
        s.deactivate_account(acct.id, t0(), &ev()).await,
        Ok(StatusChange::Unchanged(Account {
            status: AccountStatus::Deactivated,
            ..
        }))
    ));
    assert!(matches!(
        s.deactivate_account(AccountId(999_999), t0(), &ev()).await,
        Err(Error::NotFound)
    ));
    let refused = s
        .create_order(
            harness::new_order(acct.id, &["n.example.com"], t0(), false),
            &OrderGuards::default(),
            t0(),
        )
        .await;
    assert!(
        matches!(
            refused,
            Ok(OrderCreation::AccountNotValid(AccountStatus::Deactivated))
        ),
        "{refused:?}"
    );
    let missing = s
        .create_order(
            harness::new_order(AccountId(999_999), &["n.example.com"], t0(), false),
            &OrderGuards::default(),
            t0(),
        )
        .await;
    assert!(matches!(missing, Err(Error::NotFound)), "{missing:?}");
}
