//! Routes of the ACME endpoint.

mod account;
mod authz;
mod certificate;
mod directory;
mod order;
mod renewal_info;

use axum::Router;
use axum::middleware;
use axum::routing::get;
use axum::routing::post;

use crate::headers::acme_headers;
use crate::limits::global_limit;
use crate::methods::method_not_allowed;
use crate::state::ApiState;

/// The ACME router. Admin functions are never mounted here.
pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/directory", get(directory::directory))
        .route(
            "/acme/new-nonce",
            get(directory::new_nonce_get)
                .head(directory::new_nonce_head)
                .post(directory::new_nonce_post),
        )
        .route("/acme/new-account", post(account::new_account))
        .route("/acme/acct/{id}", post(account::account))
        .route("/acme/acct/{id}/orders", post(account::orders))
        .route("/acme/key-change", post(account::key_change))
        .route("/acme/new-order", post(order::new_order))
        .route("/acme/new-authz", post(authz::new_authz))
        .route("/acme/order/{id}", post(order::order))
        .route("/acme/order/{id}/finalize", post(order::finalize))
        .route("/acme/authz/{id}", post(authz::authz))
        .route("/acme/chall/{id}", post(authz::challenge))
        .route("/acme/cert/{id}", post(certificate::certificate))
        .route("/acme/cert/{id}/{n}", post(certificate::alternate))
        .route("/acme/revoke-cert", post(certificate::revoke))
        .route(
            "/acme/renewal-info/{cert_id}",
            get(renewal_info::renewal_info),
        )
        .layer(middleware::from_fn(method_not_allowed))
        .layer(middleware::from_fn_with_state(state.clone(), global_limit))
        .layer(middleware::from_fn_with_state(state.clone(), acme_headers))
        .route("/docs/rate-limits", get(directory::rate_limit_docs))
        .route("/root.pem", get(directory::root_pem))
        .merge(crate::unpause::routes())
        .layer(middleware::from_fn(crate::request_metrics::record))
        .with_state(state)
}
