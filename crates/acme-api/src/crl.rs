//! CRLs over plain HTTP (RFC 5280 §4.2.1.13): `GET /crl/<shard>.crl` (the implicit issuer
//! "default") and `GET /crl/<issuer>/<shard>.crl` (every further issuer, issuer rotation), DER,
//! as the CRL publisher (`workers::crl`) stored it.
//!
//! Served on a listener of its own (`crl.listen`), because relying parties fetch CRLs over
//! HTTP (fetching a CRL over HTTPS would need the revocation status of the server's own
//! certificate first), and also on the ACME listener for clients that only reach that one.
//!
//! A GET is answered from memory ([`PublishedCrls`]), never from the database: the CRL listener
//! is public, and a GET that read a blob from the database would let anyone turn requests into
//! database load. [`PublishedCrls::keep_fresh`] checks the shards' CRL numbers (one small query)
//! every [`REFRESH_INTERVAL`] and loads a shard's bytes only when its number grew, whichever
//! instance published it; so every instance serves the same bytes per number, and a new CRL is
//! served within about a second of being published.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::PoisonError;
use std::sync::RwLock;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;

use acme_core::clock::SharedClock;
use axum::Router;
use axum::body::Bytes;
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
use storage::crls::PublishedCrl;
use time::OffsetDateTime;
use time::macros::format_description;

/// How long a relying party may cache a CRL without asking again. Short, because a revocation is
/// published within seconds and a cached CRL hides it; a conditional request (`If-None-Match`)
/// costs the server a lookup in memory and no body.
pub const CACHE_MAX_AGE: Duration = Duration::from_secs(300);

/// How often [`PublishedCrls::keep_fresh`] checks the shards' CRL numbers in the database.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(1);

/// One shard's CRL as served: its bytes are shared by every response, never copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedCrl {
    pub number: u64,
    pub der: Bytes,
    pub this_update: OffsetDateTime,
    pub next_update: OffsetDateTime,
}

impl From<PublishedCrl> for ServedCrl {
    fn from(crl: PublishedCrl) -> Self {
        Self {
            number: crl.number,
            der: Bytes::from(crl.der),
            this_update: crl.this_update,
            next_update: crl.next_update,
        }
    }
}

/// The CRLs this instance serves: each shard's last published CRL, held in memory.
#[derive(Debug, Default)]
pub struct PublishedCrls {
    shards: RwLock<BTreeMap<(String, u16), Arc<ServedCrl>>>,
    /// Whether a refresh has succeeded: until then a missing shard may merely be unread.
    loaded: AtomicBool,
}

impl PublishedCrls {
    /// `issuer`'s shard `shard`'s CRL as last loaded.
    pub fn get(&self, issuer: &str, shard: u16) -> Option<Arc<ServedCrl>> {
        self.shards
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(issuer.to_owned(), shard))
            .cloned()
    }

    fn number_of(&self, issuer: &str, shard: u16) -> u64 {
        self.get(issuer, shard).map_or(0, |crl| crl.number)
    }

    /// Reads the shards' CRL numbers and loads the CRL of every shard whose number grew since
    /// the last refresh; returns how many were loaded. Only the changed shards' bytes are read.
    pub async fn refresh(&self, storage: &Storage) -> Result<usize, storage::error::Error> {
        let mut loaded = 0;
        for state in storage.crl_shard_states().await? {
            if state.number <= self.number_of(&state.issuer, state.shard) {
                continue;
            }
            let Some(crl) = storage.published_crl(&state.issuer, state.shard).await? else {
                continue;
            };
            let mut shards = self.shards.write().unwrap_or_else(PoisonError::into_inner);
            // Another refresh may have loaded a later number meanwhile: numbers never go back.
            let key = (state.issuer.clone(), state.shard);
            if shards.get(&key).is_none_or(|held| held.number < crl.number) {
                tracing::debug!(issuer = %state.issuer, shard = state.shard, number = crl.number, "CRL loaded");
                export_served(&state.issuer, state.shard, &crl);
                shards.insert(key, Arc::new(ServedCrl::from(crl)));
                loaded += 1;
            }
        }
        self.loaded.store(true, Ordering::Release);
        Ok(loaded)
    }

    /// Refreshes every [`REFRESH_INTERVAL`] (the first time at once) until `shutdown` completes.
    /// While the database does not answer, the CRLs already loaded go on being served.
    pub async fn keep_fresh(&self, storage: &Storage, shutdown: impl Future<Output = ()>) {
        let mut ticker = tokio::time::interval(REFRESH_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                () = &mut shutdown => return,
            }
            if let Err(e) = self.refresh(storage).await {
                metrics::counter!("certeasy_crl_refresh_failures_total").increment(1);
                tracing::warn!(error = %e, "loading published CRLs");
            }
        }
    }

    fn is_loaded(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }
}

