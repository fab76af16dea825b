//! The admin listener: metrics, health, and admin functions (reload, rate-limit buckets). It is a
//! separate socket, bound to loopback by default, so nothing here is reachable from the ACME
//! listener. `certeasy admin ...` is a client of this API.
//!
//! `/admin/*` changes state, so it needs the bearer token of [`crate::admin_token`]: loopback is
//! not a boundary (every local user and process shares it). Requests a browser sends (any
//! `Origin`, or `Sec-Fetch-Site` other than `none`) are refused even with the token, so a web
//! page cannot drive the API through a browser that holds it. `/metrics`, `/healthz` and
//! `/readyz` stay open: they change nothing and scrapers and probes carry no secrets.

use std::sync::Arc;
use std::sync::OnceLock;

use acme_api::limits::RateLimits;
use acme_core::clock::SharedClock;
use acme_core::identifier::Identifier;
use acme_core::ids::AccountId;
use axum::Json;
use axum::Router;
use axum::extract::Path;
use axum::extract::Query;
use axum::extract::Request;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::http::header;
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::response::Response;
use axum::routing::get;
use axum::routing::post;
use metrics_exporter_prometheus::PrometheusBuilder;
use metrics_exporter_prometheus::PrometheusHandle;
use ratelimits::BucketId;
use ratelimits::LimitName;
use serde::Deserialize;
use storage::Storage;

use crate::admin_eab;
use crate::admin_eab::EabAdmin;
use crate::admin_token::AdminToken;

static PROMETHEUS: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process-wide Prometheus recorder once; later calls (several servers in one test
/// process) share it. Histograms get explicit buckets so they aggregate across instances.
pub fn prometheus() -> Option<PrometheusHandle> {
    PROMETHEUS
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets(&[
                    0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                    2.5, 5.0, 10.0,
                ])
                .ok()?;
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).ok()?;
            Some(handle)
        })
        .clone()
}

/// What the admin API needs.
#[derive(Clone)]
pub struct AdminContext {
    pub storage: Storage,
    pub limits: Arc<RateLimits>,
    pub clock: SharedClock,
    /// Limits, overrides and the listener certificate, as SIGHUP reloads them.
    pub reloader: crate::reload::Reloader,
    /// What `Authorization: Bearer` must carry on `/admin/*`.
    pub token: AdminToken,
}

#[derive(Clone)]
struct AdminState {
    ctx: AdminContext,
    metrics: Option<PrometheusHandle>,
}

impl axum::extract::FromRef<AdminState> for EabAdmin {
    fn from_ref(state: &AdminState) -> Self {
        EabAdmin {
            storage: state.ctx.storage.clone(),
            clock: state.ctx.clock.clone(),
        }
    }
}

/// `/metrics`, `/healthz` (the process is up), `/readyz` (the database answers), and `/admin/*`.
pub fn router(ctx: AdminContext) -> Router {
    let state = AdminState {
        ctx,
        metrics: prometheus(),
    };
    let admin = Router::new()
        .route("/admin/reload", post(reload))
        .route("/admin/ratelimit/{limit}/{id}", get(show_bucket))
        .route("/admin/ratelimit/{limit}/{id}/reset", post(reset_bucket))
        .route("/admin/pauses", get(list_pauses))
        .route("/admin/pause", post(pause))
        .route("/admin/unpause", post(unpause))
        .route("/admin/eab", get(admin_eab::list).post(admin_eab::create))
        .route("/admin/eab/{kid}/revoke", post(admin_eab::revoke))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            require_token,
        ));
    Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .merge(admin)
        .with_state(state)
}

/// 403 for anything a browser sent, 401 without the right bearer token.
async fn require_token(State(state): State<AdminState>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    if from_browser(headers) {
        return (
            StatusCode::FORBIDDEN,
            "the admin API refuses requests sent by browsers (Origin or Sec-Fetch-Site)\n",
        )
            .into_response();
    }
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    match presented {
        Some(token) if state.ctx.token.matches(token) => next.run(request).await,
        _ => {
            tracing::warn!(path = %request.uri().path(), "admin request without a valid token refused");
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer realm=\"certeasy-admin\"")],
                "the admin API needs Authorization: Bearer <token> (server.admin-token-file, default <data-dir>/admin.token)\n",
            )
                .into_response()
        }
    }
}

