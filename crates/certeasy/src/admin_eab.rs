//! `/admin/eab`: external-account-binding keys (RFC 8555 §7.3.4) for `certeasy admin eab`.
//!
//! The HMAC key is shown once, in the answer to its creation; listing never shows it, so a key
//! that is lost is revoked and replaced rather than read back.

use acme_core::duration::ConfigDuration;
use acme_core::eab_policy::EabPolicy;
use acme_core::ids::EabKid;
use axum::Json;
use axum::extract::Path;
use axum::extract::Query;
use axum::extract::State;
use axum::http::StatusCode;
use ipnet::IpNet;
use ra::Ra;
use ra::eab::KeyRequest;
use serde::Deserialize;
use serde_json::Value;
use serde_json::json;
use storage::model::EabKey;
use time::format_description::well_known::Rfc3339;

/// What the EAB routes need of the admin state: the policy layer, which makes, lists and
/// revokes keys.
#[derive(Clone)]
pub struct EabAdmin {
    pub ra: Ra,
}

/// Body of `POST /admin/eab`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct CreateRequest {
    /// Names equal to or below these domains are allowed.
    pub domains: Vec<String>,
    /// IP identifiers inside these networks are allowed.
    pub cidrs: Vec<String>,
    /// Profile names allowed; empty means any.
    pub profiles: Vec<String>,
    /// Longest certificate validity, as a duration (`30d`).
    pub max_validity: Option<String>,
    /// The key binds no new account after this long (`7d`).
    pub expires_in: Option<String>,
    /// The key may bind several accounts (default: one).
    pub reusable: bool,
}

type Answer = (StatusCode, Json<Value>);

/// The answer to a policy-layer failure.
fn failed(e: ra::Error) -> Answer {
    match e {
        ra::Error::Refused(r) => match *r {
            ra::Refusal::NotFound(what) => {
                refused(StatusCode::NOT_FOUND, format!("{what} not found"))
            }
            other => refused(StatusCode::CONFLICT, other.to_string()),
        },
        ra::Error::Storage(e) => refused(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        ra::Error::Internal { context, message } => refused(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{context}: {message}"),
        ),
    }
}

fn refused(status: StatusCode, detail: impl Into<String>) -> Answer {
    (status, Json(json!({ "error": detail.into() })))
}

fn duration(what: &str, text: Option<&str>) -> Result<Option<time::Duration>, Answer> {
    text.map(|t| {
        t.parse::<ConfigDuration>()
            .map(ConfigDuration::time)
            .map_err(|e| refused(StatusCode::BAD_REQUEST, format!("{what} {t:?}: {e}")))
    })
    .transpose()
}

fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_else(|_| t.to_string())
}

/// The key as `eab list` shows it: everything but the HMAC key.
pub fn key_json(key: &EabKey) -> Value {
    json!({
        "kid": key.kid.0,
        "domains": key.policy.allowed_domains(),
        "cidrs": key.policy.allowed_cidrs().iter().map(ToString::to_string).collect::<Vec<_>>(),
        "profiles": key.policy.allowed_profiles(),
        "max-validity": key.policy.max_validity().map(|d| {
            ConfigDuration::from_secs(d.whole_seconds().unsigned_abs()).to_string()
        }),
        "expires-at": key.expires_at.map(rfc3339),
        "reusable": key.reusable,
        "revoked-at": key.revoked_at.map(rfc3339),
        "created-at": rfc3339(key.created_at),
        "bound-accounts": key.bound_accounts,
    })
}

/// `POST /admin/eab`: creates a key and answers with its kid (hex) and HMAC key (base64url), once.
pub async fn create(State(ctx): State<EabAdmin>, Json(body): Json<CreateRequest>) -> Answer {
    match create_key(&ctx, body).await {
        Ok(answer) | Err(answer) => answer,
    }
}

async fn create_key(ctx: &EabAdmin, body: CreateRequest) -> Result<Answer, Answer> {
    let cidrs = body
        .cidrs
        .iter()
        .map(|c| {
            c.parse::<IpNet>()
                .map_err(|e| refused(StatusCode::BAD_REQUEST, format!("network {c:?}: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let max_validity = duration("max-validity", body.max_validity.as_deref())?;
    let expires_in = duration("expires-in", body.expires_in.as_deref())?;
    let policy = EabPolicy::new(&body.domains, cidrs, body.profiles, max_validity)
        .map_err(|e| refused(StatusCode::BAD_REQUEST, format!("domain: {e}")))?;
    let request = KeyRequest {
        policy,
        expires_in,
        reusable: body.reusable,
    };
    let (key, hmac_b64) = ctx.ra.create_eab_key(request).await.map_err(failed)?;
    let mut answer = key_json(&key);
    answer["hmac-key"] = Value::String(hmac_b64);
    Ok((StatusCode::CREATED, Json(answer)))
}

/// `GET /admin/eab`: every key, without HMAC keys.
pub async fn list(State(ctx): State<EabAdmin>) -> Answer {
    match ctx.ra.eab_keys().await {
        Ok(keys) => (
            StatusCode::OK,
            Json(Value::Array(keys.iter().map(key_json).collect())),
        ),
        Err(e) => failed(e),
    }
}

/// Query of `POST /admin/eab/{kid}/revoke`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct RevokeQuery {
    /// Also deactivate the valid accounts bound with the key.
    pub deactivate_accounts: bool,
}

/// `POST /admin/eab/{kid}/revoke[?deactivate-accounts=true]`: the key binds no new account;
/// bound accounts keep their policy and keep working, unless `deactivate-accounts` asks for them
/// to be deactivated too. Answers with the key and `deactivated-accounts`, how many were.
pub async fn revoke(
    State(ctx): State<EabAdmin>,
    Path(kid): Path<String>,
    Query(query): Query<RevokeQuery>,
) -> Answer {
    let kid = EabKid(kid);
    match ctx.ra.revoke_eab_key(&kid, query.deactivate_accounts).await {
        Ok(revocation) => {
            let mut answer = key_json(&revocation.key);
            answer["deactivated-accounts"] = json!(revocation.deactivated_accounts);
            (StatusCode::OK, Json(answer))
        }
        Err(e) => failed(e),
    }
}
