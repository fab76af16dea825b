//! Certificate download and revocation (RFC 8555 §7.4.2, §7.6).
//!
//! A certificate whose issuing key is also certified under other roots (cross-signed, or under
//! an RSA and an ECDSA root) is offered with each chain: the default download links every
//! alternate with `Link: rel="alternate"`, and each alternate links the default and the others,
//! so a client that trusts only one root can pick the chain that ends at it.

use acme_core::ids::CertificateId;
use axum::Extension;
use axum::body::Body;
use axum::extract::Path;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::HeaderValue;
use axum::http::Uri;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ra::revocation::Revoker;

use crate::auth::KeyPolicy;
use crate::auth::KidRequest;
use crate::auth::authenticate;
use crate::limits::ClientIp;
use crate::problem::ApiError;
use crate::refusal::refused;
use crate::state::ApiState;
use crate::wire::RevokeRequest;

type ApiResult = Result<Response, ApiError>;

pub(crate) async fn certificate(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    KidRequest(req): KidRequest,
) -> ApiResult {
    req.require_post_as_get()?;
    let account = req.account()?.id;
    let id: CertificateId = id.parse().map_err(|_| ApiError::not_found("certificate"))?;
    let cert = state
        .ra()
        .certificate_of(account, id)
        .await
        .map_err(|e| refused(&state, e))?;
    let alternates = state.inner.ca.alternate_chains_for(&cert.der).len();
    let links = (1..=alternates).map(|n| state.urls().certificate_alternate(id, n));
    Ok(pem_chain(cert.chain_pem, links))
}

/// Alternate chain `n` of a certificate, `n` counting from 1 in the order of the default
/// download's links: the leaf, then that chain. Authorized as the default download.
pub(crate) async fn alternate(
    State(state): State<ApiState>,
    Path((id, n)): Path<(String, String)>,
    KidRequest(req): KidRequest,
) -> ApiResult {
    req.require_post_as_get()?;
    let account = req.account()?.id;
    let id: CertificateId = id.parse().map_err(|_| ApiError::not_found("certificate"))?;
    let cert = state
        .ra()
        .certificate_of(account, id)
        .await
        .map_err(|e| refused(&state, e))?;
    let alternates = state.inner.ca.alternate_chains_for(&cert.der);
    let n: usize = n
        .parse()
        .ok()
        .filter(|n| (1..=alternates.len()).contains(n))
        .ok_or_else(|| ApiError::not_found("certificate chain"))?;
    let body = issuance::download_pem(&cert.der, &alternates[n - 1]);
    let others = (1..=alternates.len())
        .filter(|other| *other != n)
        .map(|other| state.urls().certificate_alternate(id, other));
    let links = std::iter::once(state.urls().certificate(id)).chain(others);
    Ok(pem_chain(body, links))
}

/// A PEM certificate chain with a `Link: <url>;rel="alternate"` per URL of `alternates`.
fn pem_chain(body: String, alternates: impl Iterator<Item = String>) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/pem-certificate-chain"),
    );
    for url in alternates {
        if let Ok(link) = HeaderValue::from_str(&format!("<{url}>;rel=\"alternate\"")) {
            headers.append(header::LINK, link);
        }
    }
    response
}

pub(crate) async fn revoke(
    State(state): State<ApiState>,
    Extension(ClientIp(ip)): Extension<ClientIp>,
    headers: HeaderMap,
    uri: Uri,
    body: Body,
) -> ApiResult {
    let req = authenticate(&state, &headers, &uri, body, KeyPolicy::Either).await?;
    let payload: RevokeRequest = req.payload()?;
    let der = URL_SAFE_NO_PAD
        .decode(payload.certificate.trim_end_matches('='))
        .map_err(|_| ApiError::malformed("\"certificate\" is not base64url-encoded DER"))?;
    let revoker = match &req.account {
        Some(account) => Revoker::Account(account.id),
        None => Revoker::CertificateKey(req.jwk.thumbprint()),
    };
    state
        .ra()
        .revoke(revoker, &der, payload.reason, ip)
        .await
        .map_err(|e| refused(&state, e))?;
    Ok(axum::http::StatusCode::OK.into_response())
}
