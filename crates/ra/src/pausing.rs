//! Zombie pausing (see `docs/rate-limits.md`): an (account, identifier) pair that fails
//! validation too many times in a row is paused, and its new orders are refused until the
//! subscriber (through the unpause page) or an operator (through the admin API) unpauses it.
//! Both unpause through [`Ra::unpause`], so a pair unpaused either way starts its count afresh.

use acme_core::identifier::Identifier;
use acme_core::ids::AccountId;
use ratelimits::limit::LimitName;
use ratelimits::limiter::Limiter;
use storage::model::PauseOutcome;
use time::OffsetDateTime;

use crate::Ra;
use crate::audit::AuditKind;
use crate::audit::Requester;
use crate::error::Error;
use crate::error::Refusal;
use crate::limits::pair;
use crate::rate_info::PolicyItem;
use crate::rate_info::RateLimitInfo;

/// How many paused identifiers a refusal names (and an unpause link carries).
pub const SHOWN: u32 = 15;

/// How long a client refused for a pause is asked to wait: a pause lasts until the subscriber
/// unpauses, so clients that honour `Retry-After` back off for a day rather than hammer.
pub const PAUSE_RETRY_AFTER_SECS: u64 = 86_400;

/// Most pairs unpaused by one click, and by one `certeasy admin unpause` call without names (the
/// CLI repeats the call while a full batch comes back), so one request does bounded work.
pub const MAX_PER_CLICK: u32 = 50_000;

/// How a pair was unpaused, for metrics and logs: by its subscriber through the unpause page,
/// or by an operator through the admin API.
fn unpause_label(requester: &Requester) -> &'static str {
    if requester.is_account() {
        "self-service"
    } else {
        "admin"
    }
}

impl Ra {
    /// An order naming an identifier paused for this account is refused before anything is
    /// created or charged. A pause is its own kind: logged and counted as a pause.
    pub(crate) async fn refuse_paused(
        &self,
        account: AccountId,
        identifiers: &[Identifier],
        now: OffsetDateTime,
    ) -> Result<(), Error> {
        let paused = self
            .inner
            .storage
            .paused_among(account, identifiers, SHOWN + 1)
            .await?;
        if paused.is_empty() {
            return Ok(());
        }
        metrics::counter!("certeasy_pause_rejections_total").increment(1);
        tracing::info!(account_id = %account, paused = paused.len(), "new order refused: account/identifier pair is paused");
        let shown: Vec<String> = paused
            .iter()
            .take(SHOWN as usize)
            .map(|i| i.value().to_owned())
            .collect();
        // The paused pairs' policy, one item per name shown: nothing left until unpaused.
        let name = LimitName::ConsecutiveFailuresPerAccountIdentifier;
        let mut info = RateLimitInfo::default();
        for identifier in &shown {
            let key = ratelimits::bucket::BucketId::AccountIdentifier {
                account: account.0,
                identifier: identifier.clone(),
            };
            if let Some(limit) = self.inner.limits.limiter().limit_for(name, &key) {
                info.push(PolicyItem::exhausted(
                    name,
                    &limit,
                    Some(identifier.clone()),
                    PAUSE_RETRY_AFTER_SECS,
                ));
            }
        }
        Err(Refusal::Paused {
            limit: name.as_str(),
            account,
            more: paused.len() > SHOWN as usize,
            shown,
            at: now,
            info,
        }
        .into())
    }

    /// An operator (`requester`) pauses pairs: deliberate, so without the re-pause grace.
    /// Returns how many pairs were newly paused, recorded with them. Refused for an account that
    /// does not exist.
    pub async fn pause(
        &self,
        account: AccountId,
        identifiers: &[Identifier],
        requester: &Requester,
    ) -> Result<usize, Error> {
        if self.inner.storage.account(account).await?.is_none() {
            return Err(Refusal::NotFound("account").into());
        }
        let audit = requester.event(
            AuditKind::AccountPaused,
            format!("paused by {}", requester.who()),
        );
        let outcomes = self
            .inner
            .storage
            .pause_identifiers(
                account,
                identifiers,
                time::Duration::ZERO,
                self.now(),
                &audit,
            )
            .await?;
        let paused = outcomes
            .iter()
            .filter(|(_, o)| !matches!(o, PauseOutcome::AlreadyPaused))
            .count();
        metrics::counter!("certeasy_pauses_total", "outcome" => "admin").increment(paused as u64);
        tracing::info!(account_id = %account, paused, "pairs paused by an operator");
        Ok(paused)
    }

    /// Unpauses `identifiers` of the account, or, when empty, up to [`MAX_PER_CLICK`] of its
    /// paused pairs. The unpaused pairs' consecutive-failure counts start afresh. Returns the
    /// pairs unpaused, recorded as unpaused by `requester`: the account's holder through the
    /// unpause page, or an operator.
    pub async fn unpause(
        &self,
        account: AccountId,
        identifiers: &[Identifier],
        requester: &Requester,
    ) -> Result<Vec<Identifier>, Error> {
        let now = self.now();
        let storage = &self.inner.storage;
        let how = if requester.is_account() {
            "unpaused by the account's holder through the unpause page (its signed link)"
        } else {
            "unpaused by an operator"
        };
        let audit = requester.event(AuditKind::AccountUnpaused, how);
        let done = if identifiers.is_empty() {
            storage
                .unpause_account(account, MAX_PER_CLICK, now, &audit)
                .await?
        } else {
            storage
                .unpause_identifiers(account, identifiers, now, &audit)
                .await?
        };
        let by = unpause_label(requester);
        reset_consecutive_failures(self.inner.limits.limiter(), account, &done).await;
        metrics::counter!("certeasy_unpaused_pairs_total", "via" => by)
            .increment(done.len() as u64);
        tracing::info!(account_id = %account, unpaused = done.len(), via = by, "pairs unpaused");
        Ok(done)
    }

    /// Up to `limit` identifiers paused for the account now.
    pub async fn paused_for_account(
        &self,
        account: AccountId,
        limit: u32,
    ) -> Result<Vec<Identifier>, Error> {
        Ok(self
            .inner
            .storage
            .paused_for_account(account, limit)
            .await?)
    }
}

/// Empties the consecutive-failure buckets of pairs that were just unpaused, so the count starts
/// fresh once the re-pause grace is over. Best effort: a failure only delays a future pause.
pub(crate) async fn reset_consecutive_failures(
    limiter: &Limiter,
    account: AccountId,
    identifiers: &[Identifier],
) {
    let name = LimitName::ConsecutiveFailuresPerAccountIdentifier;
    for identifier in identifiers {
        let key = pair(account, identifier);
        if limiter.limit_for(name, &key).is_none() {
            return;
        }
        if let Err(e) = limiter.reset(name, &key).await {
            tracing::warn!(error = %e, "could not reset a consecutive-failure bucket after unpausing");
            return;
        }
    }
}