/// Browsers add `Origin` to cross-origin and most same-origin requests, and `Sec-Fetch-Site`
/// to every request; `none` means the user typed the URL, which is no attack.
fn from_browser(headers: &HeaderMap) -> bool {
    headers.contains_key(header::ORIGIN)
        || headers
            .get("sec-fetch-site")
            .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"none"))
}

async fn metrics_text(State(state): State<AdminState>) -> (StatusCode, String) {
    match &state.metrics {
        Some(handle) => {
            handle.run_upkeep();
            (StatusCode::OK, handle.render())
        }
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "metrics recorder not installed\n".to_owned(),
        ),
    }
}

async fn ready(State(state): State<AdminState>) -> (StatusCode, String) {
    match state.ctx.storage.ping().await {
        Ok(()) => (StatusCode::OK, "ready\n".to_owned()),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("database unavailable: {e}\n"),
        ),
    }
}

async fn reload(State(state): State<AdminState>) -> (StatusCode, String) {
    match state.ctx.reloader.reload().await {
        Ok(()) => {
            tracing::info!("rate limits, overrides and listener certificate reloaded");
            (
                StatusCode::OK,
                "rate limits, overrides and listener certificate reloaded\n".to_owned(),
            )
        }
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "reload refused");
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("reload refused:\n{e:#}\n"),
            )
        }
    }
}

fn parse_bucket(limit: &str, id: &str) -> Result<(LimitName, BucketId), (StatusCode, String)> {
    let name: LimitName = limit
        .parse()
        .map_err(|e| (StatusCode::BAD_REQUEST, format!("{e}\n")))?;
    let id = BucketId::parse(name, id).map_err(|e| (StatusCode::BAD_REQUEST, format!("{e}\n")))?;
    Ok((name, id))
}

async fn show_bucket(
    State(state): State<AdminState>,
    Path((limit, id)): Path<(String, String)>,
) -> (StatusCode, String) {
    let (name, id) = match parse_bucket(&limit, &id) {
        Ok(v) => v,
        Err(e) => return e,
    };
    let limiter = state.ctx.limits.limiter();
    match limiter.show(state.ctx.clock.now(), name, &id).await {
        Ok(Some(b)) => (
            StatusCode::OK,
            format!(
                "bucket:    {}\nlimit:     burst {}, {} per {}\nremaining: {}\nfull at:   {}\n",
                b.key,
                b.limit.burst(),
                b.limit.count(),
                acme_core::duration::ConfigDuration(b.limit.period()),
                b.remaining,
                b.reset_at
            ),
        ),
        Ok(None) => (
            StatusCode::OK,
            format!("{limit} does not apply to {id:?} (disabled or whitelisted)\n"),
        ),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
    }
}

async fn reset_bucket(
    State(state): State<AdminState>,
    Path((limit, id)): Path<(String, String)>,
) -> (StatusCode, String) {
    let (name, id) = match parse_bucket(&limit, &id) {
        Ok(v) => v,
        Err(e) => return e,
    };
    match state.ctx.limits.limiter().reset(name, &id).await {
        Ok(()) => {
            tracing::info!(limit = %limit, "rate-limit bucket reset by an operator");
            (
                StatusCode::OK,
                "bucket reset: it is full again\n".to_owned(),
            )
        }
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
    }
}

#[derive(Debug, Deserialize)]
struct PauseQuery {
    account: Option<i64>,
    #[serde(default)]
    all: bool,
    limit: Option<u32>,
}

