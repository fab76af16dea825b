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
use storage::model::Authorization;
use workers::runner::Prepared;
use workers::runner::ValidationTarget;

use crate::auth::KidRequest;
use crate::handlers::run_now;
use crate::problem::ApiError;
use crate::response::Resource;
use crate::state::ApiState;
use crate::wire::AuthzUpdate;
use crate::wire::authz_json;
use crate::wire::challenge_json;

type ApiResult = Result<Response, ApiError>;

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
            if !matches!(authz.status, AuthzStatus::Pending | AuthzStatus::Valid) {
                return Err(ApiError::malformed(format!(
                    "only pending or valid authorizations can be deactivated; this one is {}",
                    authz.status.as_str()
                )));
            }
            let updated = state
                .inner
                .storage
                .deactivate_authorization(authz.id, state.inner.clock.now())
                .await?;
            tracing::info!(account_id = %account, authz_id = %authz.id, "authorization deactivated");
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
    let account = req.account()?.id;
    let challenge_id: ChallengeId = id.parse().map_err(|_| ApiError::not_found("challenge"))?;
    let storage = &state.inner.storage;
    let challenge = storage
        .challenge(challenge_id)
        .await?
        .ok_or_else(|| ApiError::not_found("challenge"))?;
    let authz = own_authz(&state, account, &challenge.authz_id.to_string()).await?;
    let challenge = if req.is_post_as_get() {
        challenge
    } else {
        // RFC 8555 §7.5.1: the payload is an empty JSON object; anything else is ignored.
        let _: serde_json::Value = req.payload()?;
        if authz.status != AuthzStatus::Pending {
            return Err(ApiError::malformed(format!(
                "the authorization is {}; only challenges of pending authorizations can be attempted",
                authz.status.as_str()
            )));
        }
        let workers = &state.inner.workers;
        let now = state.inner.clock.now();
        // Validated at once when a worker place is free, and answered with the verdict if it
        // comes within `run_now::VALIDATION_WAIT`; through the queue otherwise.
        let started = match workers.try_slot() {
            Some(slot) => {
                let (started, job) = storage
                    .start_challenge_claimed(challenge_id, now, workers.lease())
                    .await?;
                let finished = match job {
                    Some(job) => {
                        let target = ValidationTarget {
                            challenge: started.clone(),
                            authz_id: authz.id,
                            identifier: authz.identifier.clone(),
                            account_id: account,
                            thumbprint: req.account()?.thumbprint.clone(),
                        };
                        let prepared = Some(Prepared::Validate(target));
                        run_now::run_and_wait(&state, slot, job, prepared, run_now::VALIDATION_WAIT)
                            .await
                    }
                    None => false,
                };
                if finished {
                    storage.challenge(challenge_id).await?.unwrap_or(started)
                } else {
                    started
                }
            }
            None => {
                let started = storage.start_challenge(challenge_id, now).await?;
                workers.wake();
                started
            }
        };
        tracing::info!(account_id = %account, challenge_id = %challenge_id, kind = started.kind.as_str(), "validation requested");
        started
    };
    let up = state.urls().authz(authz.id);
    let mut resource = Resource::ok(challenge_json(state.urls(), &challenge)).link(&up, "up");
    if matches!(
        challenge.status,
        ChallengeStatus::Processing | ChallengeStatus::Pending
    ) {
        resource = resource.retry_after(state.inner.settings.retry_after.whole_seconds());
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
    match state
        .inner
        .storage
        .authorization(id, state.inner.clock.now())
        .await?
    {
        Some(authz) if authz.account_id == account => Ok(authz),
        _ => Err(ApiError::not_found("authorization")),
    }
}
