//! The GCRA layers of the limiter chain (see `docs/rate-limits.md`): the live limits, the
//! charges of each request kind, refunds, and the refusal a denial becomes.
//!
//! Layer 1 (global per IP) is charged for every ACME POST; layers 2 and 4 (account creation per
//! IP; order creation per account with its SAN budget and the failed-validation check) by the
//! decisions that need them. The database-backed layers 3 and 5 are in [`crate::guards`].
//! Tokens spent for a request that then fails are refunded.
//!
//! Every layer here fails open: when the limiter's store does not answer, the limiter itself
//! allows the request (logged and counted as `fail_open`; with Redis, the limits that fail safe
//! are decided in memory instead), so a limiter outage never refuses a request. What
//! [`Limiter::check`] still returns as an error is a programming error (an id of the wrong kind,
//! a cost above the burst, a bucket twice), answered as a server error.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::RwLock;

use acme_core::identifier::Identifier;
use acme_core::ids::AccountId;
use acme_core::problem::ProblemType;
use ratelimits::batch::Kind;
use ratelimits::bucket::BucketId;
use ratelimits::config::Mode;
use ratelimits::config::RateLimitingConfig;
use ratelimits::limit::LimitName;
use ratelimits::limiter::BindingLimit;
use ratelimits::limiter::DECISIONS;
use ratelimits::limiter::Limiter;
use ratelimits::limiter::Request as LimitRequest;
use ratelimits::limiter::Verdict;
use ratelimits::overrides::Overrides;
use time::OffsetDateTime;

use crate::Ra;
use crate::error::Error;
use crate::error::Refusal;
use crate::rate_info::RateLimitInfo;
use crate::rate_info::retry_after_secs;

/// The limiter and the database-backed limit parameters, both swapped on SIGHUP.
pub struct RateLimits {
    limiter: Arc<Limiter>,
    config: RwLock<Arc<RateLimitingConfig>>,
}

impl std::fmt::Debug for RateLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimits").finish_non_exhaustive()
    }
}

impl RateLimits {
    /// Wraps a limiter built from `config`.
    pub fn new(limiter: Arc<Limiter>, config: RateLimitingConfig) -> Self {
        Self {
            limiter,
            config: RwLock::new(Arc::new(config)),
        }
    }

    /// Swaps limits and overrides (SIGHUP); on error the old ones stay in force. Buckets of ids
    /// whose override was raised are refreshed at once.
    pub async fn reload(
        &self,
        config: RateLimitingConfig,
        overrides: &Overrides,
    ) -> Result<usize, ratelimits::error::Error> {
        let refreshed = self.limiter.reload_and_refresh(&config, overrides).await?;
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(config);
        Ok(refreshed)
    }

    /// The limiter, for the admin API (bucket inspection) and the validation hooks.
    pub fn limiter(&self) -> &Arc<Limiter> {
        &self.limiter
    }

