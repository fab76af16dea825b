//! The self-service unpause page for zombie-paused (account, identifier) pairs.
//!
//! Served by Certeasy itself on the ACME listener, outside the JWS and limiter layers: plain
//! server-rendered HTML, no JavaScript, nothing loaded from other hosts. A GET never changes
//! state; the button POSTs, and cross-site POSTs are refused.

mod pages;
pub mod token;

use std::future::Future;
use std::pin::Pin;

use acme_core::identifier::Identifier;
use acme_core::ids::AccountId;
use axum::Form;
use axum::Router;
use axum::extract::Query;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::Html;
use axum::response::IntoResponse;
use axum::response::Redirect;
use axum::response::Response;
use axum::routing::get;
use serde::Deserialize;

use crate::state::ApiState;
use crate::unpause::token::TokenError;
use crate::unpause::token::UnpauseClaims;
use crate::unpause::token::UnpauseKey;

/// Most pairs unpaused by one click.
pub const MAX_PER_CLICK: u32 = 50_000;

/// How unpause links are made and checked.
#[derive(Debug, Clone)]
pub struct UnpauseSettings {
    pub key: Vec<u8>,
    pub version: u32,
    pub link_lifetime: time::Duration,
    /// Where the pages are reached, without a trailing slash.
    pub base_url: String,
}

/// Told which pairs were unpaused, so their failure counts can start fresh.
pub trait UnpauseHook: Send + Sync {
    fn unpaused<'a>(
        &'a self,
        account: AccountId,
        identifiers: &'a [Identifier],
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;
}

/// The link shown in a pause refusal.
pub fn unpause_url(settings: &UnpauseSettings, claims: &UnpauseClaims) -> String {
    let token = UnpauseKey::new(&settings.key).sign(claims);
    format!("{}/unpause?token={token}", settings.base_url)
}

/// Routes of the unpause page; merged into the ACME router outside its JWS and limiter layers.
pub fn routes() -> Router<ApiState> {
    Router::new()
        .route("/unpause", get(show).post(unpause))
        .route("/unpause/status", get(status))
}

#[derive(Debug, Deserialize)]
struct TokenParam {
    token: Option<String>,
}

fn page(status: StatusCode, html: String) -> Response {
    let mut response = (status, Html(html)).into_response();
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-store"),
    );
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        axum::http::HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"),
    );
    response
}

/// The claims of a valid token, or the status and error page to answer.
fn verify(
    state: &ApiState,
    settings: &UnpauseSettings,
    token: Option<&str>,
) -> Result<UnpauseClaims, (StatusCode, pages::ErrorKind)> {
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        return Err((StatusCode::BAD_REQUEST, pages::ErrorKind::Invalid));
    };
    let now = state.inner.clock.now().unix_timestamp();
    UnpauseKey::new(&settings.key)
        .verify(token, now, settings.version)
        .map_err(|e| match e {
            TokenError::Malformed | TokenError::BadSignature => {
                (StatusCode::BAD_REQUEST, pages::ErrorKind::Invalid)
            }
            TokenError::Expired => (StatusCode::GONE, pages::ErrorKind::Expired),
            TokenError::WrongVersion => (StatusCode::GONE, pages::ErrorKind::Revoked),
        })
}

fn not_enabled() -> Response {
    page(
        StatusCode::NOT_FOUND,
        pages::error(pages::ErrorKind::Disabled),
    )
}

async fn show(State(state): State<ApiState>, Query(q): Query<TokenParam>) -> Response {
    let Some(settings) = state.inner.settings.unpause.clone() else {
        return not_enabled();
    };
    let claims = match verify(&state, &settings, q.token.as_deref()) {
        Ok(c) => c,
        Err((status, kind)) => return page(status, pages::error(kind)),
    };
    let more = match state
        .inner
        .storage
        .paused_for_account(claims.account, 16)
        .await
    {
        Ok(current) => current.len() > claims.identifiers.len(),
        Err(e) => {
            tracing::warn!(error = %e, "could not count current pauses");
            true
        }
    };
    let account_url = state.url(&format!("/acme/acct/{}", claims.account));
    page(
        StatusCode::OK,
        pages::unpause_form(
            &claims,
            &account_url,
            more,
            q.token.as_deref().unwrap_or_default(),
        ),
    )
}

/// Refuses browser requests made from another site. A request with neither `Origin` nor
/// `Sec-Fetch-Site` comes from a non-browser client, which cannot be a cross-site forgery.
pub(crate) fn same_origin(headers: &HeaderMap, base_url: &str) -> bool {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok())
        && !matches!(site, "same-origin" | "none")
    {
        return false;
    }
    match headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        None => true,
        Some(origin) => origin.trim_end_matches('/') == origin_of(base_url),
    }
}

fn origin_of(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let end = url[after_scheme..]
        .find('/')
        .map_or(url.len(), |i| after_scheme + i);
    &url[..end]
}

async fn unpause(
    State(state): State<ApiState>,
    headers: HeaderMap,
    Form(form): Form<TokenParam>,
) -> Response {
    let Some(settings) = state.inner.settings.unpause.clone() else {
        return not_enabled();
    };
    if !same_origin(&headers, &settings.base_url) {
        return page(
            StatusCode::FORBIDDEN,
            pages::error(pages::ErrorKind::CrossSite),
        );
    }
    let claims = match verify(&state, &settings, form.token.as_deref()) {
        Ok(c) => c,
        Err((status, kind)) => return page(status, pages::error(kind)),
    };
    let now = state.inner.clock.now();
    let unpaused = match state
        .inner
        .storage
        .unpause_account(claims.account, MAX_PER_CLICK, now)
        .await
    {
        Ok(u) => u,
        Err(e) => {
            tracing::error!(error = %e, "unpausing failed");
            return page(
                StatusCode::SERVICE_UNAVAILABLE,
                pages::error(pages::ErrorKind::Unavailable),
            );
        }
    };
    if let Some(hook) = &state.inner.unpause_hook {
        hook.unpaused(claims.account, &unpaused).await;
    }
    metrics::counter!("certeasy_unpaused_pairs_total", "via" => "self-service")
        .increment(unpaused.len() as u64);
    tracing::info!(account_id = %claims.account, unpaused = unpaused.len(), "pairs unpaused by the subscriber");
    Redirect::to(&format!("/unpause/status?count={}", unpaused.len())).into_response()
}

#[derive(Debug, Deserialize)]
struct StatusParam {
    count: Option<String>,
}

async fn status(Query(q): Query<StatusParam>) -> Response {
    match q.count.as_deref().and_then(|c| c.parse::<u32>().ok()) {
        Some(n) => page(StatusCode::OK, pages::status(n, MAX_PER_CLICK)),
        None => page(
            StatusCode::BAD_REQUEST,
            pages::error(pages::ErrorKind::Invalid),
        ),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn cross_site_requests_are_refused() {
        let base = "https://acme.example:14000";
        let mut h = HeaderMap::new();
        assert!(same_origin(&h, base), "no browser headers: not a forgery");
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://acme.example:14000"),
        );
        assert!(same_origin(&h, base));
        h.insert("sec-fetch-site", HeaderValue::from_static("same-origin"));
        assert!(same_origin(&h, base));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://evil.example"),
        );
        assert!(!same_origin(&h, base));
        let mut h = HeaderMap::new();
        h.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(!same_origin(&h, base));
        assert_eq!(origin_of("https://a.example:1/x/y"), "https://a.example:1");
        assert_eq!(origin_of("https://a.example"), "https://a.example");
    }
}
