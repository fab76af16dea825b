//! ACME Renewal Information (RFC 9773 §4): an unauthenticated GET telling a client when to renew
//! a certificate. The window is the policy layer's (`ra::renewals`).

use axum::extract::Path;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use serde_json::json;

use crate::problem::ApiError;
use crate::refusal::refused;
use crate::response::Resource;
use crate::state::ApiState;
use crate::wire::rfc3339;

pub(crate) async fn renewal_info(
    State(state): State<ApiState>,
    Path(cert_id): Path<String>,
) -> Result<Response, ApiError> {
    let window = state
        .ra()
        .renewal_info(&cert_id)
        .await
        .map_err(|e| refused(&state, e))?;
    let body = json!({
        "suggestedWindow": {
            "start": rfc3339(window.start),
            "end": rfc3339(window.end),
        },
    });
    let mut response = Resource::ok(body)
        .retry_after(window.retry_after.whole_seconds())
        .into_response();
    // Clients poll this; it may be cached for as long as they are asked to wait.
    if let Ok(v) = header::HeaderValue::from_str(&format!(
        "public, max-age={}",
        window.retry_after.whole_seconds()
    )) {
        response.headers_mut().insert(header::CACHE_CONTROL, v);
    }
    Ok(response)
}
