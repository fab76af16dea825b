//! Layer 1 of the limiter chain as middleware: every ACME POST is charged to its client address
//! through the policy layer (`ra::limits`), before the handler runs. The other layers need the
//! parsed request and are charged by the decisions themselves (see `docs/rate-limits.md`).

use std::net::IpAddr;
use std::net::SocketAddr;

use axum::extract::ConnectInfo;
use axum::extract::Request;
use axum::extract::State;
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::response::Response;
use ra::rate_info::RateLimitInfo;

use crate::refusal::refused;
use crate::state::ApiState;

/// The client address of a request (peer, or trusted `X-Forwarded-For`).
pub(crate) fn request_ip(state: &ApiState, request: &Request) -> IpAddr {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::from([127, 0, 0, 1]), |c| c.0.ip());
    crate::client_ip::client_ip(peer, request.headers(), &state.inner.trusted_proxies)
}

/// The client address, stored in request extensions by [`global_limit`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientIp(pub(crate) IpAddr);

/// Layer 1: one token per ACME POST from the client's address (IPv6 by prefix), unless
/// whitelisted. Refunded when the request fails with a server error.
pub(crate) async fn global_limit(
    State(state): State<ApiState>,
    mut request: Request,
    next: Next,
) -> Response {
    let ip = request_ip(&state, &request);
    request.extensions_mut().insert(ClientIp(ip));
    if request.method() != axum::http::Method::POST {
        return next.run(request).await;
    }
    let spent = match state.ra().charge_request(ip).await {
        Ok(spent) => spent,
        Err(e) => return refused(&state, e).into_response(),
    };
    let mut response = next.run(request).await;
    if response.status().is_server_error() {
        state.ra().refund(&spent).await;
    }
    // The global policy applied too: listed first, before the handler's own policies.
    if let Some(global) = spent.info {
        match response.extensions_mut().get_mut::<RateLimitInfo>() {
            Some(info) => info.prepend(global),
            None => {
                response.extensions_mut().insert(global);
            }
        }
    }
    response
}
