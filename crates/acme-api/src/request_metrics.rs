//! Requests to the ACME listener as Prometheus sees them: a count by endpoint and status code,
//! and the time to answer by endpoint, measured around everything the router does (the global
//! limit, authentication, the handler), so a refusal counts like any other answer.
//!
//! The endpoint label is the path with its identifiers replaced by `{id}` (`/acme/order/{id}`),
//! never the path itself: a label per order would grow without bound. Paths that are not the
//! server's shape (scanners, typos) all count as `other`.

use std::time::Instant;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

/// Metric: requests answered, by `endpoint` and `code`.
pub(crate) const REQUESTS: &str = "certeasy_http_requests_total";
/// Metric (histogram): seconds from receiving a request to its response's headers, by `endpoint`.
pub(crate) const DURATION: &str = "certeasy_http_request_duration_seconds";

/// Path segments that are words of the server's URLs; any other segment is an identifier.
const WORDS: &[&str] = &[
    "acme",
    "directory",
    "new-nonce",
    "new-account",
    "new-authz",
    "new-order",
    "acct",
    "orders",
    "key-change",
    "order",
    "finalize",
    "authz",
    "chall",
    "cert",
    "revoke-cert",
    "renewal-info",
    "docs",
    "rate-limits",
    "root.pem",
    "unpause",
    "crl",
];

/// The deepest path the server answers has four segments (`/acme/cert/{id}/{n}`).
const MAX_SEGMENTS: usize = 4;

/// Counts and times each request (a layer around the whole ACME router).
pub(crate) async fn record(request: Request, next: Next) -> Response {
    let endpoint = endpoint(request.uri().path());
    let started = Instant::now();
    let response = next.run(request).await;
    let code = response.status().as_u16().to_string();
    metrics::counter!(REQUESTS, "endpoint" => endpoint.clone(), "code" => code).increment(1);
    metrics::histogram!(DURATION, "endpoint" => endpoint).record(started.elapsed().as_secs_f64());
    response
}

/// `path` with identifiers as `{id}`; `other` for a path of another shape.
fn endpoint(path: &str) -> String {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let Some(first) = segments.first() else {
        return "other".to_owned();
    };
    if !WORDS.contains(first) || segments.len() > MAX_SEGMENTS {
        return "other".to_owned();
    }
    let mut shaped = String::new();
    for segment in segments {
        shaped.push('/');
        if WORDS.contains(&segment) {
            shaped.push_str(segment);
        } else if segment.is_empty() {
            return "other".to_owned();
        } else {
            shaped.push_str("{id}");
        }
    }
    shaped
}

#[cfg(test)]
mod tests {
    use super::endpoint;

    #[test]
    fn identifiers_are_replaced_and_strange_paths_are_other() {
        assert_eq!(endpoint("/directory"), "/directory");
        assert_eq!(endpoint("/acme/new-order"), "/acme/new-order");
        assert_eq!(
            endpoint("/acme/order/42/finalize"),
            "/acme/order/{id}/finalize"
        );
        assert_eq!(endpoint("/acme/cert/ab12/1"), "/acme/cert/{id}/{id}");
        assert_eq!(
            endpoint("/acme/renewal-info/aaa.bbb"),
            "/acme/renewal-info/{id}"
        );
        assert_eq!(endpoint("/wp-login.php"), "other");
        assert_eq!(endpoint("/"), "other");
        assert_eq!(endpoint("/acme//order"), "other");
        assert_eq!(endpoint("/acme/a/b/c/d"), "other");
    }
}
