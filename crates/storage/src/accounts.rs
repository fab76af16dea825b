//! Accounts: registration, lookup, contacts, key rollover, deactivation.

use acme_core::ids::AccountId;
use time::OffsetDateTime;

use crate::Backend;
use crate::Result;
use crate::Storage;
use crate::audit;
use crate::audit::Actor;
use crate::audit::AuditEvent;
use crate::codec;
use crate::error::Error;
use crate::model::Account;
use crate::model::KeyChange;
use crate::model::NewAccount;
use crate::model::StatusChange;
use crate::rows;
use crate::rows::account_cols;
use crate::sql;

impl Storage {
    /// Creates an account; `Error::Conflict(existing_id)` when the key is already registered.
    /// `audit` is recorded in the same transaction, naming the new account ([`for_new_account`]).
    pub async fn create_account(
        &self,
        new: NewAccount,
        now: OffsetDateTime,
        audit: &AuditEvent,
    ) -> Result<Account> {
        let began = self.accounts.as_ref().map(|cache| cache.generation());
        if self.backend == Backend::Postgres {
            return create_account_pg(self, new, now, audit, began).await;
        }
        let mut tx = self.begin_write().await?;
        // ON CONFLICT instead of catching the unique violation: a failed statement would abort a
        // PostgreSQL transaction, and the existing id is what the caller needs anyway.
        let row = sql::query(concat!(
            "INSERT INTO accounts (thumbprint, jwk, status, contacts, tos_agreed, created_at) \
         VALUES ($1, $2, 'valid', $3, $4, $5) ON CONFLICT (thumbprint) DO NOTHING RETURNING ",
            account_cols!()
        ))
        .bind(&new.thumbprint)
        .bind(&new.jwk_json)
        .bind(codec::encode_list(&new.contacts))
        .bind(i64::from(new.tos_agreed))
        .bind(codec::unix(now))
        .fetch_optional(&mut *tx)
        .await?;
        match row {
            Some(row) => {
                let account = rows::account(&row)?;
                audit::append_in(&mut tx, &for_new_account(audit, account.id), now).await?;
                tx.commit().await?;
                // The requests that follow a new account are its own.
                if let (Some(cache), Some(began)) = (&self.accounts, began) {
                    cache.keep(began, &account);
                }
                Ok(account)
            }
            None => {
                tx.rollback().await?;
                match holder_of(self, &new.thumbprint).await? {
                    Some(existing) => Err(Error::Conflict(existing)),
                    None => Err(Error::NotFound),
                }
            }
        }
    }

    pub async fn account(&self, id: AccountId) -> Result<Option<Account>> {
        let Some(cache) = &self.accounts else {
            let mut conn = self.db.acquire().await?;
            return rows::load_account(&mut conn, id).await;
        };
        if let Some(account) = cache.get(id) {
            return Ok(Some(account));
        }
        let began = cache.generation();
        let mut conn = self.db.acquire().await?;
        let account = rows::load_account(&mut conn, id).await?;
        if let Some(account) = &account {
            cache.keep(began, account);
        }
        Ok(account)
    }

    pub async fn account_by_thumbprint(&self, thumbprint: &str) -> Result<Option<Account>> {
        let row = sql::query(concat!(
            "SELECT ",
            account_cols!(),
            " FROM accounts WHERE thumbprint = $1"
        ))
        .bind(thumbprint)
        .fetch_optional(&self.db)
        .await?;
        row.as_ref().map(rows::account).transpose()
    }

    /// Replaces the account's contacts, recording `audit` in the same transaction.
    pub async fn update_account_contacts(
        &self,
        id: AccountId,
        contacts: Vec<String>,
        now: OffsetDateTime,
        audit: &AuditEvent,
    ) -> Result<Account> {
        let updated = update_contacts(self, id, contacts, now, audit).await;
        written(self, id);
        updated
    }

