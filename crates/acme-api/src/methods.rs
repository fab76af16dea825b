//! Wrong HTTP methods on ACME resources (RFC 8555 §6.3): every resource but the directory and
//! newNonce is read with POST-as-GET, so a GET (or a PUT, DELETE, …) is answered with 405, the
//! `Allow` header, and a `malformed` problem document instead of axum's empty 405.

use axum::extract::Request;
use axum::http::StatusCode;
use axum::http::header;
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::response::Response;

use crate::problem::ApiError;

/// Turns the router's bare 405 into a problem document. The router sets `Allow` on the way out
/// (only when the response has none yet), and this runs inside `acme_headers`, so the answer
/// also carries a fresh nonce.
pub(crate) async fn method_not_allowed(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let response = next.run(request).await;
    if response.status() != StatusCode::METHOD_NOT_ALLOWED
        || response.headers().contains_key(header::CONTENT_TYPE)
    {
        return response;
    }
    ApiError::method_not_allowed(method.as_str()).into_response()
}
