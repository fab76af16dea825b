//! `/admin/eab`: external-account-binding keys (RFC 8555 §7.3.4) for `certeasy admin eab`.
//!
//! The HMAC key is shown once, in the answer to its creation; listing never shows it, so a key
//! that is lost is revoked and replaced rather than read back.

use acme_core::duration::ConfigDuration;
use acme_core::eab_policy::EabPolicy;
use acme_core::ids::EabKid;
use axum::Extension;
use axum::Json;
use axum::extract::Path;
use axum::extract::Query;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::extract::rejection::PathRejection;
use axum::extract::rejection::QueryRejection;
use axum::http::StatusCode;
use ipnet::IpNet;
use ra::Ra;
use ra::eab::KeyRequest;
use storage::model::EabKey;
use time::format_description::well_known::Rfc3339;

use crate::admin_caller::AdminCaller;
use crate::admin_error::AdminError;
use crate::admin_wire::EabCreateBody;
use crate::admin_wire::EabKeyDoc;
use crate::admin_wire::EabRevokeQuery;

/// What the EAB routes need of the admin state: the policy layer, which makes, lists and
/// revokes keys.
#[derive(Clone)]
pub struct EabAdmin {
    pub ra: Ra,
}

fn duration(what: &str, text: Option<&str>) -> Result<Option<time::Duration>, AdminError> {
    text.map(|t| {
        t.parse::<ConfigDuration>()
            .map(ConfigDuration::time)
            .map_err(|e| AdminError::BadRequest(format!("{what} {t:?}: {e}")))
    })
    .transpose()
}

fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_else(|_| t.to_string())
}

/// The key as `eab list` shows it: everything but the HMAC key.
pub fn key_doc(key: &EabKey) -> EabKeyDoc {
    EabKeyDoc {
        kid: key.kid.0.clone(),
        domains: key.policy.allowed_domains().to_vec(),
        cidrs: key
            .policy
            .allowed_cidrs()
            .iter()
            .map(ToString::to_string)
            .collect(),
        profiles: key.policy.allowed_profiles().to_vec(),
        max_validity: key
            .policy
            .max_validity()
            .map(|d| ConfigDuration::from_secs(d.whole_seconds().unsigned_abs()).to_string()),
        expires_at: key.expires_at.map(rfc3339),
        reusable: key.reusable,
        revoked_at: key.revoked_at.map(rfc3339),
        created_at: rfc3339(key.created_at),
        bound_accounts: key.bound_accounts,
        hmac_key: None,
        deactivated_accounts: None,
    }
}

/// `POST /admin/eab`: creates a key and answers with its kid (hex) and HMAC key (base64url), once.
pub async fn create(
    State(ctx): State<EabAdmin>,
    Extension(AdminCaller(who)): Extension<AdminCaller>,
    body: Result<Json<EabCreateBody>, JsonRejection>,
) -> Result<(StatusCode, Json<EabKeyDoc>), AdminError> {
    let Json(body) = body?;
    let cidrs = body
        .cidrs
        .iter()
        .map(|c| {
            c.parse::<IpNet>()
                .map_err(|e| AdminError::BadRequest(format!("network {c:?}: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let max_validity = duration("max-validity", body.max_validity.as_deref())?;
    let expires_in = duration("expires-in", body.expires_in.as_deref())?;
    let policy = EabPolicy::new(&body.domains, cidrs, body.profiles, max_validity)
        .map_err(|e| AdminError::BadRequest(format!("domain: {e}")))?;
    let request = KeyRequest {
        policy,
        expires_in,
        reusable: body.reusable,
    };
    let (key, hmac_b64) = ctx.ra.create_eab_key(request, &who).await?;
    let answer = EabKeyDoc {
        hmac_key: Some(hmac_b64),
        ..key_doc(&key)
    };
    Ok((StatusCode::CREATED, Json(answer)))
}

/// `GET /admin/eab`: every key, without HMAC keys.
pub async fn list(State(ctx): State<EabAdmin>) -> Result<Json<Vec<EabKeyDoc>>, AdminError> {
    let keys = ctx.ra.eab_keys().await?;
    Ok(Json(keys.iter().map(key_doc).collect()))
}

/// `POST /admin/eab/{kid}/revoke[?deactivate-accounts=true]`: the key binds no new account;
/// bound accounts keep their policy and keep working, unless `deactivate-accounts` asks for them
/// to be deactivated too. Answers with the key and `deactivated-accounts`, how many were.
pub async fn revoke(
    State(ctx): State<EabAdmin>,
    Extension(AdminCaller(who)): Extension<AdminCaller>,
    kid: Result<Path<String>, PathRejection>,
    query: Result<Query<EabRevokeQuery>, QueryRejection>,
) -> Result<Json<EabKeyDoc>, AdminError> {
    let (Path(kid), Query(query)) = (kid?, query?);
    let kid = EabKid(kid);
    let revocation = ctx
        .ra
        .revoke_eab_key(&kid, query.deactivate_accounts, &who)
        .await?;
    Ok(Json(EabKeyDoc {
        deactivated_accounts: Some(revocation.deactivated_accounts),
        ..key_doc(&revocation.key)
    }))
}
