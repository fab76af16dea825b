//! The admin listener: metrics, health, and admin functions (reload, rate-limit buckets, pauses,
//! accounts and certificates, backups). It is a
//! separate socket, bound to loopback by default, so nothing here is reachable from the ACME
//! listener. `certeasy admin ...` is a client of this API.
//!
//! `/admin/*` changes state, so it needs the bearer token of [`crate::admin_token`]: loopback is
//! not a boundary (every local user and process shares it). Requests a browser sends (any
//! `Origin`, or `Sec-Fetch-Site` other than `none`) are refused even with the token, so a web
//! page cannot drive the API through a browser that holds it. `/metrics`, `/healthz` and
//! `/readyz` stay open: they change nothing and scrapers and probes carry no secrets.
//!
//! Answers: the records (accounts, certificates, EAB keys, blocked keys, backups) are the JSON
//! documents of [`crate::admin_wire`]; the operational routes (reload, rate-limit buckets,
//! pauses) answer lines of text for people. Every refusal, on every route, the token check
//! included, is one JSON shape, `{"type": "not-found", "detail": "…"}`, made in one place
//! ([`crate::admin_error::AdminError::answer`]).

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

use acme_core::clock::SharedClock;
use acme_core::identifier::Identifier;
use acme_core::ids::AccountId;
use acme_core::ids::CertificateId;
use acme_core::status::AccountStatus;
use axum::Extension;
use axum::Json;
use axum::Router;
use axum::extract::ConnectInfo;
use axum::extract::Path;
use axum::extract::Query;
use axum::extract::Request;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::extract::rejection::PathRejection;
use axum::extract::rejection::QueryRejection;
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
use ra::Ra;
use ra::audit::AuditKind;
use ra::audit::Requester;
use ra::renewals::RenewEarlyTarget;
use ratelimits::BucketId;
use ratelimits::LimitName;
use storage::Backend;
use storage::Storage;
use storage::model::AccountFilter;
use storage::model::Page;

use crate::admin_audit;
use crate::admin_audit::AuditAdmin;
use crate::admin_caller::AdminCaller;
use crate::admin_eab;
use crate::admin_eab::EabAdmin;
use crate::admin_error::AdminError;
use crate::admin_keys;
use crate::admin_keys::KeysAdmin;
use crate::admin_overrides;
use crate::admin_overrides::OverridesAdmin;
use crate::admin_token::AdminToken;
use crate::admin_wire::AccountDoc;
use crate::admin_wire::AccountList;
use crate::admin_wire::AccountQuery;
use crate::admin_wire::BackupDoc;
use crate::admin_wire::BatchDoc;
use crate::admin_wire::BulkRevokeBody;
use crate::admin_wire::CertificateDoc;
use crate::admin_wire::CertificateList;
use crate::admin_wire::CertificateQuery;
use crate::admin_wire::CountDoc;
use crate::admin_wire::PageQuery;
use crate::admin_wire::PauseBody;
use crate::admin_wire::PauseQuery;
use crate::admin_wire::RenewEarlyBody;
use crate::admin_wire::RevokeBody;
use crate::admin_wire::ShowQuery;
use crate::admin_wire::parse_identifier;
use crate::admin_wire::parse_reason;
use crate::admin_wire::parse_serial;
use ra::operator;

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
    /// The policy layer: admin actions decide through the same functions as the ACME endpoint.
    pub ra: Ra,
    pub clock: SharedClock,
    /// Limits, overrides and the listener certificate, as SIGHUP reloads them.
    pub reloader: crate::reload::Reloader,
    /// What `Authorization: Bearer` must carry on `/admin/*`.
    pub token: AdminToken,
    /// Where `POST /admin/backup` writes its copies (`<data-dir>/backups`), created 0700 by the
    /// first backup, so a server that is never backed up, or runs on PostgreSQL, has none.
    pub backups: PathBuf,
    /// The issuers and the active one (`certeasy admin ca`).
    pub issuers: crate::admin_issuers::IssuersAdmin,
}

