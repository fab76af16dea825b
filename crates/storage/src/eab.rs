//! External-account-binding keys: create, list, read, revoke, and binding a key while creating
//! the account, in one transaction.
//!
//! Binding reads the key under a row lock (PostgreSQL `FOR UPDATE`; on SQLite the IMMEDIATE
//! transaction holds the writer), so two newAccount requests with one single-use key are
//! serialised and the second finds the key bound. The same transaction erases a single-use
//! key's HMAC key (an empty value: the column is NOT NULL, and migration 0016 erased those
//! bound before), so a spent key is worthless to whoever reads the database or a backup.

use acme_core::eab_policy::EabPolicy;
use acme_core::ids::AccountId;
use acme_core::ids::EabKid;
use ipnet::IpNet;
use time::Duration;
use time::OffsetDateTime;

use crate::Backend;
use crate::Result;
use crate::Storage;
use crate::accounts;
use crate::audit;
use crate::audit::AuditEvent;
use crate::codec;
use crate::error::Error;
use crate::model::BindOutcome;
use crate::model::EabKey;
use crate::model::NewAccount;
use crate::model::NewEabKey;
use crate::model::StatusChange;
use crate::rows;
use crate::rows::account_cols;
use crate::sql;
use crate::sql::Row;

macro_rules! key_cols {
    () => {
        "k.kid, k.hmac_key, k.allowed_domains, k.allowed_cidrs, k.allowed_profiles, \
         k.max_validity_secs, k.expires_at, k.reusable, k.revoked_at, k.created_at, \
         (SELECT COUNT(*) FROM accounts a WHERE a.eab_kid = k.kid) AS bound_accounts"
    };
}

fn key(row: &Row) -> Result<EabKey> {
    let cidrs = codec::decode_list(&row.try_get::<String, _>("allowed_cidrs")?)
        .iter()
        .map(|c| codec::parse::<IpNet>(c))
        .collect::<Result<Vec<_>>>()?;
    let policy = EabPolicy::new(
        &codec::decode_list(&row.try_get::<String, _>("allowed_domains")?),
        cidrs,
        codec::decode_list(&row.try_get::<String, _>("allowed_profiles")?),
        row.try_get::<Option<i64>, _>("max_validity_secs")?
            .map(Duration::seconds),
    )
    .map_err(|e| Error::Corrupt(format!("eab key policy: {e}")))?;
    Ok(EabKey {
        kid: EabKid(row.try_get("kid")?),
        hmac_key: Some(row.try_get::<Vec<u8>, _>("hmac_key")?).filter(|k| !k.is_empty()),
        policy,
        expires_at: codec::opt_time_from_unix(row.try_get("expires_at")?)?,
        reusable: row.try_get::<i64, _>("reusable")? != 0,
        revoked_at: codec::opt_time_from_unix(row.try_get("revoked_at")?)?,
        created_at: codec::time_from_unix(row.try_get("created_at")?)?,
        bound_accounts: codec::count(row.try_get("bound_accounts")?)?,
    })
}

