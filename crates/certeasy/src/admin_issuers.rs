//! `/admin/ca/issuers…`: the configured issuers and which one signs (`ra::issuers`), for
//! `certeasy admin ca list|activate`, answering [`IssuerDoc`]s.
//!
//! An activation is stored in the database: every instance signs with the new issuer within
//! `ra::issuers::ACTIVE_ISSUER_REFRESH`, without a restart. Refusals (an unknown, retired or
//! expiring issuer) are `ra`'s and leave through `admin_error.rs` like every other.

use std::sync::Arc;

use acme_core::clock::SharedClock;
use axum::Extension;
use axum::Json;
use axum::extract::Path;
use axum::extract::State;
use axum::extract::rejection::PathRejection;
use axum::http::StatusCode;
use issuance::CaHandle;
use issuance::IssuerName;
use ra::issuers::ActiveIssuer;
use ra::issuers::IssuerListing;
use serde::Deserialize;
use serde::Serialize;
use storage::Storage;
use time::OffsetDateTime;

use crate::admin_caller::AdminCaller;
use crate::admin_error::AdminError;

/// What the issuer routes need of the admin state.
#[derive(Clone)]
pub struct IssuersAdmin {
    pub storage: Storage,
    /// The issuer set in force, swapped by a reload of `ca.issuers`.
    pub ca: CaHandle,
    pub active: Arc<ActiveIssuer>,
    /// The longest profile validity: an issuer must outlive a certificate issued now.
    pub longest_validity: time::Duration,
    pub clock: SharedClock,
}

/// One issuer, as `ca list --json` prints it and `ca activate --json` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssuerDoc {
    pub name: String,
    /// It signs new certificates.
    pub active: bool,
    /// Its certificate had expired when it was loaded: it signs and publishes nothing.
    pub retired: bool,
    /// When its certificate expires.
    #[serde(with = "time::serde::rfc3339")]
    pub not_after: OffsetDateTime,
    /// Certificates it signed (stored), ever.
    pub certificates: u64,
    /// The latest notAfter of those: its CRLs are published until then.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_certificate_not_after: Option<OffsetDateTime>,
}

impl From<IssuerListing> for IssuerDoc {
    fn from(l: IssuerListing) -> Self {
        Self {
            name: l.name.to_string(),
            active: l.active,
            retired: l.retired,
            not_after: l.not_after,
            certificates: l.certificates,
            last_certificate_not_after: l.last_certificate_not_after,
        }
    }
}

type Answer<T> = Result<(StatusCode, Json<T>), AdminError>;

/// `GET /admin/ca/issuers`: every configured issuer, the implicit one first.
pub async fn list(State(ctx): State<IssuersAdmin>) -> Answer<Vec<IssuerDoc>> {
    let listed = ra::issuers::list(&ctx.storage, &ctx.ca.current(), &ctx.active).await?;
    Ok((
        StatusCode::OK,
        Json(listed.into_iter().map(IssuerDoc::from).collect()),
    ))
}

/// `POST /admin/ca/issuers/{name}/activate`: the issuer signs new certificates on every
/// instance; 404 for a name not configured here, 409 for a retired or expiring one.
pub async fn activate(
    State(ctx): State<IssuersAdmin>,
    Extension(AdminCaller(who)): Extension<AdminCaller>,
    path: Result<Path<String>, PathRejection>,
) -> Answer<IssuerDoc> {
    let Path(name) = path?;
    let name = IssuerName::new(&name).map_err(AdminError::BadRequest)?;
    let now = ctx.clock.now();
    let ca = ctx.ca.current();
    ra::issuers::activate(
        &ctx.storage,
        &ca,
        &ctx.active,
        &name,
        ctx.longest_validity,
        now,
        &who,
    )
    .await?;
    let listed = ra::issuers::list(&ctx.storage, &ca, &ctx.active).await?;
    let doc = listed
        .into_iter()
        .find(|l| l.name == name)
        .map(IssuerDoc::from)
        .ok_or_else(|| AdminError::Internal(format!("issuer {name} vanished")))?;
    Ok((StatusCode::OK, Json(doc)))
}