    /// Deactivates the account and its pending authorizations; all its pending and ready orders
    /// become invalid. `Unchanged` when the account is not valid.
    /// `audit` is recorded in the same transaction when the account changes.
    pub async fn deactivate_account(
        &self,
        id: AccountId,
        now: OffsetDateTime,
        audit: &AuditEvent,
    ) -> Result<StatusChange<Account>> {
        let now_s = codec::unix(now);
        let mut tx = self.begin_write().await?;
        let changed = sql::query(
            "UPDATE accounts SET status = 'deactivated' WHERE id = $1 AND status = 'valid'",
        )
        .bind(id.0)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if changed == 0 {
            return match rows::load_account(&mut tx, id).await? {
                Some(account) => Ok(StatusChange::Unchanged(account)),
                None => Err(Error::NotFound),
            };
        }
        // Nothing of a deactivated account may proceed: its unfinished orders end here.
        sql::query(
            "UPDATE orders SET status = 'invalid', updated_at = $2 \
         WHERE account_id = $1 AND status IN ('pending', 'ready')",
        )
        .bind(id.0)
        .bind(now_s)
        .execute(&mut *tx)
        .await?;
        sql::query("UPDATE authorizations SET status = 'deactivated' WHERE account_id = $1 AND status = 'pending'")
        .bind(id.0)
        .execute(&mut *tx)
        .await?;
        let account = rows::load_account(&mut tx, id)
            .await?
            .ok_or(Error::NotFound)?;
        audit::append_in(&mut tx, audit, now).await?;
        let committed = tx.commit().await;
        written(self, id);
        committed?;
        Ok(StatusChange::Changed(account))
    }

    /// Replaces the key `old_thumbprint` of account `id` by the new one, if it is still the account's
    /// key: the UPDATE names the old key, so two concurrent rollovers from the same key cannot both
    /// succeed (the second finds the key changed: PostgreSQL re-reads the row once the first commits,
    /// SQLite runs one writer at a time). `audit` is recorded in the same transaction when the
    /// key changes.
    pub async fn change_account_key(
        &self,
        id: AccountId,
        old_thumbprint: &str,
        jwk_json: &str,
        thumbprint: &str,
        now: OffsetDateTime,
        audit: &AuditEvent,
    ) -> Result<KeyChange> {
        if let Some(other) = holder_of(self, thumbprint).await?
            && other != id.0
        {
            return Ok(KeyChange::KeyInUse(AccountId(other)));
        }
        let updated = swap_key(self, id, old_thumbprint, jwk_json, thumbprint, now, audit).await;
        written(self, id);
        match updated {
            Ok(Some(account)) => Ok(KeyChange::Changed(account)),
            // No row: the account's key is no longer the old one, or there is no such account.
            Ok(None) if account_exists(self, id).await? => Ok(KeyChange::OldKeyReplaced),
            Ok(None) => Err(Error::NotFound),
            // Another rollover took the new key between the check and the update.
            Err(e) if e.is_unique_violation() => match holder_of(self, thumbprint).await? {
                Some(other) => Ok(KeyChange::KeyInUse(AccountId(other))),
                None => Err(e),
            },
            Err(e) => Err(e),
        }
    }
}

/// `audit` naming the new account `id`, known once its row is written: as the account, and as
/// the actor when an account is (the holder of the new account's key asked for it).
/// [`Storage::create_account`] on PostgreSQL: one statement in autocommit, one round trip (a
/// transaction around the insert and its record took four: BEGIN, the two inserts, COMMIT).
/// The CTE `l` inserts the pending audit record (`audit::bind_pg_append`'s twelve columns, `$6`
/// to `$17`) from the account the CTE `a` created, so the record names the new id exactly as
/// [`for_new_account`] would (`actor` is the id in text when the actor is the account, and
/// `account_id` is the id; `$10` and `$13` stand unused then); nothing is recorded when the key
/// was already registered.
async fn create_account_pg(
    s: &Storage,
    new: NewAccount,
    now: OffsetDateTime,
    audit: &AuditEvent,
    began: Option<u64>,
) -> Result<Account> {
    let query = sql::query(concat!(
        "WITH a AS (INSERT INTO accounts (thumbprint, jwk, status, contacts, tos_agreed, \
             created_at) VALUES ($1, $2, 'valid', $3, $4, $5) \
             ON CONFLICT (thumbprint) DO NOTHING RETURNING ",
        account_cols!(),
        "), \
         l AS (INSERT INTO audit_pending (format, at_ms, kind, actor_kind, actor, operator, \
             client_ip, account_id, serial, names, reason, detail) \
             SELECT $6, $7, $8, $9, CASE WHEN $9 = 'account' THEN a.id::text ELSE $10 END, \
             $11, $12, a.id, $14, $15, $16, $17 FROM a) \
         SELECT ",
        account_cols!(),
        " FROM a"
    ))
    .bind(&new.thumbprint)
    .bind(&new.jwk_json)
    .bind(codec::encode_list(&new.contacts))
    .bind(i64::from(new.tos_agreed))
    .bind(codec::unix(now));
    // The id is not known yet: the record is bound for id 0 and the statement puts the new id
    // in its place.
    let row = audit::bind_pg_append(query, &for_new_account(audit, AccountId(0)), now)?
        .fetch_optional(&s.db)
        .await?;
    let Some(row) = row else {
        return match holder_of(s, &new.thumbprint).await? {
            Some(existing) => Err(Error::Conflict(existing)),
            None => Err(Error::NotFound),
        };
    };
    let account = rows::account(&row)?;
    if let (Some(cache), Some(began)) = (&s.accounts, began) {
        cache.keep(began, &account);
    }
    Ok(account)
}

