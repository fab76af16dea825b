//! Requests to the ACME listener as Prometheus sees them: a count by endpoint and status code,
//! and the time to answer by endpoint, measured around everything the router does (the global
//! limit, authentication, the handler), so a refusal counts like any other answer.
//!
//! The endpoint label is the route the request matched with its parameters written `{id}`
//! (`/acme/order/{id}`), never the path itself: a label per order would grow without bound.
//! Requests no route matches (scanners, typos) all count as `other`.

use std::time::Instant;

use axum::extract::MatchedPath;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

/// Metric: requests answered, by `endpoint` and `code`.
pub(crate) const REQUESTS: &str = "certeasy_http_requests_total";
/// Metric (histogram): seconds from receiving a request to its response's headers, by `endpoint`.
pub(crate) const DURATION: &str = "certeasy_http_request_duration_seconds";

/// Counts and times each request (a layer around the whole ACME router).
pub(crate) async fn record(request: Request, next: Next) -> Response {
    let endpoint = endpoint(request.extensions().get::<MatchedPath>());
    let started = Instant::now();
    let response = next.run(request).await;
    let code = response.status().as_u16().to_string();
    metrics::counter!(REQUESTS, "endpoint" => endpoint.clone(), "code" => code).increment(1);
    metrics::histogram!(DURATION, "endpoint" => endpoint).record(started.elapsed().as_secs_f64());
    response
}

/// The route the router matched, each of its parameters written `{id}` (the router's own table
/// is the one list of the server's paths); `other` for a request no route matched.
fn endpoint(matched: Option<&MatchedPath>) -> String {
    let Some(matched) = matched else {
        return "other".to_owned();
    };
    let mut shaped = String::with_capacity(matched.as_str().len());
    for segment in matched.as_str().split('/').skip(1) {
        shaped.push('/');
        if segment.starts_with('{') {
            shaped.push_str("{id}");
        } else {
            shaped.push_str(segment);
        }
    }
    shaped
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::Body;
    use axum::extract::MatchedPath;
    use axum::extract::Request;
    use axum::routing::get;
    use tower::ServiceExt;

    use super::endpoint;

    /// The label of a request to `path` through a router with the server's route shapes.
    async fn label(path: &str) -> String {
        let shape = |matched: Option<MatchedPath>| async move { endpoint(matched.as_ref()) };
        let router = Router::new()
            .route("/directory", get(shape))
            .route("/acme/new-order", get(shape))
            .route("/acme/order/{id}/finalize", get(shape))
            .route("/acme/cert/{id}/{n}", get(shape))
            .route("/acme/renewal-info/{cert_id}", get(shape))
            .fallback(shape);
        let response = router
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        String::from_utf8(body.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn identifiers_are_replaced_and_strange_paths_are_other() {
        assert_eq!(label("/directory").await, "/directory");
        assert_eq!(label("/acme/new-order").await, "/acme/new-order");
        assert_eq!(
            label("/acme/order/42/finalize").await,
            "/acme/order/{id}/finalize"
        );
        assert_eq!(label("/acme/cert/ab12/1").await, "/acme/cert/{id}/{id}");
        assert_eq!(
            label("/acme/renewal-info/aaa.bbb").await,
            "/acme/renewal-info/{id}"
        );
        assert_eq!(label("/wp-login.php").await, "other");
        assert_eq!(label("/").await, "other");
        assert_eq!(label("/acme//order").await, "other");
        assert_eq!(label("/acme/a/b/c/d").await, "other");
    }
}
