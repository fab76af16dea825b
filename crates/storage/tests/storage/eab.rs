use std::sync::Arc;

use acme_core::eab_policy::EabPolicy;
use acme_core::ids::EabKid;
use sqlx::Connection;
use storage::Storage;
use storage::error::Error;
use storage::model::BindOutcome;
use storage::model::NewAccount;
use storage::model::NewEabKey;
use storage::model::StatusChange;
use time::Duration;

use crate::harness;
use crate::harness::Changed;
use crate::harness::ev;
use crate::harness::t0;

crate::both_backends!(
    keys_round_trip_and_revoke,
    single_use_key_binds_one_account,
    reusable_expired_and_revoked_keys,
    concurrent_binds_of_a_single_use_key,
    valid_accounts_bound_with_a_key
);

fn new_key(kid: &str, reusable: bool) -> NewEabKey {
    NewEabKey {
        kid: EabKid(kid.to_owned()),
        hmac_key: vec![7_u8; 32],
        policy: EabPolicy::new(
            &["example.com".to_owned()],
            vec!["10.0.0.0/8".parse().unwrap()],
            vec!["short".to_owned()],
            Some(Duration::days(30)),
        )
        .unwrap(),
        expires_at: Some(t0() + Duration::days(1)),
        reusable,
    }
}