/// Metric (gauge, unix seconds, by `issuer` and `shard`): `thisUpdate` of the CRL this instance
/// serves. `time() - it` beyond `crl.update-interval` means the publisher has fallen behind.
pub const CRL_THIS_UPDATE: &str = "certeasy_crl_this_update_timestamp_seconds";
/// Metric (gauge, unix seconds, by `issuer` and `shard`): `nextUpdate` of the CRL this instance
/// serves; past it, relying parties treat the CRL as expired.
pub const CRL_NEXT_UPDATE: &str = "certeasy_crl_next_update_timestamp_seconds";

/// Exports the dates of a CRL as it starts being served: what is served is what relying parties
/// see, whichever instance published it.
#[allow(clippy::cast_precision_loss)] // unix seconds, far below 2^52
fn export_served(issuer: &str, shard: u16, crl: &PublishedCrl) {
    let labels = [("issuer", issuer.to_owned()), ("shard", shard.to_string())];
    metrics::gauge!(CRL_THIS_UPDATE, &labels).set(crl.this_update.unix_timestamp() as f64);
    metrics::gauge!(CRL_NEXT_UPDATE, &labels).set(crl.next_update.unix_timestamp() as f64);
}

/// What the CRL routes need.
#[derive(Clone)]
pub struct CrlState {
    crls: Arc<PublishedCrls>,
    clock: SharedClock,
}

impl CrlState {
    /// Serves the CRLs held by `crls` (kept fresh by [`PublishedCrls::keep_fresh`]).
    pub fn new(crls: Arc<PublishedCrls>, clock: SharedClock) -> Self {
        Self { crls, clock }
    }
}

/// `GET /crl/{file}`.
pub fn router(state: CrlState) -> Router {
    Router::new()
        .route("/crl/{file}", get(crl))
        .route("/crl/{issuer}/{file}", get(issuer_crl))
        .with_state(state)
}

/// The implicit issuer's shards keep the URLs of before rotation existed, which the
/// certificates it signed name.
async fn crl(
    State(state): State<CrlState>,
    Path(file): Path<String>,
    request_headers: HeaderMap,
) -> Response {
    serve(&state, "default", &file, &request_headers)
}

/// A further issuer's shards, under its name.
async fn issuer_crl(
    State(state): State<CrlState>,
    Path((issuer, file)): Path<(String, String)>,
    request_headers: HeaderMap,
) -> Response {
    // "default" has its own URLs: one CRL, one URL.
    if issuer == "default" {
        return (StatusCode::NOT_FOUND, "no such CRL\n").into_response();
    }
    serve(&state, &issuer, &file, &request_headers)
}

fn serve(state: &CrlState, issuer: &str, file: &str, request_headers: &HeaderMap) -> Response {
    let Some(shard) = file
        .strip_suffix(".crl")
        .and_then(|n| n.parse::<u16>().ok())
    else {
        return (StatusCode::NOT_FOUND, "no such CRL\n").into_response();
    };
    let Some(published) = state.crls.get(issuer, shard) else {
        if !state.crls.is_loaded() {
            // Only just started, or the database has not answered yet.
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "1")],
                "the CRLs are not loaded yet\n",
            )
                .into_response();
        }
        return (StatusCode::NOT_FOUND, "no such CRL\n").into_response();
    };
    let now = state.clock.now();
    // Never cached past nextUpdate: a relying party must fetch the next CRL then.
    let until_next = (published.next_update - now).whole_seconds().max(0);
    let max_age = until_next.min(i64::try_from(CACHE_MAX_AGE.as_secs()).unwrap_or(300));
    let etag = if issuer == "default" {
        format!("\"{shard}-{}\"", published.number)
    } else {
        format!("\"{issuer}-{shard}-{}\"", published.number)
    };
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
    (StatusCode::OK, headers, published.der.clone()).into_response()
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
