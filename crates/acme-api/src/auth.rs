//! Authenticating an ACME POST (RFC 8555 §6.2–6.3): content type, size, JWS shape, key, signature,
//! URL and nonce, in an order that never changes state before the request is known to be genuine.

use acme_core::problem::ProblemType;
use acme_core::status::AccountStatus;
use acme_jose::Jwk;
use acme_jose::Jws;
use acme_jose::KeyRef;
use axum::body::Body;
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::http::Uri;
use axum::http::header;
use serde::de::DeserializeOwned;
use storage::model::Account;

use crate::account_keys::StoredKeyError;
use crate::nonce::NonceError;
use crate::problem::ApiError;
use crate::refusal::refused;
use crate::state::ApiState;

/// Which key reference an endpoint accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyPolicy {
    /// `jwk` only: newAccount.
    Jwk,
    /// `kid` only: everything else.
    Kid,
    /// Either: revokeCert (by account or by the certificate's key).
    Either,
}

/// A verified request.
pub(crate) struct Authenticated {
    pub(crate) jws: Jws,
    /// The account of a `kid` request.
    pub(crate) account: Option<Account>,
    /// The key that signed the request.
    pub(crate) jwk: Jwk,
}

impl Authenticated {
    /// The account of a `kid` request (always present under `KeyPolicy::Kid`).
    pub(crate) fn account(&self) -> Result<&Account, ApiError> {
        self.account.as_ref().ok_or_else(|| {
            ApiError::malformed("this request must be signed with an account key (kid)")
        })
    }

    pub(crate) fn is_post_as_get(&self) -> bool {
        self.jws.is_post_as_get()
    }

    /// Parses the JSON payload strictly into `T`.
    pub(crate) fn payload<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        if self.jws.is_post_as_get() {
            return Err(ApiError::malformed(
                "the request has an empty payload (POST-as-GET) where a JSON object is required",
            ));
        }
        serde_json::from_slice(self.jws.payload())
            .map_err(|e| ApiError::malformed(format!("the JWS payload is not valid: {e}")))
    }

    /// Refuses anything but an empty payload.
    pub(crate) fn require_post_as_get(&self) -> Result<(), ApiError> {
        if self.jws.is_post_as_get() {
            Ok(())
        } else {
            Err(ApiError::malformed(
                "this resource is read with POST-as-GET: the payload must be empty",
            ))
        }
    }
}

/// Reads and verifies a JWS-signed POST.
/// A request authenticated by an existing account (`kid`), as an extractor: the policy of every
/// endpoint that acts on an account's objects. Takes the body, so it comes last.
pub(crate) struct KidRequest(pub(crate) Authenticated);

impl axum::extract::FromRequest<ApiState> for KidRequest {
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &ApiState) -> Result<Self, ApiError> {
        let (parts, body) = req.into_parts();
        authenticate(state, &parts.headers, &parts.uri, body, KeyPolicy::Kid)
            .await
            .map(Self)
    }
}

pub(crate) async fn authenticate(
    state: &ApiState,
    headers: &HeaderMap,
    uri: &Uri,
    body: Body,
    policy: KeyPolicy,
) -> Result<Authenticated, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = content_type.split(';').next().unwrap_or("").trim();
    if !mime.eq_ignore_ascii_case("application/jose+json") {
        return Err(ApiError::malformed(format!(
            "Content-Type must be application/jose+json, not {content_type:?}"
        ))
        .with_status(StatusCode::UNSUPPORTED_MEDIA_TYPE));
    }
    let limit = state.inner.settings.max_body_bytes;
    let bytes = axum::body::to_bytes(body, limit).await.map_err(|_| {
        ApiError::malformed(format!("the request body is larger than {limit} bytes"))
            .with_status(StatusCode::PAYLOAD_TOO_LARGE)
    })?;
    let jws = Jws::parse(&bytes)?;
    let header = jws.header().clone();

    let (jwk, account) = match (&header.key, policy) {
        (KeyRef::Jwk(_), KeyPolicy::Kid) => {
            return Err(ApiError::malformed(
                "this request must identify the account with \"kid\", not \"jwk\"",
            ));
        }
        (KeyRef::Kid(_), KeyPolicy::Jwk) => {
            return Err(ApiError::malformed(
                "this request must carry the account key as \"jwk\", not \"kid\"",
            ));
        }
        (KeyRef::Jwk(jwk), _) => {
            jws.verify(jwk)?;
            (jwk.clone(), None)
        }
        (KeyRef::Kid(kid), _) => {
            let account = account_for_kid(state, kid).await?;
            let key = state
                .inner
                .account_keys
                .get(account.id, &account.jwk_json)
                .map_err(|e| match e {
                    StoredKeyError::Json(e) => {
                        ApiError::internal("stored account key is not JSON", &e)
                    }
                    StoredKeyError::Jwk(e) => {
                        ApiError::internal("stored account key is invalid", &e)
                    }
                })?;
            jws.verify_with(&key)?;
            (key.jwk().clone(), Some(account))
        }
    };

    let expected = state
        .urls()
        .url(uri.path_and_query().map_or(uri.path(), |pq| pq.as_str()));
    if header.url != expected {
        return Err(ApiError::unauthorized(format!(
            "the JWS \"url\" header is {:?} but this request was sent to {expected:?}",
            header.url
        )));
    }

    let nonce = header.nonce.as_deref().ok_or_else(|| {
        ApiError::new(
            ProblemType::BadNonce,
            "the JWS protected header has no \"nonce\"",
        )
    })?;
    state
        .inner
        .nonces
        .redeem(nonce, state.inner.clock.now())
        .await
        .map_err(|e| {
            let detail = match e {
                NonceError::Unknown => {
                    "the nonce was not issued by this server; fetch a new one from newNonce"
                }
                NonceError::Expired => "the nonce has expired; fetch a new one from newNonce",
                NonceError::Reused => "the nonce was already used; fetch a new one from newNonce",
                NonceError::OtherInstance => {
                    "the nonce was issued by another instance while the shared nonce ledger was unreachable and is valid only there; retry with the nonce of this response"
                }
                NonceError::LedgerUnavailable => {
                    "the shared nonce ledger is unreachable, so a shared nonce cannot be checked; retry with the nonce of this response"
                }
                NonceError::Injected => {
                    "test mode refused this valid nonce on purpose (--reject-nonces); retry with the nonce of this response"
                }
            };
            ApiError::new(ProblemType::BadNonce, detail)
        })?;

    // The one place every kid-signed request passes (RFC 8555 §7.3.6): checked after the
    // signature, so only the key holder learns the account's status.
    if let Some(account) = &account
        && account.status != AccountStatus::Valid
    {
        return Err(ApiError::account_not_valid(account.status));
    }
    Ok(Authenticated { jws, account, jwk })
}

async fn account_for_kid(state: &ApiState, kid: &str) -> Result<Account, ApiError> {
    let prefix = state.urls().account_prefix();
    let id = kid
        .strip_prefix(prefix)
        .and_then(|rest| rest.parse::<acme_core::ids::AccountId>().ok())
        .ok_or_else(|| {
            ApiError::new(
                ProblemType::AccountDoesNotExist,
                format!("\"kid\" {kid:?} is not an account URL of this server"),
            )
            .with_status(StatusCode::BAD_REQUEST)
        })?;
    let account = state
        .ra()
        .account(id)
        .await
        .map_err(|e| refused(state, e))?;
    account.ok_or_else(|| {
        ApiError::new(
            ProblemType::AccountDoesNotExist,
            format!("account {kid} does not exist"),
        )
    })
}
