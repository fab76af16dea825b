//! Accounts: creation, lookup, update, deactivation, key rollover, orders list (RFC 8555 §7.3).

use acme_core::ids::AccountId;
use acme_core::ids::OrderId;
use acme_core::problem::ProblemType;
use acme_core::status::AccountStatus;
use acme_jose::Jwk;
use acme_jose::Jws;
use acme_jose::KeyRef;
use axum::Extension;
use axum::body::Body;
use axum::extract::Path;
use axum::extract::Query;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::http::Uri;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use ratelimits::limit::LimitName;
use ratelimits::limiter::Request as LimitRequest;
use serde::Deserialize;
use serde_json::json;
use storage::model::Account;
use storage::model::NewAccount;

use crate::auth::Authenticated;
use crate::auth::KeyPolicy;
use crate::auth::KidRequest;
use crate::auth::authenticate;
use crate::eab_decision;
use crate::eab_decision::Registered;
use crate::limits::ClientIp;
use crate::limits::RateLimitInfo;
use crate::limits::Spent;
use crate::limits::denied;
use crate::limits::log_shadow;
use crate::limits::refund;
use crate::problem::ApiError;
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
    let thumbprint = req.jwk.thumbprint();
    let storage = &state.inner.storage;

    if let Some(existing) = storage.account_by_thumbprint(&thumbprint).await? {
        if existing.status != AccountStatus::Valid {
            return Err(ApiError::account_not_valid(existing.status));
        }
        let url = state.urls().account(existing.id);
        return Ok(Resource::ok(account_json(state.urls(), &existing))
            .location(&url)
            .into_response());
    }
    if payload.only_return_existing == Some(true) {
        return Err(ApiError::new(
            ProblemType::AccountDoesNotExist,
            "no account exists for this key",
        )
        .with_status(StatusCode::BAD_REQUEST));
    }
    let binding = eab_decision::check_binding(
        storage,
        state.inner.settings.external_account_required,
        payload.external_account_binding.as_ref(),
        &req.jws.header().url,
        &req.jwk,
    )
    .await?
    .map_err(ApiError::from_problem)?;
    let agreed = payload.terms_of_service_agreed.unwrap_or(false);
    if let Some(tos) = &state.inner.settings.terms_of_service
        && !agreed
    {
        return Err(ApiError::new(
            ProblemType::UserActionRequired,
            format!("you must agree to the terms of service at {tos} (termsOfServiceAgreed: true)"),
        )
        .with_header(header::LINK, &format!("<{tos}>;rel=\"terms-of-service\"")));
    }
    let contacts = validate_contacts(&state, payload.contact.unwrap_or_default())?;
    let spent = charge_account_creation(&state, ip).await?;
    let new = NewAccount {
        jwk_json: req.jwk.to_json().to_string(),
        thumbprint,
        contacts,
        tos_agreed: agreed,
    };
    let created =
        eab_decision::create_account(storage, binding.as_ref(), new, state.inner.clock.now()).await;
    if !matches!(created, Ok(Ok(Registered::New(_)))) {
        refund(&state, &spent).await;
    }
    let account = match created?.map_err(ApiError::from_problem)? {
        Registered::New(a) => a,
        // A concurrent request registered the same key first: answer as for an existing account.
        Registered::Existing(id) => storage.account(id).await?.ok_or_else(|| {
            ApiError::internal("account vanished", &"conflicting account not found")
        })?,
    };
    tracing::info!(account_id = %account.id, "account created");
    metrics::counter!("certeasy_accounts_created_total").increment(1);
    let url = state.urls().account(account.id);
    let mut body = account_json(state.urls(), &account);
    eab_decision::reflect_binding(&mut body, &account, binding.as_ref());
    Ok(Resource::created(body, &url)
        .rate_limit(spent.info)
        .into_response())
}

/// Layer 2 of new-account: one token from the client address's account-creation bucket.
async fn charge_account_creation(
    state: &ApiState,
    ip: std::net::IpAddr,
) -> Result<Spent, ApiError> {
    let limiter = state.inner.limits.limiter();
    if limiter.is_whitelisted(ip) {
        return Ok(Spent {
            requests: Vec::new(),
            info: None,
        });
    }
    let requests = vec![LimitRequest::ip(LimitName::NewAccountPerIp, ip, 1)];
    let verdict = limiter
        .check(state.inner.clock.now(), &requests)
        .await
        .map_err(|e| ApiError::internal("account-creation limit", &e))?;
    log_shadow(&verdict);
    if !verdict.allowed
        && let Some(b) = &verdict.binding
    {
        return Err(denied(state, b, "from your IP address"));
    }
    Ok(Spent {
        requests,
        info: verdict.binding.as_ref().map(RateLimitInfo::from_binding),
    })
}

