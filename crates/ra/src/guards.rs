//! Layers 3 and 5 of the limiter chain: the pending-authorization and duplicate-certificate
//! limits, counted by storage inside the transaction that creates the order (after a row lock on
//! the account), because only the database knows the counts; the verdict is made here. A limit
//! in shadow mode that would have refused is logged and counted, and the order is created
//! without it.

use ratelimits::config::Mode;
use ratelimits::config::RateLimitingConfig;
use storage::model::Authorization;
use storage::model::DuplicateGuard;
use storage::model::GuardExceeded;
use storage::model::GuardUsage;
use storage::model::NewAuthz;
use storage::model::NewOrder;
use storage::model::Order;
use storage::model::OrderCreation;
use storage::model::OrderGuards;
use storage::model::PendingAuthzGuard;
use storage::model::PreAuthorization;
use time::OffsetDateTime;

use crate::Ra;
use crate::error::Error;
use crate::error::Refusal;
use crate::limits::utc;
use crate::rate_info::PolicyItem;
use crate::rate_info::RateLimitInfo;
use crate::rate_info::ceil_secs_nanos;
use crate::rate_info::retry_after_until;

impl Ra {
    /// Creates the order under the database-backed limits. Renewals (ARI `replaces`) are held
    /// to the duplicate-certificate limit like any order, as Let's Encrypt does: it counts the
    /// certificates of one exact set of identifiers, which is what a renewal adds, and exempting
    /// it would let issue, revoke and replace go on without end. Storage counts under the
    /// account's lock and stops only on a limit this layer enforces; one in shadow mode is
    /// reported with the created order and logged here, so it costs no second transaction.
    /// Returns the order and the enforced limits' state, for the `RateLimit` headers.
    pub(crate) async fn create_with_guards(
        &self,
        new: NewOrder,
        now: OffsetDateTime,
    ) -> Result<(Order, Vec<PolicyItem>), Error> {
        let config = self.inner.limits.config();
        let pending = &config.pending_authorizations;
        let duplicate = &config.duplicate_certificate;
        let guards = OrderGuards {
            max_pending_authz: pending.enabled.then(|| PendingAuthzGuard {
                max: u32::try_from(pending.max).unwrap_or(u32::MAX),
                refuse: pending.mode == Mode::Enforce,
            }),
            duplicate_certificates: duplicate.enabled.then(|| DuplicateGuard {
                max: u32::try_from(duplicate.max_per_window).unwrap_or(u32::MAX),
                window: duplicate.window.time(),
                refuse: duplicate.mode == Mode::Enforce,
            }),
        };
        match self.inner.storage.create_order(new, &guards, now).await? {
            OrderCreation::Created {
                order,
                usage,
                exceeded,
            } => {
                for over in &exceeded {
                    shadow_db(limit_of(over));
                }
                for (limit, on) in [
                    ("pending-authorizations", guards.max_pending_authz.is_some()),
                    (
                        "duplicate-certificate",
                        guards.duplicate_certificates.is_some(),
                    ),
                ] {
                    if on && !exceeded.iter().any(|over| limit_of(over) == limit) {
                        count_db(limit, "allowed");
                    }
                }
                let policies = self.db_policies(&config, usage, now);
                Ok((*order, policies))
            }
            OrderCreation::AccountNotValid(status) => Err(Refusal::AccountNotValid(status).into()),
            OrderCreation::WouldExceed { exceeded, also } => {
                for over in &also {
                    shadow_db(limit_of(over));
                }
                Err(self.exceeded(&config, exceeded).into())
            }
        }
    }

    /// Pre-authorizes under the pending-authorization limit, counted as for an order that
    /// creates one authorization (the duplicate-certificate limit counts certificates, which a
    /// pre-authorization does not lead to by itself). Returns the authorization, whether it is
    /// an existing valid one reused, and the enforced limit's state for the `RateLimit` headers.
    pub(crate) async fn pre_authorize_with_guard(
        &self,
        account: &storage::model::Account,
        authz: &NewAuthz,
        reuse_valid_until: Option<OffsetDateTime>,
        now: OffsetDateTime,
    ) -> Result<(Authorization, bool, Vec<PolicyItem>), Error> {
        let config = self.inner.limits.config();
        let pending = &config.pending_authorizations;
        let cap = pending.enabled.then(|| PendingAuthzGuard {
            max: u32::try_from(pending.max).unwrap_or(u32::MAX),
            refuse: pending.mode == Mode::Enforce,
        });
        match self
            .inner
            .storage
            .pre_authorize(account, authz, reuse_valid_until, cap, now)
            .await?
        {
            PreAuthorization::Created {
                authz,
                usage,
                exceeded,
            } => {
                for over in &exceeded {
                    shadow_db(limit_of(over));
                }
                if cap.is_some() && exceeded.is_empty() {
                    count_db("pending-authorizations", "allowed");
                }
                Ok((*authz, false, self.db_policies(&config, usage, now)))
            }
            PreAuthorization::Reused(authz) => Ok((*authz, true, Vec::new())),
            PreAuthorization::AccountNotValid(status) => {
                Err(Refusal::AccountNotValid(status).into())
            }
            PreAuthorization::WouldExceed(over) => Err(self.exceeded(&config, over).into()),
        }
    }

