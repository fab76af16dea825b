//! Certificate download and revocation (RFC 8555 §7.4.2, §7.6).

use acme_core::ids::CertificateId;
use axum::body::Body;
use axum::extract::Path;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::HeaderValue;
use axum::Extension;
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
use crate::problem::ApiError;
use crate::refusal::refused;
use crate::state::ApiState;
use crate::wire::RevokeRequest;

use crate::limits::ClientIp;
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
    let mut response = cert.chain_pem.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/pem-certificate-chain"),
    );
    Ok(response)
}

pub(crate) async fn revoke(
    State(state): State<ApiState>,
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
    Extension(ClientIp(ip)): Extension<ClientIp>,