impl Storage {
    /// Stores a new EAB key, recording `audit` in the same transaction; `None` when the kid
    /// is taken (nothing recorded).
    pub async fn create_eab_key(
        &self,
        new: NewEabKey,
        now: OffsetDateTime,
        audit: &AuditEvent,
    ) -> Result<Option<EabKey>> {
        let cidrs: Vec<String> = new
            .policy
            .allowed_cidrs()
            .iter()
            .map(ToString::to_string)
            .collect();
        let mut tx = self.begin_write().await?;
        let inserted = sql::query(
        "INSERT INTO eab_keys (kid, hmac_key, allowed_domains, allowed_cidrs, allowed_profiles, \
         max_validity_secs, expires_at, reusable, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(&new.kid.0)
    .bind(new.hmac_key.as_slice())
    .bind(codec::encode_list(new.policy.allowed_domains()))
    .bind(codec::encode_list(&cidrs))
    .bind(codec::encode_list(new.policy.allowed_profiles()))
    .bind(new.policy.max_validity().map(codec::seconds_ceil))
    .bind(new.expires_at.map(codec::unix))
    .bind(i64::from(new.reusable))
    .bind(codec::unix(now))
    .execute(&mut *tx)
    .await;
        match inserted {
            Ok(_) => {}
            Err(e) if e.is_unique_violation() => return Ok(None),
            Err(e) => return Err(e),
        }
        audit::append_in(&mut tx, audit, now).await?;
        tx.commit().await?;
        self.eab_key(&new.kid)
            .await?
            .ok_or(Error::NotFound)
            .map(Some)
    }

    /// One EAB key, with the number of accounts bound to it.
    pub async fn eab_key(&self, kid: &EabKid) -> Result<Option<EabKey>> {
        let row = sql::query(concat!(
            "SELECT ",
            key_cols!(),
            " FROM eab_keys k WHERE k.kid = $1"
        ))
        .bind(&kid.0)
        .fetch_optional(&self.db)
        .await?;
        row.as_ref().map(key).transpose()
    }

    /// Every EAB key, oldest first.
    pub async fn list_eab_keys(&self) -> Result<Vec<EabKey>> {
        let rows = sql::query(concat!(
            "SELECT ",
            key_cols!(),
            " FROM eab_keys k ORDER BY k.created_at, k.kid"
        ))
        .fetch_all(&self.db)
        .await?;
        rows.iter().map(key).collect()
    }

    /// Revokes a key: it binds no new account. `Error::NotFound` for an unknown kid,
    /// `Unchanged` when it was already revoked. `audit` is recorded in the same transaction
    /// when the key is revoked.
    pub async fn revoke_eab_key(
        &self,
        kid: &EabKid,
        now: OffsetDateTime,
        audit: &AuditEvent,
    ) -> Result<StatusChange<EabKey>> {
        let mut tx = self.begin_write().await?;
        let changed =
            sql::query("UPDATE eab_keys SET revoked_at = $2 WHERE kid = $1 AND revoked_at IS NULL")
                .bind(&kid.0)
                .bind(codec::unix(now))
                .execute(&mut *tx)
                .await?
                .rows_affected();
        if changed > 0 {
            audit::append_in(&mut tx, audit, now).await?;
        }
        tx.commit().await?;
        let current = self.eab_key(kid).await?.ok_or(Error::NotFound)?;
        Ok(if changed == 0 {
            StatusChange::Unchanged(current)
        } else {
            StatusChange::Changed(current)
        })
    }

    /// The accounts bound with `kid` that are still valid, oldest first: those an operator's
    /// `eab revoke --deactivate-accounts` deactivates.
    pub async fn valid_accounts_bound_to_eab_key(&self, kid: &EabKid) -> Result<Vec<AccountId>> {
        let ids = sql::query_scalar::<i64>(
            "SELECT id FROM accounts WHERE eab_kid = $1 AND status = 'valid' ORDER BY id",
        )
        .bind(&kid.0)
        .fetch_all(&self.db)
        .await?;
        Ok(ids.into_iter().map(AccountId).collect())
    }

    /// Creates the account bound to the key, in one transaction that first checks, under a lock
    /// on the key, that the key exists, is neither revoked nor expired and, when single-use,
    /// binds no account yet. The MAC must have been verified by the caller. The account's
    /// creation (`creation`) and the key's binding (`binding`) are recorded in the same
    /// transaction, each with the new account's id.
    pub async fn bind_eab_and_create_account(
        &self,
        kid: &EabKid,
        new: NewAccount,
        now: OffsetDateTime,
        creation: &AuditEvent,
        binding: &AuditEvent,
    ) -> Result<BindOutcome> {
        let now_s = codec::unix(now);
        let mut tx = self.begin_write().await?;
        let lock = match self.backend {
            Backend::Postgres => sql::query(
                "SELECT reusable, expires_at, revoked_at FROM eab_keys WHERE kid = $1 FOR UPDATE",
            ),
            Backend::Sqlite => {
                sql::query("SELECT reusable, expires_at, revoked_at FROM eab_keys WHERE kid = $1")
            }
        };
        let Some(row) = lock.bind(&kid.0).fetch_optional(&mut *tx).await? else {
            return Ok(BindOutcome::UnknownKey);
        };
        if let Some(revoked) = row.try_get::<Option<i64>, _>("revoked_at")? {
            return Ok(BindOutcome::Revoked(codec::time_from_unix(revoked)?));
        }
        if let Some(expires) = row.try_get::<Option<i64>, _>("expires_at")?
            && expires <= now_s
        {
            return Ok(BindOutcome::Expired(codec::time_from_unix(expires)?));
        }
        let single_use = row.try_get::<i64, _>("reusable")? == 0;
        if single_use
            && let Some(bound) = sql::query_scalar::<i64>(
                "SELECT id FROM accounts WHERE eab_kid = $1 ORDER BY id LIMIT 1",
            )
            .bind(&kid.0)
            .fetch_optional(&mut *tx)
            .await?
        {
            return Ok(BindOutcome::AlreadyBound(AccountId(bound)));
        }
        let created = sql::query(concat!(
        "INSERT INTO accounts (thumbprint, jwk, status, contacts, tos_agreed, created_at, eab_kid) \
         VALUES ($1, $2, 'valid', $3, $4, $5, $6) ON CONFLICT (thumbprint) DO NOTHING RETURNING ",
        account_cols!()
    ))
    .bind(&new.thumbprint)
    .bind(&new.jwk_json)
    .bind(codec::encode_list(&new.contacts))
    .bind(i64::from(new.tos_agreed))
    .bind(now_s)
    .bind(&kid.0)
    .fetch_optional(&mut *tx)
    .await?;
        let Some(row) = created else {
            let holder = sql::query_scalar::<i64>("SELECT id FROM accounts WHERE thumbprint = $1")
                .bind(&new.thumbprint)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or(Error::NotFound)?;
            return Ok(BindOutcome::KeyRegistered(AccountId(holder)));
        };
        let account = rows::account(&row)?;
        if single_use {
            sql::query("UPDATE eab_keys SET hmac_key = $2 WHERE kid = $1")
                .bind(&kid.0)
                .bind(ERASED.as_slice())
                .execute(&mut *tx)
                .await?;
        }
        for event in [creation, binding] {
            audit::append_in(&mut tx, &accounts::for_new_account(event, account.id), now).await?;
        }
        tx.commit().await?;
        Ok(BindOutcome::Created(account))
    }
}

/// What an erased HMAC key is stored as.
const ERASED: [u8; 0] = [];