    /// The refusal of an enforced database-backed limit storage found exceeded.
    fn exceeded(&self, config: &RateLimitingConfig, over: GuardExceeded) -> Refusal {
        let limit = limit_of(&over);
        count_db(limit, "denied");
        match over {
            GuardExceeded::PendingAuthz {
                pending: count,
                max,
                retry_at,
            } => {
                let detail = format!(
                    "Rate limit \"pending-authorizations\" reached: this account has {count} pending authorizations and may hold at most {max}; finish or deactivate some, or wait for the soonest to expire"
                );
                let window =
                    u64::try_from(self.inner.settings.authorization_lifetime.whole_seconds())
                        .unwrap_or(0);
                self.denied_until(limit, detail, retry_at, u64::from(max), window)
            }
            GuardExceeded::Duplicates {
                count, retry_at, ..
            } => {
                let duplicate = &config.duplicate_certificate;
                let detail = format!(
                    "Rate limit \"duplicate-certificate\" reached: {count} certificates were already issued to this account for exactly these identifiers in the last {} (at most {})",
                    duplicate.window, duplicate.max_per_window
                );
                self.denied_until(
                    limit,
                    detail,
                    retry_at,
                    duplicate.max_per_window,
                    duplicate.window.std().as_secs(),
                )
            }
        }
    }

    /// A `rateLimited` refusal for a database-backed limit, whose wait is known as an instant.
    fn denied_until(
        &self,
        limit: &'static str,
        detail: String,
        retry_at: OffsetDateTime,
        quota: u64,
        window_secs: u64,
    ) -> Refusal {
        let now = self.now();
        let wait = retry_after_until(now, retry_at);
        let mut info = RateLimitInfo::default();
        info.push(PolicyItem {
            name: limit,
            partition: None,
            quota,
            window_secs,
            remaining: 0,
            reset_secs: wait,
        });
        Refusal::RateLimited {
            limit,
            detail: format!(
                "{detail}; retry after {}",
                utc(now + time::Duration::seconds(i64::try_from(wait).unwrap_or(i64::MAX)))
            ),
            retry_after_secs: wait,
            info,
        }
    }

    /// The enforced database-backed limits as policies. An order spends pending authorizations
    /// (one per new authorization); it spends no duplicate-certificate slot, which only an
    /// issued certificate takes.
    fn db_policies(
        &self,
        config: &RateLimitingConfig,
        usage: GuardUsage,
        now: OffsetDateTime,
    ) -> Vec<PolicyItem> {
        let secs_until = |at: Option<OffsetDateTime>| {
            at.map_or(0, |at| {
                ceil_secs_nanos(
                    std::time::Duration::try_from(at - now)
                        .unwrap_or_default()
                        .as_nanos(),
                )
            })
        };
        let mut items = Vec::new();
        let pending = &config.pending_authorizations;
        if let Some(u) = usage.pending_authz
            && pending.mode == Mode::Enforce
        {
            items.push(PolicyItem {
                name: "pending-authorizations",
                partition: None,
                quota: pending.max,
                window_secs: u64::try_from(
                    self.inner.settings.authorization_lifetime.whole_seconds(),
                )
                .unwrap_or(0),
                remaining: pending.max.saturating_sub(u64::from(u.pending)),
                reset_secs: secs_until(u.all_expired_at),
            });
        }
        let duplicate = &config.duplicate_certificate;
        if let Some(u) = usage.duplicates
            && duplicate.mode == Mode::Enforce
        {
            items.push(PolicyItem {
                name: "duplicate-certificate",
                partition: None,
                quota: duplicate.max_per_window,
                window_secs: duplicate.window.std().as_secs(),
                remaining: duplicate.max_per_window.saturating_sub(u64::from(u.count)),
                reset_secs: secs_until(u.all_left_at),
            });
        }
        items
    }
}

/// The limit's name, as the configuration, the metric and the documentation link spell it.
fn limit_of(over: &GuardExceeded) -> &'static str {
    match over {
        GuardExceeded::PendingAuthz { .. } => "pending-authorizations",
        GuardExceeded::Duplicates { .. } => "duplicate-certificate",
    }
}

fn shadow_db(limit: &'static str) {
    tracing::info!(limit, "shadow rate limit would have denied");
    count_db(limit, "shadow_denied");
}

/// The database-backed limits count their decisions in the limiter's metric, so one series
/// covers all layers.
fn count_db(limit: &'static str, outcome: &'static str) {
    metrics::counter!(ratelimits::limiter::DECISIONS, "limit" => limit, "outcome" => outcome)
        .increment(1);
}
