//! Headers every ACME response carries, errors included (RFC 8555 §6.5, §7.1).

use axum::extract::Request;
use axum::extract::State;
use axum::http::HeaderName;
use axum::http::HeaderValue;
use axum::http::Method;
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;

use crate::state::ApiState;

const REPLAY_NONCE: HeaderName = HeaderName::from_static("replay-nonce");

/// Adds a fresh `Replay-Nonce`, `Link: <directory>;rel="index"` and `Cache-Control: no-store`.
pub(crate) async fn acme_headers(
    State(state): State<ApiState>,
    request: Request,
    next: Next,
) -> Response {
    let is_post = request.method() == Method::POST;
    let mut response = next.run(request).await;
    let nonce = state.inner.nonces.issue(state.inner.clock.now());
    let headers = response.headers_mut();
    if let Some(v) = nonce_value(&nonce) {
        headers.insert(REPLAY_NONCE, v);
    }
    if let Some(v) = &state.inner.index_link {
        headers.append(header::LINK, v.clone());
    }
    if let Some(info) = response
        .extensions_mut()
        .remove::<ra::rate_info::RateLimitInfo>()
    {
        crate::limit_headers::apply(&info, response.headers_mut());
    }
    let headers = response.headers_mut();
    if is_post || !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// The `Replay-Nonce` value, marked sensitive so that HTTP/2 sends it as a literal that is never
/// indexed (RFC 7541 §6.2.3). A nonce is never sent twice, so entering it into the connection's
/// HPACK table, as every other value is, only evicted the values that do repeat (the `Link`,
/// `Content-Type` and `Cache-Control` of the next responses), which then had to be encoded, sent
/// and decoded in full again: 2 % of the server's CPU per request (docs/performance.md,
/// "Measured decisions"). HTTP/1.1 ignores the mark.
fn nonce_value(nonce: &str) -> Option<HeaderValue> {
    let mut value = HeaderValue::from_str(nonce).ok()?;
    value.set_sensitive(true);
    Some(value)
}

#[cfg(test)]
mod tests;
