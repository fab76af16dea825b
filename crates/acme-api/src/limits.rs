//! The limiter chain of the ACME endpoint (see `docs/rate-limits.md`).
//!
//! Layer 1 (global per IP) runs as middleware in front of every ACME POST. Layers 2–5 need the
//! parsed request and run in the handlers: account creation per IP and order creation per
//! account (count and SAN budget) with the failed-validation check, as one GCRA batch; then the
//! database-backed duplicate-certificate and pending-authorization guards inside the transaction
//! that creates the order. Tokens spent for a request that then fails are refunded.

use std::net::IpAddr;
use std::net::SocketAddr;

use acme_core::problem::ProblemType;
use axum::extract::ConnectInfo;
use axum::extract::Request;
use axum::extract::State;
use axum::http::header;
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::response::Response;
use ratelimits::config::Mode;
use ratelimits::config::RateLimitingConfig;
use ratelimits::limit::LimitName;
use ratelimits::limiter::BindingLimit;
use ratelimits::limiter::Request as LimitRequest;
use ratelimits::limiter::Verdict;
use storage::model::GuardUsage;
use time::OffsetDateTime;

use crate::limit_headers::PolicyItem;
use crate::limit_headers::ceil_secs_nanos;
use crate::problem::ApiError;
use crate::state::ApiState;

pub use crate::limiter::RateLimits;

/// Tokens spent for a request, refunded if the request then fails.
pub(crate) struct Spent {
    pub(crate) requests: Vec<LimitRequest>,
    pub(crate) info: Option<RateLimitInfo>,
}

/// Gives back what a failed request spent; a refund never takes a bucket above its burst.
pub(crate) async fn refund(state: &ApiState, spent: &Spent) {
    if spent.requests.is_empty() {
        return;
    }
    if let Err(e) = state
        .inner
        .limits
        .limiter()
        .refund(state.inner.clock.now(), &spent.requests)
        .await
    {
        tracing::warn!(error = %e, "refunding rate-limit tokens failed");
    }
}

pub(crate) use crate::limit_headers::RateLimitInfo;

/// Whole seconds, rounded up, never 0: what `Retry-After` carries.
pub(crate) fn retry_after_secs(d: std::time::Duration) -> u64 {
    ceil_secs_nanos(d.as_nanos()).max(1)
}

/// [`retry_after_secs`] of the wait until `at`: rounded up, so a client that waits it arrives at
/// or after `at` (a database-backed limit frees its slot at exactly `at`), never a second early.
pub(crate) fn retry_after_until(now: OffsetDateTime, at: OffsetDateTime) -> u64 {
    retry_after_secs(std::time::Duration::try_from(at - now).unwrap_or_default())
}

fn utc(t: OffsetDateTime) -> String {
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

fn period_text(d: std::time::Duration) -> String {
    acme_core::duration::ConfigDuration(d).to_string()
}

/// A 429 `rateLimited` problem for a GCRA denial.
pub(crate) fn denied(state: &ApiState, b: &BindingLimit, subject: &str) -> ApiError {
    let now = state.inner.clock.now();
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
        period_text(b.period),
        b.burst,
        utc(retry_at)
    );
    let mut err = ApiError::new(ProblemType::RateLimited, detail)
        .with_header(header::RETRY_AFTER, &wait.to_string())
        .with_header(
            header::LINK,
            &format!(
                "<{}>;rel=\"help\"",
                state.urls().rate_limit_doc(b.name.as_str())
            ),
        );
    err.rate_limit = Some(RateLimitInfo::from_binding(b));
    err
}

/// A 429 for a database-backed limit, whose wait is known as an instant.
pub(crate) fn denied_until(
    state: &ApiState,
    limit: &'static str,
    detail: String,
    retry_at: OffsetDateTime,
    quota: u64,
    window_secs: u64,
) -> ApiError {
    let now = state.inner.clock.now();
    let wait = retry_after_until(now, retry_at);
    let mut err = ApiError::new(
        ProblemType::RateLimited,
        format!(
            "{detail}; retry after {}",
            utc(now + time::Duration::seconds(i64::try_from(wait).unwrap_or(i64::MAX)))
        ),
    )
    .with_header(header::RETRY_AFTER, &wait.to_string())
    .with_header(
        header::LINK,
        &format!("<{}>;rel=\"help\"", state.urls().rate_limit_doc(limit)),
    );
    let mut info = RateLimitInfo::default();
    info.push(PolicyItem {
        name: limit,
        partition: None,
        quota,
        window_secs,
        remaining: 0,
        reset_secs: wait,
    });
    err.rate_limit = Some(info);
    err
}

/// Logs and counts shadow-mode denials: computed, never enforced.
pub(crate) fn log_shadow(verdict: &Verdict) {
    for s in &verdict.shadow_denials {
        tracing::info!(limit = s.name.as_str(), key = %s.key, retry_in = ?s.retry_in, "shadow rate limit would have denied");
    }
}

/// The enforced database-backed limits as `RateLimit` policies. An order spends pending
/// authorizations (one per new authorization); it spends no duplicate-certificate slot, which
/// only an issued certificate takes.
pub(crate) fn db_policies(
    state: &ApiState,
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
            window_secs: u64::try_from(state.inner.settings.authorization_lifetime.whole_seconds())
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

/// Whether a limit of the database-backed kind is enforced, shadowed, or off.
pub(crate) fn db_mode(enabled: bool, mode: Mode) -> Option<Mode> {
    enabled.then_some(mode)
}

/// The client address of a request (peer, or trusted `X-Forwarded-For`).
pub(crate) fn request_ip(state: &ApiState, request: &Request) -> IpAddr {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::from([127, 0, 0, 1]), |c| c.0.ip());
    state.inner.limits.client_ip(peer, request.headers())
}

/// The client address, stored in request extensions by [`global_limit`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientIp(pub(crate) IpAddr);

/// Layer 1: one token per ACME POST from the client's address (IPv6 by prefix), unless
/// whitelisted. Refunded when the request fails with a server error.
pub(crate) async fn global_limit(
    State(state): State<ApiState>,
    mut request: Request,
    next: Next,
) -> Response {
    let ip = request_ip(&state, &request);
    request.extensions_mut().insert(ClientIp(ip));
    if request.method() != axum::http::Method::POST {
        return next.run(request).await;
    }
    let limiter = state.inner.limits.limiter();
    if limiter.is_whitelisted(ip) {
        return next.run(request).await;
    }
    let now = state.inner.clock.now();
    let batch = [LimitRequest::ip(LimitName::GlobalPerIp, ip, 1)];
    let verdict = match limiter.check(now, &batch).await {
        Ok(v) => v,
        Err(e) => {
            tracing::error!(error = %e, "global rate limit could not be evaluated; allowing");
            return next.run(request).await;
        }
    };
    log_shadow(&verdict);
    if !verdict.allowed
        && let Some(b) = &verdict.binding
    {
        return denied(&state, b, "from your IP address").into_response();
    }
    let mut response = next.run(request).await;
    if response.status().is_server_error()
        && let Err(e) = limiter.refund(state.inner.clock.now(), &batch).await
    {
        tracing::warn!(error = %e, "refunding the global limit failed");
    }
    // The global policy applied too: listed first, before the handler's own policies.
    let global = RateLimitInfo::from_applied(&verdict.applied);
    match response.extensions_mut().get_mut::<RateLimitInfo>() {
        Some(info) => info.prepend(global),
        None => {
            response.extensions_mut().insert(global);
        }
    }
    response
}
