//! `RateLimit-Policy` and `RateLimit` headers (draft-ietf-httpapi-ratelimit-headers): one list
//! item per policy that applied to the request, so a client can watch each of its quotas, not
//! only the one closest to refusing.
//!
//! Both headers are Structured Field Lists (RFC 9651) of the same policies, in the same order:
//! `"order-creation";q=5;w=900` and `"order-creation";r=4;t=180`. A policy kept per
//! (account, identifier) pair carries the identifier as its partition key `pk` (a Byte Sequence),
//! because one request can apply the same policy to several identifiers.

use axum::http::HeaderMap;
use axum::http::HeaderValue;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ratelimits::limit::Limit;
use ratelimits::limit::LimitName;
use ratelimits::limiter::BindingLimit;

/// One policy and the state of the request's bucket under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PolicyItem {
    /// The limit's name, as in errors, metrics and overrides (a plain ASCII token).
    pub(crate) name: &'static str,
    /// The identifier of a per-(account, identifier) policy.
    pub(crate) partition: Option<String>,
    /// `q`: the most the client can spend at once.
    pub(crate) quota: u64,
    /// `w`: seconds to refill a whole quota.
    pub(crate) window_secs: u64,
    /// `r`: what is left.
    pub(crate) remaining: u64,
    /// `t`: seconds until the quota is whole again.
    pub(crate) reset_secs: u64,
}

impl PolicyItem {
    /// A GCRA bucket. A denied bucket reports nothing left: the request did not fit.
    pub(crate) fn from_bucket(b: &BindingLimit) -> Self {
        Self {
            name: b.name.as_str(),
            partition: b.key.identifier().map(str::to_owned),
            quota: b.burst,
            window_secs: window_secs(b.period, b.burst, b.count),
            remaining: if b.allowed { b.remaining } else { 0 },
            reset_secs: ceil_secs_nanos(b.reset_in.as_nanos()),
        }
    }

    /// A GCRA limit that refuses outright for `reset_secs` (a paused pair), with nothing left.
    pub(crate) fn exhausted(
        name: LimitName,
        limit: &Limit,
        partition: Option<String>,
        reset_secs: u64,
    ) -> Self {
        Self {
            name: name.as_str(),
            partition,
            quota: limit.burst(),
            window_secs: window_secs(limit.period(), limit.burst(), limit.count()),
            remaining: 0,
            reset_secs,
        }
    }

    fn partition_param(&self) -> String {
        self.partition
            .as_deref()
            .map(|p| format!(";pk=:{}:", STANDARD.encode(p)))
            .unwrap_or_default()
    }
}

/// Every policy that applied to a request. Travels in response extensions from the handler (or
/// problem) through the global limit's middleware, which puts its own policy first, to
/// [`crate::headers::acme_headers`], which renders it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RateLimitInfo {
    items: Vec<PolicyItem>,
}

impl RateLimitInfo {
    /// One GCRA bucket.
    pub(crate) fn from_binding(b: &BindingLimit) -> Self {
        Self {
            items: vec![PolicyItem::from_bucket(b)],
        }
    }

    /// Every enforced bucket of a limiter verdict ([`ratelimits::limiter::Verdict::applied`]).
    pub(crate) fn from_applied(applied: &[BindingLimit]) -> Self {
        Self {
            items: applied.iter().map(PolicyItem::from_bucket).collect(),
        }
    }

    pub(crate) fn push(&mut self, item: PolicyItem) {
        self.items.push(item);
    }

    /// Puts `earlier` (a policy checked before this request's handler ran) first.
    pub(crate) fn prepend(&mut self, earlier: Self) {
        self.items.splice(0..0, earlier.items);
    }

    /// Sets both headers; with no policy, neither.
    pub(crate) fn apply(&self, headers: &mut HeaderMap) {
        if self.items.is_empty() {
            return;
        }
        let policy = self
            .items
            .iter()
            .map(|i| {
                format!(
                    "\"{}\";q={};w={}{}",
                    i.name,
                    i.quota,
                    i.window_secs,
                    i.partition_param()
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let current = self
            .items
            .iter()
            .map(|i| {
                format!(
                    "\"{}\";r={};t={}{}",
                    i.name,
                    i.remaining,
                    i.reset_secs,
                    i.partition_param()
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        if let (Ok(p), Ok(c)) = (
            HeaderValue::from_str(&policy),
            HeaderValue::from_str(&current),
        ) {
            headers.insert("ratelimit-policy", p);
            headers.insert("ratelimit", c);
        }
    }
}

/// GCRA admits `burst` requests per burst × emission interval: that is the window.
fn window_secs(period: std::time::Duration, burst: u64, count: u64) -> u64 {
    ceil_secs_nanos(period.as_nanos() * u128::from(burst) / u128::from(count.max(1))).max(1)
}

pub(crate) fn ceil_secs_nanos(nanos: u128) -> u64 {
    u64::try_from(nanos.div_ceil(1_000_000_000)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(name: &'static str, partition: Option<&str>, remaining: u64) -> PolicyItem {
        PolicyItem {
            name,
            partition: partition.map(str::to_owned),
            quota: 5,
            window_secs: 3600,
            remaining,
            reset_secs: 720,
        }
    }

    #[test]
    fn every_policy_is_one_list_item_in_both_headers() {
        let mut info = RateLimitInfo::default();
        let mut headers = HeaderMap::new();
        info.apply(&mut headers);
        assert!(headers.is_empty(), "no policy, no headers");
        info.push(item("order-creation", None, 4));
        info.push(item("failed-validation", Some("www.example.com"), 5));
        info.prepend(RateLimitInfo {
            items: vec![item("global", None, 19)],
        });
        info.apply(&mut headers);
        assert_eq!(
            headers["ratelimit-policy"],
            "\"global\";q=5;w=3600, \"order-creation\";q=5;w=3600, \"failed-validation\";q=5;w=3600;pk=:d3d3LmV4YW1wbGUuY29t:"
        );
        assert_eq!(
            headers["ratelimit"],
            "\"global\";r=19;t=720, \"order-creation\";r=4;t=720, \"failed-validation\";r=5;t=720;pk=:d3d3LmV4YW1wbGUuY29t:"
        );
    }
}