pub(crate) async fn account(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    KidRequest(req): KidRequest,
) -> ApiResult {
    let account = own_account(&req, &id)?;
    if req.is_post_as_get() {
        return Ok(Resource::ok(account_json(state.urls(), account)).into_response());
    }
    let payload: AccountRequest = req.payload()?;
    let storage = &state.inner.storage;
    if let Some(status) = payload.status.as_deref() {
        if status != "deactivated" {
            return Err(ApiError::malformed(format!(
                "an account can only be changed to \"deactivated\", not {status:?}"
            )));
        }
        let updated = storage
            .deactivate_account(account.id, state.inner.clock.now())
            .await?;
        tracing::info!(account_id = %account.id, "account deactivated");
        return Ok(Resource::ok(account_json(state.urls(), &updated)).into_response());
    }
    let mut current = account.clone();
    if let Some(contacts) = payload.contact {
        let contacts = validate_contacts(&state, contacts)?;
        current = storage
            .update_account_contacts(account.id, contacts)
            .await?;
    }
    Ok(Resource::ok(account_json(state.urls(), &current)).into_response())
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
        .inner
        .storage
        .account_orders(account.id, cursor.cursor.map(OrderId), page + 1)
        .await?;
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
    let new_thumbprint = new_key.thumbprint();
    if new_thumbprint == account.thumbprint {
        return Err(ApiError::malformed(
            "the new key is the same as the current key",
        ));
    }
    match state
        .inner
        .storage
        .change_account_key(account.id, &new_key.to_json().to_string(), &new_thumbprint)
        .await
    {
        Ok(updated) => {
            tracing::info!(account_id = %account.id, "account key changed");
            Ok(Resource::ok(account_json(state.urls(), &updated)).into_response())
        }
        Err(storage::error::Error::Conflict(other)) => Err(ApiError::malformed(
            "the new key is already in use by another account",
        )
        .with_status(StatusCode::CONFLICT)
        .with_header(header::LOCATION, &state.urls().account(AccountId(other)))),
        Err(e) => Err(e.into()),
    }
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

fn validate_contacts(state: &ApiState, contacts: Vec<String>) -> Result<Vec<String>, ApiError> {
    let max = state.inner.settings.max_contacts;
    if contacts.len() > max {
        return Err(ApiError::new(
            ProblemType::InvalidContact,
            format!("at most {max} contacts are allowed"),
        ));
    }
    for c in &contacts {
        let Some(addr) = c.strip_prefix("mailto:") else {
            return Err(ApiError::new(
                ProblemType::UnsupportedContact,
                format!("contact {c:?} is not supported: only mailto: URLs are"),
            ));
        };
        if !valid_email(addr) {
            return Err(ApiError::new(
                ProblemType::InvalidContact,
                format!("contact {c:?} is not a valid email address"),
            ));
        }
    }
    Ok(contacts)
}

/// A deliberately plain check: one address, ASCII, no URL header fields, a dotted domain.
fn valid_email(addr: &str) -> bool {
    if !addr.is_ascii() || addr.contains(['?', '#', ',', ' ', '<', '>', '"']) || addr.len() > 254 {
        return false;
    }
    let Some((local, domain)) = addr.rsplit_once('@') else {
        return false;
    };
    !local.is_empty()
        && !local.contains('@')
        && acme_core::identifier::Identifier::dns(domain).is_ok_and(|d| !d.is_wildcard())
}

#[cfg(test)]
mod tests {
    use super::valid_email;

    #[test]
    fn emails() {
        assert!(valid_email("admin@example.com"));
        assert!(!valid_email("admin@localhost"));
        assert!(!valid_email("a@b@example.com"));
        assert!(!valid_email("admin@example.com?subject=x"));
        assert!(!valid_email("ädmin@example.com"));
        assert!(!valid_email("@example.com"));
        assert!(!valid_email("admin@*.example.com"));
    }
}
