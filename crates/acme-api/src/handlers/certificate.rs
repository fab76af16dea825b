//! Certificate download and revocation (RFC 8555 §7.4.2, §7.6).

use acme_core::ids::CertificateId;
use acme_core::ids::Serial;
use acme_core::problem::ProblemType;
use acme_core::status::RevocationReason;
use acme_jose::Jwk;
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
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;

use crate::auth::KeyPolicy;
use crate::auth::KidRequest;
use crate::auth::authenticate;
use crate::problem::ApiError;
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
    let cert = match state.inner.storage.certificate(id).await? {
        Some(c) if c.account_id == account => c,
        _ => return Err(ApiError::not_found("certificate")),
    };
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
    let reason = match payload.reason {
        None => RevocationReason::Unspecified,
        Some(code) => RevocationReason::from_code(code).ok_or_else(|| {
            ApiError::new(
                ProblemType::BadRevocationReason,
                format!("reason code {code} is not allowed; use 0 (unspecified), 1 (keyCompromise), 3, 4 or 5"),
            )
        })?,
    };
    let (serial, spki) = {
        let (_, parsed) = X509Certificate::from_der(&der)
            .map_err(|_| ApiError::malformed("\"certificate\" is not a DER X.509 certificate"))?;
        (
            Serial::from_bytes(parsed.raw_serial().to_vec()),
            parsed.public_key().raw.to_vec(),
        )
    };
    let storage = &state.inner.storage;
    let cert = match storage.certificate_by_serial(&serial).await? {
        Some(c) if c.der == der => c,
        _ => {
            return Err(ApiError::not_found(
                "certificate (it was not issued by this CA)",
            ));
        }
    };
    let authorized = match &req.account {
        Some(account) => account.id == cert.account_id,
        None => Jwk::from_spki_der(&spki).is_ok_and(|k| k.thumbprint() == req.jwk.thumbprint()),
    };
    if !authorized {
        return Err(ApiError::unauthorized(
            "revocation must be signed by the account that holds the certificate or by the certificate's own key",
        ));
    }
    let revoked = storage
        .revoke_certificate(cert.id, reason, state.inner.clock.now())
        .await?;
    tracing::info!(serial = %revoked.serial, reason = reason.as_str(), "certificate revoked");
    metrics::counter!("certeasy_certificates_revoked_total").increment(1);
    Ok(axum::http::StatusCode::OK.into_response())
}
