//! What an operator may do to accounts and certificates through the admin API, and doing it. The
//! decisions (may this account be deactivated, may this certificate be revoked, which
//! certificates a bulk revocation takes) are plain functions over domain values; the admin
//! handlers only parse, call and render.

use std::collections::HashSet;

use acme_core::identifier::Identifier;
use acme_core::ids::AccountId;
use acme_core::ids::CertificateId;
use acme_core::ids::Serial;
use acme_core::status::AccountStatus;
use acme_core::status::RevocationReason;
use storage::model::Account;
use storage::model::AccountCounts;
use storage::model::AccountFilter;
use storage::model::Certificate;
use storage::model::CertificateFilter;
use storage::model::CertificateSummary;
use storage::model::Page;

use crate::Ra;
use crate::audit;
use crate::audit::Requester;
use crate::audit::deactivation;
use crate::error::Error;
use crate::error::Refusal;
use crate::error::StateRefusal;

/// Rows per listing page when the operator names no `--limit`.
pub const DEFAULT_LIST_LIMIT: u32 = 100;
/// The most rows one page returns: a page is one statement, and its rows are held in memory.
pub const MAX_LIST_LIMIT: u32 = 1_000;
/// Certificates one bulk-revocation step revokes when the operator names no `--batch`: one
/// short write per batch, so issuance waits at most for one batch.
pub const DEFAULT_REVOKE_BATCH: u32 = 500;
/// The largest batch (also bounds the statement's `IN` list).
pub const MAX_REVOKE_BATCH: u32 = 5_000;

/// An account with what it holds, for `accounts show`.
#[derive(Debug, Clone)]
pub struct AccountDetail {
    pub account: Account,
    pub counts: AccountCounts,
}

/// A certificate with the names it holds, for `certificates show`.
#[derive(Debug, Clone)]
pub struct CertificateDetail {
    pub certificate: Certificate,
    pub identifiers: Vec<Identifier>,
}

/// One step of a bulk revocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchOutcome {
    /// Certificates this step revoked (those revoked meanwhile by someone else are not counted).
    pub revoked: Vec<Serial>,
    /// Where the next step starts; `None` when the selection is exhausted.
    pub next: Option<CertificateId>,
}

/// The page size: the operator's, within 1..=[`MAX_LIST_LIMIT`], or the default.
pub fn list_limit(requested: Option<u32>) -> u32 {
    requested.map_or(DEFAULT_LIST_LIMIT, |n| n.clamp(1, MAX_LIST_LIMIT))
}

/// The bulk-revocation batch: the operator's, within 1..=[`MAX_REVOKE_BATCH`], or the default.
pub fn revoke_batch_size(requested: Option<u32>) -> u32 {
    requested.map_or(DEFAULT_REVOKE_BATCH, |n| n.clamp(1, MAX_REVOKE_BATCH))
}

/// Only a valid account can be deactivated: deactivation is final (RFC 8555 §7.3.6), and a
/// server-revoked account stays revoked. Refused as the subscriber's request is, and as storage
/// refuses when the account changed after this read: one state, one refusal.
pub fn may_deactivate(account: &Account) -> Result<(), Refusal> {
    match account.status {
        AccountStatus::Valid => Ok(()),
        other => Err(Refusal::AccountNotValid(other)),
    }
}

/// A certificate is revoked once: the first revocation's time and reason stand, and a second
/// revocation is refused as on the ACME path (`alreadyRevoked`), whether this read or storage's
/// update finds it revoked. Every reason `RevocationReason` holds is allowed to an operator.
pub fn may_revoke(certificate: &Certificate, _reason: RevocationReason) -> Result<(), Refusal> {
    match certificate.revoked_at {
        None => Ok(()),
        Some(_) => Err(Refusal::State(StateRefusal::AlreadyRevoked)),
    }
}

/// What a bulk revocation takes: the certificates of `filter` not revoked yet. A filter with no
/// condition would revoke every certificate of the CA, which no operator means by accident, and
/// one asking for revoked certificates selects nothing to revoke: both are refused.
pub fn bulk_selection(filter: &CertificateFilter) -> Result<CertificateFilter, Refusal> {
    let mut selection = filter.clone();
    selection.revoked = None;
    if selection.is_empty() {
        return Err(Refusal::Conflict(
            "a bulk revocation needs at least one filter (name, serial, account, issued or expiry dates)"
                .to_owned(),
        ));
    }
    if filter.revoked == Some(true) {
        return Err(Refusal::Conflict(
            "revoked certificates cannot be revoked again".to_owned(),
        ));
    }
    selection.revoked = Some(false);
    Ok(selection)
}

impl Ra {
    pub async fn list_accounts(
        &self,
        filter: &AccountFilter,
        page: Page<AccountId>,
    ) -> Result<Vec<Account>, Error> {
        Ok(self.inner.storage.list_accounts(filter, page).await?)
    }

    async fn existing_account(&self, id: AccountId) -> Result<Account, Error> {
        Ok(self
            .inner
            .storage
            .account(id)
            .await?
            .ok_or(Refusal::NotFound("account"))?)
    }

    async fn existing_certificate(&self, serial: &Serial) -> Result<Certificate, Error> {
        Ok(self
            .inner
            .storage
            .certificate_by_serial(serial)
            .await?
            .ok_or(Refusal::NotFound("certificate"))?)
    }

    pub async fn show_account(&self, id: AccountId) -> Result<AccountDetail, Error> {
        let account = self.existing_account(id).await?;
        let counts = self.inner.storage.account_counts(id).await?;
        Ok(AccountDetail { account, counts })
    }