fn new_account(tag: &str) -> NewAccount {
    let thumb = format!("tp-{tag}-{}", harness::unique());
    NewAccount {
        jwk_json: format!(r#"{{"kty":"EC","x":"{thumb}"}}"#),
        thumbprint: thumb,
        contacts: vec![],
        tos_agreed: true,
    }
}

async fn keys_round_trip_and_revoke(s: &Storage) {
    let created = s
        .create_eab_key(new_key("kid-a", false), t0(), &ev())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(created.kid.0, "kid-a");
    assert_eq!(created.hmac_key, Some(vec![7_u8; 32]));
    assert_eq!(created.policy, new_key("kid-a", false).policy);
    assert_eq!(created.expires_at, Some(t0() + Duration::days(1)));
    assert!(!created.reusable);
    assert_eq!(created.revoked_at, None);
    assert_eq!(created.bound_accounts, 0);
    // The Debug form never shows the HMAC key.
    assert!(!format!("{created:?}").contains("7, 7"));
    assert!(matches!(
        s.create_eab_key(new_key("kid-a", true), t0(), &ev()).await,
        Ok(None)
    ));
    s.create_eab_key(new_key("kid-b", true), t0() + Duration::seconds(1), &ev())
        .await
        .unwrap()
        .unwrap();
    let all = s.list_eab_keys().await.unwrap();
    assert_eq!(
        all.iter().map(|k| k.kid.0.as_str()).collect::<Vec<_>>(),
        ["kid-a", "kid-b"]
    );
    assert_eq!(s.eab_key(&EabKid("nope".into())).await.unwrap(), None);

    let revoked = s
        .revoke_eab_key(&EabKid("kid-a".into()), t0() + Duration::hours(1), &ev())
        .await
        .unwrap()
        .changed();
    assert_eq!(revoked.revoked_at, Some(t0() + Duration::hours(1)));
    assert!(matches!(
        s.revoke_eab_key(&EabKid("kid-a".into()), t0(), &ev()).await,
        Ok(StatusChange::Unchanged(key)) if key.revoked_at == Some(t0() + Duration::hours(1))
    ));
    assert!(matches!(
        s.revoke_eab_key(&EabKid("nope".into()), t0(), &ev()).await,
        Err(Error::NotFound)
    ));
}

async fn single_use_key_binds_one_account(s: &Storage) {
    let kid = EabKid("single".into());
    s.create_eab_key(new_key("single", false), t0(), &ev())
        .await
        .unwrap()
        .unwrap();
    let first = match s
        .bind_eab_and_create_account(&kid, new_account("a"), t0(), &ev(), &ev())
        .await
        .unwrap()
    {
        BindOutcome::Created(a) => a,
        other => panic!("expected an account, got {other:?}"),
    };
    assert_eq!(first.eab_kid, Some(kid.clone()));
    assert_eq!(s.account(first.id).await.unwrap(), Some(first.clone()));
    let spent = s.eab_key(&kid).await.unwrap().unwrap();
    assert_eq!(spent.bound_accounts, 1);
    // Bound, the single-use key's HMAC key is gone from the database, and nothing else.
    assert_eq!(spent.hmac_key, None);
    assert_eq!(spent.policy, new_key("single", false).policy);
    assert_eq!(
        s.bind_eab_and_create_account(&kid, new_account("b"), t0(), &ev(), &ev())
            .await
            .unwrap(),
        BindOutcome::AlreadyBound(first.id)
    );
    // An account key already registered is reported, and nothing new is bound.
    let plain = harness::account(s, t0()).await;
    assert_eq!(plain.eab_kid, None);
    s.create_eab_key(new_key("fresh", false), t0(), &ev())
        .await
        .unwrap()
        .unwrap();
    let taken = NewAccount {
        jwk_json: plain.jwk_json.clone(),
        thumbprint: plain.thumbprint.clone(),
        contacts: vec![],
        tos_agreed: true,
    };
    assert_eq!(
        s.bind_eab_and_create_account(&EabKid("fresh".into()), taken, t0(), &ev(), &ev())
            .await
            .unwrap(),
        BindOutcome::KeyRegistered(plain.id)
    );
    let fresh = s.eab_key(&EabKid("fresh".into())).await.unwrap().unwrap();
    assert_eq!(fresh.bound_accounts, 0);
    // Nothing was bound, so the key keeps its HMAC key.
    assert_eq!(fresh.hmac_key, Some(vec![7_u8; 32]));
    assert_eq!(
        s.bind_eab_and_create_account(
            &EabKid("unknown".into()),
            new_account("c"),
            t0(),
            &ev(),
            &ev()
        )
        .await
        .unwrap(),
        BindOutcome::UnknownKey
    );
}

async fn reusable_expired_and_revoked_keys(s: &Storage) {
    let kid = EabKid("multi".into());
    s.create_eab_key(new_key("multi", true), t0(), &ev())
        .await
        .unwrap()
        .unwrap();
    for tag in ["a", "b", "c"] {
        assert!(matches!(
            s.bind_eab_and_create_account(&kid, new_account(tag), t0(), &ev(), &ev())
                .await
                .unwrap(),
            BindOutcome::Created(_)
        ));
    }
    let multi = s.eab_key(&kid).await.unwrap().unwrap();
    assert_eq!(multi.bound_accounts, 3);
    // A reusable key keeps its HMAC key: it binds more accounts.
    assert_eq!(multi.hmac_key, Some(vec![7_u8; 32]));
    // Expired a day after t0.
    let expiry = t0() + Duration::days(1);
    assert_eq!(
        s.bind_eab_and_create_account(&kid, new_account("d"), expiry, &ev(), &ev())
            .await
            .unwrap(),
        BindOutcome::Expired(expiry)
    );
    let revoked_at = t0() + Duration::minutes(5);
    s.revoke_eab_key(&kid, revoked_at, &ev())
        .await
        .unwrap()
        .changed();
    assert_eq!(
        s.bind_eab_and_create_account(&kid, new_account("e"), t0(), &ev(), &ev())
            .await
            .unwrap(),
        BindOutcome::Revoked(revoked_at)
    );
    assert_eq!(s.eab_key(&kid).await.unwrap().unwrap().bound_accounts, 3);
}

async fn concurrent_binds_of_a_single_use_key(s: &Storage) {
    let kid = EabKid("race".into());
    s.create_eab_key(new_key("race", false), t0(), &ev())
        .await
        .unwrap()
        .unwrap();
    let s = Arc::new(s.clone());
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let s = Arc::clone(&s);
            let kid = kid.clone();
            tokio::spawn(async move {
                s.bind_eab_and_create_account(
                    &kid,
                    new_account(&format!("r{i}")),
                    t0(),
                    &ev(),
                    &ev(),
                )
                .await
                .unwrap()
            })
        })
        .collect();
    let mut created = 0;
    let mut refused = 0;
    for t in tasks {
        match t.await.unwrap() {
            BindOutcome::Created(_) => created += 1,
            BindOutcome::AlreadyBound(_) => refused += 1,
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    assert_eq!((created, refused), (1, 15));
    let key = s.eab_key(&kid).await.unwrap().unwrap();
    assert_eq!(key.bound_accounts, 1);
    assert_eq!(key.hmac_key, None);
}

/// The accounts a key bound that are still valid, for `eab revoke --deactivate-accounts`.
async fn valid_accounts_bound_with_a_key(s: &Storage) {
    let kid = EabKid("team".into());
    s.create_eab_key(new_key("team", true), t0(), &ev())
        .await
        .unwrap()
        .unwrap();
    let mut bound = Vec::new();
    for tag in ["a", "b", "c"] {
        match s
            .bind_eab_and_create_account(&kid, new_account(tag), t0(), &ev(), &ev())
            .await
            .unwrap()
        {
            BindOutcome::Created(account) => bound.push(account.id),
            other => panic!("expected an account, got {other:?}"),
        }
    }
    harness::account(s, t0()).await;
    assert_eq!(
        s.valid_accounts_bound_to_eab_key(&kid).await.unwrap(),
        bound
    );
    s.deactivate_account(bound[1], t0(), &ev())
        .await
        .unwrap()
        .changed();
    assert_eq!(
        s.valid_accounts_bound_to_eab_key(&kid).await.unwrap(),
        [bound[0], bound[2]]
    );
    assert!(
        s.valid_accounts_bound_to_eab_key(&EabKid("none".into()))
            .await
            .unwrap()
            .is_empty()
    );
}

/// Migration 0016 erases the HMAC keys of single-use keys bound before it, and only those.
#[tokio::test]
async fn sqlite_single_use_keys_bound_before_the_migration_are_erased() {
    let dir = tempfile::tempdir().unwrap();
    let (url, mut conn) = harness::sqlite_migrated_before(dir.path(), "0016").await;
    for statement in [
        "INSERT INTO eab_keys (kid, hmac_key, reusable, created_at) VALUES \
         ('spent', x'0707', 0, 1700000000), ('unused', x'0808', 0, 1700000000), \
         ('shared', x'0909', 1, 1700000000)",
        "INSERT INTO accounts (id, thumbprint, jwk, status, created_at, eab_kid) VALUES \
         (1, 'tp1', '{}', 'valid', 1700000000, 'spent'), \
         (2, 'tp2', '{}', 'valid', 1700000000, 'shared')",
    ] {
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    conn.close().await.unwrap();

    let s = Storage::connect(&url).await.unwrap();
    let hmac = |kid: &'static str| {
        let s = s.clone();
        async move {
            s.eab_key(&EabKid(kid.into()))
                .await
                .unwrap()
                .unwrap()
                .hmac_key
        }
    };
    assert_eq!(hmac("spent").await, None);
    assert_eq!(hmac("unused").await, Some(vec![8, 8]));
    assert_eq!(hmac("shared").await, Some(vec![9, 9]));
    s.close().await;
}
