//! The self-service unpause page for zombie-paused (account, identifier) pairs.
//!
//! Served by Certeasy itself on the ACME listener, outside the JWS and limiter layers: plain
//! server-rendered HTML, no JavaScript, nothing loaded from other hosts. A GET never changes
//! state; the button POSTs, and cross-site POSTs are refused. The POST answers with the outcome
//! page itself, so what it reports (how many names were unpaused) is what the server did, not a
//! number carried in a URL that anyone could write.

pub mod link;
mod pages;
pub mod token;

use std::net::IpAddr;
use std::net::SocketAddr;

use axum::Extension;
use axum::Form;
use axum::Router;
use axum::extract::ConnectInfo;
use axum::extract::Query;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::Html;
use axum::response::IntoResponse;
use axum::response::Response;
use axum::routing::get;
use ra::audit::Requester;
use serde::Deserialize;

pub use self::link::UnpauseSettings;
pub use self::link::unpause_url;
use crate::state::ApiState;
use crate::unpause::token::TokenError;
use crate::unpause::token::UnpauseClaims;
use crate::unpause::token::UnpauseKey;

/// Most pairs unpaused by one click (the policy layer's bound, shown on the page).
pub use ra::pausing::MAX_PER_CLICK;

/// The link relation of the unpause URL in a pause refusal, after this server's external URL:
/// an extension relation type (RFC 8288 §2.1.2), a URI that resolves to its documentation.
/// Clients recognise the relation by this ending; `rel="help"` points to the documentation.
pub const UNPAUSE_REL_PATH: &str = "/docs/rate-limits#unpause";

/// Routes of the unpause page; merged into the ACME router outside its JWS and limiter layers.
pub fn routes() -> Router<ApiState> {
    Router::new().route("/unpause", get(show).post(unpause))
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
    let more = match state.ra().paused_for_account(claims.account, 16).await {
        Ok(current) => current.len() > claims.identifiers.len(),
        Err(e) => {
            tracing::warn!(error = %e, "could not count current pauses");
            true
        }
    };
    let account_url = state.urls().account(claims.account);
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

/// Refuses browser requests made from another site: a cross-site `Sec-Fetch-Site`, or an
/// `Origin` or `Referer` of another origin (either one; a browser that leaves out `Origin` may
/// still send `Referer`). An unparseable or opaque (`null`) value is another origin. A request
/// with none of the three comes from a non-browser client, which cannot be a cross-site forgery.
pub(crate) fn same_origin(headers: &HeaderMap, base_url: &str) -> bool {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok())
        && !matches!(site, "same-origin" | "none")
    {
        return false;
    }
    let Ok(ours) = url::Url::parse(base_url).map(|u| u.origin()) else {
        return false;
    };
    [header::ORIGIN, header::REFERER].iter().all(|name| {
        headers.get_all(name).iter().all(|v| {
            v.to_str()
                .ok()
                .and_then(|s| url::Url::parse(s).ok())
                .is_some_and(|u| u.origin() == ours)
        })
    })
}

async fn unpause(
    State(state): State<ApiState>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
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
    // Outside the limiter layer, so the address is worked out here as that layer does.
    let peer = peer.map_or(IpAddr::from([127, 0, 0, 1]), |Extension(ConnectInfo(a))| {
        a.ip()
    });
    let ip = crate::client_ip::client_ip(peer, &headers, &state.inner.trusted_proxies);
    let unpaused = match state
        .ra()
        .unpause(claims.account, &[], &Requester::account(claims.account, ip))
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
    let count = u32::try_from(unpaused.len()).unwrap_or(u32::MAX);
    page(
        StatusCode::OK,
        pages::status(
            count,
            MAX_PER_CLICK,
            form.token.as_deref().unwrap_or_default(),
        ),
    )
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
        h.insert(header::ORIGIN, HeaderValue::from_static("null"));
        h.remove("sec-fetch-site");
        assert!(!same_origin(&h, base), "an opaque origin is another origin");
    }

    #[test]
    fn a_foreign_referer_is_refused_like_a_foreign_origin() {
        let base = "https://acme.example:14000";
        let with = |pairs: &[(header::HeaderName, &'static str)]| {
            let mut h = HeaderMap::new();
            for (name, value) in pairs {
                h.append(name.clone(), HeaderValue::from_static(value));
            }
            same_origin(&h, base)
        };
        assert!(with(&[(
            header::REFERER,
            "https://acme.example:14000/unpause?token=x"
        )]));
        assert!(!with(&[(header::REFERER, "https://evil.example/page")]));
        assert!(
            !with(&[(header::REFERER, "https://acme.example:14001/unpause")]),
            "another port is another origin"
        );
        assert!(!with(&[(header::REFERER, "not a url")]));
        assert!(
            !with(&[
                (header::ORIGIN, "https://acme.example:14000"),
                (header::REFERER, "https://evil.example/")
            ]),
            "a matching Origin does not excuse a foreign Referer"
        );
        assert!(with(&[
            (header::ORIGIN, "https://acme.example:14000"),
            (header::REFERER, "https://acme.example:14000/unpause")
        ]));
        assert!(
            same_origin(
                &{
                    let mut h = HeaderMap::new();
                    h.insert(
                        header::ORIGIN,
                        HeaderValue::from_static("https://a.example"),
                    );
                    h
                },
                "https://a.example:443/acme"
            ),
            "the default port is the same origin"
        );
    }
}
