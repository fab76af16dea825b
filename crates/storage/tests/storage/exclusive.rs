//! A SQLite database is the server's alone while it runs (SQLite's unix-excl VFS): what that
//! makes possible (accounts kept in memory) must stay exactly what the database says, and what it
//! rules out (other processes reading the file) must have its replacement, a backup the server
//! writes itself.

use std::os::unix::fs::PermissionsExt;

use acme_core::status::AccountStatus;
use storage::Storage;
use storage::error::Error;
use storage::model::KeyChange;
use time::Duration;

use crate::harness;
use crate::harness::Changed;
use crate::harness::ev;
use crate::harness::t0;

/// Every write to an account is seen by the next read, however often the account was read
/// before (the kept copy is forgotten when the write commits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_account_follows_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let s = harness::sqlite_in(&dir).await;
    let now = t0();
    let account = harness::account(&s, now).await;
    for _ in 0..3 {
        assert_eq!(
            s.account(account.id).await.unwrap().as_ref(),
            Some(&account)
        );
    }

    let contacts = vec!["mailto:new@example.com".to_owned()];
    let updated = s
        .update_account_contacts(
            account.id,
            contacts.clone(),
            time::OffsetDateTime::now_utc(),
            &ev(),
        )
        .await
        .unwrap();
    assert_eq!(
        s.account(account.id).await.unwrap().unwrap().contacts,
        contacts
    );
    assert_eq!(s.account(account.id).await.unwrap(), Some(updated));

    let new_key = harness::account(&s, now).await;
    let jwk = "{\"kty\":\"EC\",\"rolled\":true}";
    assert!(matches!(
        s.change_account_key(
            account.id,
            &account.thumbprint,
            jwk,
            "rolled-thumbprint",
            time::OffsetDateTime::now_utc(),
            &ev()
        )
        .await
        .unwrap(),
        KeyChange::Changed(_)
    ));
    let read = s.account(account.id).await.unwrap().unwrap();
    assert_eq!(
        (read.jwk_json.as_str(), read.thumbprint.as_str()),
        (jwk, "rolled-thumbprint")
    );
    // A refused rollover (the key is another account's) changes nothing.
    let refused = s
        .change_account_key(
            account.id,
            "rolled-thumbprint",
            &new_key.jwk_json,
            &new_key.thumbprint,
            time::OffsetDateTime::now_utc(),
            &ev(),
        )
        .await
        .unwrap();
    assert_eq!(refused, KeyChange::KeyInUse(new_key.id));
    assert_eq!(s.account(account.id).await.unwrap().unwrap().jwk_json, jwk);

    s.deactivate_account(account.id, now + Duration::seconds(1), &ev())
        .await
        .unwrap()
        .changed();
    assert_eq!(
        s.account(account.id).await.unwrap().unwrap().status,
        AccountStatus::Deactivated
    );
    s.close().await;
}

/// Reads racing with a deactivation never bring the valid account back once the deactivation
/// has returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_racing_a_deactivation_never_bring_the_old_account_back() {
    let dir = tempfile::tempdir().unwrap();
    let s = harness::sqlite_in(&dir).await;
    let now = t0();
    for round in 0..20 {
        let account = harness::account(&s, now).await;
        let readers: Vec<_> = (0..4)
            .map(|_| {
                let s = s.clone();
                tokio::spawn(async move {
                    for _ in 0..50 {
                        s.account(account.id).await.unwrap();
                    }
                })
            })
            .collect();
        s.deactivate_account(account.id, now, &ev())
            .await
            .unwrap()
            .changed();
        for reader in readers {
            reader.await.unwrap();
        }
        assert_eq!(
            s.account(account.id).await.unwrap().unwrap().status,
            AccountStatus::Deactivated,
            "round {round}"
        );
    }
    s.close().await;
}

/// The backup is a consistent, private SQLite file that opens as a database of its own, holds
/// what was written before it, and never replaces a file that exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_is_a_private_copy_that_opens_on_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let s = harness::sqlite_in(&dir).await;
    let now = t0();
    let accounts = [
        harness::account(&s, now).await,
        harness::account(&s, now).await,
    ];
    let dest = dir.path().join("backup.db");
    let size = s.backup_into(&dest).await.unwrap();
    assert_eq!(size, std::fs::metadata(&dest).unwrap().len());
    assert!(size > 0);
    assert_eq!(
        std::fs::metadata(&dest).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // Written under `<dest>.partial` and linked to `dest` once whole: nothing else is left.
    let mut left: Vec<_> = std::fs::read_dir(dest.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.contains("backup"))
        .collect();
    left.sort();
    assert_eq!(
        left,
        vec![dest.file_name().unwrap().to_str().unwrap().to_owned()]
    );
    // Written while the server goes on writing.
    let later = harness::account(&s, now).await;

    let again = s.backup_into(&dest).await.unwrap_err();
    assert!(
        matches!(&again, Error::File { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists),
        "{again:?}"
    );
    assert_eq!(
        std::fs::metadata(&dest).unwrap().len(),
        size,
        "left as it was"
    );
    let missing_dir = s
        .backup_into(&dir.path().join("no/such/dir/backup.db"))
        .await
        .unwrap_err();
    assert!(matches!(missing_dir, Error::File { .. }), "{missing_dir:?}");
    s.close().await;

    let mut check = <sqlx::AnyConnection as sqlx::Connection>::connect(&format!(
        "sqlite://{}?mode=ro",
        dest.display()
    ))
    .await
    .unwrap();
    let verdict: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&mut check)
        .await
        .unwrap();
    assert_eq!(verdict, "ok");
    sqlx::Connection::close(check).await.unwrap();

    let copy = Storage::connect(&format!("sqlite://{}", dest.display()))
        .await
        .unwrap();
    for account in &accounts {
        assert_eq!(
            copy.account(account.id).await.unwrap().as_ref(),
            Some(account)
        );
    }
    assert_eq!(copy.account(later.id).await.unwrap(), None);
    copy.close().await;
}

#[tokio::test]
async fn a_postgres_database_is_not_backed_up_by_the_server() {
    harness::postgres(|s| async move {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("backup.db");
        let refused = s.backup_into(&dest).await.unwrap_err();
        assert!(matches!(refused, Error::Unsupported(why) if why.contains("pg_dump")));
        assert!(!dest.exists());
    })
    .await;
}
