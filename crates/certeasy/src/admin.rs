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

use std::io::ErrorKind;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

use acme_core::clock::SharedClock;
use acme_core::identifier::Identifier;
use acme_core::ids::AccountId;
use acme_core::ids::CertificateId;
use acme_core::status::AccountStatus;
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
use ra::Ra;
use ra::pausing::UnpausedBy;
use ra::renewals::RenewEarlyTarget;
use ratelimits::BucketId;
use ratelimits::LimitName;
use serde::Deserialize;
use storage::Backend;
use storage::Storage;
use storage::model::AccountFilter;
use storage::model::Page;

use crate::admin_eab;
use crate::admin_eab::EabAdmin;
use crate::admin_keys;
use crate::admin_keys::KeysAdmin;
use crate::admin_token::AdminToken;
use crate::admin_wire::AccountDoc;
use crate::admin_wire::AccountList;
use crate::admin_wire::BackupDoc;
use crate::admin_wire::BatchDoc;
use crate::admin_wire::BulkRevokeBody;
use crate::admin_wire::CertificateDoc;
use crate::admin_wire::CertificateList;
use crate::admin_wire::CertificateQuery;
use crate::admin_wire::CountDoc;
use crate::admin_wire::RevokeBody;
use crate::admin_wire::parse_identifier;
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