#[derive(Clone)]
struct AdminState {
    ctx: AdminContext,
    metrics: Option<PrometheusHandle>,
}

impl axum::extract::FromRef<AdminState> for KeysAdmin {
    fn from_ref(state: &AdminState) -> Self {
        KeysAdmin {
            ra: state.ctx.ra.clone(),
        }
    }
}

impl axum::extract::FromRef<AdminState> for OverridesAdmin {
    fn from_ref(state: &AdminState) -> Self {
        OverridesAdmin {
            ra: state.ctx.ra.clone(),
        }
    }
}

impl axum::extract::FromRef<AdminState> for AuditAdmin {
    fn from_ref(state: &AdminState) -> Self {
        AuditAdmin {
            storage: state.ctx.storage.clone(),
            clock: std::sync::Arc::clone(&state.ctx.clock),
        }
    }
}

impl axum::extract::FromRef<AdminState> for crate::admin_issuers::IssuersAdmin {
    fn from_ref(state: &AdminState) -> Self {
        state.ctx.issuers.clone()
    }
}

impl axum::extract::FromRef<AdminState> for EabAdmin {
    fn from_ref(state: &AdminState) -> Self {
        EabAdmin {
            ra: state.ctx.ra.clone(),
        }
    }
}

/// `/metrics`, `/healthz` (the process is up), `/readyz` (the database answers and the active
/// issuer is loaded here), and `/admin/*`.
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
        .route("/admin/certificates/renew-early", post(renew_early))
        .route("/admin/accounts", get(list_accounts))
        .route("/admin/accounts/{id}", get(show_account))
        .route("/admin/accounts/{id}/deactivate", post(deactivate_account))
        .route("/admin/certificates", get(list_certificates))
        .route("/admin/certificates/count", get(count_revocable))
        .route("/admin/certificates/revoke", post(revoke_batch))
        .route("/admin/certificates/{serial}", get(show_certificate))
        .route("/admin/certificates/{serial}/revoke", post(revoke_one))
        .route("/admin/eab", get(admin_eab::list).post(admin_eab::create))
        .route("/admin/eab/{kid}/revoke", post(admin_eab::revoke))
        .route("/admin/keys", get(admin_keys::list))
        .route("/admin/keys/block", post(admin_keys::block))
        .route("/admin/keys/unblock", post(admin_keys::unblock))
        .route(
            "/admin/overrides",
            get(admin_overrides::list).post(admin_overrides::add),
        )
        .route("/admin/overrides/show", get(admin_overrides::show))
        .route("/admin/overrides/remove", post(admin_overrides::remove))
        .route("/admin/backup", post(backup))
        .route("/admin/ca/issuers", get(crate::admin_issuers::list))
        .route(
            "/admin/ca/issuers/{name}/activate",
            post(crate::admin_issuers::activate),
        )
        .route("/admin/audit", get(admin_audit::list))
        .route("/admin/audit/head", get(admin_audit::head))
        .route("/admin/audit/verify", get(admin_audit::verify))
        .route("/admin/audit/evidence/{serial}", get(admin_audit::evidence))
        .route("/admin/audit/{seq}", get(admin_audit::show))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            require_token,
        ));
    Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .merge(admin)
        .fallback(|| async { AdminError::NotFound("no such route".to_owned()) })
        .method_not_allowed_fallback(|| async { AdminError::MethodNotAllowed })
        .with_state(state)
}

/// The header in which `certeasy admin` names its operator (`--operator`, or `$SUDO_USER`,
/// `$USER`). Recorded in the audit log as given: a claim, since the token is what is
/// authenticated, and every holder of the token can write any name here.
pub const OPERATOR_HEADER: &str = "x-certeasy-operator";

/// The longest operator name recorded; a longer one is cut.
const MAX_OPERATOR_LEN: usize = 64;