    /// The limits in force now.
    pub fn config(&self) -> Arc<RateLimitingConfig> {
        Arc::clone(&self.config.read().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Tokens spent for a request, refunded if the request then fails.
#[derive(Debug, Default)]
pub struct Spent {
    requests: Vec<LimitRequest>,
    /// The policies that applied, for the response's `RateLimit` headers.
    pub info: Option<RateLimitInfo>,
}

impl Ra {
    /// Layer 1: one token per ACME POST from the client's address (IPv6 by prefix), unless the
    /// address is whitelisted. A limiter whose store cannot answer lets the request through
    /// (fail open, as every layer here): the global limit protects capacity, and refusing every
    /// client because Redis is away would be the outage it exists to prevent.
    pub async fn charge_request(&self, ip: IpAddr) -> Result<Spent, Error> {
        Ok(match self.charge_ip(LimitName::GlobalPerIp, ip).await? {
            Some((requests, verdict)) => Spent {
                requests,
                info: Some(RateLimitInfo::from_applied(&verdict.applied)),
            },
            None => Spent::default(),
        })
    }

    /// Gives back what a failed request spent; a refund never takes a bucket above its burst.
    pub async fn refund(&self, spent: &Spent) {
        if spent.requests.is_empty() {
            return;
        }
        if let Err(e) = self
            .inner
            .limits
            .limiter()
            .refund(self.now(), &spent.requests)
            .await
        {
            tracing::warn!(error = %e, "refunding rate-limit tokens failed");
        }
    }

    /// Layer 2 of new-account: one token from the client address's account-creation bucket.
    /// Fails open like every layer here when the limiter's store does not answer.
    pub(crate) async fn charge_account_creation(&self, ip: IpAddr) -> Result<Spent, Error> {
        Ok(
            match self.charge_ip(LimitName::NewAccountPerIp, ip).await? {
                Some((requests, verdict)) => Spent {
                    requests,
                    info: verdict.binding.as_ref().map(RateLimitInfo::from_binding),
                },
                None => Spent::default(),
            },
        )
    }

    /// Layers 2 and 4 of new-order as one batch: one order token (none for an `exempt` ARI
    /// renewal) and one SAN-budget token per identifier are spent, and the failed-validation
    /// bucket of every (account, identifier) pair is checked.
    ///
    /// An order with more identifiers than the whole SAN budget can never fit it: enforced, it is
    /// `rejectedIdentifier` (waiting would not help); in shadow mode it is allowed and counted
    /// as a shadow denial, and its SAN-budget bucket is left out of the batch, as an enforced
    /// refusal would have spent nothing from it (and a cost above the burst is an error to the
    /// limiter).
    pub(crate) async fn charge_order(
        &self,
        account: AccountId,
        identifiers: &[Identifier],
        exempt: bool,
    ) -> Result<Spent, Error> {
        let limiter = self.inner.limits.limiter();
        let names = u64::try_from(identifiers.len()).unwrap_or(u64::MAX);
        let budget_id = BucketId::Account(account.0);
        let mut oversize = false;
        if let Some(budget) = limiter.limit_for(LimitName::SanBudgetPerAccount, &budget_id)
            && names > budget.burst()
        {
            if budget.mode() == Mode::Enforce {
                return Err(Refusal::problem(
                    ProblemType::RejectedIdentifier,
                    format!(
                        "this order has {names} identifiers but the account's SAN budget allows at most {} per order; split it",
                        budget.burst()
                    ),
                )
                .into());
            }
            shadow_oversize(&budget_id, names, budget.burst());
            oversize = true;
        }
        let mut requests = Vec::with_capacity(identifiers.len() + 2);
        if !exempt {
            requests.push(LimitRequest::new(
                LimitName::NewOrdersPerAccount,
                BucketId::Account(account.0),
                1,
            ));
        }
        if !oversize {
            requests.push(LimitRequest::new(
                LimitName::SanBudgetPerAccount,
                budget_id,
                names,
            ));
        }
        for id in identifiers {
            requests.push(
                LimitRequest::new(
                    LimitName::FailedValidationPerAccountIdentifier,
                    pair(account, id),
                    1,
                )
                .with_kind(Kind::CheckOnly),
            );
        }
        let verdict = limiter
            .check(self.now(), &requests)
            .await
            .map_err(|e| Error::internal("order limits", &e))?;
        log_shadow(&verdict);
        if !verdict.allowed
            && let Some(b) = &verdict.binding
        {
            let subject = match b.name {
                LimitName::FailedValidationPerAccountIdentifier => {
                    let ident = b.key.identifier().unwrap_or("this identifier");
                    format!("for {ident} by this account")
                }
                _ => "for this account".to_owned(),
            };
            let applied = RateLimitInfo::from_applied(&verdict.applied);
            return Err(self.denied(b, &subject, Some(applied)).into());
        }
        requests.retain(|r| r.kind != Kind::CheckOnly);
        Ok(Spent {
            requests,
            info: Some(RateLimitInfo::from_applied(&verdict.applied)),
        })
    }

    /// One token of the client address's bucket under `name`: `None` for a whitelisted
    /// address, the spent requests and the verdict otherwise. The limiter answers a store that
    /// does not answer by allowing (fail open); its error here would be a programming error,
    /// which one IP-keyed token (whose burst is at least 1) cannot make.
    async fn charge_ip(
        &self,
        name: LimitName,
        ip: IpAddr,
    ) -> Result<Option<(Vec<LimitRequest>, Verdict)>, Error> {
        let limiter = self.inner.limits.limiter();
        if limiter.is_whitelisted(ip) {
            return Ok(None);
        }
        let requests = vec![LimitRequest::ip(name, ip, 1)];
        let verdict = limiter
            .check(self.now(), &requests)
            .await
            .map_err(|e| Error::internal(name.as_str(), &e))?;
        log_shadow(&verdict);
        if !verdict.allowed
            && let Some(b) = &verdict.binding
        {
            return Err(self.denied(b, "from your IP address", None).into());
        }
        Ok(Some((requests, verdict)))
    }

    /// A `rateLimited` refusal for a GCRA denial; `info` replaces the binding bucket alone as
    /// the policies reported.
    fn denied(&self, b: &BindingLimit, subject: &str, info: Option<RateLimitInfo>) -> Refusal {
        let now = self.now();
        let wait = retry_after_secs(b.retry_in);
        let retry_at = now + time::Duration::seconds(i64::try_from(wait).unwrap_or(i64::MAX));
        let what = match b.name {
            LimitName::GlobalPerIp => "requests",
            LimitName::NewAccountPerIp => "new accounts",
            LimitName::NewOrdersPerAccount => "new orders",
            LimitName::SanBudgetPerAccount => "identifiers in new orders",
            LimitName::FailedValidationPerAccountIdentifier => "failed validations",
            LimitName::ConsecutiveFailuresPerAccountIdentifier => "consecutive failed validations",
        };
        let detail = format!(
            "Rate limit \"{}\" reached: too many {what} {subject} (at most {} per {}, bursts up to {}); retry after {}",
            b.name.as_str(),
            b.count,
            acme_core::duration::ConfigDuration(b.period),
            b.burst,
            utc(retry_at)
        );
        Refusal::RateLimited {
            limit: b.name.as_str(),
            detail,
            retry_after_secs: wait,
            info: info.unwrap_or_else(|| RateLimitInfo::from_binding(b)),
        }
    }
}

/// The bucket id of an (account, identifier) pair; wildcards stay distinct from base names.
pub(crate) fn pair(account: AccountId, identifier: &Identifier) -> BucketId {
    BucketId::AccountIdentifier {
        account: account.0,
        identifier: identifier.value().to_owned(),
    }
}

/// Logs shadow-mode denials: computed, never enforced (the limiter counts them).
fn log_shadow(verdict: &Verdict) {
    for s in &verdict.shadow_denials {
        tracing::info!(limit = s.name.as_str(), key = %s.key, retry_in = ?s.retry_in, "shadow rate limit would have denied");
    }
}

/// Logs and counts, as the limiter counts its shadow denials, an order larger than the whole SAN
/// budget of a limit in shadow mode: the denial is decided here, before the limiter sees the
/// batch, so nothing else would record it.
fn shadow_oversize(budget: &BucketId, names: u64, burst: u64) {
    let limit = LimitName::SanBudgetPerAccount.as_str();
    tracing::info!(limit, key = %budget, names, burst, "shadow rate limit would have denied: more identifiers than the whole SAN budget");
    metrics::counter!(DECISIONS, "limit" => limit, "outcome" => "shadow_denied").increment(1);
}

/// An instant as refusal details show it.
pub(crate) fn utc(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}
