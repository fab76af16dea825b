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
use ra::rate_info::PolicyItem;
use ra::rate_info::RateLimitInfo;

fn partition_param(item: &PolicyItem) -> String {
    item.partition
        .as_deref()
        .map(|p| format!(";pk=:{}:", STANDARD.encode(p)))
        .unwrap_or_default()
}

/// Sets both headers from every policy that applied; with no policy, neither. The policies
/// travel in response extensions from the handler (or problem) through the global limit's
/// middleware, which puts its own policy first, to [`crate::headers::acme_headers`].
pub(crate) fn apply(info: &RateLimitInfo, headers: &mut HeaderMap) {
    let items = info.items();
    if items.is_empty() {
        return;
    }
    let policy = items
        .iter()
        .map(|i| {
            format!(
                "\"{}\";q={};w={}{}",
                i.name,
                i.quota,
                i.window_secs,
                partition_param(i)
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let current = items
        .iter()
        .map(|i| {
            format!(
                "\"{}\";r={};t={}{}",
                i.name,
                i.remaining,
                i.reset_secs,
                partition_param(i)
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

#[cfg(test)]
mod tests {
    use axum::http::HeaderMap;
    use ra::rate_info::PolicyItem;
    use ra::rate_info::RateLimitInfo;

    use super::apply;

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
        apply(&info, &mut headers);
        assert!(headers.is_empty(), "no policy, no headers");
        info.push(item("order-creation", None, 4));
        info.push(item("failed-validation", Some("www.example.com"), 5));
        let mut global = RateLimitInfo::default();
        global.push(item("global", None, 19));
        info.prepend(global);
        apply(&info, &mut headers);
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
