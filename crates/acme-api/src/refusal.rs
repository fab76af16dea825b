//! The one place where the policy layer's outcomes become ACME problems: each
//! [`ra::Refusal`] gets its problem type, status, detail and headers (`Retry-After`, the
//! rate-limit documentation and unpause links, `Location` of a conflicting account). A storage
//! failure carried by [`ra::Error::Storage`] is answered `serverInternal` with a generic detail,
//! the error itself only logged: no SQL-layer text reaches a client. It needs the state for the
//! URLs it links, so it sits above both `state` and `problem`.

use acme_core::problem::ProblemType;
use axum::http::StatusCode;
use axum::http::header;
use ra::Refusal;
use ra::error::StateRefusal;
use ra::keys::KeyUse;

use crate::problem::ApiError;
use crate::state::ApiState;

/// The answer to a policy outcome.
pub(crate) fn refused(state: &ApiState, error: ra::Error) -> ApiError {
    match error {
        ra::Error::Refused(refusal) => refusal_error(state, *refusal),
        // A row the request named that vanished under it (deleted, or never there): answered
        // as any missing object.
        ra::Error::Storage(storage::error::Error::NotFound) => ApiError::not_found("The object"),
        ra::Error::Storage(e) => ApiError::internal("storage failed", &e),
        ra::Error::Internal { context, message } => ApiError::internal(context, &message),
    }
}

fn refusal_error(state: &ApiState, refusal: Refusal) -> ApiError {
    match refusal {
        Refusal::Problem(problem) => ApiError::from_problem(problem),
        Refusal::RateLimited {
            limit,
            detail,
            retry_after_secs,
            info,
        } => {
            let mut err = ApiError::new(ProblemType::RateLimited, detail)
                .with_header(header::RETRY_AFTER, &retry_after_secs.to_string())
                .with_header(header::LINK, &help_link(state, limit));
            err.rate_limit = Some(info);
            err
        }
        Refusal::Paused {
            limit,
            account,
            shown,
            more,
            at,
            info,
        } => {
            let mut names = shown.join(", ");
            if more {
                names.push_str(" and possibly others");
            }
            let mut detail = format!(
                "Issuance for {names} is paused for this account because validation failed too many times in a row."
            );
            let mut unpause_link = None;
            if let Some(settings) = &state.inner.settings.unpause {
                let claims = crate::unpause::token::UnpauseClaims {
                    account,
                    identifiers: shown,
                    issued_at: at.unix_timestamp(),
                    expires_at: (at + settings.link_lifetime).unix_timestamp(),
                    version: settings.version,
                };
                let url = crate::unpause::link::unpause_url(settings, &claims);
                detail.push_str(&format!(" Once the problem is fixed, unpause at: {url}"));
                unpause_link = Some(url);
            }
            let mut err = ApiError::new(ProblemType::RateLimited, detail)
                .with_header(
                    header::RETRY_AFTER,
                    &ra::pausing::PAUSE_RETRY_AFTER_SECS.to_string(),
                )
                .with_header(header::LINK, &help_link(state, limit));
            if let Some(url) = unpause_link {
                let rel = state.urls().url(crate::unpause::UNPAUSE_REL_PATH);
                err = err.with_header(header::LINK, &format!("<{url}>;rel=\"{rel}\""));
            }
            err.rate_limit = Some(info);
            err
        }
        Refusal::TermsNotAgreed { terms } => ApiError::new(
            ProblemType::UserActionRequired,
            format!(
                "you must agree to the terms of service at {terms} (termsOfServiceAgreed: true)"
            ),
        )
        .with_header(header::LINK, &format!("<{terms}>;rel=\"terms-of-service\"")),
        Refusal::AccountNotValid(status) => ApiError::account_not_valid(status),
        Refusal::NotFound(what) => ApiError::not_found(what),
        Refusal::Conflict(detail) => ApiError::new(ProblemType::Conflict, detail),
        Refusal::KeyInUse(other) => {
            ApiError::malformed("the new key is already in use by another account")
                .with_status(StatusCode::CONFLICT)
                .with_header(header::LOCATION, &state.urls().account(other))
        }
        Refusal::State(state) => state_refusal(state),
        // RFC 8555 keeps badPublicKey for JWS keys (§7.3, §7.3.5); a CSR's key is the CSR's.
        Refusal::BadKey { key, detail } => ApiError::new(
            match key {
                KeyUse::Account => ProblemType::BadPublicKey,
                KeyUse::Certificate => ProblemType::BadCsr,
            },
            detail,
        ),
    }
}

/// An object's state refusing the request. The details are the ones clients have always been
/// given for these states.
fn state_refusal(refusal: StateRefusal) -> ApiError {
    match refusal {
        StateRefusal::OrderNotReady(status) => ApiError::new(
            ProblemType::OrderNotReady,
            format!(
                "The order is {}, not ready: finalize needs every authorization to be valid first",
                status.as_str()
            ),
        ),
        StateRefusal::AlreadyRevoked => ApiError::new(
            ProblemType::AlreadyRevoked,
            "The certificate is already revoked",
        ),
        StateRefusal::AuthzNotPending(status) => ApiError::malformed(format!(
            "the authorization is {}; only challenges of pending authorizations can be attempted",
            status.as_str()
        )),
        StateRefusal::AuthzNotActive(status) => ApiError::malformed(format!(
            "only pending or valid authorizations can be deactivated; this one is {}",
            status.as_str()
        )),
        StateRefusal::SiblingChallengeStarted => ApiError::malformed(
            "another challenge of this authorization is already being validated",
        ),
    }
}

fn help_link(state: &ApiState, limit: &str) -> String {
    format!("<{}>;rel=\"help\"", state.urls().rate_limit_doc(limit))
}