pub(crate) fn for_new_account(audit: &AuditEvent, id: AccountId) -> AuditEvent {
    let mut event = audit.clone();
    event.account = Some(id);
    if let Actor::Account(_) = event.actor {
        event.actor = Actor::Account(id);
    }
    event
}

async fn update_contacts(
    s: &Storage,
    id: AccountId,
    contacts: Vec<String>,
    now: OffsetDateTime,
    audit: &AuditEvent,
) -> Result<Account> {
    let mut tx = s.begin_write().await?;
    let row = sql::query(concat!(
        "UPDATE accounts SET contacts = $2 WHERE id = $1 RETURNING ",
        account_cols!()
    ))
    .bind(id.0)
    .bind(codec::encode_list(&contacts))
    .fetch_optional(&mut *tx)
    .await?;
    let account = row
        .as_ref()
        .map(rows::account)
        .transpose()?
        .ok_or(Error::NotFound)?;
    audit::append_in(&mut tx, audit, now).await?;
    tx.commit().await?;
    Ok(account)
}

/// The key-change UPDATE and its record, in one transaction; `None` when the account's key is
/// no longer `old_thumbprint` (or there is no such account), which records nothing.
async fn swap_key(
    s: &Storage,
    id: AccountId,
    old_thumbprint: &str,
    jwk_json: &str,
    thumbprint: &str,
    now: OffsetDateTime,
    audit: &AuditEvent,
) -> Result<Option<Account>> {
    let mut tx = s.begin_write().await?;
    let row = sql::query(concat!(
        "UPDATE accounts SET jwk = $2, thumbprint = $3 WHERE id = $1 AND thumbprint = $4 RETURNING ",
        account_cols!()
    ))
    .bind(id.0)
    .bind(jwk_json)
    .bind(thumbprint)
    .bind(old_thumbprint)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else {
        tx.rollback().await?;
        return Ok(None);
    };
    let account = rows::account(&row)?;
    // The replaced key stays known (migration 0024): dns-persist-01 records made with it keep
    // validating. A key used twice keeps its latest retirement.
    sql::query(
        "INSERT INTO account_key_history (account_id, thumbprint, retired_at) VALUES ($1, $2, $3) \
         ON CONFLICT (account_id, thumbprint) DO UPDATE SET retired_at = excluded.retired_at",
    )
    .bind(id.0)
    .bind(old_thumbprint)
    .bind(codec::unix(now))
    .execute(&mut *tx)
    .await?;
    audit::append_in(&mut tx, audit, now).await?;
    tx.commit().await?;
    Ok(Some(account))
}

impl Storage {
    /// Thumbprints of the keys account `id` had before its current one (replaced by key
    /// changes since migration 0024), newest first: what dns-persist-01 recomputes hashed
    /// account URIs over after the current key.
    pub async fn earlier_thumbprints(&self, id: AccountId) -> Result<Vec<String>> {
        sql::query_scalar::<String>(
            "SELECT thumbprint FROM account_key_history WHERE account_id = $1 \
             ORDER BY retired_at DESC, thumbprint",
        )
        .bind(id.0)
        .fetch_all(&self.db)
        .await
    }
}

async fn holder_of(s: &Storage, thumbprint: &str) -> Result<Option<i64>> {
    sql::query_scalar::<i64>("SELECT id FROM accounts WHERE thumbprint = $1")
        .bind(thumbprint)
        .fetch_optional(&s.db)
        .await
}

/// Called once a write to account `id` has committed (or may have: a failed statement forgets
/// too, which costs one read at most).
fn written(s: &Storage, id: AccountId) {
    if let Some(cache) = &s.accounts {
        cache.forget(id);
    }
}

async fn account_exists(s: &Storage, id: AccountId) -> Result<bool> {
    Ok(
        sql::query_scalar::<i64>("SELECT id FROM accounts WHERE id = $1")
            .bind(id.0)
            .fetch_optional(&s.db)
            .await?
            .is_some(),
    )
}
