//! Directory, nonces and the root certificate.

use axum::extract::State;
use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;

use crate::state::ApiState;

pub(crate) async fn directory(State(state): State<ApiState>) -> Response {
    let mut response = state.inner.directory.clone().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

pub(crate) async fn new_nonce_head() -> StatusCode {
    StatusCode::OK
}

pub(crate) async fn new_nonce_get() -> StatusCode {
    StatusCode::NO_CONTENT
}

/// POST-as-GET to newNonce is allowed by RFC 8555 §7.2 as well; authentication is not needed to
/// hand out a nonce.
pub(crate) async fn new_nonce_post() -> StatusCode {
    StatusCode::OK
}

/// The root certificate, for operators to hand to clients.
pub(crate) async fn root_pem(State(state): State<ApiState>) -> Response {
    let mut response = state
        .inner
        .ca
        .current()
        .root_pem()
        .to_owned()
        .into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-pem-file"),
    );
    response
}

/// The operators' rate-limit documentation, linked from every 429 (`Link: rel="help"`).
pub(crate) async fn rate_limit_docs() -> Response {
    let mut response = include_str!("../../../../docs/rate-limits.md").into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/markdown; charset=utf-8"),
    );
    response
}
