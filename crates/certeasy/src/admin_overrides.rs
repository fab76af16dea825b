//! `/admin/overrides…`: the rate-limit overrides operators manage without a redeploy
//! (`ra::overrides`), for `certeasy admin overrides add|list|show|remove`, answering
//! [`OverrideDoc`]s.
//!
//! `GET /admin/overrides` lists the database's and the overrides file's together;
//! `GET /admin/overrides/show?limit=&id=` one bucket's; `POST /admin/overrides` adds one to the
//! database ([`AddOverrideBody`]); `POST /admin/overrides/remove` removes one of the database
//! ([`OverrideKey`]): the file's are changed by editing the file. Ids go in queries and bodies,
//! not paths, because a range (`10.0.0.0/24`) holds a slash.

use axum::Extension;
use axum::Json;
use axum::extract::Query;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::extract::rejection::QueryRejection;
use axum::http::StatusCode;
use ra::Ra;
use ra::overrides::Expiry;
use ra::overrides::ListedOverride;
use ra::overrides::OverrideRequest;
use serde::Deserialize;
use serde::Serialize;
use time::OffsetDateTime;

use crate::admin_caller::AdminCaller;
use crate::admin_error::AdminError;

/// What the override routes need of the admin state: the policy layer.
#[derive(Clone)]
pub struct OverridesAdmin {
    pub ra: Ra,
}

/// One limit's numbers: `count` tokens per `period`, holding at most `burst`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NumbersDoc {
    pub burst: u64,
    pub count: u64,
    /// The period as the configuration writes it (`1h`, `30s`).
    pub period: String,
    pub period_secs: f64,
}

impl NumbersDoc {
    fn of(limit: &ratelimits::Limit) -> Self {
        Self {
            burst: limit.burst(),
            count: limit.count(),
            period: acme_core::duration::ConfigDuration(limit.period()).to_string(),
            period_secs: limit.period().as_secs_f64(),
        }
    }
}

/// An override of one bucket, as `overrides list --json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverrideDoc {
    /// `database` (`overrides add`) or `file` (`rate-limit-overrides`).
    pub source: String,
    /// `active`, `expired` (a database override past its expiry) or `shadowed` (a file
    /// override of a bucket a database override in force names).
    pub status: String,
    pub limit: String,
    /// The bucket id, canonical: an address, a CIDR range, or an account id.
    pub id: String,
    /// The numbers the override sets; those it leaves out are the default's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<String>,
    /// What it puts in force under the limits of now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effective: Option<NumbersDoc>,
    /// The limit's default, to compare (an override may raise or lower it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<NumbersDoc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub expires_at: Option<OffsetDateTime>,
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub created_at: Option<OffsetDateTime>,
    /// Who added it: the operator's name as given and the admin token's identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    /// Its line in the overrides file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_line: Option<u64>,
}

impl OverrideDoc {
    fn new(o: &ListedOverride) -> Self {
        let stored = o.stored.as_ref();
        Self {
            source: o.source.as_str().to_owned(),
            status: o.status.as_str().to_owned(),
            limit: o.limit.as_str().to_owned(),
            id: o.id.clone(),
            burst: o.burst,
            count: o.count,
            period: o
                .period
                .map(|p| acme_core::duration::ConfigDuration(p).to_string()),
            effective: o.effective.as_ref().map(NumbersDoc::of),
            default: o.default.as_ref().map(NumbersDoc::of),
            comment: stored.map(|s| s.comment.clone()),
            expires_at: stored.and_then(|s| s.expires_at),
            created_at: stored.map(|s| s.created_at),
            created_by: stored.map(|s| s.created_by.clone()),
            file_line: o.file_line,
        }
    }
}

/// Body of `POST /admin/overrides`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddOverrideBody {
    pub limit: String,
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// A duration (`1h`, `30s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<String>,
    /// Required, not blank.
    #[serde(default)]
    pub comment: String,
    /// A time (RFC 3339) or a duration from now on the server's clock (`30m`, `7d`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
}

/// The bucket of `GET /admin/overrides/show` (query) and `POST /admin/overrides/remove` (body).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverrideKey {
    pub limit: String,
    pub id: String,
}

type Answer<T> = Result<(StatusCode, Json<T>), AdminError>;

/// `POST /admin/overrides`: 201 with the override, 400 for what the parser of the overrides
/// file refuses (or a missing comment), 409 when the database overrides the bucket already.
pub async fn add(
    State(ctx): State<OverridesAdmin>,
    Extension(AdminCaller(who)): Extension<AdminCaller>,
    body: Result<Json<AddOverrideBody>, JsonRejection>,
) -> Answer<OverrideDoc> {
    let Json(body) = body?;
    let period = body
        .period
        .as_deref()
        .map(|p| {
            p.trim()
                .parse::<acme_core::duration::ConfigDuration>()
                .map(|d| d.std())
                .map_err(|e| AdminError::BadRequest(format!("period {p:?}: {e}")))
        })
        .transpose()?;
    let expires = body
        .expires
        .as_deref()
        .map(Expiry::parse)
        .transpose()
        .map_err(AdminError::BadRequest)?;
    let request = OverrideRequest {
        limit: body.limit,
        id: body.id,
        burst: body.burst,
        count: body.count,
        period,
        comment: body.comment,
        expires,
    };
    let checked = ctx
        .ra
        .check_override(&request)
        .map_err(AdminError::BadRequest)?;
    let added = ctx.ra.add_override(checked, &who).await?;
    Ok((StatusCode::CREATED, Json(OverrideDoc::new(&added))))
}

/// `GET /admin/overrides`: the database's, oldest first, then the file's.
pub async fn list(State(ctx): State<OverridesAdmin>) -> Answer<Vec<OverrideDoc>> {
    let listed = ctx.ra.list_overrides().await?;
    Ok((
        StatusCode::OK,
        Json(listed.iter().map(OverrideDoc::new).collect()),
    ))
}

/// `GET /admin/overrides/show?limit=&id=`: the bucket's overrides (the database's, then the
/// file's); 404 when neither has one.
pub async fn show(
    State(ctx): State<OverridesAdmin>,
    query: Result<Query<OverrideKey>, QueryRejection>,
) -> Answer<Vec<OverrideDoc>> {
    let Query(key) = query?;
    ra::overrides::parse_bucket(&key.limit, &key.id).map_err(AdminError::BadRequest)?;
    let found = ctx.ra.show_override(&key.limit, &key.id).await?;
    Ok((
        StatusCode::OK,
        Json(found.iter().map(OverrideDoc::new).collect()),
    ))
}

/// `POST /admin/overrides/remove`: removes the database's override of the bucket; 409 naming
/// the file when only the file has one, 404 when none has.
pub async fn remove(
    State(ctx): State<OverridesAdmin>,
    Extension(AdminCaller(who)): Extension<AdminCaller>,
    body: Result<Json<OverrideKey>, JsonRejection>,
) -> Answer<OverrideDoc> {
    let Json(key) = body?;
    ra::overrides::parse_bucket(&key.limit, &key.id).map_err(AdminError::BadRequest)?;
    let removed = ctx.ra.remove_override(&key.limit, &key.id, &who).await?;
    Ok((StatusCode::OK, Json(OverrideDoc::new(&removed))))
}