    /// Deactivates the account as its holder would: it can do nothing afterwards (every request it
    /// signs is refused with `unauthorized`), its pending authorizations are deactivated and its
    /// pending and ready orders become invalid, in one transaction (`Storage::deactivate_account`)
    /// that records `requester` (the operator) as who did it.
    pub async fn operator_deactivates(
        &self,
        id: AccountId,
        requester: &Requester,
    ) -> Result<Account, Error> {
        let account = self.existing_account(id).await?;
        may_deactivate(&account)?;
        let audit = deactivation(
            requester,
            id,
            format!("deactivated by {} (the account was valid)", requester.who()),
        );
        let account = match self
            .inner
            .storage
            .deactivate_account(id, self.now(), &audit)
            .await?
        {
            storage::model::StatusChange::Changed(account) => account,
            // Deactivated by its holder between the check and the update.
            storage::model::StatusChange::Unchanged(now) => {
                return Err(Refusal::AccountNotValid(now.status).into());
            }
        };
        tracing::info!(account_id = %id, "account deactivated by an operator");
        metrics::counter!("certeasy_accounts_deactivated_total", "via" => "admin").increment(1);
        Ok(account)
    }

    pub async fn list_certificates(
        &self,
        filter: &CertificateFilter,
        page: Page<CertificateId>,
    ) -> Result<Vec<CertificateSummary>, Error> {
        Ok(self.inner.storage.list_certificates(filter, page).await?)
    }

    pub async fn show_certificate(&self, serial: &Serial) -> Result<CertificateDetail, Error> {
        let certificate = self.existing_certificate(serial).await?;
        let filter = CertificateFilter {
            serial: Some(serial.clone()),
            ..CertificateFilter::default()
        };
        let identifiers = self
            .inner
            .storage
            .list_certificates(
                &filter,
                Page {
                    before: None,
                    limit: 1,
                },
            )
            .await?
            .into_iter()
            .next()
            .map(|s| s.identifiers)
            .unwrap_or_default();
        Ok(CertificateDetail {
            certificate,
            identifiers,
        })
    }

    /// Revokes one certificate for `requester` (an operator), recorded with the revocation.
    pub async fn revoke_by_serial(
        &self,
        serial: &Serial,
        reason: RevocationReason,
        requester: &Requester,
    ) -> Result<Certificate, Error> {
        let certificate = self.existing_certificate(serial).await?;
        may_revoke(&certificate, reason)?;
        let how = format!("by {}", requester.who());
        let audit = audit::revoked(requester, &certificate, reason, &how);
        let revoked = match self
            .inner
            .storage
            .revoke_certificate(certificate.id, reason, self.now(), &audit)
            .await?
        {
            storage::model::StatusChange::Changed(c) => c,
            // Revoked by its holder between the check and the update.
            storage::model::StatusChange::Unchanged(_) => {
                return Err(StateRefusal::AlreadyRevoked.into());
            }
        };
        tracing::info!(serial = %serial, reason = reason.as_str(), "certificate revoked by an operator");
        metrics::counter!("certeasy_certificates_revoked_total").increment(1);
        Ok(revoked)
    }

    /// How many certificates a bulk revocation of `filter` would take now.
    pub async fn count_revocable(&self, filter: &CertificateFilter) -> Result<u64, Error> {
        let selection = bulk_selection(filter)?;
        Ok(self.inner.storage.count_certificates(&selection).await?)
    }

    /// One step of a bulk revocation: the next `batch` certificates of the selection below
    /// `before` (newest first), revoked in one statement. Repeat with `next` until it is `None`.
    /// Each certificate revoked is recorded, in the same transaction, as revoked by `requester`.
    pub async fn revoke_batch(
        &self,
        filter: &CertificateFilter,
        before: Option<CertificateId>,
        batch: u32,
        reason: RevocationReason,
        requester: &Requester,
    ) -> Result<BatchOutcome, Error> {
        let selection = bulk_selection(filter)?;
        let rows = self
            .inner
            .storage
            .list_certificates(
                &selection,
                Page {
                    before,
                    limit: batch,
                },
            )
            .await?;
        let ids: Vec<CertificateId> = rows.iter().map(|r| r.id).collect();
        let how = format!("by {} in a bulk revocation", requester.who());
        let audits: Vec<_> = rows
            .iter()
            .map(|r| {
                let mut event = requester.event(
                    audit::AuditKind::CertificateRevoked,
                    format!("revoked {how}, reason {}", reason.as_str()),
                );
                event.account = Some(r.account_id);
                event.serial = Some(r.serial.clone());
                event.names = r
                    .identifiers
                    .iter()
                    .map(|i| i.value().to_lowercase())
                    .collect();
                event.detail = serde_json::json!({
                    "certificate_id": r.id.0,
                    "reason_code": reason.code(),
                });
                event
            })
            .collect();
        let revoked: HashSet<CertificateId> = self
            .inner
            .storage
            .revoke_certificates(&ids, reason, self.now(), &audits)
            .await?
            .into_iter()
            .collect();
        let serials: Vec<Serial> = rows
            .iter()
            .filter(|r| revoked.contains(&r.id))
            .map(|r| r.serial.clone())
            .collect();
        if !serials.is_empty() {
            tracing::info!(
                revoked = serials.len(),
                reason = reason.as_str(),
                "certificates revoked by an operator (bulk)"
            );
            metrics::counter!("certeasy_certificates_revoked_total")
                .increment(serials.len() as u64);
        }
        let full = u32::try_from(rows.len()).is_ok_and(|n| n >= batch);
        Ok(BatchOutcome {
            revoked: serials,
            next: if full { ids.last().copied() } else { None },
        })
    }
}
