//! Directory, nonces and the root certificate.

use axum::extract::State;
use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use serde_json::json;

use crate::handlers::renewal_info::RENEWAL_INFO_PATH;
use crate::response::Resource;
use crate::state::ApiState;

pub(crate) async fn directory(State(state): State<ApiState>) -> Response {
    let s = &state.inner.settings;
    let policy = state.ra().settings();
    let mut meta = json!({ "externalAccountRequired": policy.external_account_required });
    if let Some(tos) = &policy.terms_of_service {
        meta["termsOfService"] = json!(tos);
    }
    if let Some(site) = &s.website {
        meta["website"] = json!(site);
    }
    if !s.caa_identities.is_empty() {
        meta["caaIdentities"] = json!(s.caa_identities);
    }
    // draft-ietf-acme-profiles: name → human-readable description.
    let profiles: serde_json::Map<String, serde_json::Value> = state
        .ra()
        .settings()
        .profiles
        .iter()
        .map(|p| (p.name().to_owned(), json!(p.description())))
        .collect();
    meta["profiles"] = serde_json::Value::Object(profiles);
    let body = json!({
        "newNonce": state.urls().url("/acme/new-nonce"),
        "newAccount": state.urls().url("/acme/new-account"),
        "newOrder": state.urls().url("/acme/new-order"),
        "revokeCert": state.urls().url("/acme/revoke-cert"),
        "keyChange": state.urls().url("/acme/key-change"),
        "renewalInfo": state.urls().url(RENEWAL_INFO_PATH),
        "meta": meta,
    });
    Resource::ok(body).into_response()
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
    let mut response = state.inner.ca.root_pem().to_owned().into_response();
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