async fn list_pauses(
    State(state): State<AdminState>,
    Query(q): Query<PauseQuery>,
) -> (StatusCode, String) {
    let rows = state
        .ctx
        .storage
        .list_pauses(q.account.map(AccountId), q.all, q.limit.unwrap_or(10_000))
        .await;
    match rows {
        Ok(rows) => {
            let mut out = String::from("account\tidentifier\tpaused_at\tunpaused_at\n");
            for r in rows {
                let unpaused = r
                    .unpaused_at
                    .map_or_else(|| "-".to_owned(), |t| t.to_string());
                out.push_str(&format!(
                    "{}\t{}\t{}\t{unpaused}\n",
                    r.account_id, r.identifier, r.paused_at
                ));
            }
            (StatusCode::OK, out)
        }
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
    }
}

/// Body of `/admin/pause` and `/admin/unpause`: identifiers as `dns:name`, `ip:addr`, or bare.
#[derive(Debug, Deserialize)]
struct PauseBody {
    account: i64,
    #[serde(default)]
    identifiers: Vec<String>,
}

/// Parses `dns:x`, `ip:x` or a bare name or address.
pub fn parse_identifier(text: &str) -> Result<Identifier, String> {
    let text = text.trim();
    let parsed = match text.split_once(':') {
        Some(("dns", v)) => Identifier::dns(v),
        Some(("ip", v)) => Identifier::ip(v),
        _ if text.parse::<std::net::IpAddr>().is_ok() => Identifier::ip(text),
        _ => Identifier::dns(text),
    };
    parsed.map_err(|e| e.to_string())
}

fn parse_all(raw: &[String]) -> Result<Vec<Identifier>, (StatusCode, String)> {
    raw.iter()
        .map(|r| parse_identifier(r))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| (StatusCode::BAD_REQUEST, format!("{e}\n")))
}

async fn pause(
    State(state): State<AdminState>,
    Json(body): Json<PauseBody>,
) -> (StatusCode, String) {
    let ids = match parse_all(&body.identifiers) {
        Ok(ids) => ids,
        Err(e) => return e,
    };
    let account = AccountId(body.account);
    match state.ctx.storage.account(account).await {
        Ok(Some(_)) => {}
        Ok(None) => {
            return (
                StatusCode::NOT_FOUND,
                format!("account {account} does not exist\n"),
            );
        }
        Err(e) => return (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
    }
    // An operator's pause is deliberate: no grace.
    match state
        .ctx
        .storage
        .pause_identifiers(account, &ids, time::Duration::ZERO, state.ctx.clock.now())
        .await
    {
        Ok(outcomes) => {
            let paused = outcomes
                .iter()
                .filter(|(_, o)| !matches!(o, storage::model::PauseOutcome::AlreadyPaused))
                .count();
            metrics::counter!("certeasy_pauses_total", "outcome" => "admin")
                .increment(paused as u64);
            tracing::info!(account_id = %account, paused, "pairs paused by an operator");
            (StatusCode::OK, format!("{paused}\n"))
        }
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
    }
}

async fn unpause(
    State(state): State<AdminState>,
    Json(body): Json<PauseBody>,
) -> (StatusCode, String) {
    let ids = match parse_all(&body.identifiers) {
        Ok(ids) => ids,
        Err(e) => return e,
    };
    let account = AccountId(body.account);
    let now = state.ctx.clock.now();
    let unpaused = if ids.is_empty() {
        state
            .ctx
            .storage
            .unpause_account(account, acme_api::unpause::MAX_PER_CLICK, now)
            .await
    } else {
        state
            .ctx
            .storage
            .unpause_identifiers(account, &ids, now)
            .await
    };
    match unpaused {
        Ok(done) => {
            workers::hooks::reset_consecutive_failures(state.ctx.limits.limiter(), account, &done)
                .await;
            metrics::counter!("certeasy_unpaused_pairs_total", "via" => "admin")
                .increment(done.len() as u64);
            tracing::info!(account_id = %account, unpaused = done.len(), "pairs unpaused by an operator");
            (StatusCode::OK, format!("{}\n", done.len()))
        }
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
    }
}