impl axum::extract::FromRef<AdminState> for EabAdmin {
    fn from_ref(state: &AdminState) -> Self {
        EabAdmin {
            ra: state.ctx.ra.clone(),
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
        .route("/admin/backup", post(backup))
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
    let limiter = state.ctx.ra.limits().limiter();
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
    match state.ctx.ra.limits().limiter().reset(name, &id).await {
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
    match state.ctx.ra.pause(account, &ids).await {
        Ok(paused) => (StatusCode::OK, format!("{paused}\n")),
        Err(ra::Error::Refused(r)) if matches!(*r, ra::Refusal::NotFound(_)) => (
            StatusCode::NOT_FOUND,
            format!("account {account} does not exist\n"),
        ),
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
    match state
        .ctx
        .ra
        .unpause(account, &ids, UnpausedBy::Operator)
        .await
    {
        Ok(done) => (StatusCode::OK, format!("{}\n", done.len())),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
    }
}

/// Body of `/admin/certificates/renew-early`: one serial (hex), one account or one name.
#[derive(Debug, Deserialize)]
struct RenewEarlyBody {
    serial: Option<String>,
    account: Option<i64>,
    name: Option<String>,
}

/// Marks certificates for early renewal: their ARI window moves into the past. Answers how many
/// were newly marked (unexpired, unrevoked, not marked before).
async fn renew_early(
    State(state): State<AdminState>,
    Json(body): Json<RenewEarlyBody>,
) -> Answer<CountDoc> {
    let which = match (body.serial, body.account, body.name) {
        (Some(serial), None, None) => match crate::admin_wire::parse_serial(&serial) {
            Ok(serial) => RenewEarlyTarget::Serial(serial),
            Err(e) => return Err(bad_request(e)),
        },
        (None, Some(account), None) => RenewEarlyTarget::Account(AccountId(account)),
        (None, None, Some(name)) => match parse_identifier(&name) {
            Ok(name) => RenewEarlyTarget::Name(name),
            Err(e) => return Err(bad_request(e)),
        },
        _ => {
            return Err(bad_request(
                "name exactly one of \"serial\", \"account\" and \"name\"".to_owned(),
            ));
        }
    };
    let count = state.ctx.ra.renew_early(&which).await.map_err(refused)?;
    Ok(Json(CountDoc { count }))
}

/// How many backups one second may name: `certeasy-<time>.db`, then `-2` up to this suffix.
const BACKUP_NAMES_PER_SECOND: u32 = 100;

/// Writes a consistent copy of the SQLite database into the backups directory while the server
/// serves. The server holds its database exclusively (storage's `unix-excl` VFS), so no other
/// process can copy it while it runs: online backups go through here. Refused (409) on
/// PostgreSQL, which `pg_dump` backs up.
async fn backup(State(state): State<AdminState>) -> Answer<BackupDoc> {
    // A task of its own: a client that gives up waiting does not leave a copy under way
    // unlogged and uncounted.
    let ctx = state.ctx;
    tokio::spawn(async move { logged_backup(&ctx).await })
        .await
        .unwrap_or_else(|e| {
            Err((
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the backup task failed: {e}\n"),
            ))
        })
}

/// [`write_backup`], logged and counted.
async fn logged_backup(ctx: &AdminContext) -> Answer<BackupDoc> {
    let started = Instant::now();
    let written = write_backup(ctx).await;
    let seconds = started.elapsed().as_secs_f64();
    match written {
        Ok((path, bytes)) => {
            metrics::counter!("certeasy_backups_total", "outcome" => "done").increment(1);
            let path = path.display().to_string();
            tracing::info!(path = %path, bytes, seconds, "database backed up");
            Ok(Json(BackupDoc {
                path,
                bytes,
                seconds,
            }))
        }
        Err((status, text)) => {
            metrics::counter!("certeasy_backups_total", "outcome" => "failed").increment(1);
            if status == StatusCode::CONFLICT {
                tracing::warn!(error = %text.trim_end(), "backup refused");
            } else {
                tracing::error!(error = %text.trim_end(), seconds, "backup failed");
            }
            Err((status, text))
        }
    }
}

/// The copy's path and size. Its name carries the UTC second it started; a name taken already
/// (two backups in one second) gets the next suffix, and the storage refuses to overwrite, so
/// two requests at once never write into one file.
async fn write_backup(ctx: &AdminContext) -> Result<(PathBuf, u64), (StatusCode, String)> {
    // Only SQLite is copied here: on PostgreSQL the storage's refusal is the answer, and no
    // directory is left behind.
    if ctx.storage.backend() == Backend::Sqlite {
        crate::data_dir::create_private(&ctx.backups)
            .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}\n")))?;
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
                return Err((StatusCode::CONFLICT, format!("{e}\n")));
            }
            Err(e) => return Err((StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n"))),
        }
    }
    Err((
        StatusCode::CONFLICT,
        format!(
            "{BACKUP_NAMES_PER_SECOND} backups named certeasy-{stamp}… exist in {} already; try again in a second\n",
            ctx.backups.display()
        ),
    ))
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

/// What a handler answers: a JSON document, or a status with a line of text.
type Answer<T> = Result<Json<T>, (StatusCode, String)>;

fn refused(e: ra::Error) -> (StatusCode, String) {
    match e {
        ra::Error::Refused(r) => match *r {
            ra::Refusal::NotFound(what) => {
                (StatusCode::NOT_FOUND, format!("{what} does not exist\n"))
            }
            other => (StatusCode::CONFLICT, format!("{other}\n")),
        },
        ra::Error::Storage(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
        ra::Error::Internal { context, message } => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{context}: {message}\n"),
        ),
    }
}

fn bad_request(e: String) -> (StatusCode, String) {
    (StatusCode::BAD_REQUEST, format!("{e}\n"))
}

/// `before` (the keyset cursor) and `limit` of a listing.
#[derive(Debug, Deserialize)]
struct PageQuery {
    before: Option<i64>,
    limit: Option<u32>,
}

#[derive(Debug, Deserialize)]
struct AccountQuery {
    status: Option<String>,
    contact: Option<String>,
}

/// The cursor of the next page: the last id when the page is full.
fn next_before(ids: &[i64], limit: u32) -> Option<i64> {
    let full = u32::try_from(ids.len()).is_ok_and(|n| n >= limit);
    if full { ids.last().copied() } else { None }
}

async fn list_accounts(
    State(state): State<AdminState>,
    Query(q): Query<AccountQuery>,
    Query(p): Query<PageQuery>,
) -> Answer<AccountList> {
    let status = q
        .status
        .as_deref()
        .map(|s| s.parse::<AccountStatus>().map_err(|e| e.to_string()))
        .transpose()
        .map_err(bad_request)?;
    let filter = AccountFilter {
        status,
        contact: q.contact.filter(|c| !c.is_empty()),
    };
    let limit = operator::list_limit(p.limit);
    let page = Page {
        before: p.before.map(AccountId),
        limit,
    };
    let accounts = state
        .ctx
        .ra
        .list_accounts(&filter, page)
        .await
        .map_err(refused)?;
    let ids: Vec<i64> = accounts.iter().map(|a| a.id.0).collect();
    Ok(Json(AccountList {
        accounts: accounts.iter().map(AccountDoc::new).collect(),
        next_before: next_before(&ids, limit),
    }))
}

async fn show_account(State(state): State<AdminState>, Path(id): Path<i64>) -> Answer<AccountDoc> {
    let detail = state
        .ctx
        .ra
        .show_account(AccountId(id))
        .await
        .map_err(refused)?;
    Ok(Json(AccountDoc::detailed(&detail)))
}

async fn deactivate_account(
    State(state): State<AdminState>,
    Path(id): Path<i64>,
) -> Answer<AccountDoc> {
    state
        .ctx
        .ra
        .operator_deactivates(AccountId(id))
        .await
        .map_err(refused)?;
    let detail = state
        .ctx
        .ra
        .show_account(AccountId(id))
        .await
        .map_err(refused)?;
    Ok(Json(AccountDoc::detailed(&detail)))
}

async fn list_certificates(
    State(state): State<AdminState>,
    Query(q): Query<CertificateQuery>,
    Query(p): Query<PageQuery>,
) -> Answer<CertificateList> {
    let filter = q.to_filter().map_err(bad_request)?;
    let limit = operator::list_limit(p.limit);
    let page = Page {
        before: p.before.map(CertificateId),
        limit,
    };
    let rows = state
        .ctx
        .ra
        .list_certificates(&filter, page)
        .await
        .map_err(refused)?;
    let ids: Vec<i64> = rows.iter().map(|c| c.id.0).collect();
    Ok(Json(CertificateList {
        certificates: rows.iter().map(CertificateDoc::summary).collect(),
        next_before: next_before(&ids, limit),
    }))
}

async fn count_revocable(
    State(state): State<AdminState>,
    Query(q): Query<CertificateQuery>,
) -> Answer<CountDoc> {
    let filter = q.to_filter().map_err(bad_request)?;
    let count = state
        .ctx
        .ra
        .count_revocable(&filter)
        .await
        .map_err(refused)?;
    Ok(Json(CountDoc { count }))
}

#[derive(Debug, Deserialize)]
struct ShowQuery {
    #[serde(default)]
    pem: bool,
}

async fn show_certificate(
    State(state): State<AdminState>,
    Path(serial): Path<String>,
    Query(q): Query<ShowQuery>,
) -> Answer<CertificateDoc> {
    let serial = crate::admin_wire::parse_serial(&serial).map_err(bad_request)?;
    let detail = state
        .ctx
        .ra
        .show_certificate(&serial)
        .await
        .map_err(refused)?;
    Ok(Json(CertificateDoc::detailed(&detail, q.pem)))
}

async fn revoke_one(
    State(state): State<AdminState>,
    Path(serial): Path<String>,
    Json(body): Json<RevokeBody>,
) -> Answer<CertificateDoc> {
    let serial = crate::admin_wire::parse_serial(&serial).map_err(bad_request)?;
    let reason = crate::admin_wire::parse_reason(&body.reason).map_err(bad_request)?;
    state
        .ctx
        .ra
        .revoke_by_serial(&serial, reason)
        .await
        .map_err(refused)?;
    let detail = state
        .ctx
        .ra
        .show_certificate(&serial)
        .await
        .map_err(refused)?;
    Ok(Json(CertificateDoc::detailed(&detail, false)))
}

async fn revoke_batch(
    State(state): State<AdminState>,
    Json(body): Json<BulkRevokeBody>,
) -> Answer<BatchDoc> {
    let filter = body.filter.to_filter().map_err(bad_request)?;
    let reason = crate::admin_wire::parse_reason(&body.reason).map_err(bad_request)?;
    let outcome = state
        .ctx
        .ra
        .revoke_batch(
            &filter,
            body.before.map(CertificateId),
            operator::revoke_batch_size(body.batch),
            reason,
        )
        .await
        .map_err(refused)?;
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
