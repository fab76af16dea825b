//! Authorizations and challenges (RFC 8555 §7.5).

use acme_core::ids::AccountId;
use acme_core::ids::AuthzId;
use acme_core::ids::ChallengeId;
use acme_core::status::AuthzStatus;
use acme_core::status::ChallengeStatus;
use axum::extract::Path;
use axum::extract::State;
use axum::response::IntoResponse;
use axum::response::Response;
use ra::orders::RawIdentifier;
use storage::model::Authorization;

use crate::auth::KidRequest;
use crate::problem::ApiError;
use crate::refusal::refused;
use crate::response::Resource;
use crate::state::ApiState;
use crate::wire::AuthzUpdate;
use crate::wire::NewAuthzRequest;
use crate::wire::authz_json;
use crate::wire::challenge_json;

type ApiResult = Result<Response, ApiError>;

/// `newAuthz` (RFC 8555 §7.4.1). Always `201 Created` with the authorization's URL, also when an
/// existing valid authorization is returned: Go's `x/crypto/acme` accepts no other status.
pub(crate) async fn new_authz(
    State(state): State<ApiState>,
    KidRequest(req): KidRequest,
) -> ApiResult {
    let account = req.account()?;
    let payload: NewAuthzRequest = req.payload()?;
    let done = state
        .ra()
        .new_authorization(
            account,
            RawIdentifier {
                kind: payload.identifier.kind,
                value: payload.identifier.value,
            },
        )
        .await
        .map_err(|e| refused(&state, e))?;
    let url = state.urls().authz(done.authz.id);
    Ok(
        Resource::created(authz_json(state.urls(), &done.authz), &url)
            .rate_limit(done.rate_limit)
            .into_response(),
    )
}

pub(crate) async fn authz(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    KidRequest(req): KidRequest,
) -> ApiResult {
    let account = req.account()?.id;
    let authz = own_authz(&state, account, &id).await?;
    if req.is_post_as_get() {
        return Ok(authz_resource(&state, &authz).into_response());
    }
    let update: AuthzUpdate = req.payload()?;
    match update.status.as_deref() {
        Some("deactivated") => {
            let updated = state
                .ra()
                .deactivate_authorization(account, &authz)
                .await
                .map_err(|e| refused(&state, e))?;
            Ok(authz_resource(&state, &updated).into_response())
        }
        Some(other) => Err(ApiError::malformed(format!(
            "an authorization can only be changed to \"deactivated\", not {other:?}"
        ))),
        None => Err(ApiError::malformed(
            "send {\"status\": \"deactivated\"} to deactivate, or an empty payload to read",
        )),
    }
}

pub(crate) async fn challenge(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    KidRequest(req): KidRequest,
) -> ApiResult {
    let account = req.account()?;
    let challenge_id: ChallengeId = id.parse().map_err(|_| ApiError::not_found("challenge"))?;
    let (challenge, authz) = state
        .ra()
        .challenge_of(account.id, challenge_id)
        .await
        .map_err(|e| refused(&state, e))?;
    let challenge = if req.is_post_as_get() {
        challenge
    } else {
        // RFC 8555 §7.5.1: the payload is an empty JSON object; anything else is ignored.
        let _: serde_json::Value = req.payload()?;
        state
            .ra()
            .start_validation(account, challenge, &authz)
            .await
            .map_err(|e| refused(&state, e))?
    };
    let up = state.urls().authz(authz.id);
    let mut resource = Resource::ok(challenge_json(state.urls(), &challenge)).link(&up, "up");
    if matches!(
        challenge.status,
        ChallengeStatus::Processing | ChallengeStatus::Pending
    ) {
        // While a failed attempt waits for its retry, poll when the next attempt is due.
        let wait = state
            .ra()
            .validation_retry_after(&challenge)
            .await
            .map_err(|e| refused(&state, e))?
            .unwrap_or(state.inner.settings.retry_after);
        resource = resource.retry_after(wait.whole_seconds());
    }
    Ok(resource.into_response())
}

fn authz_resource(state: &ApiState, authz: &Authorization) -> Resource {
    let resource = Resource::ok(authz_json(state.urls(), authz));
    if authz.status == AuthzStatus::Pending {
        resource.retry_after(state.inner.settings.retry_after.whole_seconds())
    } else {
        resource
    }
}

/// An authorization of this account; others' are indistinguishable from missing ones.
async fn own_authz(
    state: &ApiState,
    account: AccountId,
    id: &str,
) -> Result<Authorization, ApiError> {
    let id: AuthzId = id
        .parse()
        .map_err(|_| ApiError::not_found("authorization"))?;
    state
        .ra()
        .authorization_of(account, id)
        .await
        .map_err(|e| refused(state, e))
}
