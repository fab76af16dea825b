//! Orders: creation, lookup, finalization (RFC 8555 §7.4). The decisions are the policy
//! layer's (`ra::orders`); this module parses the wire form and renders the answer.

use acme_core::ids::OrderId;
use acme_core::status::OrderStatus;
use axum::Extension;
use axum::extract::Path;
use axum::extract::State;
use axum::response::IntoResponse;
use axum::response::Response;
use ra::orders::RawIdentifier;
use storage::model::Order;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::auth::KidRequest;
use crate::limits::ClientIp;
use crate::problem::ApiError;
use crate::refusal::refused;
use crate::response::Resource;
use crate::state::ApiState;
use crate::wire::FinalizeRequest;
use crate::wire::OrderRequest;
use crate::wire::order_json;

type ApiResult = Result<Response, ApiError>;

pub(crate) async fn new_order(
    State(state): State<ApiState>,
    KidRequest(req): KidRequest,
) -> ApiResult {
    let account = req.account()?;
    let payload: OrderRequest = req.payload()?;
    let request = ra::orders::OrderRequest {
        identifiers: payload
            .identifiers
            .into_iter()
            .map(|i| RawIdentifier {
                kind: i.kind,
                value: i.value,
            })
            .collect(),
        not_before: timestamp("notBefore", payload.not_before.as_deref())?,
        not_after: timestamp("notAfter", payload.not_after.as_deref())?,
        replaces: payload.replaces,
        profile: payload.profile,
    };
    let created = state
        .ra()
        .new_order(account, request)
        .await
        .map_err(|e| refused(&state, e))?;
    let url = state.urls().order(created.order.id);
    Ok(
        Resource::created(order_json(state.urls(), &created.order), &url)
            .rate_limit(created.rate_limit)
            .into_response(),
    )
}

pub(crate) async fn order(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    KidRequest(req): KidRequest,
) -> ApiResult {
    req.require_post_as_get()?;
    let order = own_order(&state, &req, &id).await?;
    Ok(order_resource(&state, &order).into_response())
}

pub(crate) async fn finalize(
    State(state): State<ApiState>,
    Extension(ClientIp(ip)): Extension<ClientIp>,
    Path(id): Path<String>,
    KidRequest(req): KidRequest,
) -> ApiResult {
    let order = own_order(&state, &req, &id).await?;
    let payload: FinalizeRequest = req.payload()?;
    let updated = state
        .ra()
        .finalize(req.account()?, order, &payload.csr, ip)
        .await
        .map_err(|e| refused(&state, e))?;
    Ok(order_resource(&state, &updated).into_response())
}

fn order_resource(state: &ApiState, order: &Order) -> Resource {
    let url = state.urls().order(order.id);
    let resource = Resource::ok(order_json(state.urls(), order)).location(&url);
    match order.status {
        OrderStatus::Processing | OrderStatus::Pending => {
            resource.retry_after(state.inner.settings.retry_after.whole_seconds())
        }
        _ => resource,
    }
}

/// An order of the request's account; other accounts' orders are indistinguishable from missing
/// ones.
async fn own_order(
    state: &ApiState,
    req: &crate::auth::Authenticated,
    id: &str,
) -> Result<Order, ApiError> {
    let account = req.account()?.id;
    let id: OrderId = id.parse().map_err(|_| ApiError::not_found("order"))?;
    state
        .ra()
        .order_of(account, id)
        .await
        .map_err(|e| refused(state, e))
}

/// An optional RFC 3339 timestamp of the payload.
fn timestamp(name: &str, value: Option<&str>) -> Result<Option<OffsetDateTime>, ApiError> {
    value
        .map(|s| {
            OffsetDateTime::parse(s, &Rfc3339).map_err(|_| {
                ApiError::malformed(format!("{name} {s:?} is not an RFC 3339 timestamp"))
            })
        })
        .transpose()
}