/// The operator a request names in [`OPERATOR_HEADER`]: printable characters only (control
/// characters are dropped so a name cannot forge lines of a log), at most
/// [`MAX_OPERATOR_LEN`] of them; none when absent or empty.
fn operator_of(headers: &HeaderMap) -> Option<String> {
    let raw = headers.get(OPERATOR_HEADER)?;
    let text = String::from_utf8_lossy(raw.as_bytes());
    let name: String = text
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_OPERATOR_LEN)
        .collect();
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

/// 403 for anything a browser sent, 401 without the right bearer token.
async fn require_token(
    State(state): State<AdminState>,
    mut request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    if from_browser(headers) {
        return AdminError::FromBrowser.into_response();
    }
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    match presented {
        Some(token) if state.ctx.token.matches(token) => {
            let peer = request
                .extensions()
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0.ip().to_canonical());
            let caller = Requester::admin(state.ctx.token.identity(), operator_of(headers), peer);
            request.extensions_mut().insert(AdminCaller(caller));
            next.run(request).await
        }
        _ => {
            tracing::warn!(path = %request.uri().path(), "admin request without a valid token refused");
            AdminError::Unauthorized.into_response()
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
            let ctx = &state.ctx;
            crate::admin_metrics::collect(crate::admin_metrics::Sources {
                storage: &ctx.storage,
                clock: &ctx.clock,
                reloader: &ctx.reloader,
                issuers: &ctx.issuers,
            })
            .await;
            handle.run_upkeep();
            (StatusCode::OK, handle.render())
        }
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "metrics recorder not installed\n".to_owned(),
        ),
    }
}

/// Ready when the database answers and this instance can sign with the active issuer: one
/// whose `ca.issuers` lacks it signs nothing (`ra::issuers::ActiveIssuer::missing_from`), so a
/// load balancer must send its clients elsewhere until a reload adds it.
async fn ready(State(state): State<AdminState>) -> (StatusCode, String) {
    if let Err(e) = state.ctx.storage.ping().await {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("database unavailable: {e}\n"),
        );
    }
    let issuers = &state.ctx.issuers;
    match issuers.active.missing_from(&issuers.ca.current()).await {
        None => (StatusCode::OK, "ready\n".to_owned()),
        Some(name) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the active issuer {name} is not loaded on this instance: add it to ca.issuers and reload\n"
            ),
        ),
    }
}

/// A route's answer: a document (or text), or the refusal.
type Answer<T> = Result<T, AdminError>;

async fn reload(
    State(state): State<AdminState>,
    Extension(AdminCaller(who)): Extension<AdminCaller>,
) -> Answer<String> {
    match state.ctx.reloader.reload_by(&who).await {
        Ok(()) => {
            tracing::info!("rate limits, overrides, listener certificate and ca.issuers reloaded");
            Ok("rate limits, overrides, listener certificate and ca.issuers reloaded\n".to_owned())
        }
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "reload refused");
            Err(AdminError::ReloadRefused(format!("reload refused:\n{e:#}")))
        }
    }
}

fn parse_bucket(limit: &str, id: &str) -> Answer<(LimitName, BucketId)> {
    let name: LimitName = limit
        .parse()
        .map_err(|e| AdminError::BadRequest(format!("{e}")))?;
    let id = BucketId::parse(name, id).map_err(|e| AdminError::BadRequest(format!("{e}")))?;
    Ok((name, id))
}

