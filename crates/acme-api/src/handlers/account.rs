//! Accounts: creation, lookup, update, deactivation, key rollover, orders list (RFC 8555 §7.3).

use acme_core::ids::AccountId;
use acme_core::ids::OrderId;
use acme_jose::Jwk;
use acme_jose::Jws;
use acme_jose::KeyRef;
use acme_jose::eab::EabBinding;
use axum::Extension;
use axum::body::Body;
use axum::extract::Path;
use axum::extract::Query;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::Uri;
use axum::response::IntoResponse;
use axum::response::Response;
use ra::accounts::AccountUpdate;
use ra::accounts::Registered;
use ra::audit::Requester;
use serde::Deserialize;
use serde_json::json;
use storage::model::Account;

use crate::auth::Authenticated;
use crate::auth::KeyPolicy;
use crate::auth::KidRequest;
use crate::auth::authenticate;
use crate::limits::ClientIp;
use crate::problem::ApiError;
use crate::refusal::refused;
use crate::response::Resource;
use crate::state::ApiState;
use crate::wire::AccountRequest;
use crate::wire::KeyChange;
use crate::wire::account_json;

type ApiResult = Result<Response, ApiError>;

pub(crate) async fn new_account(
    State(state): State<ApiState>,
    Extension(ClientIp(ip)): Extension<ClientIp>,
    headers: HeaderMap,
    uri: Uri,
    body: Body,
) -> ApiResult {
    let req = authenticate(&state, &headers, &uri, body, KeyPolicy::Jwk).await?;
    let payload: AccountRequest = req.payload()?;
    // RFC 8555 §7.3.4 steps 1 and 2: the binding is a JWS over this request's key and URL.
    let binding = payload
        .external_account_binding
        .as_ref()
        .map(|value| EabBinding::parse(value, &req.jws.header().url, &req.jwk))
        .transpose()
        .map_err(|e| ApiError::from_problem(e.into()))?;
    let request = ra::accounts::AccountRequest {
        jwk: req.jwk.clone(),
        contacts: payload.contact,
        terms_of_service_agreed: payload.terms_of_service_agreed.unwrap_or(false),
        only_return_existing: payload.only_return_existing == Some(true),
        external_account_binding: binding.clone(),
        client_ip: ip,
    };
    match state.ra().new_account(request).await {
        Ok(Registered::Existing(existing)) => {
            let url = state.urls().account(existing.id);
            Ok(Resource::ok(account_json(state.urls(), &existing))
                .location(&url)
                .into_response())
        }
        Ok(Registered::Created {
            account,
            rate_limit,
        }) => {
            let url = state.urls().account(account.id);
            let mut body = account_json(state.urls(), &account);
            // RFC 8555 §7.3.4: the object of an account this request bound carries the binding.
            if let (Some(binding), Some(value)) = (&binding, &payload.external_account_binding)
                && account.eab_kid.as_ref().map(|k| k.0.as_str()) == Some(binding.kid())
            {
                body["externalAccountBinding"] = value.clone();
            }
            Ok(Resource::created(body, &url)
                .rate_limit(rate_limit)
                .into_response())
        }
        Err(e) => Err(refused(&state, e)),
    }
}

pub(crate) async fn account(
    State(state): State<ApiState>,
    Extension(ClientIp(ip)): Extension<ClientIp>,
    Path(id): Path<String>,
    KidRequest(req): KidRequest,
) -> ApiResult {
    let account = own_account(&req, &id)?;
    if req.is_post_as_get() {
        return Ok(Resource::ok(account_json(state.urls(), account)).into_response());
    }
    let payload: AccountRequest = req.payload()?;
    let update = AccountUpdate {
        status: payload.status,
        contacts: payload.contact,
    };
    let updated = state
        .ra()
        .update_account(account, update, &Requester::account(account.id, ip))
        .await
        .map_err(|e| refused(&state, e))?;
    Ok(Resource::ok(account_json(state.urls(), &updated)).into_response())
}

#[derive(Debug, Deserialize)]
pub(crate) struct Cursor {
    cursor: Option<i64>,
}

pub(crate) async fn orders(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    Query(cursor): Query<Cursor>,
    KidRequest(req): KidRequest,
) -> ApiResult {
    req.require_post_as_get()?;
    let account = own_account(&req, &id)?;
    let page = state.inner.settings.orders_per_page.max(1);
    let mut ids = state
        .ra()
        .orders_of(account.id, cursor.cursor.map(OrderId), page + 1)
        .await
        .map_err(|e| refused(&state, e))?;
    let more = ids.len() > page as usize;
    ids.truncate(page as usize);
    let urls: Vec<String> = ids.iter().map(|o| state.urls().order(*o)).collect();
    let mut resource = Resource::ok(json!({ "orders": urls }));
    if more && let Some(last) = ids.last() {
        resource = resource.link(
            &state.urls().account_orders_after(account.id, *last),
            "next",
        );
    }
    Ok(resource.into_response())
}

pub(crate) async fn key_change(
    State(state): State<ApiState>,
    Extension(ClientIp(ip)): Extension<ClientIp>,
    KidRequest(req): KidRequest,
) -> ApiResult {
    let account = req.account()?.clone();
    let inner = Jws::parse(req.jws.payload()).map_err(|e| {
        ApiError::malformed(format!(
            "the keyChange payload must be a JWS signed by the new key: {e}"
        ))
    })?;
    let inner_header = inner.header();
    let KeyRef::Jwk(new_key) = &inner_header.key else {
        return Err(ApiError::malformed(
            "the inner keyChange JWS must carry the new key as \"jwk\"",
        ));
    };
    if inner_header.nonce.is_some() {
        return Err(ApiError::malformed(
            "the inner keyChange JWS must not have a \"nonce\"",
        ));
    }
    if inner_header.url != req.jws.header().url {
        return Err(ApiError::malformed(
            "the inner keyChange JWS \"url\" must equal the outer one",
        ));
    }
    inner.verify(new_key).map_err(|e| {
        ApiError::malformed(format!("the inner keyChange JWS signature is invalid: {e}"))
    })?;
    let change: KeyChange = serde_json::from_slice(inner.payload()).map_err(|e| {
        ApiError::malformed(format!("the inner keyChange payload is not valid: {e}"))
    })?;
    let account_url = state.urls().account(account.id);
    if change.account != account_url {
        return Err(ApiError::unauthorized(
            "the keyChange \"account\" does not match the account that signed the request",
        ));
    }
    let old_key = Jwk::from_json(&change.old_key)
        .map_err(|e| ApiError::malformed(format!("\"oldKey\" is not a valid JWK: {e}")))?;
    if old_key.thumbprint() != account.thumbprint {
        return Err(ApiError::unauthorized(
            "\"oldKey\" is not the account's current key",
        ));
    }
    let updated = state
        .ra()
        .change_key(&account, new_key, &Requester::account(account.id, ip))
        .await
        .map_err(|e| refused(&state, e))?;
    Ok(Resource::ok(account_json(state.urls(), &updated)).into_response())
}

/// The request's account, which must be the one named in the path.
fn own_account<'a>(req: &'a Authenticated, path_id: &str) -> Result<&'a Account, ApiError> {
    let account = req.account()?;
    match path_id.parse::<AccountId>() {
        Ok(id) if id == account.id => Ok(account),
        _ => Err(ApiError::unauthorized(
            "the request was signed by a different account than the one in the URL",
        )),
    }
}
