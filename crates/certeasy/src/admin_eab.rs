//! `/admin/eab`: external-account-binding keys (RFC 8555 §7.3.4) for `certeasy admin eab`.
//!
//! The HMAC key is shown once, in the answer to its creation; listing never shows it, so a key
//! that is lost is revoked and replaced rather than read back.

use acme_core::clock::SharedClock;
use acme_core::duration::ConfigDuration;
use acme_core::eab_policy::EabPolicy;
use acme_core::ids::EabKid;
use aws_lc_rs::rand::SecureRandom;
use aws_lc_rs::rand::SystemRandom;
use axum::Json;
use axum::extract::Path;
use axum::extract::State;
use axum::http::StatusCode;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ipnet::IpNet;
use serde::Deserialize;
use serde_json::Value;
use serde_json::json;
use storage::Storage;
use storage::model::EabKey;
use storage::model::NewEabKey;
use time::format_description::well_known::Rfc3339;

/// What the EAB routes need of the admin state.
#[derive(Clone)]
pub struct EabAdmin {
    pub storage: Storage,
    pub clock: SharedClock,
}

/// Bytes of a new HMAC key: 256 bits, the output size of HS256.
const HMAC_KEY_BYTES: usize = 32;
/// Bytes of a new key identifier: random, so identifiers reveal nothing about how many exist.
const KID_BYTES: usize = 16;

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

fn refused(status: StatusCode, detail: impl Into<String>) -> Answer {
    (status, Json(json!({ "error": detail.into() })))
}

fn random_b64(len: usize) -> Result<String, Answer> {
    let mut bytes = vec![0_u8; len];
    SystemRandom::new().fill(&mut bytes).map_err(|_| {
        refused(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the system random number generator failed",
        )
    })?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
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

/// `POST /admin/eab`: creates a key and answers with its kid and HMAC key (base64url), once.
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
    let now = ctx.clock.now();
    let hmac_b64 = random_b64(HMAC_KEY_BYTES)?;
    let hmac_key = URL_SAFE_NO_PAD
        .decode(&hmac_b64)
        .map_err(|e| refused(StatusCode::INTERNAL_SERVER_ERROR, format!("hmac key: {e}")))?;
    let new = NewEabKey {
        kid: EabKid(random_b64(KID_BYTES)?),
        hmac_key,
        policy,
        expires_at: expires_in.map(|d| now + d),
        reusable: body.reusable,
    };
    let key = ctx
        .storage
        .create_eab_key(new, now)
        .await
        .map_err(|e| refused(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    tracing::info!(kid = %key.kid, reusable = key.reusable, "external account key created by an operator");
    metrics::counter!("certeasy_eab_keys_created_total").increment(1);
    let mut answer = key_json(&key);
    answer["hmac-key"] = Value::String(hmac_b64);
    Ok((StatusCode::CREATED, Json(answer)))
}

/// `GET /admin/eab`: every key, without HMAC keys.
pub async fn list(State(ctx): State<EabAdmin>) -> Answer {
    match ctx.storage.list_eab_keys().await {
        Ok(keys) => (
            StatusCode::OK,
            Json(Value::Array(keys.iter().map(key_json).collect())),
        ),
        Err(e) => refused(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// `POST /admin/eab/{kid}/revoke`: the key binds no new account; bound accounts keep their
/// policy and keep working.
pub async fn revoke(State(ctx): State<EabAdmin>, Path(kid): Path<String>) -> Answer {
    let kid = EabKid(kid);
    match ctx.storage.revoke_eab_key(&kid, ctx.clock.now()).await {
        Ok(key) => {
            tracing::info!(kid = %kid, "external account key revoked by an operator");
            (StatusCode::OK, Json(key_json(&key)))
        }
        Err(storage::error::Error::NotFound) => refused(
            StatusCode::NOT_FOUND,
            format!("no external account key has the identifier {kid}"),
        ),
        Err(storage::error::Error::WrongState(detail)) => refused(StatusCode::CONFLICT, detail),
        Err(e) => refused(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}