async fn show_bucket(
    State(state): State<AdminState>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Answer<String> {
    let Path((limit, id)) = path?;
    let (name, id) = parse_bucket(&limit, &id)?;
    let limiter = state.ctx.ra.limits().limiter();
    match limiter.show(state.ctx.clock.now(), name, &id).await {
        Ok(Some(b)) => Ok(format!(
            "bucket:    {}\nlimit:     burst {}, {} per {}\nremaining: {}\nfull at:   {}\n",
            b.key,
            b.limit.burst(),
            b.limit.count(),
            acme_core::duration::ConfigDuration(b.limit.period()),
            b.remaining,
            b.reset_at
        )),
        Ok(None) => Ok(format!(
            "{limit} does not apply to {id:?} (disabled or whitelisted)\n"
        )),
        Err(e) => Err(AdminError::Unavailable(e.to_string())),
    }
}

async fn reset_bucket(
    State(state): State<AdminState>,
    Extension(AdminCaller(who)): Extension<AdminCaller>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Answer<String> {
    let Path((limit, id)) = path?;
    let (name, bucket) = parse_bucket(&limit, &id)?;
    match state.ctx.ra.limits().limiter().reset(name, &bucket).await {
        Ok(()) => {
            tracing::info!(limit = %limit, "rate-limit bucket reset by an operator");
            // The bucket lives in the limiter's store, not the database: the record follows the
            // reset in a transaction of its own, and a reset whose record fails is reported.
            let mut event = who.event(
                AuditKind::AdminAction,
                format!("rate-limit bucket {limit} {id} reset (full again) by an operator"),
            );
            event.detail = serde_json::json!({
                "action": "ratelimit_reset",
                "limit": limit,
                "bucket": bucket.to_string(),
            });
            record(&state.ctx, &event).await?;
            Ok("bucket reset: it is full again\n".to_owned())
        }
        Err(e) => Err(AdminError::Unavailable(e.to_string())),
    }
}

/// Records an admin action that changed nothing in the database (or nothing the database's
/// transaction could include), in a transaction of its own.
async fn record(ctx: &AdminContext, event: &ra::audit::AuditEvent) -> Answer<()> {
    ctx.storage
        .append_audit(event, ctx.clock.now())
        .await
        .map(|_| ())
        .map_err(|e| AdminError::Unavailable(format!("the audit record was not written: {e}")))
}

async fn list_pauses(
    State(state): State<AdminState>,
    query: Result<Query<PauseQuery>, QueryRejection>,
) -> Answer<String> {
    let Query(q) = query?;
    let rows = state
        .ctx
        .storage
        .list_pauses(q.account.map(AccountId), q.all, q.limit.unwrap_or(10_000))
        .await
        .map_err(|e| AdminError::Unavailable(e.to_string()))?;
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
    Ok(out)
}

fn parse_all(raw: &[String]) -> Answer<Vec<Identifier>> {
    raw.iter()
        .map(|r| parse_identifier(r))
        .collect::<Result<Vec<_>, _>>()
        .map_err(AdminError::BadRequest)
}

async fn pause(
    State(state): State<AdminState>,
    Extension(AdminCaller(who)): Extension<AdminCaller>,
    body: Result<Json<PauseBody>, JsonRejection>,
) -> Answer<String> {
    let Json(body) = body?;
    let ids = parse_all(&body.identifiers)?;
    let account = AccountId(body.account);
    match state.ctx.ra.pause(account, &ids, &who).await {
        Ok(paused) => Ok(format!("{paused}\n")),
        Err(ra::Error::Refused(r)) if matches!(*r, ra::Refusal::NotFound(_)) => Err(
            AdminError::NotFound(format!("account {account} does not exist")),
        ),
        Err(e) => Err(AdminError::Unavailable(e.to_string())),
    }
}

async fn unpause(
    State(state): State<AdminState>,
    Extension(AdminCaller(who)): Extension<AdminCaller>,
    body: Result<Json<PauseBody>, JsonRejection>,
) -> Answer<String> {
    let Json(body) = body?;
    let ids = parse_all(&body.identifiers)?;
    let account = AccountId(body.account);
    match state.ctx.ra.unpause(account, &ids, &who).await {
        Ok(done) => Ok(format!("{}\n", done.len())),
        Err(e) => Err(AdminError::Unavailable(e.to_string())),
    }
}

/// Marks certificates for early renewal: their ARI window moves into the past. Answers how many
/// were newly marked (unexpired, unrevoked, not marked before).
async fn renew_early(
    State(state): State<AdminState>,
    Extension(AdminCaller(who)): Extension<AdminCaller>,
    body: Result<Json<RenewEarlyBody>, JsonRejection>,
) -> Answer<Json<CountDoc>> {
    let Json(body) = body?;
    let which = match (body.serial, body.account, body.name) {
        (Some(serial), None, None) => {
            RenewEarlyTarget::Serial(parse_serial(&serial).map_err(AdminError::BadRequest)?)
        }
        (None, Some(account), None) => RenewEarlyTarget::Account(AccountId(account)),
        (None, None, Some(name)) => {
            RenewEarlyTarget::Name(parse_identifier(&name).map_err(AdminError::BadRequest)?)
        }
        _ => {
            return Err(AdminError::BadRequest(
                "name exactly one of \"serial\", \"account\" and \"name\"".to_owned(),
            ));
        }
    };
    let count = state.ctx.ra.renew_early(&which, &who).await?;
    Ok(Json(CountDoc { count }))
}

/// How many backups one second may name: `certeasy-<time>.db`, then `-2` up to this suffix.
const BACKUP_NAMES_PER_SECOND: u32 = 100;

/// Writes a consistent copy of the SQLite database into the backups directory while the server
/// serves. The server holds its database exclusively (storage's `unix-excl` VFS), so no other
/// process can copy it while it runs: online backups go through here. Refused (409) on
/// PostgreSQL, which `pg_dump` backs up.
async fn backup(
    State(state): State<AdminState>,
    Extension(AdminCaller(who)): Extension<AdminCaller>,
) -> Answer<Json<BackupDoc>> {
    // A task of its own: a client that gives up waiting does not leave a copy under way
    // unlogged and uncounted.
    let ctx = state.ctx;
    tokio::spawn(async move { logged_backup(&ctx, &who).await })
        .await
        .unwrap_or_else(|e| Err(AdminError::Internal(format!("the backup task failed: {e}"))))
}

/// [`write_backup`], logged, counted, and recorded: a copy of the database leaves the server's
/// custody, which an auditor asks about.
async fn logged_backup(ctx: &AdminContext, who: &Requester) -> Answer<Json<BackupDoc>> {
    let started = Instant::now();
    let written = write_backup(ctx).await;
    let seconds = started.elapsed().as_secs_f64();
    match written {
        Ok((path, bytes)) => {
            metrics::counter!("certeasy_backups_total", "outcome" => "done").increment(1);
            let path = path.display().to_string();
            tracing::info!(path = %path, bytes, seconds, "database backed up");
            let mut event = who.event(
                AuditKind::AdminAction,
                format!("database backed up to {path} by an operator"),
            );
            event.detail = serde_json::json!({ "action": "backup", "path": path, "bytes": bytes });
            record(ctx, &event).await?;
            Ok(Json(BackupDoc {
                path,
                bytes,
                seconds,
            }))
        }
        Err(e) => {
            metrics::counter!("certeasy_backups_total", "outcome" => "failed").increment(1);
            match &e {
                AdminError::Conflict(text) => tracing::warn!(error = %text, "backup refused"),
                other => tracing::error!(error = ?other, seconds, "backup failed"),
            }
            Err(e)
        }
    }
}

/// The copy's path and size. Its name carries the UTC second it started; a name taken already
/// (two backups in one second) gets the next suffix, and the storage refuses to overwrite, so
/// two requests at once never write into one file.
async fn write_backup(ctx: &AdminContext) -> Answer<(PathBuf, u64)> {
    // Only SQLite is copied here: on PostgreSQL the storage's refusal is the answer, and no
    // directory is left behind.
    if ctx.storage.backend() == Backend::Sqlite {
        crate::data_dir::create_private(&ctx.backups)
            .map_err(|e| AdminError::Internal(format!("{e:#}")))?;
    }
    let stamp = backup_stamp(ctx.clock.now());
    for n in 1..=BACKUP_NAMES_PER_SECOND {
        let name = if n == 1 {
            format!("certeasy-{stamp}.db")
        } else {
            format!("certeasy-{stamp}-{n}.db")
        };
        let path = ctx.backups.join(name);
        match ctx.storage.backup_into(&path).await {
            Ok(bytes) => return Ok((path, bytes)),
            Err(storage::error::Error::File { source, .. })
                if source.kind() == ErrorKind::AlreadyExists => {}
            Err(e @ storage::error::Error::Unsupported(_)) => {
                return Err(AdminError::Conflict(e.to_string()));
            }
            Err(e) => return Err(AdminError::Unavailable(e.to_string())),
        }
    }
    Err(AdminError::Conflict(format!(
        "{BACKUP_NAMES_PER_SECOND} backups named certeasy-{stamp}… exist in {} already; try again in a second",
        ctx.backups.display()
    )))
}

/// `YYYYMMDDTHHMMSSZ` in UTC: sorts by time, and holds no character a shell or another file
/// system would quote.
fn backup_stamp(now: time::OffsetDateTime) -> String {
    let format = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    let utc = now.to_offset(time::UtcOffset::UTC);
    // Cannot fail: an `OffsetDateTime` has every component the format names. The Unix time
    // would still name the second.
    utc.format(&format)
        .unwrap_or_else(|_| format!("{}Z", utc.unix_timestamp()))
}

// ---- accounts and certificates: parse, call `ra::operator`, render `admin_wire` ----

/// The cursor of the next page: the last id when the page is full.
fn next_before(ids: &[i64], limit: u32) -> Option<i64> {
    let full = u32::try_from(ids.len()).is_ok_and(|n| n >= limit);
    if full { ids.last().copied() } else { None }
}

async fn list_accounts(
    State(state): State<AdminState>,
    query: Result<Query<AccountQuery>, QueryRejection>,
    page: Result<Query<PageQuery>, QueryRejection>,
) -> Answer<Json<AccountList>> {
    let (Query(q), Query(p)) = (query?, page?);
    let status = q
        .status
        .as_deref()
        .map(|s| s.parse::<AccountStatus>().map_err(|e| e.to_string()))
        .transpose()
        .map_err(AdminError::BadRequest)?;
    let filter = AccountFilter {
        status,
        contact: q.contact.filter(|c| !c.is_empty()),
    };
    let limit = operator::list_limit(p.limit);
    let page = Page {
        before: p.before.map(AccountId),
        limit,
    };
    let accounts = state.ctx.ra.list_accounts(&filter, page).await?;
    let ids: Vec<i64> = accounts.iter().map(|a| a.id.0).collect();
    Ok(Json(AccountList {
        accounts: accounts.iter().map(AccountDoc::new).collect(),
        next_before: next_before(&ids, limit),
    }))
}

async fn show_account(
    State(state): State<AdminState>,
    id: Result<Path<i64>, PathRejection>,
) -> Answer<Json<AccountDoc>> {
    let Path(id) = id?;
    let detail = state.ctx.ra.show_account(AccountId(id)).await?;
    Ok(Json(AccountDoc::detailed(&detail)))
}

async fn deactivate_account(
    State(state): State<AdminState>,
    Extension(AdminCaller(who)): Extension<AdminCaller>,
    id: Result<Path<i64>, PathRejection>,
) -> Answer<Json<AccountDoc>> {
    let Path(id) = id?;
    state
        .ctx
        .ra
        .operator_deactivates(AccountId(id), &who)
        .await?;
    let detail = state.ctx.ra.show_account(AccountId(id)).await?;
    Ok(Json(AccountDoc::detailed(&detail)))
}

async fn list_certificates(
    State(state): State<AdminState>,
    query: Result<Query<CertificateQuery>, QueryRejection>,
    page: Result<Query<PageQuery>, QueryRejection>,
) -> Answer<Json<CertificateList>> {
    let (Query(q), Query(p)) = (query?, page?);
    let filter = q
        .to_filter(state.ctx.clock.now())
        .map_err(AdminError::BadRequest)?;
    let limit = operator::list_limit(p.limit);
    let page = Page {
        before: p.before.map(CertificateId),
        limit,
    };
    let rows = state.ctx.ra.list_certificates(&filter, page).await?;
    let ids: Vec<i64> = rows.iter().map(|c| c.id.0).collect();
    Ok(Json(CertificateList {
        certificates: rows.iter().map(CertificateDoc::summary).collect(),
        next_before: next_before(&ids, limit),
    }))
}

async fn count_revocable(
    State(state): State<AdminState>,
    query: Result<Query<CertificateQuery>, QueryRejection>,
) -> Answer<Json<CountDoc>> {
    let Query(q) = query?;
    let filter = q
        .to_filter(state.ctx.clock.now())
        .map_err(AdminError::BadRequest)?;
    let count = state.ctx.ra.count_revocable(&filter).await?;
    Ok(Json(CountDoc { count }))
}

async fn show_certificate(
    State(state): State<AdminState>,
    serial: Result<Path<String>, PathRejection>,
    query: Result<Query<ShowQuery>, QueryRejection>,
) -> Answer<Json<CertificateDoc>> {
    let (Path(serial), Query(q)) = (serial?, query?);
    let serial = parse_serial(&serial).map_err(AdminError::BadRequest)?;
    let detail = state.ctx.ra.show_certificate(&serial).await?;
    Ok(Json(CertificateDoc::detailed(&detail, q.pem)))
}

async fn revoke_one(
    State(state): State<AdminState>,
    Extension(AdminCaller(who)): Extension<AdminCaller>,
    serial: Result<Path<String>, PathRejection>,
    body: Result<Json<RevokeBody>, JsonRejection>,
) -> Answer<Json<CertificateDoc>> {
    let (Path(serial), Json(body)) = (serial?, body?);
    let serial = parse_serial(&serial).map_err(AdminError::BadRequest)?;
    let reason = parse_reason(&body.reason).map_err(AdminError::BadRequest)?;
    state.ctx.ra.revoke_by_serial(&serial, reason, &who).await?;
    let detail = state.ctx.ra.show_certificate(&serial).await?;
    Ok(Json(CertificateDoc::detailed(&detail, false)))
}

async fn revoke_batch(
    State(state): State<AdminState>,
    Extension(AdminCaller(who)): Extension<AdminCaller>,
    body: Result<Json<BulkRevokeBody>, JsonRejection>,
) -> Answer<Json<BatchDoc>> {
    let Json(body) = body?;
    let filter = body
        .filter
        .to_filter(state.ctx.clock.now())
        .map_err(AdminError::BadRequest)?;
    let reason = parse_reason(&body.reason).map_err(AdminError::BadRequest)?;
    let outcome = state
        .ctx
        .ra
        .revoke_batch(
            &filter,
            body.before.map(CertificateId),
            operator::revoke_batch_size(body.batch),
            reason,
            &who,
        )
        .await?;
    Ok(Json(BatchDoc {
        revoked: outcome
            .revoked
            .iter()
            .map(acme_core::ids::Serial::to_hex)
            .collect(),
        next_before: outcome.next.map(|id| id.0),
    }))
}

#[cfg(test)]
mod tests {
    use super::backup_stamp;

    #[test]
    fn backup_names_carry_the_utc_second() {
        let t = time::macros::datetime!(2026-03-04 05:06:07.89 +02:00);
        assert_eq!(backup_stamp(t), "20260304T030607Z");
    }
}
