//! CRLs over plain HTTP (RFC 5280 §4.2.1.13): `GET /crl/<shard>.crl`, DER, as the CRL publisher
//! (`workers::crl`) stored it.
//!
//! Served on a listener of its own (`crl.listen`), because relying parties fetch CRLs over
//! HTTP (fetching a CRL over HTTPS would need the revocation status of the server's own
//! certificate first), and also on the ACME listener for clients that only reach that one.
//! Every instance serves the bytes stored in the shared database, so a shard's CRL is the same
//! whichever instance answers.

use std::time::Duration;

use acme_core::clock::SharedClock;
use axum::Router;
use axum::extract::Path;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use axum::routing::get;
use storage::Storage;
use time::OffsetDateTime;
use time::macros::format_description;

/// How long a relying party may cache a CRL without asking again. Short, because a revocation is
/// published within seconds and a cached CRL hides it; a conditional request (`If-None-Match`)
/// costs the server one indexed read and no body.
pub const CACHE_MAX_AGE: Duration = Duration::from_secs(300);

/// What the CRL routes need.
#[derive(Clone)]
pub struct CrlState {
    storage: Storage,
    clock: SharedClock,
}

impl CrlState {
    pub fn new(storage: Storage, clock: SharedClock) -> Self {
        Self { storage, clock }
    }
}

/// `GET /crl/{file}`.
pub fn router(state: CrlState) -> Router {
    Router::new()
        .route("/crl/{file}", get(crl))
        .with_state(state)
}

async fn crl(
    State(state): State<CrlState>,
    Path(file): Path<String>,
    request_headers: HeaderMap,
) -> Response {
    let Some(shard) = file
        .strip_suffix(".crl")
        .and_then(|n| n.parse::<u16>().ok())
    else {
        return (StatusCode::NOT_FOUND, "no such CRL\n").into_response();
    };
    let published = match state.storage.published_crl(shard).await {
        Ok(Some(published)) => published,
        Ok(None) => return (StatusCode::NOT_FOUND, "no such CRL\n").into_response(),
        Err(e) => {
            tracing::warn!(shard, error = %e, "reading a CRL");
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "the CRL cannot be read now\n",
            )
                .into_response();
        }
    };
    let now = state.clock.now();
    // Never cached past nextUpdate: a relying party must fetch the next CRL then.
    let until_next = (published.next_update - now).whole_seconds().max(0);
    let max_age = until_next.min(i64::try_from(CACHE_MAX_AGE.as_secs()).unwrap_or(300));
    let etag = format!("\"{shard}-{}\"", published.number);
    let mut headers = HeaderMap::new();
    insert(&mut headers, header::ETAG, &etag);
    insert(
        &mut headers,
        header::CACHE_CONTROL,
        &format!("public, max-age={max_age}"),
    );
    insert(
        &mut headers,
        header::LAST_MODIFIED,
        &http_date(published.this_update),
    );
    insert(
        &mut headers,
        header::EXPIRES,
        &http_date(published.next_update),
    );
    let not_modified = request_headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|tag| {
            let tag = tag.trim();
            tag == "*" || tag.trim_start_matches("W/") == etag
        });
    if not_modified {
        return (StatusCode::NOT_MODIFIED, headers).into_response();
    }
    insert(&mut headers, header::CONTENT_TYPE, "application/pkix-crl");
    (StatusCode::OK, headers, published.der).into_response()
}

fn insert(headers: &mut HeaderMap, name: header::HeaderName, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(name, value);
    }
}

/// An HTTP date (RFC 9110 §5.6.7, IMF-fixdate).
fn http_date(at: OffsetDateTime) -> String {
    let format = format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
    );
    at.to_offset(time::UtcOffset::UTC)
        .format(&format)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    #[test]
    fn dates_are_imf_fixdate() {
        assert_eq!(
            http_date(datetime!(1994-11-06 08:49:37 UTC)),
            "Sun, 06 Nov 1994 08:49:37 GMT"
        );
    }
}
