//! Pre-authorization (RFC 8555 §7.4.1): an authorization an account asks for before any order
//! names it. It is an ordinary `authorizations` row that no `order_authorizations` row links to
//! yet; an order created later reuses it under the same rule as any other valid authorization
//! (`orders::create`), and the pruner removes it like any authorization no order names.
//!
//! The transaction is the order creation's, cut to one identifier: the account's status read
//! under its lock, a still-valid authorization reused instead of a new one, the pending cap
//! counted, then the write. On PostgreSQL these are separate statements rather than a function:
//! a pre-authorization is rare beside new-order, so the round trips are not worth a second copy
//! of the transaction in PL/pgSQL.

use acme_core::ids::AuthzId;
use acme_core::status::AccountStatus;
use time::OffsetDateTime;

use crate::Backend;
use crate::Result;
use crate::Storage;
use crate::codec;
use crate::error::Error;
use crate::model::Account;
use crate::model::GuardUsage;
use crate::model::NewAuthz;
use crate::model::OrderGuards;
use crate::model::PendingAuthzGuard;
use crate::model::PreAuthorization;
use crate::orders;
use crate::rows;
use crate::sql;

impl Storage {
    /// Pre-authorizes `authz.identifier` for `account`: returns the account's valid
    /// authorization for it that is still valid at `reuse_valid_until` (when given), or writes a
    /// new pending one with its challenges, after counting the account's pending authorizations
    /// against `pending_cap` under the account's lock. Writes nothing when the account is not
    /// valid or the cap is exceeded and to refuse on.
    pub async fn pre_authorize(
        &self,
        account: &Account,
        authz: &NewAuthz,
        reuse_valid_until: Option<OffsetDateTime>,
        pending_cap: Option<PendingAuthzGuard>,
        now: OffsetDateTime,
    ) -> Result<PreAuthorization> {
        let now_s = codec::unix(now);
        let mut tx = self.begin_write().await?;
        // As in order creation: the row lock serialises one account's pending count on
        // PostgreSQL; SQLite's IMMEDIATE transaction already holds the only write lock.
        let lock = match self.backend {
            Backend::Postgres => {
                sql::query_scalar::<String>("SELECT status FROM accounts WHERE id = $1 FOR UPDATE")
            }
            Backend::Sqlite => {
                sql::query_scalar::<String>("SELECT status FROM accounts WHERE id = $1")
            }
        };
        let status: AccountStatus = codec::parse(
            &lock
                .bind(account.id.0)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or(Error::NotFound)?,
        )?;
        if status != AccountStatus::Valid {
            return Ok(PreAuthorization::AccountNotValid(status));
        }
        if let Some(until) = reuse_valid_until {
            let reusable = orders::reusable_authz(
                &mut tx,
                account.id,
                authz.identifier.kind().as_str(),
                authz.identifier.value(),
                codec::unix(until),
            )
            .await?;
            if let Some((id, _)) = reusable {
                let found = rows::load_authorization(&mut tx, AuthzId(id))
                    .await?
                    .ok_or_else(|| {
                        Error::Corrupt(format!("authorization {id} vanished under its lock"))
                    })?;
                tx.commit().await?;
                return Ok(PreAuthorization::Reused(Box::new(found)));
            }
        }
        let guards = OrderGuards {
            max_pending_authz: pending_cap,
            duplicate_certificates: None,
        };
        let mut exceeded = Vec::new();
        let counted = orders::count_pending_authz(
            &mut tx,
            account.id,
            &guards,
            (1, Some(authz.expires_at)),
            now,
            now_s,
        )
        .await?;
        let pending_authz = match counted.settle(&mut exceeded) {
            Ok(usage) => usage,
            Err(over) => return Ok(PreAuthorization::WouldExceed(over)),
        };
        let id = orders::insert_authz(&mut tx, account.id, authz, now_s).await?;
        let written = rows::load_authorization(&mut tx, AuthzId(id))
            .await?
            .ok_or_else(|| Error::Corrupt(format!("authorization {id} not found after insert")))?;
        tx.commit().await?;
        Ok(PreAuthorization::Created {
            authz: Box::new(written),
            usage: GuardUsage {
                pending_authz,
                duplicates: None,
            },
            exceeded,
        })
    }
}
